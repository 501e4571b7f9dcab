#pragma once
/// @file padding.hpp
/// Padding policies: how the costs of the items on one rank combine into that rank's load.
///
///   packed                 load = Σ cost(lᵢ)              varlen attention / sequence packing
///   padded                 load = count · cost(max lᵢ)     rectangular batches
///   padded_to_multiple(k)  load = count · cost(⌈max lᵢ / k⌉ · k)
///   bucketed({B₁ < … < B_m})  load = count · cost(the smallest B_j ≥ max lᵢ)
///                          fixed shapes: CUDA graphs, compiled kernels per bucket length
///
/// Every policy but `packed` is a *padded* one: a rank's load is count × cost(pad(longest)),
/// with pad(l) ≥ l non-decreasing in l (`padded_length`). Every balancer handles all of them,
/// and `padded_exact` (and `automatic`) is exact for all of them (docs/algorithms.md).
///
/// The same policy decides the memory footprint a per-rank cap is checked against: tokens are
/// Σ lᵢ (packed) or count · padded max length (padded); bytes are Σ bytesᵢ (packed) or
/// count · max bytesᵢ (padded).

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "orchmllm/core/error.hpp"

namespace orchmllm {

namespace detail {

// The one stored copy of a bucket list: lists live until the process ends, one per distinct
// list, so a policy holding one stays a trivially copyable literal value. Thread-safe.
inline std::span<const std::int64_t> intern_buckets(std::vector<std::int64_t> buckets) {
  static std::mutex mutex;
  // Never destroyed: policies in static objects may outlive any destructor order. Moving an
  // inner vector (when the outer one grows) keeps its buffer, so the spans stay valid.
  static auto* lists = new std::vector<std::vector<std::int64_t>>();
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = std::find(lists->begin(), lists->end(), buckets);
  if (it == lists->end()) it = lists->insert(lists->end(), std::move(buckets));
  return {it->data(), it->size()};
}

}  // namespace detail

/// A padding policy value. Cheap to copy (trivially copyable); all members O(1) except
/// `padded_length` of a bucketed policy (O(log m) for m buckets); deterministic.
class padding_policy {
 public:
  /// How items on a rank are combined.
  enum class kind : std::uint8_t { packed, padded, bucketed };

  /// Sum of item costs (no padding).
  static constexpr padding_policy packed() noexcept { return padding_policy(kind::packed, 1); }
  /// count × cost of the longest item, its length rounded up to a multiple of `multiple`.
  /// Throws `invalid_argument_error` when multiple < 1.
  static constexpr padding_policy padded(std::int64_t multiple = 1) {
    ORCHMLLM_REQUIRE(multiple >= 1, invalid_argument_error, "padding multiple is ", multiple,
                     ", must be >= 1");
    return padding_policy(kind::padded, multiple);
  }
  /// count × cost of the smallest bucket length ≥ the longest item: `buckets` strictly
  /// increasing and ≥ 1 (e.g. {512, 1024, 2048, 4096}). Balancing an item longer than the last
  /// bucket throws `invalid_argument_error` naming both. The list is stored once per distinct
  /// list for the life of the process (see `detail::intern_buckets`), so copies stay trivial.
  /// Throws `invalid_argument_error` for an empty, unsorted or non-positive list. O(m log m).
  static padding_policy bucketed(std::span<const std::int64_t> buckets) {
    ORCHMLLM_REQUIRE(!buckets.empty(), invalid_argument_error,
                     "a bucketed policy needs at least one bucket length");
    for (std::size_t j = 0; j < buckets.size(); ++j) {
      ORCHMLLM_REQUIRE(buckets[j] >= 1, invalid_argument_error, "bucket length ", buckets[j],
                       " must be >= 1");
      ORCHMLLM_REQUIRE(j == 0 || buckets[j] > buckets[j - 1], invalid_argument_error,
                       "bucket lengths must be strictly increasing: ", buckets[j - 1],
                       " then ", buckets[j]);
    }
    padding_policy p(kind::bucketed, 1);
    p.buckets_ = detail::intern_buckets({buckets.begin(), buckets.end()});
    return p;
  }
  /// As above, from a braced list: `padding_policy::bucketed({512, 1024, 2048})`.
  static padding_policy bucketed(std::initializer_list<std::int64_t> buckets) {
    return bucketed(std::span<const std::int64_t>(buckets.begin(), buckets.size()));
  }

  [[nodiscard]] constexpr kind policy_kind() const noexcept { return kind_; }
  /// Every policy but packed.
  [[nodiscard]] constexpr bool is_padded() const noexcept { return kind_ != kind::packed; }
  /// The multiple lengths are rounded up to (1 for packed and bucketed policies).
  [[nodiscard]] constexpr std::int64_t multiple() const noexcept { return multiple_; }
  /// The bucket lengths, ascending (empty unless bucketed).
  [[nodiscard]] constexpr std::span<const std::int64_t> buckets() const noexcept {
    return buckets_;
  }

  /// Length after padding: l (≥ 0) rounded up to a multiple, or to the smallest bucket ≥ l (l
  /// itself for packed). O(1), O(log m) for m buckets. Throws `invalid_argument_error` when the
  /// padded length would exceed 2^63 − 1, or l exceeds the largest bucket.
  [[nodiscard]] constexpr std::int64_t padded_length(std::int64_t length) const {
    if (kind_ == kind::bucketed) {
      const auto it = std::lower_bound(buckets_.begin(), buckets_.end(), length);
      ORCHMLLM_REQUIRE(it != buckets_.end(), invalid_argument_error, "length ", length,
                       " exceeds the largest bucket ", buckets_.back());
      return *it;
    }
    if (multiple_ == 1) return length;
    const std::int64_t rest = length % multiple_;
    if (rest == 0) return length;
    ORCHMLLM_REQUIRE(length - rest <= INT64_MAX - multiple_, invalid_argument_error, "length ",
                     length, " padded to a multiple of ", multiple_, " exceeds 2^63 - 1");
    return length - rest + multiple_;
  }

  /// Same kind, multiple and bucket lengths.
  friend constexpr bool operator==(const padding_policy& a, const padding_policy& b) noexcept {
    return a.kind_ == b.kind_ && a.multiple_ == b.multiple_ &&
           std::equal(a.buckets_.begin(), a.buckets_.end(), b.buckets_.begin(),
                      b.buckets_.end());
  }

 private:
  constexpr padding_policy(kind k, std::int64_t multiple) noexcept
      : kind_(k), multiple_(multiple) {}
  kind kind_;
  std::int64_t multiple_;
  std::span<const std::int64_t> buckets_{};
};

/// `padding_policy::packed()`.
inline constexpr padding_policy packed = padding_policy::packed();
/// `padding_policy::padded()`.
inline constexpr padding_policy padded = padding_policy::padded();
/// `padding_policy::padded(k)`.
constexpr padding_policy padded_to_multiple(std::int64_t k) { return padding_policy::padded(k); }
/// `padding_policy::bucketed(buckets)`: `orchmllm::bucketed({512, 1024, 2048, 4096})`.
inline padding_policy bucketed(std::initializer_list<std::int64_t> buckets) {
  return padding_policy::bucketed(buckets);
}
/// `padding_policy::bucketed(buckets)` from a vector or span.
inline padding_policy bucketed(std::span<const std::int64_t> buckets) {
  return padding_policy::bucketed(buckets);
}

/// Accumulates one rank's load under a policy, item by item, in the order items are added.
/// O(1) per item. `Cost` is the cost model's value type.
template <class Cost>
class rank_load {
 public:
  explicit constexpr rank_load(padding_policy policy) noexcept : policy_(policy) {}

  /// Adds an item of the given length, cost, byte size.
  constexpr void add(std::int64_t length, Cost cost, std::int64_t bytes) noexcept {
    ++count_;
    sum_cost_ += cost;
    sum_tokens_ += length;
    sum_bytes_ += bytes;
    if (count_ == 1 || length > max_length_) max_length_ = length;
    if (count_ == 1 || bytes > max_bytes_) max_bytes_ = bytes;
  }

  [[nodiscard]] constexpr std::int64_t count() const noexcept { return count_; }
  [[nodiscard]] constexpr std::int64_t max_length() const noexcept { return max_length_; }

  /// The load under the policy; `cost` is the cost model (used for cost of the padded length).
  template <class C>
  [[nodiscard]] constexpr Cost load(const C& cost) const {
    if (!policy_.is_padded()) return sum_cost_;
    if (count_ == 0) return Cost{};
    return static_cast<Cost>(count_) * static_cast<Cost>(cost(policy_.padded_length(max_length_)));
  }
  /// Token footprint under the policy. Throws `invalid_argument_error` when it exceeds 2^63 − 1.
  [[nodiscard]] constexpr std::int64_t tokens() const {
    return policy_.is_padded() ? footprint(policy_.padded_length(max_length_), "tokens")
                               : sum_tokens_;
  }
  /// Byte footprint under the policy. Throws `invalid_argument_error` when it exceeds 2^63 − 1.
  [[nodiscard]] constexpr std::int64_t bytes() const {
    return policy_.is_padded() ? footprint(max_bytes_, "bytes") : sum_bytes_;
  }

 private:
  // count · per_item, checked (the padded footprints).
  constexpr std::int64_t footprint(std::int64_t per_item, const char* what) const {
    ORCHMLLM_REQUIRE(per_item == 0 || count_ <= INT64_MAX / per_item, invalid_argument_error,
                     count_, " items padded to ", per_item, " ", what,
                     " each exceed 2^63 - 1 ", what);
    return count_ * per_item;
  }

  padding_policy policy_;
  std::int64_t count_ = 0;
  Cost sum_cost_{};
  std::int64_t sum_tokens_ = 0;
  std::int64_t sum_bytes_ = 0;
  std::int64_t max_length_ = 0;
  std::int64_t max_bytes_ = 0;
};

}  // namespace orchmllm
