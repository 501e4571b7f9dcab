#pragma once
/// @file balancers.hpp
/// The built-in balancers as types: each is a `balancer` (balance/problem.hpp) with its own
/// options, passed to `balance(layout, cost, policy, balancers::lpt{...}, limits)` or to a stage
/// declaration, or called on a `balance_problem` from the application's own balancer (to start
/// from lpt's plan, say). A unit instantiates only the algorithms it names, so a trainer that
/// uses one balancer compiles one. `balance_options` (balance/options.hpp) selects the same
/// balancers at run time; `options()` gives the equivalent selector and `visit_balancer` the
/// reverse, and both paths give bit-identical plans.
///
/// The algorithms, their bounds and complexities are described in balance/balancer.hpp and
/// docs/algorithms.md. Calling a balancer directly returns its plan (or none when the
/// constraints stopped it and its constrained first-fit fallback found none); `balance` adds
/// the checks, the makespan and the reported lower bound. Determinism: as `balance`.
///
/// Throws (from the call): `invalid_argument_error` for a negative budget, a non-finite or
/// negative tolerance, a `node_of_rank` of the wrong size or with ids outside [0, d), kk with a
/// padded policy or padded_exact with the packed one; `infeasible_error` from `identity` when
/// the sampled placement breaks a constraint.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/balance/options.hpp"
#include "orchmllm/balance/problem.hpp"
#include "orchmllm/config.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm::balancers {

/// Every item stays on the rank that sampled it (`balance_method::none`, the baseline). O(n).
struct identity {
  [[nodiscard]] balance_options options(const constraints& limits = {}) const {
    return balance_options{.method = balance_method::none, .limits = limits};
  }
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Longest processing time first (`balance_method::lpt`), optionally refined. O(n log n).
struct lpt {
  bool refine = false;              ///< refine the greedy plan (moves and swaps)
  std::int64_t refine_budget = -1;  ///< refinement steps (also for the fallback); -1 = 2·n + 64
  [[nodiscard]] balance_options options(const constraints& limits = {}) const {
    return balance_options{.method = balance_method::lpt, .limits = limits, .refine = refine,
                           .refine_budget = refine_budget};
  }
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Karmarkar–Karp largest differencing, packed policy only. `complete`: the complete method
/// (`balance_method::kk`; `kk_equal` above n · d = `kk_complete_max_entries`); otherwise the
/// equal-count one (`balance_method::kk_equal`).
struct karmarkar_karp {
  bool complete = true;
  bool refine = false;              ///< refine the differencing plan
  std::int64_t refine_budget = -1;  ///< refinement steps (also for the fallback); -1 = 2·n + 64
  [[nodiscard]] balance_options options(const constraints& limits = {}) const {
    return balance_options{.method = complete ? balance_method::kk : balance_method::kk_equal,
                           .limits = limits, .refine = refine, .refine_budget = refine_budget};
  }
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Depth-first branch and bound (`balance_method::exact`), optimal when it completes within
/// `node_budget` search nodes. For small inputs (n ≲ 20).
struct exact {
  std::int64_t node_budget = 2'000'000;
  [[nodiscard]] balance_options options(const constraints& limits = {}) const {
    return balance_options{.method = balance_method::exact, .limits = limits,
                           .exact_node_budget = node_budget};
  }
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// The exact algorithm for padded policies (`balance_method::padded_exact`). O(n log n + d log T).
/// Exact (the optimum under the constraints, or a proof that none exists, bytes caps aside:
/// docs/algorithms.md) for every padded policy: `padded`, `padded_to_multiple(k)`, `bucketed`
/// and any trainer's `padding_rule`, since its proof needs only that the padded length and the
/// cost model are non-decreasing (which `balance` checks of a rule). Not for `packed` (throws).
/// With a segmented layout (every segment a padded row) the problem is NP-hard: a heuristic
/// within OPT + (S_max − 1) · cost(pad(longest segment)) without cap and item counts
/// (docs/algorithms.md, "Padded policies with segments"), never reported proven optimal unless
/// it meets the lower bound.
struct padded_exact {
  std::int64_t refine_budget = -1;  ///< refinement of the fallback plan; -1 = 2·n + 64
  [[nodiscard]] balance_options options(const constraints& limits = {}) const {
    return balance_options{.method = balance_method::padded_exact, .limits = limits,
                           .refine_budget = refine_budget};
  }
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// The best of lpt, kk_equal and kk (each refined) and, on small inputs, the exact search
/// (packed); padded_exact (padded) (`balance_method::automatic`, the default).
struct automatic {
  std::int64_t refine_budget = -1;          ///< refinement steps; -1 = 2·n + 64
  std::int64_t exact_node_budget = 2'000'000;  ///< search nodes of the exact step
  std::int64_t exact_max_items = 14;        ///< the exact step runs up to this many items
  double gap_tolerance = 0;  ///< stop within lower bound · (1 + gap) (`balance_options`)
  bool concurrent = false;   ///< kk beside lpt on a second thread (`balance_options`)
  [[nodiscard]] balance_options options(const constraints& limits = {}) const {
    return balance_options{.method = balance_method::automatic, .limits = limits,
                           .refine_budget = refine_budget, .exact_node_budget = exact_node_budget,
                           .exact_max_items = exact_max_items, .gap_tolerance = gap_tolerance,
                           .concurrent = concurrent};
  }
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Keeps data where it is within a makespan slack over `base` (`balance_method::locality`).
struct locality {
  automatic base{};                    ///< the balancer whose makespan sets the target
  double tolerance = 0.001;            ///< target = base's makespan · (1 + tolerance)
  std::vector<rank_t> node_of_rank{};  ///< node of every rank (d entries), or empty: one node
  [[nodiscard]] balance_options options(const constraints& limits = {}) const {
    balance_options o = base.options(limits);
    o.method = balance_method::locality;
    o.locality_tolerance = tolerance;
    o.node_of_rank = node_of_rank;
    return o;
  }
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

}  // namespace orchmllm::balancers

/// Expands `X(name)` for every built-in balancer type of `orchmllm::balancers`.
#define ORCHMLLM_DETAIL_FOR_BUILTIN_BALANCERS(X) \
  X(identity) X(lpt) X(karmarkar_karp) X(exact) X(padded_exact) X(automatic) X(locality)

namespace orchmllm {

/// Whether B is one of the built-in balancer types above.
#define ORCHMLLM_DETAIL_IS(B) std::is_same_v<B_, balancers::B> ||
template <class B_>
inline constexpr bool is_builtin_balancer_v =
    ORCHMLLM_DETAIL_FOR_BUILTIN_BALANCERS(ORCHMLLM_DETAIL_IS) false;
#undef ORCHMLLM_DETAIL_IS

/// Calls `f` with the built-in balancer that `options` selects (its knobs copied over; the
/// constraints are not part of a balancer) and returns what `f` returns, which must be the same
/// type for every balancer. Throws `invalid_argument_error` for `balance_method::custom` or a value
/// outside the enum. Instantiates `f` for all seven types.
template <class F>
decltype(auto) visit_balancer(const balance_options& o, F&& f) {
  switch (o.method) {
    case balance_method::none: return std::forward<F>(f)(balancers::identity{});
    case balance_method::lpt: return std::forward<F>(f)(balancers::lpt{o.refine, o.refine_budget});
    case balance_method::kk:
    case balance_method::kk_equal:
      return std::forward<F>(f)(
          balancers::karmarkar_karp{o.method == balance_method::kk, o.refine, o.refine_budget});
    case balance_method::exact: return std::forward<F>(f)(balancers::exact{o.exact_node_budget});
    case balance_method::padded_exact:
      return std::forward<F>(f)(balancers::padded_exact{o.refine_budget});
    case balance_method::automatic:
    case balance_method::locality: {
      const balancers::automatic a{o.refine_budget, o.exact_node_budget, o.exact_max_items,
                                   o.gap_tolerance, o.concurrent};
      if (o.method == balance_method::automatic) return std::forward<F>(f)(a);
      return std::forward<F>(f)(balancers::locality{a, o.locality_tolerance, o.node_of_rank});
    }
    case balance_method::custom: break;
  }
  detail::raise<invalid_argument_error>(detail::concat(
      "balance_options::method is ", to_string(o.method),
      "; a custom balancer is passed as an object, not selected by the enum"));
}

namespace detail {

/// Checks the knobs of a balancer configuration against the policy and the rank count:
/// budgets, tolerance, node ids, and the policies each algorithm balances. `what` prefixes the
/// message (e.g. "stage 'vision': "). d < 0: the rank count is not known yet, node ids are only
/// checked to be >= 0. O(d).
inline void check_balance_options(const balance_options& o, padding_policy policy, rank_t d,
                                  std::string_view what = {}) {
  ORCHMLLM_REQUIRE(o.method != balance_method::custom, invalid_argument_error, what,
                   "balance_method::custom selects no balancer; pass your balancer object instead");
  ORCHMLLM_REQUIRE(o.refine_budget >= -1, invalid_argument_error, what, "refine_budget is ",
                   o.refine_budget, ", must be >= -1");
  ORCHMLLM_REQUIRE(o.exact_node_budget >= 0 && o.exact_max_items >= 0, invalid_argument_error,
                   what, "exact budgets must be >= 0");
  ORCHMLLM_REQUIRE(!(packed_only(o.method) && policy.is_padded()), invalid_argument_error, what,
                   to_string(o.method),
                   " balances the packed policy only; use padded or auto for padded batches");
  ORCHMLLM_REQUIRE(!(o.method == balance_method::padded_exact && !policy.is_padded()),
                   invalid_argument_error, what,
                   "the padded algorithm needs a padded policy; use lpt, kk or auto for packed");
  ORCHMLLM_REQUIRE(std::isfinite(o.gap_tolerance) && o.gap_tolerance >= 0,
                   invalid_argument_error, what, "gap_tolerance is ", o.gap_tolerance,
                   ", must be finite and >= 0");
  ORCHMLLM_REQUIRE(std::isfinite(o.locality_tolerance) && o.locality_tolerance >= 0,
                   invalid_argument_error, what, "locality_tolerance is ", o.locality_tolerance,
                   ", must be finite and >= 0");
  if (d < 0) {
    for (const auto r : o.node_of_rank)
      ORCHMLLM_REQUIRE(r >= 0, invalid_argument_error, what, "node_of_rank holds ", r);
    return;
  }
  ORCHMLLM_REQUIRE(o.node_of_rank.empty() || o.node_of_rank.size() == static_cast<std::size_t>(d),
                   invalid_argument_error, what, "node_of_rank has ", o.node_of_rank.size(),
                   " entries, expected ", d, " (one per rank) or none");
  for (std::size_t r = 0; r < o.node_of_rank.size(); ++r)
    ORCHMLLM_REQUIRE(o.node_of_rank[r] >= 0 && o.node_of_rank[r] < d, invalid_argument_error,
                     what, "node_of_rank[", r, "] is ", o.node_of_rank[r],
                     ", must be a node id in [0, ", d,
                     ") (node ids are dense: 0, 1, … per distinct node)");
}

/// The compiled library's entry points: the built-in balancer that `options` selects, run on a
/// problem over a type-erased model (one per computation type).
#define ORCHMLLM_DETAIL_DECLARE_BUILTIN(T) \
  balancer_plan builtin_compiled(const balance_problem<cost_ref<T>>& p, const balance_options& o);
ORCHMLLM_DETAIL_FOR_COST_TYPES(ORCHMLLM_DETAIL_DECLARE_BUILTIN)
#undef ORCHMLLM_DETAIL_DECLARE_BUILTIN

}  // namespace detail
}  // namespace orchmllm

#if ORCHMLLM_USE_COMPILED
// Compiled mode: every built-in runs in the library on the type-erased problem `balance`
// builds there (and that the trainer's own balancers receive).
#define ORCHMLLM_DETAIL_DEFINE_BUILTIN_CALL(B)                                     \
  template <class C>                                                               \
  orchmllm::balancer_plan orchmllm::balancers::B::operator()(                      \
      const orchmllm::balance_problem<C>& p) const {                               \
    return orchmllm::detail::builtin_compiled(p, options(p.limits()));             \
  }
ORCHMLLM_DETAIL_FOR_BUILTIN_BALANCERS(ORCHMLLM_DETAIL_DEFINE_BUILTIN_CALL)
#undef ORCHMLLM_DETAIL_DEFINE_BUILTIN_CALL
#else
#include "orchmllm/detail/balance/builtin.hpp"
#endif
