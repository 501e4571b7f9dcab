#pragma once
/// @file padding.hpp
/// Padding policies: how the costs of the items on one rank combine into that rank's load.
///
///   packed                    load = Σ cost(lᵢ)               varlen attention / packing
///   padded                    load = count · cost(max lᵢ)      rectangular batches
///   padded_to_multiple(k)     load = count · cost(⌈max lᵢ / k⌉ · k)
///   bucketed({B₁ < … < B_m})  load = count · cost(the smallest B_j ≥ max lᵢ)
///   a padding_rule P          load = count · cost(P.padded_length(max lᵢ))   the trainer's own
///
/// Every policy but `packed` is padded: pad(l) ≥ l, non-decreasing (`padded_length`); an item
/// of S segments is S padded rows of its longest segment. The same policy decides the footprint
/// a per-rank cap is checked against. The load formula is written once, in `rank_load`
/// (core/rank_load.hpp, included here). A policy reaches every algorithm only through
/// `padded_length`, so every balancer handles every policy, the trainer's own rule included. See
/// docs/cost_models.md, "Padding policies".

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
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

/// A padding rule the trainer defines: a value type whose `padded_length(l)` gives the length
/// an item of length l ≥ 0 is padded to on a rank whose longest item it is. The contract:
/// pad(l) ≥ l and pad non-decreasing in l (checked by `balance` on the lengths it sees);
/// deterministic (the same on every rank); thread-safe to call concurrently. Equality compares
/// rules (equal rules are one policy); an optional `name()` names the rule in errors, the
/// CLI and the stage fingerprint (else "custom"). Wrap it in `padding_policy(rule)`.
// The member check comes first: it fails for padding_policy's own enum before
// equality_comparable could look at padding_policy's operator== and, through the converting
// constructor below, recurse into this concept.
template <class P>
concept padding_rule = requires(const P& p, std::int64_t l) {
  { p.padded_length(l) } -> std::convertible_to<std::int64_t>;
}
&&std::copy_constructible<P>&& std::equality_comparable<P>;

namespace detail {

// The type-erased form of a padding rule, stored once per distinct (type, value, name).
struct padding_rule_base {
  padding_rule_base() = default;
  padding_rule_base(const padding_rule_base&) = delete;
  padding_rule_base& operator=(const padding_rule_base&) = delete;
  virtual ~padding_rule_base() = default;
  [[nodiscard]] virtual std::int64_t padded_length(std::int64_t length) const = 0;
  [[nodiscard]] virtual const std::string& name() const noexcept = 0;
};

template <class P>
std::string padding_rule_name(const P& rule) {
  if constexpr (requires {
                  { rule.name() } -> std::convertible_to<std::string_view>;
                }) {
    return std::string(std::string_view(rule.name()));
  } else {
    return "custom";
  }
}

template <class P>
struct padding_rule_model final : padding_rule_base {
  padding_rule_model(P r, std::string n) : rule(std::move(r)), rule_name(std::move(n)) {}
  [[nodiscard]] std::int64_t padded_length(std::int64_t length) const override {
    return static_cast<std::int64_t>(rule.padded_length(length));
  }
  [[nodiscard]] const std::string& name() const noexcept override { return rule_name; }
  P rule;
  std::string rule_name;
};

// The one stored copy of a rule, as `intern_buckets` stores bucket lists: never destroyed,
// one per distinct (type, value, name), so a policy holding a pointer to it stays trivially
// copyable and two policies are equal exactly when their pointers are. Thread-safe.
template <class P>
const padding_rule_base* intern_rule(P rule) {
  static std::mutex mutex;
  static auto* rules = new std::vector<std::unique_ptr<padding_rule_model<P>>>();
  std::string name = padding_rule_name(rule);
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& r : *rules)
    if (r->rule == rule && r->rule_name == name) return r.get();
  rules->push_back(std::make_unique<padding_rule_model<P>>(std::move(rule), std::move(name)));
  return rules->back().get();
}

}  // namespace detail

/// A padding policy value. Cheap to copy (trivially copyable); all members O(1) except
/// `padded_length` of a bucketed policy (O(log m) for m buckets); deterministic.
class padding_policy {
 public:
  /// How items on a rank are combined.
  enum class kind : std::uint8_t { packed, padded, bucketed, custom };

  /// The trainer's own padded policy: `rule.padded_length` pads a rank's longest item (see
  /// `padding_rule`). O(1) plus one lookup among the rules of type P stored so far; the rule is
  /// stored once for the life of the process, so copies of the policy stay trivial. Implicit, so
  /// a rule can be passed wherever a policy is expected.
  template <class P>
  requires(!std::same_as<std::remove_cvref_t<P>, padding_policy> && padding_rule<P>)
      padding_policy(P rule)  // NOLINT(google-explicit-constructor)
      : kind_(kind::custom), rule_(detail::intern_rule(std::move(rule))) {}

  /// A class with a `padded_length` member that is not a `padding_rule`: a compile error that
  /// names the requirement it misses (`padded_length(std::int64_t) const` returning an integer,
  /// `==`, copy construction).
  template <class P>
  requires(!std::same_as<std::remove_cvref_t<P>, padding_policy> && std::is_class_v<P> &&
           requires { &P::padded_length; } && !padding_rule<P>)
      padding_policy(P)  // NOLINT(google-explicit-constructor)
  {
    static_assert(
        requires(const P& p, std::int64_t l) {
          { p.padded_length(l) } -> std::convertible_to<std::int64_t>;
        },
        "orchmllm: a padding rule needs `padded_length(std::int64_t) const` returning the padded "
        "length as an integer");
    static_assert(std::equality_comparable<P>,
                  "orchmllm: a padding rule needs `==` (equal rules are one policy; e.g. "
                  "`friend bool operator==(const my_rule&, const my_rule&) = default;`)");
    static_assert(std::copy_constructible<P>,
                  "orchmllm: a padding rule must be copy-constructible");
  }

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
                       "bucket lengths must be strictly increasing: ", buckets[j - 1], " then ",
                       buckets[j]);
    }
    ORCHMLLM_REQUIRE(buckets.size() <= UINT32_MAX, invalid_argument_error, "a bucketed policy ",
                     "takes at most 2^32 - 1 bucket lengths, got ", buckets.size());
    padding_policy p(kind::bucketed, 1);
    p.size_ = static_cast<std::uint32_t>(buckets.size());
    p.buckets_ = detail::intern_buckets({buckets.begin(), buckets.end()}).data();
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
  [[nodiscard]] constexpr std::int64_t multiple() const noexcept {
    return kind_ == kind::padded ? multiple_ : 1;
  }
  /// The bucket lengths, ascending (empty unless bucketed).
  [[nodiscard]] constexpr std::span<const std::int64_t> buckets() const noexcept {
    if (kind_ != kind::bucketed) return {};
    return {buckets_, size_};
  }
  /// The trainer's rule's name (its `name()`, else "custom"); empty unless the kind is custom.
  [[nodiscard]] std::string_view rule_name() const noexcept {
    return kind_ == kind::custom ? std::string_view(rule_->name()) : std::string_view();
  }

  /// Length after padding: l (≥ 0) rounded up to a multiple, or to the smallest bucket ≥ l, or
  /// the trainer's rule's length (l itself for packed). O(1), O(log m) for m buckets, one call
  /// of a rule. Throws `invalid_argument_error` when the padded length would exceed 2^63 − 1, l
  /// exceeds the largest bucket, or a rule pads l below l; whatever a rule throws.
  [[nodiscard]] constexpr std::int64_t padded_length(std::int64_t length) const {
    // Packed and padded to a multiple of 1 (the common cases) inline; the rest out of line.
    if ((kind_ == kind::packed || kind_ == kind::padded) && multiple_ == 1) return length;
    return padded_length_slow(length);
  }

  /// Same kind, multiple and bucket lengths; custom: equal rules (of one type, by its `==`)
  /// with the same name.
  friend constexpr bool operator==(const padding_policy& a, const padding_policy& b) noexcept {
    if (a.kind_ != b.kind_) return false;
    switch (a.kind_) {
      case kind::padded:
        return a.multiple_ == b.multiple_;
      case kind::bucketed:
        return a.size_ == b.size_ && std::equal(a.buckets_, a.buckets_ + a.size_, b.buckets_);
      case kind::custom:
        return a.rule_ == b.rule_;
      case kind::packed:
        break;
    }
    return true;
  }

 private:
  [[nodiscard]] constexpr std::int64_t padded_length_slow(std::int64_t length) const {
    if (kind_ == kind::custom) {
      const std::int64_t padded = rule_->padded_length(length);
      ORCHMLLM_REQUIRE(padded >= length, invalid_argument_error, "padding rule '", rule_->name(),
                       "' pads length ", length, " to ", padded, ", below the length itself");
      return padded;
    }
    if (kind_ == kind::bucketed) {
      const std::int64_t* const end = buckets_ + size_;
      const auto it = std::lower_bound(buckets_, end, length);
      ORCHMLLM_REQUIRE(it != end, invalid_argument_error, "length ", length,
                       " exceeds the largest bucket ", end[-1]);
      return *it;
    }
    if (multiple_ == 1) return length;  // packed, or padded to a multiple of 1
    const std::int64_t rest = length % multiple_;
    if (rest == 0) return length;
    ORCHMLLM_REQUIRE(length - rest <= INT64_MAX - multiple_, invalid_argument_error, "length ",
                     length, " padded to a multiple of ", multiple_,
                     " exceeds 2^63 - 1 (int64 overflow)");
    return length - rest + multiple_;
  }

  constexpr padding_policy(kind k, std::int64_t multiple) noexcept
      : kind_(k), multiple_(multiple) {}
  // 16 bytes: every rank_load holds a copy, and balancers keep one rank_load per rank.
  kind kind_;
  std::uint32_t size_ = 0;  // bucketed: the number of bucket lengths
  union {
    std::int64_t multiple_ = 1;              // packed (1) and padded: the multiple
    const std::int64_t* buckets_;            // bucketed: the interned lengths (size_ of them)
    const detail::padding_rule_base* rule_;  // custom: the interned rule
  };
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

}  // namespace orchmllm

// rank_load, the one per-rank state under a policy (where the load formula is written).
#include "orchmllm/core/rank_load.hpp"  // IWYU pragma: export
