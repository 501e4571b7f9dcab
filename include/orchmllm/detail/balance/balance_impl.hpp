#pragma once
// The body of `orchmllm::balance` (balance/balancer.hpp, which includes this file in
// header-only mode and declares `balance_impl`): the checks, the algorithm switch, the
// constrained fallback. The compiled library (orchmllm/config.hpp) instantiates it once per
// computation type.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/balance/exact.hpp"
#include "orchmllm/detail/balance/first_fit.hpp"
#include "orchmllm/detail/balance/kk.hpp"
#include "orchmllm/detail/balance/locality.hpp"
#include "orchmllm/detail/balance/lpt.hpp"
#include "orchmllm/detail/balance/padded.hpp"
#include "orchmllm/detail/balance/refine.hpp"
#include "orchmllm/detail/core/headroom.hpp"

namespace orchmllm {
namespace detail {

/// Definite infeasibility, checked before any algorithm runs: counts, single items above the
/// cap, and (packed) the total footprint above d · cap.
template <class Cost>
void check_feasible(const balance_input<Cost>& in) {
  const auto n = in.layout.num_items();
  in.limits.check(n, in.d);
  if (!in.limits.cap || n == 0) return;
  const auto& cap = *in.limits.cap;
  const char* unit = cap.what == capacity::measure::tokens ? "tokens" : "bytes";
  std::int64_t total = 0;
  for (std::int64_t g = 0; g < n; ++g) {
    const auto f = item_footprint(in.layout, g, in.policy, cap.what);
    ORCHMLLM_REQUIRE(f <= cap.limit, infeasible_error, "item ", g, " alone needs ", f, " ", unit,
                     ", above the per-rank cap of ", cap.limit);
    total += f;
  }
  if (!in.policy.is_padded()) {
    // ⌈total / d⌉ <= cap, i.e. total <= d · cap without forming d · cap (overflows for large caps).
    const auto d64 = static_cast<std::int64_t>(in.d);
    ORCHMLLM_REQUIRE(total / d64 + (total % d64 != 0 ? 1 : 0) <= cap.limit || cap.limit == 0,
                     infeasible_error, "total of ", total, " ", unit, " exceeds ", in.d,
                     " ranks × cap ", cap.limit, " = ", cap.limit * static_cast<std::int64_t>(in.d));
    ORCHMLLM_REQUIRE(total == 0 || cap.limit > 0, infeasible_error, "total of ", total, " ",
                     unit, " cannot fit under a cap of 0 on ", in.d, " ranks");
  }
}

/// Target of `algorithm::locality`: m · (1 + tolerance), rounded down for integral costs,
/// clamped to the largest Cost, never below m.
template <class Cost>
Cost locality_target(Cost m, double tolerance) {
  if constexpr (std::is_integral_v<Cost>) {
    const long double t = static_cast<long double>(m) * (1.0L + static_cast<long double>(tolerance));
    if (!(t < static_cast<long double>(std::numeric_limits<Cost>::max())))
      return std::numeric_limits<Cost>::max();
    return std::max(m, static_cast<Cost>(std::floor(t)));
  } else {
    return std::max(m, static_cast<Cost>(m * (1 + static_cast<Cost>(tolerance))));
  }
}

[[noreturn]] inline void no_placement_found(std::int64_t n, rank_t d, const constraints& limits,
                                            std::int64_t total_tokens, std::int64_t total_bytes) {
  std::string what = "no placement of " + std::to_string(n) + " items on " + std::to_string(d) +
                     " ranks satisfies";
  if (limits.cap) {
    const bool tokens = limits.cap->what == capacity::measure::tokens;
    what += " the cap of " + std::to_string(limits.cap->limit) + (tokens ? " tokens" : " bytes") +
            " per rank (total " + std::to_string(tokens ? total_tokens : total_bytes) + ")";
  }
  what += " with " + std::to_string(limits.min_items) + ".." +
          (limits.max_items == INT64_MAX ? std::string("unlimited")
                                         : std::to_string(limits.max_items)) +
          " items per rank";
  raise<infeasible_error>(what);
}

// Declared in balance/balancer.hpp; `cost` returns its computation type.
template <class C>
balance_result<cost_type_t<C>> balance_impl(const batch_layout& layout, const C& cost,
                                            padding_policy policy, const balance_options& options) {
  using Cost = cost_type_t<C>;
  const rank_t d = layout.num_ranks();
  const auto n = layout.num_items();
  ORCHMLLM_REQUIRE(options.refine_budget >= -1, invalid_argument_error, "refine_budget is ",
                   options.refine_budget, ", must be >= -1");
  ORCHMLLM_REQUIRE(options.exact_node_budget >= 0 && options.exact_max_items >= 0,
                   invalid_argument_error, "exact budgets must be >= 0");
  ORCHMLLM_REQUIRE(!(packed_only(options.method) && policy.is_padded()),
                   invalid_argument_error, to_string(options.method),
                   " balances the packed policy only; use padded or auto for padded batches");
  ORCHMLLM_REQUIRE(!(options.method == algorithm::padded_exact && !policy.is_padded()),
                   invalid_argument_error,
                   "the padded algorithm needs a padded policy; use lpt, kk or auto for packed");
  ORCHMLLM_REQUIRE(std::isfinite(options.locality_tolerance) && options.locality_tolerance >= 0,
                   invalid_argument_error, "locality_tolerance is ", options.locality_tolerance,
                   ", must be finite and >= 0");
  ORCHMLLM_REQUIRE(options.node_of_rank.empty() ||
                       options.node_of_rank.size() == static_cast<std::size_t>(d),
                   invalid_argument_error, "node_of_rank has ", options.node_of_rank.size(),
                   " entries, expected ", d, " (one per rank) or none");
  for (std::size_t r = 0; r < options.node_of_rank.size(); ++r)
    ORCHMLLM_REQUIRE(options.node_of_rank[r] >= 0 && options.node_of_rank[r] < d,
                     invalid_argument_error, "node_of_rank[", r, "] is ",
                     options.node_of_rank[r], ", must be a node id in [0, ", d,
                     ") (node ids are dense: 0, 1, … per distinct node)");

  std::vector<Cost> costs(static_cast<std::size_t>(n));
  for (std::int64_t g = 0; g < n; ++g) {
    costs[static_cast<std::size_t>(g)] = cost(layout.length(g));
    ORCHMLLM_REQUIRE(costs[static_cast<std::size_t>(g)] >= Cost{}, invalid_argument_error,
                     "cost of item ", g, " (length ", layout.length(g), ") is ",
                     costs[static_cast<std::size_t>(g)], ", must be >= 0");
  }
  detail::check_headroom(layout, std::span<const Cost>(costs), cost, policy);
  const std::vector<std::int64_t> order = detail::canonical_order<Cost>(layout, costs, policy);
  const detail::balance_input<Cost> in{layout, d, costs, order, policy, options.limits};
  detail::check_feasible(in);

  balance_result<Cost> result;
  result.lower_bound = detail::input_lower_bound(in, cost);
  const std::int64_t budget = options.refine_budget >= 0 ? options.refine_budget : 2 * n + 64;

  std::optional<std::vector<rank_t>> best;
  Cost best_makespan{};
  bool proven = false;
  bool infeasible = false;  // an exact method exhausted its search without a feasible plan
  auto consider = [&](std::optional<std::vector<rank_t>>&& a, algorithm which) {
    if (!a || !detail::satisfies(in, *a)) return;
    const Cost m = detail::assignment_makespan(in, cost, *a);
    if (!best || m < best_makespan) {
      best = std::move(a);
      best_makespan = m;
      result.used = which;
    }
  };
  auto at_bound = [&] { return best && best_makespan <= result.lower_bound; };
  auto refine_best = [&] {
    if (best && !at_bound()) {
      std::vector<rank_t> a = *best;
      detail::refine(in, cost, a, budget, result.lower_bound);
      consider(std::move(a), result.used);
    }
  };

  switch (options.method) {
    case algorithm::none: {
      std::vector<rank_t> a(static_cast<std::size_t>(n));
      for (rank_t r = 0; r < d; ++r)
        std::fill(a.begin() + layout.offset(r), a.begin() + layout.offset(r + 1), r);
      ORCHMLLM_REQUIRE(detail::satisfies(in, a), infeasible_error,
                       "the identity plan violates the constraints (cap or item counts)");
      consider(std::move(a), algorithm::none);
      break;
    }
    case algorithm::lpt:
      consider(detail::lpt(in, cost), algorithm::lpt);
      if (options.refine) refine_best();
      break;
    case algorithm::kk:
      // The complete method where its n · d sums fit the guard, else the equal-count one.
      if (kk_complete_fits(n, d))
        consider(detail::karmarkar_karp(in, true), algorithm::kk);
      else
        consider(detail::karmarkar_karp(in), algorithm::kk_equal);
      if (options.refine) refine_best();
      break;
    case algorithm::kk_equal:
      consider(detail::karmarkar_karp(in), algorithm::kk_equal);
      if (options.refine) refine_best();
      break;
    case algorithm::exact: {
      auto r = detail::exact_search(in, cost, options.exact_node_budget);
      infeasible = r.complete && !r.assignment;
      consider(std::move(r.assignment), algorithm::exact);
      proven = r.complete && best.has_value();
      break;
    }
    case algorithm::padded_exact: {
      auto r = detail::padded_optimal(in, cost);
      infeasible = r.optimal && !r.assignment;
      consider(std::move(r.assignment), algorithm::padded_exact);
      proven = r.optimal && best.has_value();
      break;
    }
    case algorithm::locality: {
      // automatic first: its makespan sets the target and its plan is the fallback.
      balance_options base_options = options;
      base_options.method = algorithm::automatic;
      balance_result<Cost> base = balance_impl(layout, cost, policy, base_options);
      const Cost target = detail::locality_target(base.makespan, options.locality_tolerance);
      std::vector<rank_t> a =
          detail::locality_assign(in, cost, target, options.node_of_rank, budget);
      if (!detail::satisfies(in, std::span<const rank_t>(a))) return base;
      const Cost m = detail::assignment_makespan(in, cost, std::span<const rank_t>(a));
      if (m > target) return base;
      result.used = algorithm::locality;
      result.makespan = m;
      result.lower_bound = base.lower_bound;  // the reported (tight padded) bound
      result.proven_optimal = m <= result.lower_bound;
      result.plan = rearrangement::from_destinations(layout.offsets(), a, d);
      return result;
    }
    case algorithm::automatic: {
      if (policy.is_padded()) {
        auto r = detail::padded_optimal(in, cost);
        infeasible = r.optimal && !r.assignment;
        consider(std::move(r.assignment), algorithm::padded_exact);
        proven = r.optimal && best.has_value();
        if (!proven && !infeasible) {
          consider(detail::lpt(in, cost), algorithm::lpt);
          refine_best();
        }
      } else {
        // lpt, then refinement, then kk + refinement: each step only when the bound is not
        // met yet, so the result is never worse than lpt or kk alone.
        consider(detail::lpt(in, cost), algorithm::lpt);
        refine_best();
        if (!at_bound()) {
          consider(detail::karmarkar_karp(in), algorithm::kk_equal);
          refine_best();
        }
        // Then the complete differencing (within its memory guard), refined in a copy: `consider`
        // keeps it only when its makespan is strictly smaller.
        if (!at_bound() && kk_complete_fits(n, d)) {
          auto k = detail::karmarkar_karp(in, true);
          if (k && detail::satisfies(in, std::span<const rank_t>(*k))) {
            detail::refine(in, cost, *k, budget, result.lower_bound);
            consider(std::move(k), algorithm::kk);
          }
        }
      }
      if (!at_bound() && !proven && !infeasible && n <= options.exact_max_items) {
        auto r = detail::exact_search(in, cost, options.exact_node_budget,
                                      best ? std::optional<Cost>(best_makespan) : std::nullopt);
        consider(std::move(r.assignment), algorithm::exact);
        proven = r.complete && best.has_value();
      }
      break;
    }
  }
  if (!best && !infeasible) {
    // The chosen algorithm could not honour the constraints: try a constrained first-fit
    // decreasing packing before declaring the input infeasible.
    // Reported under the requested algorithm (lpt for automatic) with `fallback` set.
    consider(detail::constrained_first_fit(in, cost),
             options.method == algorithm::automatic ? algorithm::lpt : options.method);
    result.fallback = best.has_value();
    if (best && options.method != algorithm::exact) refine_best();
  }
  if (!best) {
    std::int64_t tokens = 0, bytes = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      tokens += policy.padded_length(layout.length(g));
      bytes += layout.bytes(g);
    }
    detail::no_placement_found(n, d, options.limits, tokens, bytes);
  }
  result.makespan = best_makespan;
  // The algorithms above ran on the structural bound; the result reports the tight one
  // (padded: the optimum without the cap), which only ever proves more plans optimal.
  result.lower_bound = detail::reported_lower_bound<C>(layout, order, d, cost, policy,
                                                       options.limits, result.lower_bound);
  result.proven_optimal = proven || best_makespan <= result.lower_bound;
  result.plan = rearrangement::from_destinations(layout.offsets(), *best, d);
  return result;
}

}  // namespace detail
}  // namespace orchmllm
