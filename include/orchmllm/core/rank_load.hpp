#pragma once
/// @file rank_load.hpp
/// One rank's state under a padding policy (core/padding.hpp): the items on it, summarised so
/// that its load, its token and byte footprints, the load it would have with one more item and
/// whether that item would fit under a cap are O(1).
///
///   packed   load = Σ cost(lᵢ)
///   padded   load = rows × cost(pad(longest row))   (rows: items, or their segments)
///
/// The padded-load rule is written here and nowhere else: every built-in balancer keeps its ranks
/// in `rank_load`s (padded_exact, which reasons about whole groups, evaluates
/// `rank_load::padded_load`), as the library's checks and figures do, and a trainer's own
/// balancer uses it to evaluate moves under any policy, its own rule included. Three packed
/// loops keep bare sums instead, the packed rule itself, for speed: unconstrained lpt, the
/// packed refinement and locality's packed moves. See docs/cost_models.md, "The per-rank state:
/// `rank_load`".

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"

namespace orchmllm {

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

/// One rank's state under a policy (see the file comment). `Cost` is the cost model's
/// computation type.
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
  constexpr void add(const item_shape& item, Cost cost);
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
  constexpr void remove(std::int64_t length, Cost cost, std::int64_t bytes) requires removable {
    remove_item(item_shape{length, bytes, 1, length}, cost);
  }
  /// Removes an item added before with the same shape and cost. Throws `invalid_argument_error`
  /// when the rank holds no item of that shape.
  constexpr void remove(const item_shape& item, Cost cost) requires removable {
    remove_item(item, cost);
  }
  /// As above, and keeps cost(pad(longest)) of `model` cached (see the class comment).
  template <class C>
  constexpr void remove(const item_shape& item, Cost cost, const C& model) requires removable {
    remove_item(item, cost);
    cache(model);
  }
  template <class C>
  void remove(const item_shape&, Cost, const C&&) = delete;  // see the class comment
  /// As above, and keeps cost(pad(longest)) of `model` cached (see the class comment).
  template <class C>
  constexpr void remove(std::int64_t length, Cost cost, std::int64_t bytes,
                        const C& model) requires removable {
    remove_item(item_shape{length, bytes, 1, length}, cost);
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
  [[nodiscard]] constexpr Cost load(const C& cost) const;
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
                                             const C& cost) const;
  /// Padded policies: the cost of one item on this rank, cost(pad(longest)) (every item costs
  /// as much as the longest); packed: 0. 0 when empty.
  template <class C>
  [[nodiscard]] constexpr Cost unit(const C& cost) const {
    return policy_.is_padded() && count_ > 0 ? unit_of(max_length_, cost) : Cost{};
  }

  /// Whether the rank's footprint under the cap's measure is within the cap (cap.limit ≥ 0, as
  /// `constraints` require). Never overflows.
  [[nodiscard]] constexpr bool fits(const capacity& cap) const;
  /// Whether the rank's footprint would be within the cap with one more item of the given
  /// length and bytes; the state is unchanged. Never overflows.
  [[nodiscard]] constexpr bool fits_if_added(const capacity& cap, std::int64_t length,
                                             std::int64_t bytes) const {
    return fits_if_added(cap, item_shape{length, bytes, 1, length});
  }
  /// As above, for an item of the given shape.
  [[nodiscard]] constexpr bool fits_if_added(const capacity& cap, const item_shape& item) const;

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
  // The removal behind every `remove` (removable mode only).
  constexpr void remove_item(const item_shape& item, Cost cost);
  // cost(pad(longest)), from the cache when it holds the longest item's under this model.
  template <class C>
  constexpr Cost unit_of(std::int64_t longest, const C& cost) const;
  template <class C>
  constexpr void cache(const C& cost);
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
  static constexpr bool fits_count(std::int64_t count, std::int64_t per_item, const capacity& cap) {
    return per_item == 0 || count <= cap.limit / per_item;
  }
  // count · per_item, checked (the padded footprints).
  constexpr std::int64_t footprint(std::int64_t count, std::int64_t per_item,
                                   const char* what) const;

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

// The definitions of rank_load's members that are declared only above.
#include "orchmllm/detail/core/rank_load.inl"  // IWYU pragma: export
