#pragma once
// The exact balancer for padded policies (rank load = count · cost(padded length of its longest
// item)). Internal: reached through orchmllm::balance with balancers::padded_exact (or
// automatic with a padded policy). The optimality proof is in docs/algorithms.md ("Padded
// policies").
//
// Outline. Items are scanned in `in.order` (length descending, id ascending), positions
// 0..n-1. Some optimal partition into at most d groups is contiguous in that order, so a
// solution is a list of group sizes. For a makespan target T the greedy check opens a group at
// the longest unassigned item s and gives it as many following items as T, max_items, the cap
// and the min_items reservation allow; T is feasible iff at most d groups (exactly d with
// min_items > 0) cover all items. Feasibility is monotone in T, so a binary search over
// [makespan_lower_bound, makespan of the greedy at T = +inf] finds the smallest feasible T,
// which is the optimum (the optimum is itself a feasible target). Group k goes to rank k.
//
// Exactness: holds for any cost non-decreasing in the length, with or without a token cap and
// min/max item counts. With a bytes cap the group footprint is count · max bytes, and bytes need
// not follow lengths: when the bytes along `in.order` are non-increasing the largest byte size
// of a group is its first item's and exactness holds; otherwise the check scans each group
// (O(n) per check), the result is a feasible heuristic and `optimal` is false (feasibility of
// the greedy is then not monotone in T, and a feasible instance may be missed: the façade then
// falls back to constrained_first_fit).
//
// Arithmetic: a group of c items starting at position s costs `Cost(c) * cost(padded(l_s))`,
// exactly the product rank_load::load evaluates, so the makespan the search certifies is the
// one the statistics report, bit for bit, also for floating costs. Integral costs are searched
// over the integers, floating costs over the bit patterns of non-negative values (their integer
// order is the value order), so the search takes at most 64 checks either way.
//
// Segments (a layout with segments: item g is S_g rows of its longest segment): the problem is
// NP-hard, and `padded_segmented` below runs a strict and an overfilling weighted greedy with
// a proven additive bound instead (docs/algorithms.md, "Padded policies with segments");
// `optimal` is then never set.
//
// Complexity: O(n log n) for the lower bound, O(n) to tabulate costs, then at most 64 checks of
// O(min(n, d)) each (O(n) with an unsorted bytes cap). Memory O(n). Deterministic.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/core/padded_search.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"

namespace orchmllm::detail {

/// Result of `padded_optimal`. `assignment` holds one destination rank per item (global id
/// order) or nullopt when the greedy found no feasible partition; `optimal` says the result is
/// proven: the assignment's makespan is the minimum over all feasible assignments, or, with no
/// assignment, that no feasible assignment exists.
template <class Cost>
struct padded_result {
  std::optional<std::vector<rank_t>> assignment;
  bool optimal = false;
};

/// Group sizes (in order positions) → destination ranks in global-id order (group k → rank k).
inline std::vector<rank_t> groups_to_assignment(std::span<const std::int64_t> order,
                                                std::span<const std::int64_t> sizes) {
  std::vector<rank_t> assignment(order.size());
  std::size_t s = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    for (std::int64_t j = 0; j < sizes[k]; ++j, ++s)
      assignment[static_cast<std::size_t>(order[s])] = static_cast<rank_t>(k);
  }
  return assignment;
}

/// `padded_optimal` on a layout with segments (item g is S_g rows of its longest segment; n ≥ 1,
/// d ≥ 1). The weighted problem is NP-hard (equal row lengths make it P||Cmax on the S_g), so
/// this is a heuristic with a bound, never `optimal`: the better of (a) the strict weighted
/// greedy, binary-searched on the target like the unweighted one, and (b) the overfilling greedy
/// at T₀ = max(optimum of the row relaxation, max_g S_g · u_g), which without a cap and item
/// counts always fits d groups and has makespan ≤ T₀ + (S_max − 1) · u_max ≤ OPT + (S_max − 1)
/// · u_max (docs/algorithms.md, "Padded policies with segments"). (b) is kept only when strictly
/// better; on a tie (a) wins. O(n log n + 64 · (n + d) + 64 · d log n).
template <class Cost, class C>
padded_result<Cost> padded_segmented(const balance_input<Cost>& in, const C& cost) {
  const auto n = in.order.size();
  std::vector<Cost> unit(n);
  std::vector<std::int64_t> rows(n);
  std::vector<std::int64_t> prefix(n + 1, 0);
  Cost heaviest{};
  padded_unit_cost<Cost, C> unit_of(cost, in.policy);
  for (std::size_t s = 0; s < n; ++s) {
    const item_shape item = item_shape_of(in.layout, in.order[s]);
    unit[s] = unit_of(item.row_length);
    rows[s] = item.rows;
    prefix[s + 1] = prefix[s] + item.rows;
    heaviest = std::max(heaviest, padded_impl::group_load(item.rows, unit[s]));
  }
  bool bytes_sorted = true;
  if (in.limits.cap && in.limits.cap->what == capacity::measure::bytes) {
    for (std::size_t s = 1; s < n && bytes_sorted; ++s)
      bytes_sorted = in.layout.bytes(in.order[s]) <= in.layout.bytes(in.order[s - 1]);
  }
  const padded_instance inst{in.layout, in.d, in.order, in.policy, in.limits};
  padded_result<Cost> result;  // never `optimal`: the greedy is not exact with rows
  const padded_impl::greedy<Cost> strict(inst, unit, bytes_sorted, prefix, false);
  std::optional<Cost> best;
  std::vector<std::int64_t> sizes;
  const auto top = strict.run(unbounded<Cost>());
  if (top.feasible) {
    const Cost lo = std::min(input_lower_bound(in, cost), top.makespan);
    const Cost hi = padded_impl::min_feasible_makespan(strict, lo, top.makespan);
    const auto final_run = strict.run(hi, &sizes);
    if (final_run.feasible) best = final_run.makespan;
  }
  // (b): the target from the row relaxation (exact for rows, so T₀ is a lower bound on OPT).
  const padded_impl::row_greedy<Cost> relax(in.d, unit, rows);
  const auto wide = relax.run(unbounded<Cost>());
  if (wide.feasible) {
    Cost t0 = padded_impl::min_feasible_makespan(relax, Cost{}, wide.makespan);
    t0 = std::max(t0, heaviest);
    const padded_impl::greedy<Cost> over(inst, std::move(unit), bytes_sorted, std::move(prefix),
                                         true);
    std::vector<std::int64_t> over_sizes;
    const auto o = over.run(t0, &over_sizes);
    if (o.feasible && (!best || o.makespan < *best)) {
      best = o.makespan;
      sizes = std::move(over_sizes);
    }
  }
  if (best) result.assignment = groups_to_assignment(in.order, sizes);
  return result;
}

/// Exact min-makespan assignment for a padded policy (see the file comment). Requires
/// `in.policy.is_padded()` and `in.order` the canonical padded order (length desc, id asc);
/// the cost model must be non-decreasing in the length. Throws `invalid_argument_error` for a
/// packed policy. Returns the assignment in global-id order (group k → rank k, so the ranks
/// holding the longest items come first) and whether it is proven optimal.
template <class Cost, class C>
padded_result<Cost> padded_optimal(const balance_input<Cost>& in, const C& cost) {
  ORCHMLLM_REQUIRE(in.policy.is_padded(), invalid_argument_error,
                   "padded_optimal needs a padded policy, got the packed one");
  const std::int64_t n = in.layout.num_items();
  ORCHMLLM_REQUIRE(static_cast<std::int64_t>(in.order.size()) == n, invalid_argument_error,
                   "item order has ", in.order.size(), " entries for ", n, " items");
  padded_result<Cost> result;
  if (n == 0) {
    result.assignment.emplace();
    result.optimal = true;
    return result;
  }
  if (in.d <= 0) {
    result.optimal = true;  // items but no rank: nothing is feasible
    return result;
  }

  if (in.layout.has_segments()) return padded_segmented(in, cost);

  std::vector<Cost> unit(static_cast<std::size_t>(n));
  padded_unit_cost<Cost, C> unit_of(cost, in.policy);
  for (std::int64_t s = 0; s < n; ++s)
    unit[static_cast<std::size_t>(s)] =
        unit_of(in.layout.length(in.order[static_cast<std::size_t>(s)]));
  bool bytes_sorted = true;
  if (in.limits.cap && in.limits.cap->what == capacity::measure::bytes) {
    for (std::int64_t s = 1; s < n && bytes_sorted; ++s) {
      bytes_sorted = in.layout.bytes(in.order[static_cast<std::size_t>(s)]) <=
                     in.layout.bytes(in.order[static_cast<std::size_t>(s - 1)]);
    }
  }
  const padded_impl::greedy<Cost> check(
      padded_instance{in.layout, in.d, in.order, in.policy, in.limits}, std::move(unit),
      bytes_sorted);

  // Upper end: the greedy under the hard limits alone. Infeasible there means infeasible
  // everywhere (feasibility only grows with T), which is a proof when the greedy is exact.
  const auto top = check.run(unbounded<Cost>());
  if (!top.feasible) {
    result.optimal = bytes_sorted;
    return result;
  }
  Cost hi = top.makespan;  // feasible
  Cost lo = input_lower_bound(in, cost);
  lo = std::min(lo, hi);  // the bound is valid; this only guards the invariant lo <= hi

  hi = padded_impl::min_feasible_makespan(check, lo, hi);

  std::vector<std::int64_t> sizes;
  const auto final_run = check.run(hi, &sizes);
  if (!final_run.feasible) return result;  // unreachable: hi was feasible
  std::vector<rank_t> assignment(static_cast<std::size_t>(n));
  std::int64_t s = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    for (std::int64_t j = 0; j < sizes[k]; ++j, ++s)
      assignment[static_cast<std::size_t>(in.order[static_cast<std::size_t>(s)])] =
          static_cast<rank_t>(k);
  }
  result.assignment = std::move(assignment);
  result.optimal = bytes_sorted;
  return result;
}

}  // namespace orchmllm::detail
