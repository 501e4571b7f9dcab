#pragma once
// The bodies of the plan statistics (core/statistics.hpp, which declares them and includes this
// file in header-only mode) and the lower bound on a sorted order that the balancers share.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/core/headroom.hpp"
#include "orchmllm/detail/core/order.hpp"
#include "orchmllm/detail/core/padded_search.hpp"

namespace orchmllm {

namespace detail {

/// ⌈total / d⌉ for total ≥ 0, d > 0, without forming total + d − 1 (total may be near 2^63).
template <class Cost>
Cost ceil_div(Cost total, rank_t d) {
  const auto dd = static_cast<Cost>(d);
  return static_cast<Cost>(total / dd + (total % dd != 0 ? 1 : 0));
}

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
      best = std::max<Cost>(best, ceil_div(total, d));
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
    best = std::max<Cost>(best, ceil_div(total, d));
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

/// The lower bound the library reports, given `bound` = lower_bound_in_order on the same input.
/// Packed: `bound`. Padded: the optimum of the instance without its memory cap (the exact padded
/// search of detail/core/padded_search.hpp, started at `bound`), so a plan proven optimal
/// without a cap meets it exactly (`bound` can be far below it); `bound` when the item counts
/// admit no plan. The balancers keep using `bound` internally, so plans do not depend on this.
/// O(n + 64 · min(n, d)).
template <class C, class Cost = cost_type_t<C>>
Cost reported_lower_bound(const batch_layout& layout, std::span<const std::int64_t> order,
                          rank_t d, const C& cost, padding_policy policy,
                          const constraints& limits, Cost bound) {
  const std::int64_t n = layout.num_items();
  if (!policy.is_padded() || n == 0 || d <= 0) return bound;
  constraints counts = limits;
  counts.cap.reset();  // the cap can only raise the optimum: the bound stays valid without it
  std::vector<Cost> unit(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < n; ++s)
    unit[static_cast<std::size_t>(s)] = static_cast<Cost>(
        cost(policy.padded_length(layout.length(order[static_cast<std::size_t>(s)]))));
  const padded_impl::greedy<Cost> check(padded_instance{layout, d, order, policy, counts},
                                        std::move(unit), true);
  const Cost top = std::numeric_limits<Cost>::has_infinity ? std::numeric_limits<Cost>::infinity()
                                                           : std::numeric_limits<Cost>::max();
  const auto widest = check.run(top);
  if (!widest.feasible) return bound;
  return padded_impl::min_feasible_makespan(check, std::min(bound, widest.makespan),
                                            widest.makespan);
}

// The four statistics on a model that returns its computation type (declared in
// core/statistics.hpp).

/// Every item's cost, after `check_headroom`: the loads and bounds formed from them fit.
template <class C>
std::vector<cost_type_t<C>> checked_costs(const batch_layout& layout, const C& cost,
                                          padding_policy policy) {
  using Cost = cost_type_t<C>;
  std::vector<Cost> costs(static_cast<std::size_t>(layout.num_items()));
  for (std::int64_t g = 0; g < layout.num_items(); ++g)
    costs[static_cast<std::size_t>(g)] = cost(layout.length(g));
  check_headroom(layout, std::span<const Cost>(costs), cost, policy);
  return costs;
}

template <class C>
std::vector<cost_type_t<C>> rank_loads_impl(const batch_layout& layout, const C& cost,
                                       padding_policy policy) {
  using Cost = cost_type_t<C>;
  const std::vector<Cost> costs = checked_costs(layout, cost, policy);
  std::vector<Cost> loads(static_cast<std::size_t>(layout.num_ranks()));
  for (rank_t r = 0; r < layout.num_ranks(); ++r) {
    rank_load<Cost> acc(policy);
    for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g)
      acc.add(layout.length(g), costs[static_cast<std::size_t>(g)], layout.bytes(g));
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
  const std::vector<Cost> costs = checked_costs(layout, cost, policy);
  std::vector<Cost> loads(static_cast<std::size_t>(plan.num_dst_ranks()));
  const auto off = plan.dst_offsets();
  for (rank_t r = 0; r < plan.num_dst_ranks(); ++r) {
    rank_load<Cost> acc(policy);
    for (auto h = off[static_cast<std::size_t>(r)]; h < off[static_cast<std::size_t>(r) + 1]; ++h) {
      const auto g = plan.source_of(h);
      acc.add(layout.length(g), costs[static_cast<std::size_t>(g)], layout.bytes(g));
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
  const std::vector<Cost> costs = checked_costs(layout, cost, policy);
  const auto order = detail::canonical_order<Cost>(layout, costs, policy);
  const Cost bound = detail::lower_bound_in_order<C>(layout, order, std::span<const Cost>(costs),
                                                     d, cost, policy, limits);
  return reported_lower_bound<C>(layout, order, d, cost, policy, limits, bound);
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

}  // namespace detail
}  // namespace orchmllm
