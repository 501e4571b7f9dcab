#pragma once
/// @file split.hpp
/// Balancing with splitting: items made of segments (core/batch_layout.hpp) may be cut at
/// segment boundaries into contiguous pieces placed on different ranks, so that one long
/// video or recording no longer sets the makespan on its own (issue 14). Packed policy.
///
/// `balance_split(layout, cost, policy, options, split)`:
///  1. computes the splitting-aware lower bound L (`split_lower_bound`): the largest of the
///     average load Σ c_g / d and, over the items, the smallest largest piece b_g an item can
///     be cut into under the rules (`split_options`); L ≤ the optimum over every cut at
///     segment boundaries and every assignment;
///  2. for targets τ = L, L/2, …, L/2^(rounds−1): cuts every item whose cost exceeds τ into
///     the fewest valid pieces of cost ≤ max(τ, b_g) — two cuts per round: the most even one
///     with that many pieces, and the one that fills pieces up to the target — leaves every
///     other item whole, and balances the pieces with `balance` and `options` (any built-in
///     method; default automatic); then shifts boundaries between adjacent pieces of one item
///     on different ranks while that lowers the larger of the two loads (kept only when the
///     makespan drops; not with a cap or `none`);
///  3. returns the cut with the smallest makespan (ties: the earlier, which cuts less); it
///     stops early once one is within `tolerance` of L (makespan ≤ L · (1 + tolerance)).
/// So an item is split only when its cost exceeds the current target: in the first round only
/// items above the lower bound, which no plan can keep whole without exceeding L.
///
/// Guarantee (packed policy, no constraints, method lpt or automatic; proof in
/// docs/algorithms.md, "Splitting segmented items"): with p_max the largest piece of the cut
/// the balancer placed (before boundary shifts, which only lower the makespan),
///     makespan ≤ Σ c_g / d + (1 − 1/d) · p_max ≤ L + (1 − 1/d) · p_max ≤ (2 − 1/d) · OPT,
/// where OPT is the optimum over all cuts and assignments (p_max ≤ L ≤ OPT), reported as
/// `split_result::guarantee`. For floating costs the piece costs used for cutting are prefix
/// differences, so the statement holds within a few ulps.
///
/// Constraints (`options.limits`) apply to the pieces (a count limit counts pieces; a piece's
/// bytes are its share of the item's, core/pieces.hpp); the guarantee is not claimed then.
///
/// Determinism: the same inputs give the same pieces and plan on every rank (integer or
/// order-fixed arithmetic, ties by id, no randomness).
///
/// Throws `invalid_argument_error` for min_piece_segments < 1, max_pieces < 1, rounds < 1, a
/// negative or non-finite tolerance, a padded policy with a segmented layout (splitting does
/// not cut under padded policies yet; `balance` balances such a layout with its items whole),
/// d < 1 with items, and what `balance` throws (negative costs,
/// overflow, options); `infeasible_error` as `balance`.
///
/// Zero cost when unused: with no segmented item (or max_pieces = 1) the pieces are the items
/// (`pieces.layout() == layout`) and the plan is bit-identical to `balance(layout, cost,
/// policy, options)`.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/options.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/pieces.hpp"
#include "orchmllm/detail/balance/split.hpp"
#include "orchmllm/detail/core/headroom.hpp"

namespace orchmllm {

/// How items may be cut (an encoder stage's splitting rules).
struct split_options {
  /// Fewest segments in a piece of a cut item (≥ 1); an item with fewer than twice as many
  /// segments stays whole.
  std::int64_t min_piece_segments = 1;
  /// Most pieces per item (≥ 1; 1 disables splitting).
  std::int64_t max_pieces = std::numeric_limits<std::int64_t>::max();
  /// Targets tried: L, L/2, …, L/2^(rounds−1) (≥ 1). More rounds can lower the makespan by
  /// cutting finer; each costs one `balance` call on the pieces.
  int rounds = 4;
  /// A round is good enough, and no finer one is tried, once its makespan is within this
  /// relative slack of the lower bound L (makespan ≤ L · (1 + tolerance), rounded down for
  /// integral costs). Finite and ≥ 0; 0 tries finer rounds until one meets L exactly.
  double tolerance = 0.001;
  friend bool operator==(const split_options&, const split_options&) = default;
};

/// What `balance_split` returns.
template <class Cost>
struct split_result {
  /// The cut: for every piece its item, segment range [first, last) and row offset, and the
  /// pieces as a layout of their own (core/pieces.hpp).
  piece_layout pieces;
  /// `balance` of `pieces.layout()`: the destination (rank, slot) of every piece
  /// (`balance.plan.destination_of(p)`), its makespan, and the pieces' own lower bound (pieces
  /// are whole there, so it can exceed `lower_bound`).
  balance_result<Cost> balance;
  /// The splitting-aware lower bound L (≤ the optimum over every cut and assignment); when
  /// nothing may be split (no segments, max_pieces = 1), `balance`'s own bound (≥ L).
  Cost lower_bound{};
  /// p_max: the largest piece's cost in the cut the balancer placed (before boundary shifts;
  /// ≤ `lower_bound` whenever an item was cut).
  Cost largest_piece{};
  /// Σ c_g / d + (1 − 1/d) · p_max (rounded down for integral costs): the makespan bound of
  /// lpt and automatic without constraints.
  Cost guarantee{};
};

namespace detail {

template <class Cost>
void check_split_options(const split_options& s) {
  ORCHMLLM_REQUIRE(s.min_piece_segments >= 1, invalid_argument_error, "min_piece_segments is ",
                   s.min_piece_segments, ", must be >= 1");
  ORCHMLLM_REQUIRE(s.max_pieces >= 1, invalid_argument_error, "max_pieces is ", s.max_pieces,
                   ", must be >= 1");
  ORCHMLLM_REQUIRE(s.rounds >= 1, invalid_argument_error, "rounds is ", s.rounds, ", must be >= 1");
  ORCHMLLM_REQUIRE(std::isfinite(s.tolerance) && s.tolerance >= 0, invalid_argument_error,
                   "split tolerance is ", s.tolerance, ", must be finite and >= 0");
}

/// Every item's segment-cost prefix sums (CSR over `layout.segment_offsets()` shifted by one
/// per item) and total costs, checked as `balance` checks them.
template <class C>
struct segment_costs {
  using Cost = cost_type_t<C>;
  std::vector<std::int64_t> start;  // prefix of item g: prefix[start[g] .. start[g] + S_g]
  std::vector<Cost> prefix;
  std::vector<Cost> item;  // c_g
  Cost total{};

  segment_costs(const batch_layout& layout, const C& cost, padding_policy policy) {
    const std::int64_t n = layout.num_items();
    start.resize(static_cast<std::size_t>(n) + 1);
    prefix.reserve(static_cast<std::size_t>(layout.total_segments() + n));
    item.resize(static_cast<std::size_t>(n));
    for (std::int64_t g = 0; g < n; ++g) {
      start[static_cast<std::size_t>(g)] = static_cast<std::int64_t>(prefix.size());
      prefix.push_back(Cost{});
      // One evaluation per segment: the checked sum's running values are the prefix sums.
      item[static_cast<std::size_t>(g)] =
          checked_item_cost(layout, g, cost, [&](const Cost& run) { prefix.push_back(run); });
    }
    start[static_cast<std::size_t>(n)] = static_cast<std::int64_t>(prefix.size());
    check_headroom(layout, std::span<const Cost>(item), cost, policy);
    for (const auto c : item) total += c;
  }
  item_cutter<Cost> cutter(std::int64_t g, const split_options& s) const {
    const auto a = static_cast<std::size_t>(start[static_cast<std::size_t>(g)]);
    const auto b = static_cast<std::size_t>(start[static_cast<std::size_t>(g) + 1]);
    return {std::span<const Cost>(prefix).subspan(a, b - a), s.min_piece_segments, s.max_pieces};
  }
};

/// ⌈total / d⌉ for integral costs, total / d for floating ones.
template <class Cost>
Cost average_load(Cost total, rank_t d) {
  if constexpr (std::is_integral_v<Cost>) {
    const auto dd = static_cast<Cost>(d);
    return total / dd + (total % dd != 0 ? 1 : 0);
  } else {
    return total / static_cast<Cost>(d);
  }
}

/// b_g for every item whose cost exceeds `above` (c_g otherwise: no smaller piece is needed).
template <class C>
std::vector<cost_type_t<C>> smallest_pieces(const segment_costs<C>& sc, const split_options& s,
                                            cost_type_t<C> above) {
  std::vector<cost_type_t<C>> b(sc.item);
  for (std::size_t g = 0; g < b.size(); ++g) {
    if (!(b[g] > above)) continue;
    const auto cut = sc.cutter(static_cast<std::int64_t>(g), s);
    if (cut.piece_limit() > 1) b[g] = cut.smallest_largest(cut.piece_limit());
  }
  return b;
}

template <class C>
cost_type_t<C> split_lower_bound_from(const segment_costs<C>& sc, const split_options& s, rank_t d,
                                      std::vector<cost_type_t<C>>* smallest = nullptr) {
  using Cost = cost_type_t<C>;
  if (sc.item.empty()) return Cost{};
  const Cost avg = average_load(sc.total, d);
  auto b = smallest_pieces(sc, s, avg);
  Cost bound = avg;
  for (const auto x : b) bound = std::max(bound, x);
  if (smallest) *smallest = std::move(b);
  return bound;
}

}  // namespace detail

/// The splitting-aware lower bound L on the makespan of `layout` on d ranks under the packed
/// policy when items may be cut under `split`: max(Σ c_g / d (rounded up for integral costs),
/// max_g b_g), b_g the smallest largest piece item g can be cut into (c_g when it cannot be
/// cut). Valid for every cut at segment boundaries and every assignment (docs/algorithms.md).
/// O(n + Σ S_g) plus O(S_g log c_g) per item above the average. Deterministic. Throws
/// `invalid_argument_error` for d < 1 with items, bad options, negative costs or overflow.
template <cost_model C>
cost_type_t<C> split_lower_bound(const batch_layout& layout, rank_t d, const C& cost,
                                 const split_options& split = {}) {
  detail::check_split_options<cost_type_t<C>>(split);
  ORCHMLLM_REQUIRE(d >= 1 || layout.num_items() == 0, invalid_argument_error, "lower bound for ",
                   layout.num_items(), " items on ", d, " ranks");
  return detail::with_normal_cost(cost, [&](const auto& c) {
    using M = std::remove_cvref_t<decltype(c)>;
    const detail::segment_costs<M> sc(layout, c, packed);
    return detail::split_lower_bound_from(sc, split, d);
  });
}

namespace detail {

template <class C>
split_result<cost_type_t<C>> balance_split_impl(const batch_layout& layout, const C& cost,
                                                padding_policy policy,
                                                const balance_options& options,
                                                const split_options& split) {
  using Cost = cost_type_t<C>;
  check_split_options<Cost>(split);
  const rank_t d = layout.num_ranks();
  const std::int64_t n = layout.num_items();
  ORCHMLLM_REQUIRE(!(policy.is_padded() && layout.has_segments()), invalid_argument_error,
                   "splitting balances the packed policy only: padded policies do not cut "
                   "segmented items yet (balance them whole with `balance`)");
  // `placed`: the cut the balancer placed (before boundary shifts), whose largest piece the
  // guarantee is stated with.
  auto finish = [&](piece_layout pieces, balance_result<Cost> res, Cost bound,
                    const batch_layout& placed) {
    split_result<Cost> out;
    out.balance = std::move(res);
    out.lower_bound = bound;
    const batch_layout& pl = placed;
    Cost total{}, largest{};
    for (std::int64_t p = 0; p < pl.num_items(); ++p) {
      const Cost c = item_cost<Cost>(pl, p, cost);
      total += c;
      largest = std::max(largest, c);
    }
    out.largest_piece = largest;
    if (d > 0) {
      if constexpr (std::is_integral_v<Cost>) {
        // ⌊(Σ + (d − 1)·p_max) / d⌋ = q + ⌊(r + (d − 1)·p_max) / d⌋ with Σ = q·d + r; the
        // product needs more than 64 bits.
        const Cost q = total / d, r = total % d;
#if defined(__SIZEOF_INT128__)
        out.guarantee =
            q + static_cast<Cost>(
                    (static_cast<int128_t>(r) + static_cast<int128_t>(d - 1) * largest) / d);
#else
        out.guarantee =
            q + static_cast<Cost>(
                    (static_cast<long double>(r) + static_cast<long double>(d - 1) * largest) / d);
#endif
      } else {
        const auto dd = static_cast<Cost>(d);
        out.guarantee = total / dd + (1 - 1 / dd) * largest;
      }
    }
    out.pieces = std::move(pieces);
    return out;
  };
  if (!layout.has_segments() || split.max_pieces == 1 || n == 0 || d <= 0) {
    auto res = balance(layout, cost, policy, options);
    const Cost bound = res.lower_bound;
    return finish(piece_layout::whole(layout), std::move(res), bound, layout);
  }
  const segment_costs<C> sc(layout, cost, policy);
  std::vector<Cost> smallest;  // b_g above the average (c_g elsewhere), then filled on demand
  const Cost bound = split_lower_bound_from(sc, split, d, &smallest);
  const Cost avg = average_load(sc.total, d);
  // The makespan at which no finer round is tried: L · (1 + tolerance).
  const auto slack = 1 + static_cast<long double>(split.tolerance);
  const Cost good_enough =
      std::max(bound, static_cast<Cost>(static_cast<long double>(bound) * slack));

  // Boundary shifts after balancing (detail::shift_boundaries): kept when the makespan, evaluated
  // afresh on the shifted pieces, drops.
  auto shift = [&](piece_layout& pieces, balance_result<Cost>& res, const segment_costs<C>& s) {
    const auto m = static_cast<std::size_t>(pieces.num_pieces());
    std::vector<rank_t> rank(m);
    std::vector<Cost> load(static_cast<std::size_t>(d));
    for (std::size_t p = 0; p < m; ++p) {
      rank[p] = res.plan.destination_of(static_cast<std::int64_t>(p)).rank;
      const auto g = static_cast<std::size_t>(pieces.item_of(static_cast<std::int64_t>(p)));
      const Cost* pre = s.prefix.data() + s.start[g];
      load[static_cast<std::size_t>(rank[p])] +=
          pre[pieces.last_segment(static_cast<std::int64_t>(p))] -
          pre[pieces.first_segment(static_cast<std::int64_t>(p))];
    }
    std::vector<std::int64_t> first(pieces.first_segments().begin(), pieces.first_segments().end());
    if (!shift_boundaries<Cost>(s.prefix, s.start, pieces.piece_offsets(), first, rank, load,
                                split.min_piece_segments))
      return;
    piece_layout shifted(
        layout,
        std::vector<std::int64_t>(pieces.piece_offsets().begin(), pieces.piece_offsets().end()),
        std::move(first));
    auto plan = rearrangement::from_destinations(shifted.layout().offsets(), rank, d);
    const auto loads = rank_loads(shifted.layout(), plan, cost, policy);
    const Cost makespan = *std::max_element(loads.begin(), loads.end());
    if (!(makespan < res.makespan)) return;
    res.plan = std::move(plan);
    res.makespan = makespan;
    res.lower_bound = makespan_lower_bound(shifted.layout(), d, cost, policy, options.limits);
    res.proven_optimal = !(res.makespan > res.lower_bound);
    pieces = std::move(shifted);
  };

  std::optional<split_result<Cost>> best;
  Cost target = bound;
  // The cuts balanced so far (first segments per piece; the offsets follow from them and the
  // items' segment counts): a cut is balanced once.
  std::vector<std::vector<std::int64_t>> tried;
  std::vector<std::int64_t> cut;
  bool done = false;
  for (int round = 0; round < split.rounds && !done; ++round) {
    // Two cuts per round: `even` = the fewest pieces under the target, as even as that count
    // allows; `fill` = the DP's own cut at the target (pieces filled up to it, the last one
    // smaller), which packs better where the even pieces leave gaps.
    for (const bool even : {true, false}) {
      std::vector<std::int64_t> piece_offsets{0};
      std::vector<std::int64_t> first;
      piece_offsets.reserve(static_cast<std::size_t>(n) + 1);
      first.reserve(static_cast<std::size_t>(n));
      for (std::int64_t g = 0; g < n; ++g) {
        const auto gi = static_cast<std::size_t>(g);
        const auto cutter = sc.cutter(g, split);
        if (!(sc.item[gi] > target) || cutter.piece_limit() == 1) {
          first.push_back(0);
        } else {
          if (!(sc.item[gi] > avg)) {  // b_g not computed by the bound (c_g <= average)
            smallest[gi] = cutter.smallest_largest(cutter.piece_limit());
          }
          // The fewest pieces under the target (at least b_g: always a valid cut).
          const Cost t = std::max(target, smallest[gi]);
          const std::int64_t k = cutter.fewest(t, &cut);
          if (even) cutter.fewest(cutter.smallest_largest(k), &cut);
          first.insert(first.end(), cut.begin(), cut.end());
        }
        piece_offsets.push_back(static_cast<std::int64_t>(first.size()));
      }
      if (std::find(tried.begin(), tried.end(), first) != tried.end()) continue;
      tried.push_back(first);
      piece_layout pieces = first.size() == static_cast<std::size_t>(n)
                                ? piece_layout::whole(layout)  // nothing cut: no validation
                                : piece_layout(layout, std::move(piece_offsets), std::move(first));
      auto res = balance(pieces.layout(), cost, policy, options);
      const batch_layout placed = pieces.layout();
      if (!pieces.is_whole() && !options.limits.cap && options.method != balance_method::none)
        shift(pieces, res, sc);
      if (!best || res.makespan < best->balance.makespan) {
        best = finish(std::move(pieces), std::move(res), bound, placed);
        if (!(best->balance.makespan > good_enough)) {  // within the tolerance of L
          done = true;
          break;
        }
      }
    }
    if constexpr (std::is_integral_v<Cost>) {
      if (target <= 1) break;
    }
    target /= 2;
  }
  return std::move(*best);
}

}  // namespace detail

/// Balances `layout` over its own d ranks under the packed policy, cutting segmented items
/// into pieces where that lowers the makespan (see the file comment for the algorithm, the
/// guarantee and the errors). O(R · (balance of the pieces + n + Σ S_g)) for R ≤ rounds, plus
/// O(S_g log c_g) per cut item. Deterministic.
template <cost_model C>
split_result<cost_type_t<C>> balance_split(const batch_layout& layout, const C& cost,
                                           padding_policy policy = packed,
                                           const balance_options& options = {},
                                           const split_options& split = {}) {
  return detail::with_normal_cost(cost, [&](const auto& c) {
    return detail::balance_split_impl(layout, c, policy, options, split);
  });
}

}  // namespace orchmllm
