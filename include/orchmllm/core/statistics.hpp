#pragma once
/// @file statistics.hpp
/// Quality figures of a plan: per-rank loads before and after, makespan, imbalance, lower
/// bounds on the optimal makespan and the ratio to them, items and bytes that change rank. See
/// docs/algorithms.md, "Lower bounds (`makespan_lower_bound`, core/statistics.hpp)".

#include <cstdint>
#include <optional>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"

namespace orchmllm {

/// Quality figures of one plan.
template <class Cost>
struct plan_statistics {
  rank_t ranks = 0;                     ///< destination ranks d
  std::int64_t items = 0;               ///< items n
  std::vector<Cost> load_before;        ///< per source rank, as sampled
  std::vector<Cost> load_after;         ///< per destination rank, after the plan
  Cost makespan_before{};               ///< max of load_before
  Cost makespan{};                      ///< max of load_after
  Cost min_load{};                      ///< min of load_after
  double mean_before = 0;               ///< mean of load_before
  double mean_after = 0;                ///< mean of load_after
  double imbalance_before = 1;          ///< makespan_before / mean_before (1 when the mean is 0)
  double imbalance_after = 1;           ///< makespan / mean_after (1 when the mean is 0)
  Cost lower_bound{};                   ///< makespan_lower_bound for d ranks
  double ratio = 1;                     ///< makespan / lower_bound (1 when both are 0)
  std::int64_t max_tokens = 0;          ///< largest token footprint of a destination rank
  std::int64_t max_bytes = 0;           ///< largest byte footprint of a destination rank
  std::int64_t max_tokens_before = 0;   ///< largest token footprint of a source rank, as sampled
  std::int64_t max_bytes_before = 0;    ///< largest byte footprint of a source rank, as sampled
  std::int64_t min_items_per_rank = 0;  ///< fewest items on a destination rank
  std::int64_t max_items_per_rank = 0;  ///< most items on a destination rank
  std::int64_t items_moved = 0;         ///< items whose destination rank differs from the source
  std::int64_t bytes_moved = 0;         ///< their payload bytes
};

namespace detail {

// The four statistics on a model that returns its computation type (defined in
// detail/core/statistics_impl.hpp, which this header includes in header-only mode). The public
// templates below forward to them, or to the compiled library's entry points.
template <class C>
std::vector<cost_type_t<C>> rank_loads_impl(const batch_layout& layout, const C& cost,
                                            padding_policy policy);
template <class C>
std::vector<cost_type_t<C>> rank_loads_impl(const batch_layout& layout, const rearrangement& plan,
                                            const C& cost, padding_policy policy);
template <class C>
cost_type_t<C> makespan_lower_bound_impl(const batch_layout& layout, rank_t d, const C& cost,
                                         padding_policy policy, const constraints& limits);
// `known_lower_bound`: the stage's bound when the caller has it already (`balance_result::
// lower_bound` of the same layout, model, policy and limits): taken as is instead of recomputed
// (the bound is the one figure that sorts).
template <class C>
plan_statistics<cost_type_t<C>> compute_statistics_impl(
    const batch_layout& layout, const rearrangement& plan, const C& cost, padding_policy policy,
    const constraints& limits, std::optional<cost_type_t<C>> known_lower_bound = std::nullopt);

// The compiled library's entry points (orchmllm/config.hpp), one per computation type.
#define ORCHMLLM_DETAIL_DECLARE_STATISTICS(T)                                               \
  std::vector<T> rank_loads_compiled(const batch_layout& layout, cost_ref<T> cost,          \
                                     padding_policy policy);                                \
  std::vector<T> rank_loads_compiled(const batch_layout& layout, const rearrangement& plan, \
                                     cost_ref<T> cost, padding_policy policy);              \
  T makespan_lower_bound_compiled(const batch_layout& layout, rank_t d, cost_ref<T> cost,   \
                                  padding_policy policy, const constraints& limits);        \
  plan_statistics<T> compute_statistics_compiled(                                           \
      const batch_layout& layout, const rearrangement& plan, cost_ref<T> cost,              \
      padding_policy policy, const constraints& limits);
ORCHMLLM_DETAIL_FOR_COST_TYPES(ORCHMLLM_DETAIL_DECLARE_STATISTICS)
#undef ORCHMLLM_DETAIL_DECLARE_STATISTICS

}  // namespace detail

ORCHMLLM_MODE_NAMESPACE_BEGIN

// Each public template computes in cost_type_t<C> (see cost_model.hpp): in header-only mode
// here, in compiled mode in the library (orchmllm/config.hpp). Same figures either way.
/// Per-rank loads of a layout as it stands (no rearrangement). O(n + d), deterministic
/// (items combined in slot order). Throws `invalid_argument_error` for a non-finite cost or an
/// input whose loads could overflow their type (the same check as `balance`, naming the value).
template <cost_model C>
std::vector<cost_type_t<C>> rank_loads(const batch_layout& layout, const C& cost,
                                       padding_policy policy) {
#if ORCHMLLM_USE_COMPILED
  return detail::rank_loads_compiled(layout, detail::cost_ref<cost_type_t<C>>(cost), policy);
#else
  return detail::with_normal_cost(
      cost, [&](const auto& c) { return detail::rank_loads_impl(layout, c, policy); });
#endif
}

/// Per-destination-rank loads after `plan` (items combined in destination slot order).
/// O(n + d). Throws `invalid_argument_error` if the plan's source is not the layout, and as the
/// overload above.
template <cost_model C>
std::vector<cost_type_t<C>> rank_loads(const batch_layout& layout, const rearrangement& plan,
                                       const C& cost, padding_policy policy) {
#if ORCHMLLM_USE_COMPILED
  return detail::rank_loads_compiled(layout, plan, detail::cost_ref<cost_type_t<C>>(cost), policy);
#else
  return detail::with_normal_cost(
      cost, [&](const auto& c) { return detail::rank_loads_impl(layout, plan, c, policy); });
#endif
}

/// A lower bound on the smallest achievable makespan over all plans of `layout` onto `d` ranks
/// under the cost model, policy and item-count limits (the memory cap is ignored: it can only
/// raise the optimum, so the bound stays valid). With p₁ ≥ p₂ ≥ … the sorted item costs and S
/// their sum:
///
/// packed: the largest of
///   L0 = max(S / d (rounded up for integral costs), p₁)
///   Lr = p_{rd+1-r} + … + p_{rd+1} for 0 ≤ r ≲ 2√n with rd + 1 ≤ n: some rank holds r + 1 of
///        the rd + 1 largest (r = 1: p_d + p_{d+1}); with min_items m that rank holds m - r - 1
///        more items, so the m - r - 1 smallest items are added (r = 0: p₁ + the m - 1 smallest)
///   the ⌈n/d⌉ smallest items (some rank holds at least that many)
/// padded: the optimum itself, without the memory cap: the exact padded search (the
///   `padded` algorithm, docs/algorithms.md) started from the largest of
///   max over i ≥ 1 of max(m, ⌈i/d⌉) · cost(padded l_i), lengths sorted descending (some rank
///        holds ⌈i/d⌉ of the i longest, so its longest is at least l_i; every rank holds ≥ m)
///   Σ cost(padded l_i) / d (rounded up for integral costs): a rank's padded load is at least
///        the sum of its items' own costs, since the cost model is non-decreasing
///   — at most 64 greedy checks of O(min(n, d)) more, so a padded plan proven optimal without a
///   cap has ratio 1 (those two terms alone can sit 20 % below the optimum).
/// m is min_items clamped to ⌊n/d⌋ (a larger value is infeasible; `constraints::check` says so).
///
/// Floating-point costs: the bound's sums are formed in sorted order and a makespan's in slot
/// order, so an optimal makespan can sit a few ulps below the bound. Integral costs are exact.
/// Throws `invalid_argument_error` when d ≤ 0 and the layout has items, and as `rank_loads` for
/// costs whose sums could overflow. O(n log n) time, O(n)
/// memory, deterministic. Returns 0 for an empty layout.
template <cost_model C>
cost_type_t<C> makespan_lower_bound(const batch_layout& layout, rank_t d, const C& cost,
                                    padding_policy policy, const constraints& limits = {}) {
#if ORCHMLLM_USE_COMPILED
  return detail::makespan_lower_bound_compiled(layout, d, detail::cost_ref<cost_type_t<C>>(cost),
                                               policy, limits);
#else
  return detail::with_normal_cost(cost, [&](const auto& c) {
    return detail::makespan_lower_bound_impl(layout, d, c, policy, limits);
  });
#endif
}

/// Computes every figure of `plan_statistics` from scratch. O(n log n + d) (the lower bound
/// sorts). Deterministic. Throws `invalid_argument_error` if the plan does not start from the
/// layout, and as `rank_loads`. The layout's rank count is the source rank count; ranks are
/// compared by index for items_moved.
template <cost_model C>
plan_statistics<cost_type_t<C>> compute_statistics(const batch_layout& layout,
                                                   const rearrangement& plan, const C& cost,
                                                   padding_policy policy,
                                                   const constraints& limits = {}) {
#if ORCHMLLM_USE_COMPILED
  return detail::compute_statistics_compiled(layout, plan, detail::cost_ref<cost_type_t<C>>(cost),
                                             policy, limits);
#else
  return detail::with_normal_cost(cost, [&](const auto& c) {
    return detail::compute_statistics_impl(layout, plan, c, policy, limits);
  });
#endif
}

ORCHMLLM_MODE_NAMESPACE_END

}  // namespace orchmllm

#if !ORCHMLLM_USE_COMPILED
#include "orchmllm/detail/core/statistics_impl.hpp"
#endif
