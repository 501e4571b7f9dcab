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

/// Footprint of one item alone under the cap's measure (tokens: padded length; bytes: bytes).
inline std::int64_t item_footprint(const batch_layout& layout, std::int64_t g,
                                   padding_policy policy, capacity::measure what) {
  return what == capacity::measure::tokens ? policy.padded_length(layout.length(g))
                                           : layout.bytes(g);
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
    acc[static_cast<std::size_t>(r)].add(in.layout.length(static_cast<std::int64_t>(g)), Cost{},
                                          in.layout.bytes(static_cast<std::int64_t>(g)));
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

/// Makespan of an assignment under the policy (items combined in global-id order). O(n + d).
template <class Cost, class C>
Cost assignment_makespan(const balance_input<Cost>& in, const C& cost,
                         std::span<const rank_t> assignment) {
  using tally = rank_load<Cost, rank_load_mode::add_only>;
  std::vector<tally> acc(static_cast<std::size_t>(in.d), tally(in.policy));
  for (std::size_t g = 0; g < assignment.size(); ++g)
    acc[static_cast<std::size_t>(assignment[g])].add(in.layout.length(static_cast<std::int64_t>(g)),
                                                      in.costs[g], 0);
  Cost best{};
  for (const auto& a : acc) best = std::max(best, a.load(cost));
  return best;
}

}  // namespace orchmllm::detail
