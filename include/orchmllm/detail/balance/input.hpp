#pragma once
// The problem view every balancer receives (`balance_input`) and the checks of an assignment
// against it: constraints and makespan. Light on purpose: `orchmllm::balance_problem`
// (balance/problem.hpp) wraps it in both build modes. Internal: may change without notice.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"

namespace orchmllm::detail {

/// Everything a balancer needs, computed once by the façade.
/// - costs[g]  = cost(length(g)) for every item g (global id order);
/// - order     = item ids sorted by (cost desc, length desc, id asc) for the packed policy and
///               by (length desc, id asc) for padded ones: the single canonical order all
///               algorithms scan, so ties break the same way on every rank.
template <class Cost>
struct balance_input {
  const batch_layout& layout;
  rank_t d;
  std::span<const Cost> costs;
  std::span<const std::int64_t> order;
  padding_policy policy;
  const constraints& limits;
};

/// Footprint of one item alone under the cap's measure (tokens: padded length, or under a
/// padded policy S_g × the padded longest segment; bytes: bytes). Throws
/// `invalid_argument_error` when the padded footprint exceeds 2^63 − 1.
inline std::int64_t item_footprint(const batch_layout& layout, std::int64_t g,
                                   padding_policy policy, capacity::measure what) {
  if (what != capacity::measure::tokens) return layout.bytes(g);
  if (!policy.is_padded() || !layout.has_segments()) return policy.padded_length(layout.length(g));
  const item_shape item = item_shape_of(layout, g);
  const std::int64_t row = policy.padded_length(item.row_length);
  ORCHMLLM_REQUIRE(row == 0 || item.rows <= INT64_MAX / row, invalid_argument_error, "item ", g,
                   ": ", item.rows, " rows padded to ", row,
                   " tokens exceed 2^63 - 1 tokens (int64 overflow)");
  return item.rows * row;
}

/// Whether an assignment (destination rank per item) satisfies every constraint. O(n + d).
template <class Cost>
bool satisfies(const balance_input<Cost>& in, std::span<const rank_t> assignment) {
  const auto d = static_cast<std::size_t>(in.d);
  if (!in.limits.cap && in.limits.min_items <= 0 &&
      in.limits.max_items >= static_cast<std::int64_t>(assignment.size())) {
    // No limit can bind: only the ranks need checking (the common, unconstrained case).
    return std::all_of(assignment.begin(), assignment.end(),
                       [d](rank_t r) { return r >= 0 && static_cast<std::size_t>(r) < d; });
  }
  using tally = rank_load<Cost, rank_load_mode::add_only>;
  std::vector<tally> acc(d, tally(in.policy));
  for (std::size_t g = 0; g < assignment.size(); ++g) {
    const auto r = assignment[g];
    if (r < 0 || static_cast<std::size_t>(r) >= d) return false;
    acc[static_cast<std::size_t>(r)].add(item_shape_of(in.layout, static_cast<std::int64_t>(g)),
                                         Cost{});
  }
  for (const auto& a : acc) {
    if (a.count() < in.limits.min_items || a.count() > in.limits.max_items) return false;
    if (in.limits.cap) {
      const auto used = in.limits.cap->what == capacity::measure::tokens ? a.tokens() : a.bytes();
      if (used > in.limits.cap->limit) return false;
    }
  }
  return true;
}

/// Makespan of an assignment under the policy (items combined in global-id order; padded: an
/// item of S segments is S rows of its longest segment). O(n + d + Σ S_g).
template <class Cost, class C>
Cost assignment_makespan(const balance_input<Cost>& in, const C& cost,
                         std::span<const rank_t> assignment) {
  if (!in.policy.is_padded()) {
    // The packed rule alone (a rank's load is its Σ cost, added in global-id order, as
    // `rank_load` adds it): bare sums, the same bits without the tally's shape bookkeeping.
    std::vector<Cost> sum(static_cast<std::size_t>(in.d), Cost{});
    for (std::size_t g = 0; g < assignment.size(); ++g)
      sum[static_cast<std::size_t>(assignment[g])] += in.costs[g];
    Cost best{};
    for (const Cost s : sum) best = std::max(best, s);
    return best;
  }
  // The padded rule alone: a rank's load is rows × cost(pad(longest row)), what
  // `rank_load::load` returns, from two integers per rank instead of a whole tally.
  const auto d = static_cast<std::size_t>(in.d);
  std::vector<std::int64_t> rows(d, 0);
  std::vector<std::int64_t> longest(d, -1);  // -1: no item (row lengths are >= 0)
  for (std::size_t g = 0; g < assignment.size(); ++g) {
    const auto r = static_cast<std::size_t>(assignment[g]);
    const item_shape item = item_shape_of(in.layout, static_cast<std::int64_t>(g));
    rows[r] += item.rows;
    longest[r] = std::max(longest[r], item.row_length);
  }
  using rule = rank_load<Cost, rank_load_mode::add_only>;
  Cost best{};
  for (std::size_t r = 0; r < d; ++r) {
    if (longest[r] < 0) continue;
    const auto unit = static_cast<Cost>(cost(in.policy.padded_length(longest[r])));
    best = std::max(best, rule::padded_load(rows[r], unit));
  }
  return best;
}

}  // namespace orchmllm::detail
