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
///   a padding_rule P       load = count · cost(P.padded_length(max lᵢ))
///                          the trainer's own rule, e.g. the next power of two
///
/// Every policy but `packed` is a *padded* one: a rank's load is count × cost(pad(longest)),
/// with pad(l) ≥ l non-decreasing in l (`padded_length`). Items with segments (`batch_layout`)
/// are S padded rows each, of their longest segment: load = (Σ S) × cost(pad(longest
/// segment)); "count" above counts rows, item-count limits still count items (`item_shape`,
/// docs/algorithms.md, "Padded policies with segments"). The load formula is written once, in
/// `rank_load` below, the one per-rank state: of every built-in balancer (lpt, first fit, the
/// padded refinement, locality and exact keep their ranks in `rank_load`s; padded_exact, which
/// reasons about whole groups, evaluates `rank_load::padded_load`), of the library's checks and
/// figures, and of a trainer's own balancer. Three packed loops keep bare sums instead, the
/// packed rule itself (Σ cost), where a state per rank would cost speed for the same bits:
/// unconstrained lpt, the packed refinement and locality's packed moves. A policy reaches every
/// algorithm only through `padded_length`, so every balancer handles every padded policy, the
/// trainer's included, and `padded_exact` (and `automatic`) is exact for all of them: its proof
/// uses only that pad and the cost model are non-decreasing (docs/algorithms.md, "Padded
/// policies"). With segments it is a heuristic within OPT + (S_max − 1) · cost(pad(longest
/// segment)) (the problem is then NP-hard).
///
/// A trainer's own rule is any value type with `padded_length(l)` (and `==`; `name()` optional):
///
///     struct next_pow2 {
///       std::int64_t padded_length(std::int64_t l) const {
///         return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(l)));
///       }
///       bool operator==(const next_pow2&) const = default;
///     };
///     auto plan = orchmllm::balance(layout, cost, orchmllm::padding_policy(next_pow2{}));
///
/// `balance` checks the contract on the lengths it is given (pad(l) ≥ l, non-decreasing) and
/// raises `invalid_argument_error` naming the rule and the two lengths when it is broken.
///
/// The same policy decides the memory footprint a per-rank cap is checked against: tokens are
/// Σ lᵢ (packed) or rows · padded max row length (padded); bytes are Σ bytesᵢ (packed) or
/// count · max bytesᵢ (padded; items, not rows).

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
concept padding_rule =
    requires(const P& p, std::int64_t l) {
      { p.padded_length(l) } -> std::convertible_to<std::int64_t>;
    } && std::copy_constructible<P> && std::equality_comparable<P>;

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
  if constexpr (requires { { rule.name() } -> std::convertible_to<std::string_view>; }) {
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
      case kind::padded: return a.multiple_ == b.multiple_;
      case kind::bucketed:
        return a.size_ == b.size_ && std::equal(a.buckets_, a.buckets_ + a.size_, b.buckets_);
      case kind::custom: return a.rule_ == b.rule_;
      case kind::packed: break;
    }
    return true;
  }

 private:
  [[nodiscard]] constexpr std::int64_t padded_length_slow(std::int64_t length) const {
    if (kind_ == kind::custom) {
      const std::int64_t padded = rule_->padded_length(length);
      ORCHMLLM_REQUIRE(padded >= length, invalid_argument_error, "padding rule '",
                       rule_->name(), "' pads length ", length, " to ", padded,
                       ", below the length itself");
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
                     length, " padded to a multiple of ", multiple_, " exceeds 2^63 - 1 (int64 overflow)");
    return length - rest + multiple_;
  }

  constexpr padding_policy(kind k, std::int64_t multiple) noexcept
      : kind_(k), multiple_(multiple) {}
  // 16 bytes: every rank_load holds a copy, and balancers keep one rank_load per rank.
  kind kind_;
  std::uint32_t size_ = 0;  // bucketed: the number of bucket lengths
  union {
    std::int64_t multiple_ = 1;               // packed (1) and padded: the multiple
    const std::int64_t* buckets_;             // bucketed: the interned lengths (size_ of them)
    const detail::padding_rule_base* rule_;   // custom: the interned rule
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

/// An item as a `rank_load` sees it. Packed policies read its `length` (tokens) and `bytes`;
/// padded ones treat it as `rows` padded rows of `row_length` each: a rank's load is
/// (Σ rows) × cost(pad(longest row)) and its token footprint (Σ rows) × pad(longest row). An
/// item without segments is one row of its length; an item of S segments is S rows of its
/// longest segment (`item_shape_of`). Trivially copyable; `==` compares all four fields.
struct item_shape {
  std::int64_t length = 0;      ///< tokens (Σ of its segments)
  std::int64_t bytes = 0;       ///< payload bytes
  std::int64_t rows = 1;        ///< padded rows: 1, or the item's segment count S ≥ 1
  std::int64_t row_length = 0;  ///< length of a row before padding: the longest segment
  friend constexpr bool operator==(const item_shape&, const item_shape&) = default;
};

/// The shape of item `g` of `layout`: its length and bytes, and S_g rows of its longest
/// segment (one row of its length without segments). O(S_g), deterministic, no throw.
inline item_shape item_shape_of(const batch_layout& layout, std::int64_t g) noexcept {
  if (!layout.has_segments()) return {layout.length(g), layout.bytes(g), 1, layout.length(g)};
  const auto seg = layout.segments(g);
  return {layout.length(g), layout.bytes(g), static_cast<std::int64_t>(seg.size()),
          *std::max_element(seg.begin(), seg.end())};
}

/// Whether a `rank_load` supports `remove`: `removable` keeps the (length, bytes) pair of every
/// item it holds (O(k) memory for k items); `add_only` keeps sums and maxima only (O(1) memory,
/// trivially copyable), which is what the library's own checks, figures and search states use.
enum class rank_load_mode : std::uint8_t { removable, add_only };

/// One rank's state under a policy: the items on it, summarised so that its load, its
/// footprints, the load it would have with one more item and whether that item would fit under
/// a cap are O(1). The padded-load rule (count × cost(pad(longest))) is written here and
/// nowhere else: every built-in balancer keeps its ranks in `rank_load`s, as the library's checks
/// and figures do, and a trainer's own balancer uses it to evaluate moves under any policy, its
/// own rule included. `Cost` is the cost model's computation type.
///
/// The cost model is passed to the calls that need it. The overloads of `add` and `remove` that
/// take it also keep cost(pad(longest)) cached, so that later `load`, `load_if_added` and
/// `unit` calls with the same model object (compared by address) cost no cost-model call while
/// the longest item is unchanged; any other model, or a state changed without the model, is
/// evaluated afresh. The cached value is the very value a fresh evaluation gives, so results do
/// not depend on the cache, provided the model object given to `add`/`remove` lives as long as
/// the state is queried (a temporary is refused at compile time: its address could be reused by
/// another model).
///
/// add, load, load_if_added, unit, fits, fits_if_added, tokens, bytes: O(1) (plus at most one
/// cost-model call and one `padded_length` for a padded policy; add amortised when removable).
/// remove (removable mode only): O(k) for k items on the rank (it finds the item, and looks the
/// longest and widest up again when it removed one). Deterministic: sums are updated in call
/// order, so two states given the same calls hold the same bits; a floating packed load after
/// `remove` may differ in the last bits from that of a state built without the removed item.
template <class Cost, rank_load_mode Mode = rank_load_mode::removable>
class rank_load {
  static constexpr bool removable = Mode == rank_load_mode::removable;
  struct no_items {};

 public:
  explicit constexpr rank_load(padding_policy policy) noexcept : policy_(policy) {}

  /// Adds an item of the given length, cost, byte size (one padded row of its length).
  constexpr void add(std::int64_t length, Cost cost, std::int64_t bytes) {
    add(item_shape{length, bytes, 1, length}, cost);
  }
  /// Adds an item of the given shape (its padded rows: `item_shape`) and cost.
  constexpr void add(const item_shape& item, Cost cost) {
    ++count_;
    rows_ += item.rows;
    sum_cost_ += cost;
    sum_tokens_ += item.length;
    sum_bytes_ += item.bytes;
    if (count_ == 1 || item.row_length > max_length_) {
      max_length_ = item.row_length;
      cached_model_ = nullptr;  // the cached unit was for another longest item
    }
    if (count_ == 1 || item.bytes > max_bytes_) max_bytes_ = item.bytes;
    if constexpr (removable) items_.push_back(item);
  }
  /// As above, and keeps cost(pad(longest)) of `model` cached (see the class comment).
  template <class C>
  constexpr void add(const item_shape& item, Cost cost, const C& model) {
    add(item, cost);
    cache(model);
  }
  template <class C>
  void add(const item_shape&, Cost, const C&&) = delete;  // see the class comment
  /// As above, and keeps cost(pad(longest)) of `model` cached (see the class comment).
  template <class C>
  constexpr void add(std::int64_t length, Cost cost, std::int64_t bytes, const C& model) {
    add(length, cost, bytes);
    cache(model);
  }
  template <class C>
  void add(std::int64_t, Cost, std::int64_t, const C&&) = delete;  // see the class comment

  /// Removes an item added before with the same length, cost and byte size. Throws
  /// `invalid_argument_error` when the rank holds no item of that length and byte size.
  constexpr void remove(std::int64_t length, Cost cost, std::int64_t bytes)
    requires removable
  {
    remove(item_shape{length, bytes, 1, length}, cost);
  }
  /// Removes an item added before with the same shape and cost. Throws `invalid_argument_error`
  /// when the rank holds no item of that shape.
  constexpr void remove(const item_shape& item, Cost cost)
    requires removable
  {
    ORCHMLLM_REQUIRE(count_ > 0, invalid_argument_error, "removing an item of length ", item.length,
                     " from an empty rank");
    const auto it = std::find(items_.rbegin(), items_.rend(), item);
    ORCHMLLM_REQUIRE(it != items_.rend(), invalid_argument_error,
                     "the rank holds no item of length ", item.length, ", ", item.rows, " rows of ",
                     item.row_length, " and ", item.bytes, " bytes to remove");
    *it = items_.back();
    items_.pop_back();
    --count_;
    rows_ -= item.rows;
    sum_cost_ -= cost;
    sum_tokens_ -= item.length;
    sum_bytes_ -= item.bytes;
    if (count_ == 0) {
      sum_cost_ = Cost{};  // an emptied rank loads exactly 0, floating costs included
      max_length_ = max_bytes_ = 0;
      cached_model_ = nullptr;
    } else if (item.row_length == max_length_ || item.bytes == max_bytes_) {
      if (item.row_length == max_length_) cached_model_ = nullptr;  // the longest may change
      max_length_ = max_bytes_ = 0;
      for (const auto& x : items_) {
        max_length_ = std::max(max_length_, x.row_length);
        max_bytes_ = std::max(max_bytes_, x.bytes);
      }
    }
  }
  /// As above, and keeps cost(pad(longest)) of `model` cached (see the class comment).
  template <class C>
  constexpr void remove(const item_shape& item, Cost cost, const C& model)
    requires removable
  {
    remove(item, cost);
    cache(model);
  }
  template <class C>
  void remove(const item_shape&, Cost, const C&&) = delete;  // see the class comment
  /// As above, and keeps cost(pad(longest)) of `model` cached (see the class comment).
  template <class C>
  constexpr void remove(std::int64_t length, Cost cost, std::int64_t bytes, const C& model)
    requires removable
  {
    remove(length, cost, bytes);
    cache(model);
  }
  template <class C>
  void remove(std::int64_t, Cost, std::int64_t, const C&&) = delete;  // see the class comment

  /// Items held (what item-count limits count).
  [[nodiscard]] constexpr std::int64_t count() const noexcept { return count_; }
  /// Padded rows held: Σ `item_shape::rows` (= count() unless items have segments).
  [[nodiscard]] constexpr std::int64_t rows() const noexcept { return rows_; }
  /// The longest row (`item_shape::row_length`: an item's length unless it has segments) and
  /// the widest (most bytes) item held; 0 when empty.
  [[nodiscard]] constexpr std::int64_t max_length() const noexcept { return max_length_; }
  [[nodiscard]] constexpr std::int64_t max_bytes() const noexcept { return max_bytes_; }

  /// The load under the policy; `cost` is the cost model (used for cost of the padded length).
  template <class C>
  [[nodiscard]] constexpr Cost load(const C& cost) const {
    if (!policy_.is_padded()) return sum_cost_;
    if (count_ == 0) return Cost{};
    return padded_load(rows_, unit_of(max_length_, cost));
  }
  /// The load this rank would have with one more item of the given length and cost; the state
  /// is unchanged. `load_if_added(max_length(), Cost{}, cost)` is the load after one more item
  /// no longer than any it holds and of no cost of its own: the key of a greedy that places
  /// items longest first (packed: the load; padded: (count + 1) × unit).
  template <class C>
  [[nodiscard]] constexpr Cost load_if_added(std::int64_t length, Cost item_cost,
                                             const C& cost) const {
    return load_if_added(item_shape{length, 0, 1, length}, item_cost, cost);
  }
  /// As above, for an item of the given shape (padded: its rows at its row length).
  template <class C>
  [[nodiscard]] constexpr Cost load_if_added(const item_shape& item, Cost item_cost,
                                             const C& cost) const {
    if (!policy_.is_padded()) return sum_cost_ + item_cost;
    return padded_load(
        rows_ + item.rows,
        unit_of(count_ == 0 ? item.row_length : std::max(max_length_, item.row_length), cost));
  }
  /// Padded policies: the cost of one item on this rank, cost(pad(longest)) (every item costs
  /// as much as the longest); packed: 0. 0 when empty.
  template <class C>
  [[nodiscard]] constexpr Cost unit(const C& cost) const {
    return policy_.is_padded() && count_ > 0 ? unit_of(max_length_, cost) : Cost{};
  }

  /// Whether the rank's footprint under the cap's measure is within the cap (cap.limit ≥ 0, as
  /// `constraints` require). Never overflows.
  [[nodiscard]] constexpr bool fits(const capacity& cap) const {
    if (!policy_.is_padded()) return sum_of(cap.what) <= cap.limit;
    return count_ == 0 ||
           fits_count(count_of(cap.what, 0), widest(cap.what, max_length_, max_bytes_), cap);
  }
  /// Whether the rank's footprint would be within the cap with one more item of the given
  /// length and bytes; the state is unchanged. Never overflows.
  [[nodiscard]] constexpr bool fits_if_added(const capacity& cap, std::int64_t length,
                                             std::int64_t bytes) const {
    return fits_if_added(cap, item_shape{length, bytes, 1, length});
  }
  /// As above, for an item of the given shape.
  [[nodiscard]] constexpr bool fits_if_added(const capacity& cap, const item_shape& item) const {
    if (!policy_.is_padded()) {
      const std::int64_t f =
          cap.what == capacity::measure::tokens ? item.length : item.bytes;  // unpadded
      return f <= cap.limit - sum_of(cap.what);
    }
    const std::int64_t w = count_ == 0 ? widest(cap.what, item.row_length, item.bytes)
                                       : widest(cap.what, std::max(max_length_, item.row_length),
                                                std::max(max_bytes_, item.bytes));
    // count_of(what, rows) + 1 more item: rows_ + item.rows rows, or count_ + 1 items.
    return fits_count(
        count_of(cap.what, item.rows) + (cap.what == capacity::measure::tokens ? 0 : 1), w, cap);
  }

  /// Token footprint under the policy (padded: rows × padded longest row). Throws
  /// `invalid_argument_error` when it exceeds 2^63 − 1.
  [[nodiscard]] constexpr std::int64_t tokens() const {
    if (!policy_.is_padded()) return sum_tokens_;
    return footprint(rows_, policy_.padded_length(max_length_), "tokens");
  }
  /// Byte footprint under the policy (padded: items × the widest item's bytes; an item's
  /// payload is not split by segments). Throws `invalid_argument_error` when it exceeds
  /// 2^63 − 1.
  [[nodiscard]] constexpr std::int64_t bytes() const {
    return policy_.is_padded() ? footprint(count_, max_bytes_, "bytes") : sum_bytes_;
  }

  /// The padding rule itself, for a rank of `count` ≥ 1 rows (items, or their segments) whose
  /// longest costs `unit` once padded: count × unit. Search algorithms that reason about whole
  /// groups (the exact padded balancer) evaluate it directly.
  [[nodiscard]] static constexpr Cost padded_load(std::int64_t count, Cost unit) {
    return static_cast<Cost>(static_cast<Cost>(count) * unit);
  }

 private:
  // cost(pad(longest)), from the cache when it holds the longest item's under this model.
  template <class C>
  constexpr Cost unit_of(std::int64_t longest, const C& cost) const {
    if (count_ > 0 && longest == max_length_ &&
        static_cast<const void*>(&cost) == cached_model_)
      return unit_;
    return static_cast<Cost>(cost(policy_.padded_length(longest)));
  }
  template <class C>
  constexpr void cache(const C& cost) {
    if (!policy_.is_padded() || count_ == 0) return;
    if (static_cast<const void*>(&cost) == cached_model_) return;
    unit_ = static_cast<Cost>(cost(policy_.padded_length(max_length_)));
    cached_model_ = &cost;
  }
  // Per-item footprint of a padded rank whose longest / widest items are these.
  constexpr std::int64_t widest(capacity::measure what, std::int64_t longest,
                                std::int64_t widest_bytes) const {
    return what == capacity::measure::tokens ? policy_.padded_length(longest) : widest_bytes;
  }
  // The padded footprint's multiplier: rows (tokens) or items (bytes), plus `more_rows`.
  constexpr std::int64_t count_of(capacity::measure what, std::int64_t more_rows) const noexcept {
    return what == capacity::measure::tokens ? rows_ + more_rows : count_;
  }
  constexpr std::int64_t sum_of(capacity::measure what) const noexcept {
    return what == capacity::measure::tokens ? sum_tokens_ : sum_bytes_;
  }
  // count · per_item <= cap, without overflow.
  static constexpr bool fits_count(std::int64_t count, std::int64_t per_item,
                                   const capacity& cap) {
    return per_item == 0 || count <= cap.limit / per_item;
  }
  // count · per_item, checked (the padded footprints).
  constexpr std::int64_t footprint(std::int64_t count, std::int64_t per_item,
                                   const char* what) const {
    ORCHMLLM_REQUIRE(per_item == 0 || count <= INT64_MAX / per_item, invalid_argument_error, count,
                     count == count_ ? " items" : " rows", " padded to ", per_item, " ", what,
                     " each exceed 2^63 - 1 ", what);
    return count * per_item;
  }

  padding_policy policy_;
  std::int64_t count_ = 0;
  std::int64_t rows_ = 0;
  Cost sum_cost_{};
  std::int64_t sum_tokens_ = 0;
  std::int64_t sum_bytes_ = 0;
  std::int64_t max_length_ = 0;
  std::int64_t max_bytes_ = 0;
  // Padded: cost(pad(max_length_)) under the model at cached_model_ (null: none cached).
  Cost unit_{};
  const void* cached_model_ = nullptr;
  // The shape of each item held (removable mode).
  [[no_unique_address]] std::conditional_t<removable, std::vector<item_shape>, no_items> items_{};
};

}  // namespace orchmllm
