#pragma once
/// @file padding.hpp
/// Padding policies: how the costs of the items on one rank combine into that rank's load.
///
///   packed                 load = Σ cost(lᵢ)              varlen attention / sequence packing
///   padded                 load = count · cost(max lᵢ)     rectangular batches
///   padded_to_multiple(k)  load = count · cost(⌈max lᵢ / k⌉ · k)
///
/// The same policy decides the memory footprint a per-rank cap is checked against: tokens are
/// Σ lᵢ (packed) or count · padded max length (padded); bytes are Σ bytesᵢ (packed) or
/// count · max bytesᵢ (padded).

#include <cstdint>

#include "orchmllm/core/error.hpp"

namespace orchmllm {

/// A padding policy value. Cheap to copy; all members O(1), deterministic.
class padding_policy {
 public:
  /// How items on a rank are combined.
  enum class kind : std::uint8_t { packed, padded };

  /// Sum of item costs (no padding).
  static constexpr padding_policy packed() noexcept { return padding_policy(kind::packed, 1); }
  /// count × cost of the longest item, its length rounded up to a multiple of `multiple`.
  /// Throws `invalid_argument_error` when multiple < 1.
  static constexpr padding_policy padded(std::int64_t multiple = 1) {
    ORCHMLLM_REQUIRE(multiple >= 1, invalid_argument_error, "padding multiple is ", multiple,
                     ", must be >= 1");
    return padding_policy(kind::padded, multiple);
  }

  [[nodiscard]] constexpr kind policy_kind() const noexcept { return kind_; }
  [[nodiscard]] constexpr bool is_padded() const noexcept { return kind_ == kind::padded; }
  [[nodiscard]] constexpr std::int64_t multiple() const noexcept { return multiple_; }

  /// Length after padding: l (≥ 0) rounded up to a multiple (l itself for packed). O(1). Throws
  /// `invalid_argument_error` when the padded length would exceed 2^63 − 1.
  [[nodiscard]] constexpr std::int64_t padded_length(std::int64_t length) const {
    if (multiple_ == 1) return length;
    const std::int64_t rest = length % multiple_;
    if (rest == 0) return length;
    ORCHMLLM_REQUIRE(length - rest <= INT64_MAX - multiple_, invalid_argument_error, "length ",
                     length, " padded to a multiple of ", multiple_, " exceeds 2^63 - 1");
    return length - rest + multiple_;
  }

  friend constexpr bool operator==(const padding_policy&, const padding_policy&) = default;

 private:
  constexpr padding_policy(kind k, std::int64_t multiple) noexcept
      : kind_(k), multiple_(multiple) {}
  kind kind_;
  std::int64_t multiple_;
};

/// `padding_policy::packed()`.
inline constexpr padding_policy packed = padding_policy::packed();
/// `padding_policy::padded()`.
inline constexpr padding_policy padded = padding_policy::padded();
/// `padding_policy::padded(k)`.
constexpr padding_policy padded_to_multiple(std::int64_t k) { return padding_policy::padded(k); }

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
