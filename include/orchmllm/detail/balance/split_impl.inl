#pragma once
// `balance_split` and `split_lower_bound`, included by balance/split.hpp at its end: the packed
// rounds (targets L, L/2, ...; two cuts per target, balanced, then boundary shifts), the padded
// path (detail/balance/split_padded.inl) and the whole-item cases. docs/algorithms.md,
// "Splitting segmented items", has the algorithm and its guarantee.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/detail/balance/split.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"

namespace orchmllm::detail {

template <class C>
split_result<cost_type_t<C>> balance_split_impl(const batch_layout& layout, const C& cost,
                                                padding_policy policy, const any_balancer& b,
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

}  // namespace orchmllm::detail

namespace orchmllm {

template <cost_model C>
cost_type_t<C> split_lower_bound(const batch_layout& layout, rank_t d, const C& cost,
                                 const split_options& split) {
  detail::check_split_options<cost_type_t<C>>(split);
  ORCHMLLM_REQUIRE(d >= 1 || layout.num_items() == 0, invalid_argument_error, "lower bound for ",
                   layout.num_items(), " items on ", d, " ranks");
  return detail::with_normal_cost(cost, [&](const auto& c) {
    using M = std::remove_cvref_t<decltype(c)>;
    const detail::segment_costs<M> sc(layout, c, packed);
    return detail::split_lower_bound_from(sc, split, d);
  });
}

template <cost_model C>
split_result<cost_type_t<C>> balance_split(const batch_layout& layout, const C& cost,
                                           padding_policy policy, const any_balancer& b,
                                           const constraints& limits, const split_options& split) {
  return detail::with_normal_cost(cost, [&](const auto& c) {
    return detail::balance_split_impl(layout, c, policy, b, limits, split);
  });
}

}  // namespace orchmllm
