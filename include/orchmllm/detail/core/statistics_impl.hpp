#pragma once
// The bodies of the plan statistics (core/statistics.hpp, which declares them and includes this
// file in header-only mode) and the lower bound on a sorted order that the balancers share.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/core/headroom.hpp"
#include "orchmllm/detail/core/order.hpp"
#include "orchmllm/detail/core/padded_search.hpp"
#include "orchmllm/detail/core/prefetch.hpp"

namespace orchmllm {

namespace detail {

/// ⌈total / d⌉ for total ≥ 0, d > 0, without forming total + d − 1 (total may be near 2^63).
template <class Cost>
Cost ceil_div(Cost total, rank_t d) {
  const auto dd = static_cast<Cost>(d);
  return static_cast<Cost>(total / dd + (total % dd != 0 ? 1 : 0));
}

/// Integral costs: every rank's load is a multiple of g (the greatest common divisor of the
/// terms it is a sum or a multiple of), so a makespan of at least `bound` is at least `bound`
/// rounded up to a multiple of g. g = 0 (every term 0) leaves `bound`. Never passes the largest
/// load that a plan can have when `bound` does not: that load is itself a multiple of g.
template <class Cost>
Cost round_up_to_multiple(Cost bound, Cost g) {
  if constexpr (std::is_integral_v<Cost>) {
    if (g > 1 && bound % g != 0) return static_cast<Cost>(bound - bound % g + g);
  }
  return bound;
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
  if (policy.is_padded() && layout.has_segments()) {
    // Rows: the top i + 1 items hold R rows, so some rank holds ⌈R / d⌉ of them, each costing
    // at least the unit of item i; an item alone costs its rows × its unit.
    Cost best{};
    Cost total{};
    Cost unit_gcd{};  // a rank's load is rows × the unit of one of its items
    std::int64_t rows = 0;
    padded_unit_cost<Cost, C> unit_of(cost, policy);
    for (std::int64_t i = 0; i < n; ++i) {
      const item_shape item = item_shape_of(layout, at(i));
      rows += item.rows;
      const std::int64_t count = std::max<std::int64_t>(m, rows / d + (rows % d != 0 ? 1 : 0));
      const Cost c = unit_of(item.row_length);
      using rule = rank_load<Cost, rank_load_mode::add_only>;
      best = std::max<Cost>(best, rule::padded_load(count, c));
      best = std::max<Cost>(best, rule::padded_load(item.rows, c));
      total += rule::padded_load(item.rows, c);
      if constexpr (std::is_integral_v<Cost>) unit_gcd = std::gcd(unit_gcd, c);
    }
    if constexpr (std::is_integral_v<Cost>) {
      best = std::max<Cost>(best, ceil_div(total, d));
    } else {
      best = std::max<Cost>(best, total / static_cast<Cost>(d));
    }
    return round_up_to_multiple(best, unit_gcd);
  }
  if (policy.is_padded()) {
    Cost best{};
    Cost total{};
    Cost unit_gcd{};  // a rank's load is its count × the unit of one of its items
    padded_unit_cost<Cost, C> unit_of(cost, policy);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t count = std::max<std::int64_t>(m, i / d + 1);
      const Cost c = unit_of(layout.length(at(i)));
      using rule = rank_load<Cost, rank_load_mode::add_only>;
      best = std::max<Cost>(best, rule::padded_load(count, c));
      total += c;
      if constexpr (std::is_integral_v<Cost>) unit_gcd = std::gcd(unit_gcd, c);
    }
    if constexpr (std::is_integral_v<Cost>) {
      best = std::max<Cost>(best, ceil_div(total, d));
    } else {
      best = std::max<Cost>(best, total / static_cast<Cost>(d));
    }
    return round_up_to_multiple(best, unit_gcd);
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
  // A rank's load is a sum of item costs: a multiple of their greatest common divisor (lengths
  // in whole tiles under a linear model, say), which proves such plans optimal.
  Cost cost_gcd{};
  if constexpr (std::is_integral_v<Cost>)
    for (std::int64_t i = 0; i < n && cost_gcd != 1; ++i) cost_gcd = std::gcd(cost_gcd, p(i));
  return round_up_to_multiple(best, cost_gcd);
}

/// A padded instance with segments: the optimum of its row relaxation (`padded_impl::
/// row_greedy`), and at least `bound` (= lower_bound_in_order, which holds every single item's
/// rows × unit). O(n + 64 · (n + d)).
template <class C, class Cost = cost_type_t<C>>
Cost segmented_padded_bound(const batch_layout& layout, std::span<const std::int64_t> order,
                            rank_t d, const C& cost, padding_policy policy, Cost bound) {
  const auto n = order.size();
  std::vector<Cost> unit(n);
  std::vector<std::int64_t> rows(n);
  padded_unit_cost<Cost, C> unit_of(cost, policy);
  for (std::size_t s = 0; s < n; ++s) {
    const item_shape item = item_shape_of(layout, order[s]);
    unit[s] = unit_of(item.row_length);
    rows[s] = item.rows;
  }
  const padded_impl::row_greedy<Cost> check(d, std::move(unit), std::move(rows));
  const Cost top = std::numeric_limits<Cost>::has_infinity ? std::numeric_limits<Cost>::infinity()
                                                           : std::numeric_limits<Cost>::max();
  const auto widest = check.run(top);
  if (!widest.feasible) return bound;  // unreachable: d >= 1 groups hold all rows at +inf
  const Cost relaxed =
      padded_impl::min_feasible_makespan(check, std::min(bound, widest.makespan), widest.makespan);
  return std::max(bound, relaxed);
}

/// The lower bound the library reports, given `bound` = lower_bound_in_order on the same input.
/// Packed: `bound`. Padded: the optimum of the instance without its memory cap (the exact padded
/// search of detail/core/padded_search.hpp, started at `bound`), so a plan proven optimal
/// without a cap meets it exactly (`bound` can be far below it); `bound` when the item counts
/// admit no plan. The balancers keep using `bound` internally, so plans do not depend on this.
/// O(n + 64 · min(n, d)).
template <class C, class Cost = cost_type_t<C>>
Cost reported_lower_bound(const batch_layout& layout, std::span<const std::int64_t> order, rank_t d,
                          const C& cost, padding_policy policy, const constraints& limits,
                          Cost bound) {
  const std::int64_t n = layout.num_items();
  if (!policy.is_padded() || n == 0 || d <= 0) return bound;
  if (layout.has_segments())
    return segmented_padded_bound<C>(layout, order, d, cost, policy, bound);
  constraints counts = limits;
  counts.cap.reset();  // the cap can only raise the optimum: the bound stays valid without it
  std::vector<Cost> unit(static_cast<std::size_t>(n));
  padded_unit_cost<Cost, C> unit_of(cost, policy);
  for (std::int64_t s = 0; s < n; ++s)
    unit[static_cast<std::size_t>(s)] = unit_of(layout.length(order[static_cast<std::size_t>(s)]));
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
  if (!layout.has_segments()) {
    for (std::int64_t g = 0; g < layout.num_items(); ++g)
      costs[static_cast<std::size_t>(g)] = cost(layout.length(g));
  } else {
    for (std::int64_t g = 0; g < layout.num_items(); ++g)
      costs[static_cast<std::size_t>(g)] = checked_item_cost(layout, g, cost);
  }
  check_headroom(layout, std::span<const Cost>(costs), cost, policy);
  return costs;
}

// The largest token and byte footprints and the fewest and most items of the ranks a pass of
// `loads_of` visits.
struct shape_extremes {
  std::int64_t max_tokens = 0, max_bytes = 0;
  std::int64_t min_items = INT64_MAX, max_items = 0;  // min stays INT64_MAX without ranks
};

// Loads of the ranks described by `off` (CSR offsets): rank r holds item_of(k) for k in
// [off[r], off[r + 1]), combined in that order; `costs` from checked_costs. With `shapes`, the
// same pass also tallies every rank's tokens, bytes and items into it. `Scattered`: item_of
// jumps about (a plan's destination order), so the items a few places ahead are prefetched.
template <bool Scattered = false, class C, class ItemOf>
std::vector<cost_type_t<C>> loads_of(const batch_layout& layout,
                                     std::span<const cost_type_t<C>> costs,
                                     std::span<const std::int64_t> off, ItemOf item_of,
                                     const C& cost, padding_policy policy,
                                     shape_extremes* shapes = nullptr) {
  using Cost = cost_type_t<C>;
  using tally = rank_load<Cost, rank_load_mode::add_only>;
  std::vector<Cost> loads(off.size() - 1);
  // The shapes are read with `shapes` or under a padded policy: their arrays are fetched too.
  const bool reads_shapes = shapes != nullptr || policy.is_padded();
  const std::int64_t* const lengths = layout.lengths().data();
  const std::int64_t* const bytes = layout.item_bytes().data();
  const auto prefetch_ahead = [&](std::int64_t k) {
    if constexpr (Scattered) {
      if (k + prefetch_distance < off.back()) {
        const auto ahead = static_cast<std::size_t>(item_of(k + prefetch_distance));
        prefetch(costs.data() + ahead);
        if (reads_shapes) {
          prefetch(lengths + ahead);
          prefetch(bytes + ahead);
        }
      }
    } else {
      (void)k, (void)reads_shapes, (void)lengths, (void)bytes;
    }
  };
  const auto note = [shapes](const tally& t) {
    shapes->max_tokens = std::max(shapes->max_tokens, t.tokens());
    shapes->max_bytes = std::max(shapes->max_bytes, t.bytes());
    shapes->min_items = std::min(shapes->min_items, t.count());
    shapes->max_items = std::max(shapes->max_items, t.count());
  };
  if (!policy.is_padded()) {
    // The packed rule alone: each rank's Σ cost in slot order, as `rank_load` adds it.
    for (std::size_t r = 0; r + 1 < off.size(); ++r) {
      Cost sum{};
      tally shape(policy);
      for (auto k = off[r]; k < off[r + 1]; ++k) {
        prefetch_ahead(k);
        const std::int64_t g = item_of(k);
        sum += costs[static_cast<std::size_t>(g)];
        if (shapes) shape.add(item_shape_of(layout, g), Cost{});
      }
      loads[r] = sum;
      if (shapes) note(shape);
    }
    return loads;
  }
  for (std::size_t r = 0; r + 1 < off.size(); ++r) {
    tally acc(policy);
    for (auto k = off[r]; k < off[r + 1]; ++k) {
      prefetch_ahead(k);
      const std::int64_t g = item_of(k);
      acc.add(item_shape_of(layout, g), costs[static_cast<std::size_t>(g)]);
    }
    loads[r] = acc.load(cost);
    if (shapes) note(acc);
  }
  return loads;
}

// The loads before (sampled layout) and after `plan`, from checked costs (with `shapes`, their
// ranks' shape extremes too).
template <class C>
std::vector<cost_type_t<C>> loads_before(const batch_layout& layout,
                                         std::span<const cost_type_t<C>> costs, const C& cost,
                                         padding_policy policy, shape_extremes* shapes = nullptr) {
  return loads_of(
      layout, costs, layout.offsets(), [](std::int64_t g) { return g; }, cost, policy, shapes);
}
inline void check_plan_source(const batch_layout& layout, const rearrangement& plan) {
  ORCHMLLM_REQUIRE(std::ranges::equal(layout.offsets(), plan.src_offsets()), invalid_argument_error,
                   "plan of ", plan.num_items(), " items on ", plan.num_src_ranks(),
                   " ranks does not start from this layout (", layout.num_items(), " items on ",
                   layout.num_ranks(), " ranks)");
}
template <class C>
std::vector<cost_type_t<C>> loads_after(const batch_layout& layout, const rearrangement& plan,
                                        std::span<const cost_type_t<C>> costs, const C& cost,
                                        padding_policy policy, shape_extremes* shapes = nullptr) {
  return loads_of<true>(
      layout, costs, plan.dst_offsets(), [&](std::int64_t h) { return plan.source_of(h); }, cost,
      policy, shapes);
}

// The reported lower bound from checked costs.
template <class C>
cost_type_t<C> lower_bound_of(const batch_layout& layout, std::span<const cost_type_t<C>> costs,
                              rank_t d, const C& cost, padding_policy policy,
                              const constraints& limits) {
  using Cost = cost_type_t<C>;
  const std::int64_t n = layout.num_items();
  ORCHMLLM_REQUIRE(d > 0 || n == 0, invalid_argument_error, "lower bound for ", n, " items on ", d,
                   " ranks");
  const auto order = detail::canonical_order<Cost>(layout, costs, policy);
  const Cost bound = detail::lower_bound_in_order<C>(layout, order, costs, d, cost, policy, limits);
  return reported_lower_bound<C>(layout, order, d, cost, policy, limits, bound);
}

template <class C>
std::vector<cost_type_t<C>> rank_loads_impl(const batch_layout& layout, const C& cost,
                                            padding_policy policy) {
  const auto costs = checked_costs(layout, cost, policy);
  return loads_before<C>(layout, costs, cost, policy);
}

template <class C>
std::vector<cost_type_t<C>> rank_loads_impl(const batch_layout& layout, const rearrangement& plan,
                                            const C& cost, padding_policy policy) {
  check_plan_source(layout, plan);
  const auto costs = checked_costs(layout, cost, policy);
  return loads_after<C>(layout, plan, costs, cost, policy);
}

template <class C>
cost_type_t<C> makespan_lower_bound_impl(const batch_layout& layout, rank_t d, const C& cost,
                                         padding_policy policy, const constraints& limits) {
  const auto costs = checked_costs(layout, cost, policy);
  return lower_bound_of<C>(layout, costs, d, cost, policy, limits);
}

template <class C>
plan_statistics<cost_type_t<C>> compute_statistics_impl(
    const batch_layout& layout, const rearrangement& plan, const C& cost, padding_policy policy,
    const constraints& limits, std::optional<cost_type_t<C>> known_lower_bound) {
  using Cost = cost_type_t<C>;
  plan_statistics<Cost> s;
  s.ranks = plan.num_dst_ranks();
  s.items = layout.num_items();
  // Every item's cost once, shared by the loads before and after and the bound.
  const auto costs = checked_costs(layout, cost, policy);
  check_plan_source(layout, plan);
  shape_extremes before, after;
  s.load_before = loads_before<C>(layout, costs, cost, policy, &before);
  // The identity plan (a stage already balanced) gives every rank its own items in the same
  // order: the same loads and shapes, bit for bit, without a second pass.
  const bool home = plan.is_identity();
  if (home) {
    s.load_after = s.load_before;
    after = before;
  } else {
    s.load_after = loads_after<C>(layout, plan, costs, cost, policy, &after);
  }
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
  s.lower_bound = known_lower_bound ? *known_lower_bound
                  : s.ranks > 0 ? lower_bound_of<C>(layout, costs, s.ranks, cost, policy, limits)
                                : Cost{};
  s.ratio = s.lower_bound > Cost{}
                ? static_cast<double>(s.makespan) / static_cast<double>(s.lower_bound)
                : (s.makespan > Cost{} ? INFINITY : 1.0);
  s.max_tokens = after.max_tokens;
  s.max_bytes = after.max_bytes;
  s.min_items_per_rank = s.ranks > 0 ? after.min_items : 0;
  s.max_items_per_rank = after.max_items;
  s.max_tokens_before = before.max_tokens;
  s.max_bytes_before = before.max_bytes;
  if (!home)  // the identity moves nothing
    for (rank_t r = 0; r < layout.num_ranks(); ++r)
      for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g)
        if (plan.dst_ranks()[static_cast<std::size_t>(g)] != r) {
          ++s.items_moved;
          s.bytes_moved += layout.bytes(g);
        }
  return s;
}

}  // namespace detail
}  // namespace orchmllm
