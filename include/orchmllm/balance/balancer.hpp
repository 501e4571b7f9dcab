#pragma once
/// @file balancer.hpp
/// The Batch Post-Balancing Dispatcher: `balance` assigns every item of a layout to one of the
/// layout's d ranks so that the largest per-rank load (the makespan, which synchronous
/// data-parallel training waits for) is as small as possible, under a cost model, a padding
/// policy and per-rank constraints, with a balancer object: a built-in one
/// (balance/balancers.hpp: identity, lpt, karmarkar_karp, karmarkar_karp_equal, exact,
/// padded_exact, automatic, locality; `any_balancer` for one chosen at run time) or the
/// application's own (balance/problem.hpp).
///
/// Constraints (`constraints`): a per-rank cap in tokens or bytes is never exceeded; min/max
/// items per rank are honoured; when a balancer cannot satisfy them, a constrained
/// first-fit-decreasing packing is tried before giving up. Determinism: the same inputs give a
/// bit-identical plan on every rank and every call (one canonical item order, heaps keyed by
/// (load, rank), integer or order-fixed floating arithmetic, no unordered containers, no
/// randomness, budgets that count work, not seconds). The algorithms, their bounds and proofs:
/// docs/algorithms.md.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/balance/problem.hpp"
#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/projection.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"

namespace orchmllm {

/// What `balance` returns.
template <class Cost>
struct balance_result {
  rearrangement plan;  ///< canonical slot order (see rearrangement.hpp)
  /// The name of the algorithm whose plan was returned: a built-in's `name` (never
  /// "automatic": the one of its candidates it kept), or what the application's balancer set
  /// (`balancer_plan::used`, "custom" by default). Static storage duration.
  std::string_view used = "custom";
  Cost makespan{};              ///< largest destination load
  Cost lower_bound{};           ///< makespan_lower_bound for the same input
  bool proven_optimal = false;  ///< makespan meets the bound, or an exact method completed
  bool fallback = false;  ///< the chosen algorithm could not meet the constraints and the plan
                          ///< comes from the constrained first-fit-decreasing fallback
};

namespace detail {

/// `balance` with a balancer object, on a model that returns its computation type (also in
/// detail/balance/balance_impl.hpp).
template <class C, class B>
balance_result<cost_type_t<C>> balance_with(const batch_layout& layout, const C& cost,
                                            padding_policy policy, const B& b,
                                            const constraints& limits);

/// A balancer over the type-erased problem of the compiled library.
template <class T>
using erased_balancer = std::function<balancer_plan(const balance_problem<cost_ref<T>>&)>;

/// The compiled library's entry points (orchmllm/config.hpp): `balance_impl` on a type-erased
/// model, one per computation type.
#define ORCHMLLM_DETAIL_DECLARE_BALANCE(T)                                                    \
  balance_result<T> balance_compiled(const batch_layout& layout, cost_ref<T> cost,            \
                                     padding_policy policy, const any_balancer& b,            \
                                     const constraints& limits);                              \
  balance_result<T> balance_custom_compiled(const batch_layout& layout, cost_ref<T> cost,     \
                                            padding_policy policy, const constraints& limits, \
                                            const erased_balancer<T>& b);
ORCHMLLM_DETAIL_FOR_COST_TYPES(ORCHMLLM_DETAIL_DECLARE_BALANCE)
#undef ORCHMLLM_DETAIL_DECLARE_BALANCE

}  // namespace detail

ORCHMLLM_MODE_NAMESPACE_BEGIN

/// Balances `layout` over its own d ranks with the balancer `b` (default
/// `balancers::automatic`) under the constraints `limits`. `balance` computes the costs, checks
/// them and the constraints, hands `b` the problem, and returns `b`'s plan with its makespan,
/// the reported lower bound and whether it is proven optimal. Any `cost_model` works: the
/// algorithms compute in `cost_type_t<C>` (a model returning `unsigned` plans exactly like one
/// returning `std::int64_t`; `float` like `double`). A plan from the application's balancer is
/// checked: a wrong size or a rank outside [0, d) raises `invalid_argument_error`; a plan that
/// breaks a constraint, or no plan, is replaced by the refined constrained first-fit-decreasing
/// packing (`fallback` set), and `infeasible_error` is raised only when that finds none either
/// (or `b` proved that none exists). Header-only, a unit instantiates only the algorithms of
/// the balancer it names (every built-in for an `any_balancer`), once per computation type: the
/// built-ins see the model through `detail::cost_ref` (the costs are computed with the model
/// itself; the algorithms evaluate it only for a rank's padded unit cost, which they cache). In
/// compiled mode (orchmllm/config.hpp) they run in the library, with the same plan.
///
/// Complexity: that of `b` plus O(n log n) for the canonical order and the lower bound.
/// Throws `invalid_argument_error` for an unusable knob (karmarkar_karp with a padded policy,
/// padded_exact with the packed one, negative budgets, a non-finite tolerance), a negative or
/// non-finite cost, and an input whose loads could overflow their type (packed: Σ costs above
/// 2^63 − 1 for integral costs; padded: (n + 1) × the largest padded cost, n × the padded
/// length or n × the widest item's bytes above 2^63 − 1): the message names the value;
/// `infeasible_error` when the constraints cannot be met, naming the total, the cap and the
/// rank count; and what `b` throws.
template <cost_model C, class B = balancers::automatic>
requires balancer_for<B, C> balance_result<cost_type_t<C>> balance(const batch_layout& layout,
                                                                   const C& cost,
                                                                   padding_policy policy = packed,
                                                                   const B& b = {},
                                                                   const constraints& limits = {}) {
#if ORCHMLLM_USE_COMPILED
  using T = cost_type_t<C>;
  if constexpr (is_builtin_balancer_v<B> || std::is_same_v<B, any_balancer>) {
    return detail::balance_compiled(layout, detail::cost_ref<T>(cost), policy, any_balancer(b),
                                    limits);
  } else {
    return detail::balance_custom_compiled(
        layout, detail::cost_ref<T>(cost), policy, limits,
        detail::erased_balancer<T>([&b](const balance_problem<detail::cost_ref<T>>& p) {
          return detail::to_balancer_plan(b(p));
        }));
  }
#else
  return detail::with_normal_cost(
      cost, [&](const auto& c) { return detail::balance_with(layout, c, policy, b, limits); });
#endif
}

/// Balances a batch of the trainer's own items, held per rank (`ranks[r]` is rank r's range of
/// items, e.g. `std::vector<std::vector<Sample>>`; core/projection.hpp): `proj` gives an item's
/// length (`&Sample::tokens`, a lambda) or an `item_size` with its length and payload bytes.
/// The same as `balance(make_layout(ranks, proj), cost, policy, b, limits)`: the plan's global
/// ids follow the ranges' iteration order, and `apply_by_rank(result.plan, ranks)`
/// (core/rearrangement.hpp) moves the items to their destinations. Complexity: the overload
/// above plus n projection calls. Throws what `make_layout` and the overload above throw.
template <ranks_range R, cost_model C, class P, class B = balancers::automatic>
requires item_projection<P, ranks_item_t<R>> && balancer_for<B, C> balance_result<cost_type_t<C>>
balance(R&& ranks, const C& cost, P proj, padding_policy policy = packed, const B& b = {},
        const constraints& limits = {}) {
  return balance(make_layout(ranks, std::move(proj)), cost, policy, b, limits);
}

ORCHMLLM_MODE_NAMESPACE_END

}  // namespace orchmllm

#if !ORCHMLLM_USE_COMPILED
#include "orchmllm/detail/balance/balance_impl.hpp"
#endif
