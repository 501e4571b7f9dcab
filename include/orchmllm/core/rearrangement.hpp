#pragma once
/// @file rearrangement.hpp
/// A rearrangement (plan): `rearrangement`, where every item of a source layout goes (both
/// directions, O(1) each way), and the algebra on plans: `inverse`, `compose`, `validate`, the
/// per-rank send and receive counts, and `apply` / `apply_by_rank` to move host data (any
/// random-access range, items held per rank, ragged rows) along a plan. See docs/design.md,
/// "Core nouns".

#include <algorithm>
#include <cstdint>
#include <ranges>
#include <span>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/core/csr.hpp"
#include "orchmllm/detail/core/fnv.hpp"

namespace orchmllm {

/// Destination of one item.
struct placement {
  rank_t rank;
  std::int64_t slot;
  friend constexpr bool operator==(const placement&, const placement&) = default;
};

namespace detail {
struct rearrangement_parts;
}  // namespace detail

/// A plan: every item of a source layout with `d_src` ranks (global ids 0..n-1 in the source's
/// CSR order) mapped to a destination rank and slot among `d_dst` ranks, bijectively: each
/// destination slot receives exactly one item. It keeps both directions, so `destination_of(g)`
/// and `source_of(h)` (h a destination global id) are O(1).
///
/// Destination slot order. Plans built by `from_destinations` (all balancers) order the items on
/// each destination rank by increasing source global id, i.e. by (source rank, source slot):
/// exactly the order in which an all-to-all(v) delivers them. `inverse` and `compose` keep the
/// slots they are given, so the algebra is exact: `compose(p.inverse(), p)` is the identity of
/// the source layout, `compose(p, p.inverse())` that of the destination layout, and
/// `compose(b, a).inverse() == compose(a.inverse(), b.inverse())`.
///
/// Composition: `compose(second, first)` is "first, then second" (second ∘ first); `first`'s
/// destination layout must be `second`'s source layout (same rank count and per-rank sizes).
///
/// Thread-safety: immutable after construction. Memory: O(n + d_src + d_dst); the dense
/// count matrix is never stored (see `send_counts`, `count_matrix`).
class rearrangement {
 public:
  /// The empty plan (no ranks, no items).
  rearrangement() : src_offsets_{0}, dst_offsets_{0} {}

  /// Builds a plan from one destination rank per source item; slots follow the canonical order
  /// (increasing source global id on each destination rank). `src_offsets` are the source
  /// layout's CSR offsets. O(n + d). Throws `invalid_argument_error` when a rank is outside
  /// [0, num_dst_ranks) or sizes disagree.
  static rearrangement from_destinations(std::span<const std::int64_t> src_offsets,
                                         std::span<const rank_t> dst_rank, rank_t num_dst_ranks) {
    const auto n = static_cast<std::int64_t>(dst_rank.size());
    rearrangement p = with_ranks(src_offsets, n, num_dst_ranks, [&](std::int64_t g) {
      return dst_rank[static_cast<std::size_t>(g)];
    });
    p.dst_slot_.resize(static_cast<std::size_t>(n));
    p.src_of_dst_.resize(static_cast<std::size_t>(n));
    std::vector<std::int64_t> fill(p.dst_offsets_.begin(), p.dst_offsets_.end() - 1);
    for (std::int64_t g = 0; g < n; ++g) {
      const auto r = static_cast<std::size_t>(p.dst_rank_[static_cast<std::size_t>(g)]);
      const std::int64_t h = fill[r]++;
      p.dst_slot_[static_cast<std::size_t>(g)] = h - p.dst_offsets_[r];
      p.src_of_dst_[static_cast<std::size_t>(h)] = g;
    }
    return p;
  }

  /// Builds a plan from explicit (rank, slot) destinations. The destination sizes follow from
  /// the ranks; every (rank, slot) must be used exactly once with slots dense from 0.
  /// O(n + d). Throws `invalid_argument_error` naming the first bad item.
  static rearrangement from_placements(std::span<const std::int64_t> src_offsets,
                                       std::span<const placement> destinations,
                                       rank_t num_dst_ranks) {
    // from_destinations' checks, offsets and ranks, then the given slots in one pass:
    // `src_of_dst_` starts at -1 and marks the slots taken.
    const auto n = static_cast<std::int64_t>(destinations.size());
    rearrangement p = with_ranks(src_offsets, n, num_dst_ranks, [&](std::int64_t g) {
      return destinations[static_cast<std::size_t>(g)].rank;
    });
    p.dst_slot_.resize(static_cast<std::size_t>(n));
    p.src_of_dst_.assign(static_cast<std::size_t>(n), -1);
    for (std::size_t g = 0; g < destinations.size(); ++g) {
      const auto r = static_cast<std::size_t>(destinations[g].rank);
      const std::int64_t size = p.dst_offsets_[r + 1] - p.dst_offsets_[r];
      const std::int64_t s = destinations[g].slot;
      ORCHMLLM_REQUIRE(s >= 0 && s < size, invalid_argument_error, "item ", g, " goes to slot ", s,
                       " of rank ", r, ", which receives ", size, " items");
      const std::int64_t h = p.dst_offsets_[r] + s;
      ORCHMLLM_REQUIRE(p.src_of_dst_[static_cast<std::size_t>(h)] < 0, invalid_argument_error,
                       "item ", g, " goes to slot ", s, " of rank ", r, ", already taken by item ",
                       p.src_of_dst_[static_cast<std::size_t>(h)]);
      p.dst_slot_[g] = s;
      p.src_of_dst_[static_cast<std::size_t>(h)] = static_cast<std::int64_t>(g);
    }
    return p;
  }

  /// The plan that leaves every item where it is (d_dst = d_src). O(n + d).
  static rearrangement identity(std::span<const std::int64_t> src_offsets) {
    check_offsets(src_offsets, "source");
    return from_destinations(src_offsets, detail::ranks_of_items(src_offsets),
                             static_cast<rank_t>(src_offsets.size() - 1));
  }
  /// Identity plan of a layout.
  static rearrangement identity(const batch_layout& layout) { return identity(layout.offsets()); }

  /// Number of items.
  [[nodiscard]] std::int64_t num_items() const noexcept {
    return static_cast<std::int64_t>(dst_rank_.size());
  }
  [[nodiscard]] rank_t num_src_ranks() const noexcept {
    return static_cast<rank_t>(src_offsets_.size() - 1);
  }
  [[nodiscard]] rank_t num_dst_ranks() const noexcept {
    return static_cast<rank_t>(dst_offsets_.size() - 1);
  }
  /// Source CSR offsets (d_src + 1).
  [[nodiscard]] std::span<const std::int64_t> src_offsets() const noexcept { return src_offsets_; }
  /// Destination CSR offsets (d_dst + 1): rank r receives dst_offsets[r+1] - dst_offsets[r].
  [[nodiscard]] std::span<const std::int64_t> dst_offsets() const noexcept { return dst_offsets_; }
  /// Destination rank of every source item (indexed by source global id).
  [[nodiscard]] std::span<const rank_t> dst_ranks() const noexcept { return dst_rank_; }
  /// Destination slot of every source item.
  [[nodiscard]] std::span<const std::int64_t> dst_slots() const noexcept { return dst_slot_; }
  /// Source global id of every destination global id.
  [[nodiscard]] std::span<const std::int64_t> sources() const noexcept { return src_of_dst_; }

  /// Where source item g goes. O(1), no bounds check.
  [[nodiscard]] placement destination_of(std::int64_t g) const noexcept {
    return {dst_rank_[static_cast<std::size_t>(g)], dst_slot_[static_cast<std::size_t>(g)]};
  }
  /// Destination global id of source item g. O(1).
  [[nodiscard]] std::int64_t destination_id(std::int64_t g) const noexcept {
    return dst_offsets_[static_cast<std::size_t>(dst_rank_[static_cast<std::size_t>(g)])] +
           dst_slot_[static_cast<std::size_t>(g)];
  }
  /// Source global id of destination global id h. O(1).
  [[nodiscard]] std::int64_t source_of(std::int64_t h) const noexcept {
    return src_of_dst_[static_cast<std::size_t>(h)];
  }

  /// Whether this is the identity plan: as many destination as source ranks, and every item
  /// in its source slot (destination global id = source global id). O(n + d), no allocation.
  [[nodiscard]] bool is_identity() const noexcept {
    if (!std::ranges::equal(src_offsets_, dst_offsets_)) return false;
    for (std::size_t h = 0; h < src_of_dst_.size(); ++h)
      if (src_of_dst_[h] != static_cast<std::int64_t>(h)) return false;
    return true;
  }

  /// Items source rank `src` sends to each destination rank (d_dst entries): one row of the
  /// count matrix. O(items of src + d_dst).
  [[nodiscard]] std::vector<std::int64_t> send_counts(rank_t src) const {
    check_rank(src, num_src_ranks(), "source");
    std::vector<std::int64_t> counts(static_cast<std::size_t>(num_dst_ranks()), 0);
    for (auto g = src_offsets_[static_cast<std::size_t>(src)];
         g < src_offsets_[static_cast<std::size_t>(src) + 1]; ++g)
      ++counts[static_cast<std::size_t>(dst_rank_[static_cast<std::size_t>(g)])];
    return counts;
  }
  /// Items destination rank `dst` receives from each source rank (d_src entries): one column
  /// of the count matrix. O(items of dst · log d_src + d_src).
  [[nodiscard]] std::vector<std::int64_t> recv_counts(rank_t dst) const {
    check_rank(dst, num_dst_ranks(), "destination");
    std::vector<std::int64_t> counts(static_cast<std::size_t>(num_src_ranks()), 0);
    for (auto h = dst_offsets_[static_cast<std::size_t>(dst)];
         h < dst_offsets_[static_cast<std::size_t>(dst) + 1]; ++h) {
      const auto g = src_of_dst_[static_cast<std::size_t>(h)];
      const auto it = std::upper_bound(src_offsets_.begin(), src_offsets_.end(), g);
      ++counts[static_cast<std::size_t>(it - src_offsets_.begin() - 1)];
    }
    return counts;
  }
  /// Dense d_src × d_dst count matrix, row-major. O(n + d_src · d_dst) time and memory: meant
  /// for tests and small d; use `send_counts` per rank at scale.
  [[nodiscard]] std::vector<std::int64_t> count_matrix() const {
    const auto cols = static_cast<std::size_t>(num_dst_ranks());
    std::vector<std::int64_t> m(static_cast<std::size_t>(num_src_ranks()) * cols, 0);
    for (std::size_t r = 0; r + 1 < src_offsets_.size(); ++r)
      for (auto g = src_offsets_[r]; g < src_offsets_[r + 1]; ++g)
        ++m[r * cols + static_cast<std::size_t>(dst_rank_[static_cast<std::size_t>(g)])];
    return m;
  }

  /// The reverse plan: destination layout → source layout, each item back to its source
  /// (rank, slot). `p.inverse().inverse() == p`. O(n + d).
  [[nodiscard]] rearrangement inverse() const {
    rearrangement q;
    q.src_offsets_ = dst_offsets_;
    q.dst_offsets_ = src_offsets_;
    const auto n = dst_rank_.size();
    q.dst_rank_.resize(n);
    q.dst_slot_.resize(n);
    q.src_of_dst_.resize(n);
    for (std::size_t r = 0; r + 1 < src_offsets_.size(); ++r) {
      for (auto g = src_offsets_[r]; g < src_offsets_[r + 1]; ++g) {
        const auto h = static_cast<std::size_t>(destination_id(g));
        q.dst_rank_[h] = static_cast<rank_t>(r);
        q.dst_slot_[h] = g - src_offsets_[r];
        q.src_of_dst_[static_cast<std::size_t>(g)] = static_cast<std::int64_t>(h);
      }
    }
    return q;
  }

  /// Checks that the plan is a bijection with consistent offsets, ranks and slots. O(n + d).
  /// Throws `invalid_argument_error` naming the first inconsistency. Plans built through the
  /// factories above are always valid; this is for plans received from elsewhere.
  void validate() const {
    check_offsets(src_offsets_, "source");
    check_offsets(dst_offsets_, "destination");
    const auto n = num_items();
    ORCHMLLM_REQUIRE(src_offsets_.back() == n && dst_offsets_.back() == n &&
                         static_cast<std::int64_t>(dst_slot_.size()) == n &&
                         static_cast<std::int64_t>(src_of_dst_.size()) == n,
                     invalid_argument_error, "plan sizes disagree: ", n,
                     " items, source offsets end at ", src_offsets_.back(),
                     ", destination offsets end at ", dst_offsets_.back());
    for (std::int64_t g = 0; g < n; ++g) {
      const auto r = dst_rank_[static_cast<std::size_t>(g)];
      ORCHMLLM_REQUIRE(r >= 0 && r < num_dst_ranks(), invalid_argument_error, "item ", g,
                       " goes to rank ", r, ", outside [0, ", num_dst_ranks(), ")");
      const auto s = dst_slot_[static_cast<std::size_t>(g)];
      const auto size =
          dst_offsets_[static_cast<std::size_t>(r) + 1] - dst_offsets_[static_cast<std::size_t>(r)];
      ORCHMLLM_REQUIRE(s >= 0 && s < size, invalid_argument_error, "item ", g, " goes to slot ", s,
                       " of rank ", r, ", which receives ", size, " items");
      ORCHMLLM_REQUIRE(source_of(destination_id(g)) == g, invalid_argument_error, "item ", g,
                       " and item ", source_of(destination_id(g)), " share slot ", s, " of rank ",
                       r);
    }
  }

  friend bool operator==(const rearrangement&, const rearrangement&) = default;
  friend struct detail::rearrangement_parts;

 private:
  // The checks and arrays both factories share: the source offsets, every item's destination
  // rank (rank_of(g), checked in item order) and the destination offsets they give; slots and
  // src_of_dst_ are left to the caller. O(n + d). Throws `invalid_argument_error`.
  template <class RankOf>
  static rearrangement with_ranks(std::span<const std::int64_t> src_offsets, std::int64_t n,
                                  rank_t num_dst_ranks, RankOf rank_of) {
    check_offsets(src_offsets, "source");
    ORCHMLLM_REQUIRE(src_offsets.back() == n, invalid_argument_error, "source layout has ",
                     src_offsets.back(), " items but ", n, " destinations were given");
    ORCHMLLM_REQUIRE(num_dst_ranks >= 0, invalid_argument_error, "destination rank count ",
                     num_dst_ranks, " is negative");
    rearrangement p;
    p.src_offsets_.assign(src_offsets.begin(), src_offsets.end());
    p.dst_offsets_.assign(static_cast<std::size_t>(num_dst_ranks) + 1, 0);
    p.dst_rank_.resize(static_cast<std::size_t>(n));
    for (std::int64_t g = 0; g < n; ++g) {
      const rank_t r = rank_of(g);
      ORCHMLLM_REQUIRE(r >= 0 && r < num_dst_ranks, invalid_argument_error, "item ", g,
                       " is sent to rank ", r, ", outside [0, ", num_dst_ranks, ")");
      ++p.dst_offsets_[static_cast<std::size_t>(r) + 1];
      p.dst_rank_[static_cast<std::size_t>(g)] = r;
    }
    for (std::size_t r = 1; r < p.dst_offsets_.size(); ++r)
      p.dst_offsets_[r] += p.dst_offsets_[r - 1];
    return p;
  }
  static void check_offsets(std::span<const std::int64_t> offsets, const char* which) {
    ORCHMLLM_REQUIRE(!offsets.empty() && offsets.front() == 0, invalid_argument_error, which,
                     " offsets must start at 0");
    for (std::size_t r = 1; r < offsets.size(); ++r)
      ORCHMLLM_REQUIRE(offsets[r] >= offsets[r - 1], invalid_argument_error, which, " offsets[", r,
                       "] = ", offsets[r], " is below offsets[", r - 1, "] = ", offsets[r - 1]);
  }
  static void check_rank(rank_t r, rank_t d, const char* which) {
    ORCHMLLM_REQUIRE(r >= 0 && r < d, invalid_argument_error, which, " rank ", r, " outside [0, ",
                     d, ")");
  }

  std::vector<std::int64_t> src_offsets_;
  std::vector<std::int64_t> dst_offsets_;
  std::vector<rank_t> dst_rank_;
  std::vector<std::int64_t> dst_slot_;
  std::vector<std::int64_t> src_of_dst_;
};

/// `second ∘ first`: first moves layout A to B, then second moves B to C. O(n + d).
/// Throws `invalid_argument_error` when first's destination layout is not second's source.
inline rearrangement compose(const rearrangement& second, const rearrangement& first) {
  ORCHMLLM_REQUIRE(std::ranges::equal(first.dst_offsets(), second.src_offsets()),
                   invalid_argument_error, "cannot compose: the first plan delivers ",
                   first.num_items(), " items to ", first.num_dst_ranks(),
                   " ranks but the second starts from ", second.num_items(), " items on ",
                   second.num_src_ranks(), " ranks with other per-rank counts");
  const auto n = first.num_items();
  std::vector<placement> dest(static_cast<std::size_t>(n));
  for (std::int64_t g = 0; g < n; ++g)
    dest[static_cast<std::size_t>(g)] = second.destination_of(first.destination_id(g));
  return rearrangement::from_placements(first.src_offsets(), dest, second.num_dst_ranks());
}

/// 64-bit fingerprint of a plan (FNV-1a over both offset arrays' digests and the digest of
/// every item's destination rank and slot, `detail::word_digest`). Equal plans have equal
/// fingerprints on every platform; different plans collide with probability about 2^-64.
/// Collectives compare fingerprints across ranks before moving data, so ranks that built
/// different plans fail together instead of corrupting payloads. O(n + d) (about a cycle per
/// item and offset), deterministic, never throws.
[[nodiscard]] inline std::uint64_t fingerprint(const rearrangement& plan) noexcept {
  detail::fnv f;
  f.mix(static_cast<std::uint64_t>(plan.src_offsets().size()));
  f.mix_all(plan.src_offsets());
  f.mix(static_cast<std::uint64_t>(plan.dst_offsets().size()));
  f.mix_all(plan.dst_offsets());
  detail::word_digest items;
  const auto word = [&plan](std::int64_t g, bool rank) {
    const auto p = plan.destination_of(g);
    return rank ? static_cast<std::uint64_t>(static_cast<std::uint32_t>(p.rank))
                : static_cast<std::uint64_t>(p.slot);
  };
  std::int64_t g = 0;
  for (; g + 2 <= plan.num_items(); g += 2) {
    items.add4(word(g, true), word(g, false), word(g + 1, true), word(g + 1, false));
  }
  for (; g < plan.num_items(); ++g) {
    items.add(word(g, true));
    items.add(word(g, false));
  }
  f.mix(items.finish());
  return f.h;
}

namespace detail {

/// Internal: a plan from its five arrays, for builders that produce them already consistent
/// (plan_step's composition writes a plan, its lift and its inverse in one walk). Unchecked:
/// the caller guarantees what `rearrangement::validate` checks. O(1) (the arrays are moved in).
struct rearrangement_parts {
  std::vector<std::int64_t> src_offsets, dst_offsets;
  std::vector<rank_t> dst_rank;
  std::vector<std::int64_t> dst_slot, src_of_dst;

  [[nodiscard]] rearrangement assemble() && {
    rearrangement p;
    p.src_offsets_ = std::move(src_offsets);
    p.dst_offsets_ = std::move(dst_offsets);
    p.dst_rank_ = std::move(dst_rank);
    p.dst_slot_ = std::move(dst_slot);
    p.src_of_dst_ = std::move(src_of_dst);
    return p;
  }
};

// Whether the elements of `R&&` may be moved from: an rvalue that owns them (not a view).
template <class R>
inline constexpr bool owns_elements_v =
    !std::is_lvalue_reference_v<R> && !std::ranges::view<std::remove_cvref_t<R>>;

// in[i], moved out when the range is an owning rvalue.
template <class R, class It>
decltype(auto) take_element(It it) {
  if constexpr (owns_elements_v<R>) {
    return std::ranges::iter_move(it);
  } else {
    return *it;
  }
}

}  // namespace detail

/// Moves one value per item into destination order: out[destination_id(g)] = in[g].
/// `in` is any random-access sized range (a vector, a span, an array, a view) of values of any
/// movable type, one per source item in source global-id order. When `in` is an rvalue that
/// owns its elements (`apply(plan, std::move(samples))`), they are moved out of it, so
/// move-only types work; otherwise they are copied. O(n) moves or copies.
/// Throws `invalid_argument_error` when sizes disagree (nothing is moved then).
template <std::ranges::random_access_range R>
requires std::ranges::sized_range<R> std::vector<std::ranges::range_value_t<R>> apply(
    const rearrangement& plan, R&& in) {
  ORCHMLLM_REQUIRE(static_cast<std::int64_t>(std::ranges::size(in)) == plan.num_items(),
                   invalid_argument_error, "apply: ", std::ranges::size(in),
                   " values for a plan of ", plan.num_items(), " items");
  std::vector<std::ranges::range_value_t<R>> out;
  out.reserve(static_cast<std::size_t>(plan.num_items()));
  const auto first = std::ranges::begin(in);
  for (std::int64_t h = 0; h < plan.num_items(); ++h)
    out.push_back(detail::take_element<R>(first + plan.source_of(h)));
  return out;
}

/// Moves the trainer's own items, held per rank, along a plan: `ranks[r]` holds rank r's items
/// in slot order (the `ranks_range` a layout was made from, core/projection.hpp); returns one
/// vector per destination rank with its items in destination slot order. Owning rvalue inner
/// ranges are moved from as in `apply`. O(n + d).
/// Throws `invalid_argument_error` when the rank count or a rank's item count differs from the
/// plan's sources (nothing is moved then).
template <std::ranges::random_access_range R>
requires std::ranges::sized_range<R> &&
    std::ranges::random_access_range<std::ranges::range_reference_t<R>> &&
    std::ranges::sized_range<std::ranges::range_reference_t<R>>
        std::vector<std::vector<std::ranges::range_value_t<std::ranges::range_reference_t<R>>>>
        apply_by_rank(const rearrangement& plan, R&& ranks);

/// Ragged rows: item g owns rows [row_offsets[g], row_offsets[g+1]) of `rows`, each row
/// `row_width` elements. Returns the rows in destination order and their new row offsets.
template <class T>
struct ragged_rows {
  std::vector<std::int64_t> row_offsets;  ///< n + 1 entries
  std::vector<T> rows;                    ///< row_offsets.back() · row_width elements
  std::int64_t row_width = 1;
};

/// Moves ragged rows into destination order. O(total elements + n). Throws
/// `invalid_argument_error` when offsets are inconsistent with the plan or the data size.
template <class T>
ragged_rows<T> apply(const rearrangement& plan, const ragged_rows<T>& in);

}  // namespace orchmllm

// The definitions of the templates declared only above.
#include "orchmllm/detail/core/rearrangement.inl"  // IWYU pragma: export
