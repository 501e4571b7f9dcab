#pragma once
/// @file split.hpp
/// Balancing with splitting: items made of segments (core/batch_layout.hpp) may be cut at
/// segment boundaries into contiguous pieces placed on different ranks, so that one long
/// video or recording no longer sets the makespan on its own (issue 14). Packed policy below;
/// padded policies (a piece of k segments is k padded rows of its longest segment) in
/// "Padded policies" at the end of this comment.
///
/// `balance_split(layout, cost, policy, b, limits, split)`:
///  1. computes the splitting-aware lower bound L (`split_lower_bound`): the largest of the
///     average load Σ c_g / d and, over the items, the smallest largest piece b_g an item can
///     be cut into under the rules (`split_options`); L ≤ the optimum over every cut at
///     segment boundaries and every assignment;
///  2. for targets τ = L, L/2, …, L/2^(rounds−1): cuts every item whose cost exceeds τ into
///     the fewest valid pieces of cost ≤ max(τ, b_g) — two cuts per round: the most even one
///     with that many pieces, and the one that fills pieces up to the target — leaves every
///     other item whole, and balances the pieces with `balance` and the built-in balancer `b`
///     (default automatic); then shifts boundaries between adjacent pieces of one item on
///     different ranks while that lowers the larger of the two loads (kept only when the
///     makespan drops; not with a cap or `identity`);
///  3. returns the cut with the smallest makespan (ties: the earlier, which cuts less); it
///     stops early once one is within `tolerance` of L (makespan ≤ L · (1 + tolerance)).
/// So an item is split only when its cost exceeds the current target: in the first round only
/// items above the lower bound, which no plan can keep whole without exceeding L.
///
/// Guarantee (packed policy, no constraints, balancer lpt or automatic; proof in
/// docs/algorithms.md, "Splitting segmented items"): with p_max the largest piece of the cut
/// the balancer placed (before boundary shifts, which only lower the makespan),
///     makespan ≤ Σ c_g / d + (1 − 1/d) · p_max ≤ L + (1 − 1/d) · p_max ≤ (2 − 1/d) · OPT,
/// where OPT is the optimum over all cuts and assignments (p_max ≤ L ≤ OPT), reported as
/// `split_result::guarantee`. For floating costs the piece costs used for cutting are prefix
/// differences, so the statement holds within a few ulps.
///
/// Padded policies (segmented layout; docs/algorithms.md, "Splitting under padded policies"):
/// the whole items and the finest cut (every item into K_g = min(max_pieces,
/// ⌊S_g / min_piece_segments⌋) pieces as even as possible) are balanced, the smaller makespan
/// kept (whole on a tie); `rounds`, `tolerance` and boundary shifts are not used. L =
/// max(T_rows, max_g ⌈S_g/K_g⌉ · u(shortest segment of g)) with T_rows the optimum with every
/// segment a row of its own; `guarantee` = T₀ + (R − 1) · u(longest segment), R = max_g
/// ⌈S_g/K_g⌉, which bounds the makespan of padded_exact and automatic without constraints; with
/// equal segments T₀ = L, so makespan ≤ OPT + (R − 1) · u(longest segment) (optimal for the
/// default rules, R = 1). `largest_piece` is the kept cut's largest piece alone (rows × unit).
///
/// Constraints (`limits`) apply to the pieces (a count limit counts pieces; a piece's
/// bytes are its share of the item's, core/pieces.hpp); the guarantee is not claimed then.
///
/// Determinism: the same inputs give the same pieces and plan on every rank (integer or
/// order-fixed arithmetic, ties by id, no randomness).
///
/// Throws `invalid_argument_error` for min_piece_segments < 1, max_pieces < 1, rounds < 1, a
/// negative or non-finite tolerance, d < 1 with items, and what `balance` throws (negative costs,
/// overflow, the balancer's knobs); `infeasible_error` as `balance`.
///
/// Zero cost when unused: with no segmented item (or max_pieces = 1) the pieces are the items
/// (`pieces.layout() == layout`) and the plan is bit-identical to `balance(layout, cost,
/// policy, b, limits)`.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/pieces.hpp"
#include "orchmllm/detail/balance/split.hpp"
#include "orchmllm/detail/core/headroom.hpp"
#include "orchmllm/detail/core/order.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"

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
  /// lpt and automatic without constraints. Padded policies with segments: T₀ + (R − 1) ·
  /// u(longest segment), the bound of padded_exact and automatic (see the file comment).
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

/// The padded path of `balance_split` (a padded policy, a layout with segments, max_pieces ≥ 2,
/// n ≥ 1, d ≥ 1): a piece of k segments is k padded rows of its longest segment. Two cuts are
/// balanced with the caller's options and the one with the smaller makespan kept (the whole
/// items on a tie): every item whole, and the *finest* cut, every item into K_g =
/// min(max_pieces, ⌊S_g / m⌋) pieces of ⌊S_g/K_g⌋ or ⌈S_g/K_g⌉ segments (the longer first).
/// Bound L = max(T_rows, max_g ⌈S_g/K_g⌉ · u(shortest segment of g)), T_rows the optimum of the
/// row relaxation (every segment placed on its own, padded to its own length), valid for every
/// cut and assignment;
/// guarantee (automatic or padded_exact, no constraints) T₀ + (R − 1) · u(longest segment), R
/// the most segments of a piece of the finest cut (docs/algorithms.md, "Splitting under padded
/// policies"; T₀ = max(L, the finest cut's largest piece alone, the finest cut's own row
/// optimum) stands for L there, equal to it when segments are equal). `make(pieces, result, bound,
/// largest, guarantee)` builds the split_result.
template <class C, class Make>
auto padded_split(const batch_layout& layout, const C& cost, padding_policy policy,
                  const any_balancer& b, const constraints& limits, const split_options& split,
                  Make make) {
  using Cost = cost_type_t<C>;
  const std::int64_t n = layout.num_items();
  const rank_t d = layout.num_ranks();
  // Checks the costs and headroom as `balance` does (its errors first, on the whole layout).
  (void)checked_costs(layout, cost, policy);
  // T_rows of a layout: the optimum of its row relaxation (padded_search.hpp), every row of an
  // item of S segments at the item's longest segment.
  auto row_optimum = [&](const batch_layout& l) {
    const std::vector<Cost> none(static_cast<std::size_t>(l.num_items()));
    const auto order = canonical_order<Cost>(l, std::span<const Cost>(none), policy);
    return segmented_padded_bound<C>(l, order, d, cost, policy, Cost{});
  };
  // The bound's row term: every segment a row of its own length (a cut piece pads to its own
  // longest segment, which can be shorter than its item's).
  const batch_layout rows_alone(
      {0, layout.total_segments()},
      std::vector<std::int64_t>(layout.segment_lengths().begin(), layout.segment_lengths().end()));
  Cost bound = row_optimum(rows_alone);
  // The finest cut and the per-item term of the bound.
  std::vector<std::int64_t> piece_offsets{0}, first;
  std::int64_t most_rows = 1;
  std::int64_t longest = 0;
  for (std::int64_t g = 0; g < n; ++g) {
    const auto seg = layout.segments(g);
    const auto S = static_cast<std::int64_t>(seg.size());
    const std::int64_t K =
        std::max<std::int64_t>(1, std::min(split.max_pieces, S / split.min_piece_segments));
    const std::int64_t q = S / K, r = S % K;  // r pieces of q + 1, then K − r of q
    std::int64_t at = 0;
    for (std::int64_t i = 0; i < K; ++i) {
      first.push_back(at);
      at += q + (i < r ? 1 : 0);
    }
    piece_offsets.push_back(static_cast<std::int64_t>(first.size()));
    most_rows = std::max(most_rows, q + (r > 0 ? 1 : 0));
    const std::int64_t shortest = *std::min_element(seg.begin(), seg.end());
    longest = std::max(longest, *std::max_element(seg.begin(), seg.end()));
    const Cost unit = static_cast<Cost>(cost(policy.padded_length(shortest)));
    bound = std::max(
        bound, rank_load<Cost, rank_load_mode::add_only>::padded_load(q + (r > 0 ? 1 : 0), unit));
  }
  const Cost u_max = static_cast<Cost>(cost(policy.padded_length(longest)));
  // The largest piece alone: its rows × the unit of its longest segment.
  auto largest_of = [&](const batch_layout& pl) {
    Cost largest{};
    for (std::int64_t p = 0; p < pl.num_items(); ++p) {
      const item_shape item = item_shape_of(pl, p);
      largest = std::max(
          largest, rank_load<Cost, rank_load_mode::add_only>::padded_load(
                       item.rows, static_cast<Cost>(cost(policy.padded_length(item.row_length)))));
    }
    return largest;
  };
  const bool cuts = first.size() != static_cast<std::size_t>(n);
  piece_layout pieces = cuts ? piece_layout(layout, std::move(piece_offsets), std::move(first))
                             : piece_layout::whole(layout);
  // T₀ of the padded bound on the finest cut: at least L and every piece alone (= L's per-item
  // term when an item's segments are equal).
  const Cost t0 = std::max({bound, largest_of(pieces.layout()), row_optimum(pieces.layout())});
  const Cost guarantee =
      t0 + rank_load<Cost, rank_load_mode::add_only>::padded_load(most_rows - 1, u_max);
  auto whole = balance(layout, cost, policy, b, limits);
  if (!cuts) {  // nothing can be cut: whole items are the only plans, so balance's bound holds
    const Cost largest = largest_of(layout);
    const Cost whole_bound = std::max(bound, whole.lower_bound);
    return make(std::move(pieces), std::move(whole), whole_bound, largest, guarantee);
  }
  auto cut = balance(pieces.layout(), cost, policy, b, limits);
  if (cut.makespan < whole.makespan) {
    const Cost largest = largest_of(pieces.layout());
    return make(std::move(pieces), std::move(cut), bound, largest, guarantee);
  }
  const Cost largest = largest_of(layout);
  return make(piece_layout::whole(layout), std::move(whole), bound, largest, guarantee);
}

template <class C>
split_result<cost_type_t<C>> balance_split_impl(const batch_layout& layout, const C& cost,
                                                padding_policy policy,
                                                const any_balancer& b,
                                                const constraints& limits,
                                                const split_options& split) {
  using Cost = cost_type_t<C>;
  check_split_options<Cost>(split);
  const rank_t d = layout.num_ranks();
  const std::int64_t n = layout.num_items();
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
  if (!layout.has_segments() || (split.max_pieces == 1 && !policy.is_padded()) || n == 0 ||
      d <= 0) {
    auto res = balance(layout, cost, policy, b, limits);
    const Cost bound = res.lower_bound;
    return finish(piece_layout::whole(layout), std::move(res), bound, layout);
  }
  if (policy.is_padded()) {  // segmented, n >= 1, d >= 1 (the early return above otherwise)
    return padded_split<C>(layout, cost, policy, b, limits, split,
                           [&](piece_layout pieces, balance_result<Cost> res, Cost bound,
                               Cost largest, Cost guarantee) {
                             split_result<Cost> out;
                             out.balance = std::move(res);
                             out.lower_bound = bound;
                             out.largest_piece = largest;
                             out.guarantee = guarantee;
                             out.pieces = std::move(pieces);
                             return out;
                           });
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
    res.lower_bound = makespan_lower_bound(shifted.layout(), d, cost, policy, limits);
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
      auto res = balance(pieces.layout(), cost, policy, b, limits);
      const batch_layout placed = pieces.layout();
      if (!pieces.is_whole() && !limits.cap && !b.get_if<balancers::identity>())
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

/// Balances `layout` over its own d ranks, cutting segmented items into pieces where that
/// lowers the makespan (see the file comment for the algorithm under packed and padded
/// policies, the guarantees and the errors). Packed: O(R · (balance of the pieces + n + Σ S_g))
/// for R ≤ rounds, plus O(S_g log c_g) per cut item; padded: two balance calls plus
/// O(64 · (Σ S_g + d)). Deterministic.
template <cost_model C>
split_result<cost_type_t<C>> balance_split(const batch_layout& layout, const C& cost,
                                           padding_policy policy = packed,
                                           const any_balancer& b = {},
                                           const constraints& limits = {},
                                           const split_options& split = {}) {
  return detail::with_normal_cost(cost, [&](const auto& c) {
    return detail::balance_split_impl(layout, c, policy, b, limits, split);
  });
}

}  // namespace orchmllm
