#pragma once
// The body of `orchmllm::balance` (balance/balancer.hpp, which includes this file in
// header-only mode): the checks, the problem, the balancer, the constrained fallback and the
// result's figures. The compiled library (orchmllm/config.hpp) instantiates it once per
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
#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/balance/problem.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/balance/builtin.hpp"
#include "orchmllm/detail/balance/common.hpp"
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
                     " ranks × cap ", cap.limit, " = ",
                     cap.limit * static_cast<std::int64_t>(in.d));
    ORCHMLLM_REQUIRE(total == 0 || cap.limit > 0, infeasible_error, "total of ", total, " ", unit,
                     " cannot fit under a cap of 0 on ", in.d, " ranks");
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

/// One `balance` call on a model C that returns its computation type: the checks and the
/// problem (constructor), the application's plan checked and completed by the fallback
/// (`adopt`), and the result's figures (`finish`). Only the item costs and their checks are
/// computed with C itself; the problem and everything after it see the model as M: C for an
/// application's balancer, `cost_ref` for the built-ins, so that every model with the same
/// computation type shares one instantiation of the built-in algorithms (they evaluate the
/// model only for a rank's padded unit cost, which they cache). Not copyable: the problem
/// refers to members.
template <class C, class M = C>
class balance_session {
 public:
  using Cost = cost_type_t<C>;

  balance_session(const batch_layout& layout, const C& cost, padding_policy policy,
                  const constraints& limits)
      : layout_(layout),
        model_(cost),
        policy_(policy),
        limits_(limits),
        costs_(costs_of(layout, cost)),
        order_((check_headroom(layout, std::span<const Cost>(costs_), cost, policy),
                canonical_order<Cost>(layout, costs_, policy))),
        in_{layout, layout.num_ranks(), costs_, order_, policy, limits},
        problem_(in_, model_, (check_feasible(in_), input_lower_bound(in_, model_))) {}
  balance_session(const balance_session&) = delete;
  balance_session& operator=(const balance_session&) = delete;

  [[nodiscard]] const balance_problem<M>& problem() const noexcept { return problem_; }

  /// The application's plan: its shape checked (a clear error), kept if it satisfies the
  /// constraints, else replaced by the refined constrained first-fit fallback unless the
  /// balancer proved that no plan exists.
  builtin_outcome<Cost> adopt(balancer_plan raw) const {
    const auto n = layout_.num_items();
    const rank_t d = layout_.num_ranks();
    if (raw.destination) {
      const auto& a = *raw.destination;
      ORCHMLLM_REQUIRE(a.size() == static_cast<std::size_t>(n), invalid_argument_error,
                       "the balancer returned ", a.size(), " destinations for ", n, " items");
      for (std::size_t g = 0; g < a.size(); ++g)
        ORCHMLLM_REQUIRE(a[g] >= 0 && a[g] < d, invalid_argument_error, "the balancer sent item ",
                         g, " to rank ", a[g], ", outside [0, ", d, ")");
    }
    plan_search<M> s(problem_, -1);
    s.set_infeasible(raw.proven_infeasible && !raw.destination);
    s.consider(std::move(raw.destination), raw.used);
    s.set_proven(raw.proven_optimal && s.found());
    return s.finish(raw.used);
  }

  /// The result of a plan (or `infeasible_error` naming the totals when there is none).
  balance_result<Cost> finish(builtin_outcome<Cost>&& out) const {
    const rank_t d = layout_.num_ranks();
    const auto n = layout_.num_items();
    if (!out.plan.destination) {
      std::int64_t tokens = 0, bytes = 0;
      for (std::int64_t g = 0; g < n; ++g) {
        tokens += policy_.padded_length(layout_.length(g));
        bytes += layout_.bytes(g);
      }
      no_placement_found(n, d, limits_, tokens, bytes);
    }
    balance_result<Cost> result;
    result.used = out.plan.used;
    result.fallback = out.plan.fallback;
    result.makespan = out.makespan;
    // The algorithms ran on the structural bound; the result reports the tight one (padded: the
    // optimum without the cap), which only ever proves more plans optimal.
    result.lower_bound = reported_lower_bound<M>(layout_, order_, d, model_, policy_, limits_,
                                                 problem_.lower_bound());
    result.proven_optimal = out.plan.proven_optimal || result.makespan <= result.lower_bound;
    result.plan = rearrangement::from_destinations(layout_.offsets(), *out.plan.destination, d);
    return result;
  }

 private:
  static std::vector<Cost> costs_of(const batch_layout& layout, const C& cost) {
    std::vector<Cost> costs(static_cast<std::size_t>(layout.num_items()));
    if (!layout.has_segments()) {
      for (std::int64_t g = 0; g < layout.num_items(); ++g) {
        costs[static_cast<std::size_t>(g)] = cost(layout.length(g));
        ORCHMLLM_REQUIRE(costs[static_cast<std::size_t>(g)] >= Cost{}, invalid_argument_error,
                         "cost of item ", g, " (length ", layout.length(g), ") is ",
                         costs[static_cast<std::size_t>(g)], ", must be >= 0");
      }
      return costs;
    }
    for (std::int64_t g = 0; g < layout.num_items(); ++g)
      costs[static_cast<std::size_t>(g)] = checked_item_cost(layout, g, cost);
    return costs;
  }

  // The model as the problem sees it: a reference to C, or a cost_ref to it.
  using model_holder = std::conditional_t<std::is_same_v<M, C>, const C&, M>;

  const batch_layout& layout_;
  model_holder model_;
  padding_policy policy_;
  const constraints& limits_;
  std::vector<Cost> costs_;
  std::vector<std::int64_t> order_;
  balance_input<Cost> in_;
  balance_problem<M> problem_;
};

/// `balance` with balancer `b` on a model that returns its computation type. Built-in
/// balancers (also when an `any_balancer` holds one) are trusted with their plan and makespan;
/// any other balancer's plan goes through `balance_session::adopt`.
template <class C, class B>
balance_result<cost_type_t<C>> balance_with(const batch_layout& layout, const C& cost,
                                            padding_policy policy, const B& b,
                                            const constraints& limits) {
  // A built-in's knobs are checked before the input, so an unusable knob is reported as such
  // whatever the input (search checks them again when called on its own).
  if constexpr (std::is_same_v<B, any_balancer>) {
    check_balancer(b, policy, layout.num_ranks());
    const balance_session<C, cost_ref<cost_type_t<C>>> session(layout, cost, policy, limits);
    return session.finish(b.visit([&](const auto& x) { return search(x, session.problem()); }));
  } else if constexpr (is_builtin_balancer_v<B>) {
    check_knobs(b, policy, layout.num_ranks());
    const balance_session<C, cost_ref<cost_type_t<C>>> session(layout, cost, policy, limits);
    return session.finish(search(b, session.problem()));
  } else {
    const balance_session<C> session(layout, cost, policy, limits);
    return session.finish(session.adopt(to_balancer_plan(b(session.problem()))));
  }
}

}  // namespace detail
}  // namespace orchmllm
