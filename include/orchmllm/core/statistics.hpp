#pragma once
/// @file statistics.hpp
/// Quality figures of a plan: per-rank loads before and after, makespan, imbalance, lower
/// bounds on the optimal makespan and the ratio to them, items and bytes that change rank.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/core/order.hpp"

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

/// makespan_lower_bound on an already computed canonical order (detail/core/order.hpp) and
/// per-item costs: O(n), so a balancer that has sorted once does not sort again.
template <class C, class Cost = cost_type_t<C>>
Cost lower_bound_in_order(const batch_layout& layout, std::span<const std::int64_t> order,
                          std::span<const Cost> costs, rank_t d, const C& cost,
                          padding_policy policy, const constraints& limits) {
  const std::int64_t n = layout.num_items();
  ORCHMLLM_REQUIRE(d > 0 || n == 0, invalid_argument_error, "lower bound for ", n, " items on ", d,
                   " ranks");
  if (n == 0) return Cost{};
  const std::int64_t m = std::min<std::int64_t>(limits.min_items, n / d);
  auto at = [&](std::int64_t i) { return order[static_cast<std::size_t>(i)]; };
  if (policy.is_padded()) {
    Cost best{};
    Cost total{};
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t count = std::max<std::int64_t>(m, i / d + 1);
      const Cost c = static_cast<Cost>(cost(policy.padded_length(layout.length(at(i)))));
      best = std::max<Cost>(best, static_cast<Cost>(static_cast<Cost>(count) * c));
      total += c;
    }
    if constexpr (std::is_integral_v<Cost>) {
      best = std::max<Cost>(best, static_cast<Cost>((total + d - 1) / d));
    } else {
      best = std::max<Cost>(best, total / static_cast<Cost>(d));
    }
    return best;
  }
  auto p = [&](std::int64_t i) { return costs[static_cast<std::size_t>(at(i))]; };
  // Suffix sums give "sum of the k smallest" in O(1).
  std::vector<Cost> suffix(static_cast<std::size_t>(n) + 1, Cost{});
  for (std::int64_t i = n - 1; i >= 0; --i)
    suffix[static_cast<std::size_t>(i)] = suffix[static_cast<std::size_t>(i) + 1] + p(i);
  auto smallest = [&](std::int64_t k) { return suffix[static_cast<std::size_t>(n - k)]; };
  const Cost total = suffix[0];
  Cost best = p(0);
  if constexpr (std::is_integral_v<Cost>) {
    best = std::max<Cost>(best, static_cast<Cost>((total + d - 1) / d));
  } else {
    best = std::max<Cost>(best, total / static_cast<Cost>(d));
  }
  best = std::max(best, smallest((n + d - 1) / d));
  for (std::int64_t r = 0; r * d + 1 <= n; ++r) {
    // r + 1 smallest among the top r·d + 1 items: 0-based positions r·d - r … r·d.
    Cost s{};
    for (std::int64_t i = r * d - r; i <= r * d; ++i) s += p(i);
    const std::int64_t extra = m - r - 1;  // more items that rank must hold
    if (extra > 0) {
      if (n - extra <= r * d) continue;  // would overlap the chosen items
      s += smallest(extra);
    }
    best = std::max(best, s);
    if (r > 0 && (r + 1) * (r + 1) > 4 * n) break;  // keeps the scan O(n)
  }
  return best;
}

// The four statistics on a model that returns its computation type (the public templates below
// forward to them, or to the compiled library's entry points).

template <class C>
std::vector<cost_type_t<C>> rank_loads_impl(const batch_layout& layout, const C& cost,
                                       padding_policy policy) {
  using Cost = cost_type_t<C>;
  std::vector<Cost> loads(static_cast<std::size_t>(layout.num_ranks()));
  for (rank_t r = 0; r < layout.num_ranks(); ++r) {
    rank_load<Cost> acc(policy);
    for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g)
      acc.add(layout.length(g), cost(layout.length(g)), layout.bytes(g));
    loads[static_cast<std::size_t>(r)] = acc.load(cost);
  }
  return loads;
}


template <class C>
std::vector<cost_type_t<C>> rank_loads_impl(const batch_layout& layout, const rearrangement& plan,
                                       const C& cost, padding_policy policy) {
  using Cost = cost_type_t<C>;
  ORCHMLLM_REQUIRE(std::ranges::equal(layout.offsets(), plan.src_offsets()), invalid_argument_error,
                   "plan of ", plan.num_items(), " items on ", plan.num_src_ranks(),
                   " ranks does not start from this layout (", layout.num_items(), " items on ",
                   layout.num_ranks(), " ranks)");
  std::vector<Cost> loads(static_cast<std::size_t>(plan.num_dst_ranks()));
  const auto off = plan.dst_offsets();
  for (rank_t r = 0; r < plan.num_dst_ranks(); ++r) {
    rank_load<Cost> acc(policy);
    for (auto h = off[static_cast<std::size_t>(r)]; h < off[static_cast<std::size_t>(r) + 1]; ++h) {
      const auto g = plan.source_of(h);
      acc.add(layout.length(g), cost(layout.length(g)), layout.bytes(g));
    }
    loads[static_cast<std::size_t>(r)] = acc.load(cost);
  }
  return loads;
}


template <class C>
cost_type_t<C> makespan_lower_bound_impl(const batch_layout& layout, rank_t d, const C& cost,
                                    padding_policy policy, const constraints& limits) {
  using Cost = cost_type_t<C>;
  const std::int64_t n = layout.num_items();
  ORCHMLLM_REQUIRE(d > 0 || n == 0, invalid_argument_error, "lower bound for ", n, " items on ", d,
                   " ranks");
  std::vector<Cost> costs(static_cast<std::size_t>(n));
  for (std::int64_t g = 0; g < n; ++g) costs[static_cast<std::size_t>(g)] = cost(layout.length(g));
  const auto order = detail::canonical_order<Cost>(layout, costs, policy);
  return detail::lower_bound_in_order<C>(layout, order, std::span<const Cost>(costs), d, cost,
                                         policy, limits);
}


template <class C>
plan_statistics<cost_type_t<C>> compute_statistics_impl(const batch_layout& layout,
                                                   const rearrangement& plan, const C& cost,
                                                   padding_policy policy,
                                                   const constraints& limits) {
  using Cost = cost_type_t<C>;
  plan_statistics<Cost> s;
  s.ranks = plan.num_dst_ranks();
  s.items = layout.num_items();
  s.load_before = rank_loads_impl(layout, cost, policy);
  s.load_after = rank_loads_impl(layout, plan, cost, policy);
  auto mean = [](const std::vector<Cost>& v) {
    double t = 0;
    for (auto x : v) t += static_cast<double>(x);
    return v.empty() ? 0.0 : t / static_cast<double>(v.size());
  };
  auto max_of = [](const std::vector<Cost>& v) {
    return v.empty() ? Cost{} : *std::max_element(v.begin(), v.end());
  };
  s.makespan_before = max_of(s.load_before);
  s.makespan = max_of(s.load_after);
  s.min_load =
      s.load_after.empty() ? Cost{} : *std::min_element(s.load_after.begin(), s.load_after.end());
  s.mean_before = mean(s.load_before);
  s.mean_after = mean(s.load_after);
  s.imbalance_before =
      s.mean_before > 0 ? static_cast<double>(s.makespan_before) / s.mean_before : 1.0;
  s.imbalance_after = s.mean_after > 0 ? static_cast<double>(s.makespan) / s.mean_after : 1.0;
  s.lower_bound =
      s.ranks > 0 ? makespan_lower_bound_impl(layout, s.ranks, cost, policy, limits) : Cost{};
  s.ratio = s.lower_bound > Cost{}
                ? static_cast<double>(s.makespan) / static_cast<double>(s.lower_bound)
                : (s.makespan > Cost{} ? INFINITY : 1.0);
  const auto off = plan.dst_offsets();
  s.min_items_per_rank = s.ranks > 0 ? INT64_MAX : 0;
  for (rank_t r = 0; r < s.ranks; ++r) {
    rank_load<Cost> acc(policy);
    for (auto h = off[static_cast<std::size_t>(r)]; h < off[static_cast<std::size_t>(r) + 1]; ++h) {
      const auto g = plan.source_of(h);
      acc.add(layout.length(g), Cost{}, layout.bytes(g));
    }
    s.max_tokens = std::max(s.max_tokens, acc.tokens());
    s.max_bytes = std::max(s.max_bytes, acc.bytes());
    s.min_items_per_rank = std::min(s.min_items_per_rank, acc.count());
    s.max_items_per_rank = std::max(s.max_items_per_rank, acc.count());
  }
  for (rank_t r = 0; r < layout.num_ranks(); ++r) {
    rank_load<Cost> acc(policy);
    for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g) {
      acc.add(layout.length(g), Cost{}, layout.bytes(g));
      if (plan.dst_ranks()[static_cast<std::size_t>(g)] != r) {
        ++s.items_moved;
        s.bytes_moved += layout.bytes(g);
      }
    }
    s.max_tokens_before = std::max(s.max_tokens_before, acc.tokens());
    s.max_bytes_before = std::max(s.max_bytes_before, acc.bytes());
  }
  return s;
}


// The compiled library's entry points (orchmllm/config.hpp), one per computation type.
#define ORCHMLLM_DETAIL_DECLARE_STATISTICS(T)                                                   \
  std::vector<T> rank_loads_compiled(const batch_layout& layout, cost_ref<T> cost,              \
                                     padding_policy policy);                                    \
  std::vector<T> rank_loads_compiled(const batch_layout& layout, const rearrangement& plan,     \
                                     cost_ref<T> cost, padding_policy policy);                  \
  T makespan_lower_bound_compiled(const batch_layout& layout, rank_t d, cost_ref<T> cost,       \
                                  padding_policy policy, const constraints& limits);            \
  plan_statistics<T> compute_statistics_compiled(const batch_layout& layout,                    \
                                                 const rearrangement& plan, cost_ref<T> cost,   \
                                                 padding_policy policy, const constraints& limits);
ORCHMLLM_DETAIL_FOR_COST_TYPES(ORCHMLLM_DETAIL_DECLARE_STATISTICS)
#undef ORCHMLLM_DETAIL_DECLARE_STATISTICS

}  // namespace detail

ORCHMLLM_MODE_NAMESPACE_BEGIN

// Each public template computes in cost_type_t<C> (see cost_model.hpp): in header-only mode
// here, in compiled mode in the library (orchmllm/config.hpp). Same figures either way.
/// Per-rank loads of a layout as it stands (no rearrangement). O(n + d), deterministic
/// (items combined in slot order).
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
/// O(n + d). Throws `invalid_argument_error` if the plan's source is not the layout.
template <cost_model C>
std::vector<cost_type_t<C>> rank_loads(const batch_layout& layout, const rearrangement& plan,
                                       const C& cost, padding_policy policy) {
#if ORCHMLLM_USE_COMPILED
  return detail::rank_loads_compiled(layout, plan, detail::cost_ref<cost_type_t<C>>(cost),
                                     policy);
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
/// padded: the largest of
///   max over i ≥ 1 of max(m, ⌈i/d⌉) · cost(padded l_i), lengths sorted descending (some rank
///        holds ⌈i/d⌉ of the i longest, so its longest is at least l_i; every rank holds ≥ m)
///   Σ cost(padded l_i) / d (rounded up for integral costs): a rank's padded load is at least
///        the sum of its items' own costs, since the cost model is non-decreasing
/// m is min_items clamped to ⌊n/d⌋ (a larger value is infeasible; `constraints::check` says so).
///
/// Floating-point costs: the bound's sums are formed in sorted order and a makespan's in slot
/// order, so an optimal makespan can sit a few ulps below the bound. Integral costs are exact.
/// Throws `invalid_argument_error` when d ≤ 0 and the layout has items. O(n log n) time, O(n)
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
/// layout. The layout's rank count is the source rank count; ranks are compared by index for
/// items_moved.
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
