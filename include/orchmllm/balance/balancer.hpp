#pragma once
/// @file balancer.hpp
/// The Batch Post-Balancing Dispatcher: assigns every item of a layout to one of the layout's
/// d ranks so that the largest per-rank load (the makespan, which synchronous data-parallel
/// training waits for) is as small as possible, under a cost model, a padding policy and
/// per-rank constraints. One entry point, `balance`, with the algorithm chosen by option
/// (`balance_options`, balance/options.hpp) or passed as an object: a built-in type
/// (balance/balancers.hpp) or the application's own balancer (balance/problem.hpp).
///
/// Algorithms (`algorithm`):
///   none       identity: every item stays where it was sampled (baseline).
///   lpt        longest processing time first: items in descending cost order, each to the
///              currently least-loaded rank that can take it (binary heap). O(n log n).
///              Packed policy: within 4/3 − 1/(3d) of the optimum (Graham 1969).
///              Padded policy: the same greedy on the padded load.
///   kk         Karmarkar–Karp largest differencing for d ways, the textbook (complete)
///              method: every item starts as a d-tuple (cost, 0, …, 0); the two tuples with the
///              largest spread are merged (one's heaviest subsets with the other's lightest)
///              until one is left. Counts per rank are free. O(n · d log d) time, O(n · d)
///              memory, so above n · d = 2^21 (`kk_complete_max_entries`) it runs `kk_equal`
///              instead (`balance_result::used` says so). Packed policy only.
///   kk_equal   ("kk-equal" in the tool) the equal-count differencing: items in descending
///              order are cut into d-tuples of one item per subset, merged as above, so every
///              rank gets ⌊n/d⌋ or ⌈n/d⌉ items. O(n log n) time, O(n + d) memory, any size;
///              weaker than `kk` when the optimum needs unequal counts. Packed policy only.
///   exact      depth-first branch and bound over all assignments with symmetry breaking and a
///              node budget; optimal when it completes (`balance_result::proven_optimal`).
///              Meant for small inputs (n ≲ 20).
///   padded_exact  ("padded" in the tool) the exact algorithm for padded policies: descending
///              lengths, contiguous runs, binary search on the makespan with a greedy feasibility
///              check. Optimal (proof in docs/algorithms.md). O(n log n + d · log T).
///              Segmented items (S segments = S padded rows of the longest segment): a
///              heuristic within OPT + (S_max − 1) · cost(pad(longest segment)) (no cap,
///              no item counts); O(n log n + (n + d) · log T).
///   automatic  packed: lpt and its refinement; while the lower bound is missed, kk_equal, then
///              kk (each refined), then the exact search on small inputs. Returns the best plan
///              found (never worse than lpt, kk_equal or kk). Padded: `padded_exact`. With
///              `balance_options::gap_tolerance` = g > 0 it stops at lower bound · (1 + g)
///              instead: the plan is within that target or exactly the plan of g = 0.
///   locality   keeps data where it is: runs `automatic` for its makespan M, sets the target
///              T = M · (1 + locality_tolerance) (rounded down for integral costs, never below
///              M), then starts from the current placement (every item on its source rank) and
///              moves only what is needed: ranks above T or outside the constraints shed the
///              items with the fewest bytes per unit of cost that cover their excess, each to a
///              best-fit receiver on the same node (`node_of_rank`) if one has room, else on any
///              node; what is still above T is polished by the refinement. If the result misses
///              T or a constraint, automatic's plan is returned instead and `used` says which
///              algorithm made it (anything but `locality`). So the makespan is always ≤ T.
///              O(n log n + d log d) beyond automatic (padded: O(s · d) for s shed items);
///              details in detail/balance/locality.hpp and docs/algorithms.md.
/// Refinement (`balance_options::refine`, always on in `automatic`): moves and swaps between
/// the heaviest rank and the lighter ones while the makespan drops, stopping at the lower bound
/// or after `refine_budget` steps.
///
/// Padded policies with segments: a rank's load is (Σ segments of its items) × cost(pad(its
/// longest segment)), its token footprint (Σ segments) × pad(longest segment); min/max items
/// count items; a bytes cap reads items × the widest item's bytes (docs/algorithms.md,
/// "Padded policies with segments"). Every balancer but `kk` (packed only) accepts them.
///
/// Constraints (`constraints`): a per-rank cap in tokens or bytes is never exceeded; min/max
/// items per rank are honoured. When an algorithm cannot satisfy them, a constrained
/// first-fit-decreasing packing is tried before giving up.
///
/// Determinism: the same inputs give a bit-identical plan on every rank and every call: one
/// canonical item order (cost, then length, descending; ties by global id), heaps keyed by
/// (load, rank), integer or order-fixed floating arithmetic, no unordered containers, no
/// randomness, no time limits (budgets count work, not seconds).
///
/// Throws: `invalid_argument_error` for an unusable option (e.g. `kk` with a padded policy,
/// `padded` with the packed policy, negative budgets), for a negative or non-finite cost, and
/// for an input whose loads could overflow their type (packed: Σ costs above 2^63 − 1 for
/// integral costs; padded: (n + 1) × the largest padded cost, n × the padded length or n × the
/// widest item's bytes above 2^63 − 1) — the message names the value; `infeasible_error` when the
/// constraints cannot be met — the message names the total, the cap and the rank count.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <string>
#include <string_view>
#include <vector>

#include "orchmllm/balance/options.hpp"
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
  rearrangement plan;        ///< canonical slot order (see rearrangement.hpp)
  balance_method used{};          ///< the algorithm whose plan was returned (never `automatic`;
                             ///< see `fallback`)
  Cost makespan{};           ///< largest destination load
  Cost lower_bound{};        ///< makespan_lower_bound for the same input
  bool proven_optimal = false;  ///< makespan meets the bound, or an exact method completed
  bool fallback = false;  ///< the chosen algorithm could not meet the constraints and the plan
                          ///< comes from the constrained first-fit-decreasing fallback
};

namespace detail {

/// The algorithms behind `balance`, on a model that returns its computation type (defined in
/// detail/balance/balance_impl.hpp, which this header includes in header-only mode).
template <class C>
balance_result<cost_type_t<C>> balance_impl(const batch_layout& layout, const C& cost,
                                            padding_policy policy, const balance_options& options);

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
#define ORCHMLLM_DETAIL_DECLARE_BALANCE(T)                                                   \
  balance_result<T> balance_compiled(const batch_layout& layout, cost_ref<T> cost,             \
                                     padding_policy policy, const balance_options& options);   \
  balance_result<T> balance_custom_compiled(const batch_layout& layout, cost_ref<T> cost,      \
                                            padding_policy policy, const constraints& limits, \
                                            const erased_balancer<T>& b);
ORCHMLLM_DETAIL_FOR_COST_TYPES(ORCHMLLM_DETAIL_DECLARE_BALANCE)
#undef ORCHMLLM_DETAIL_DECLARE_BALANCE

}  // namespace detail

ORCHMLLM_MODE_NAMESPACE_BEGIN

/// Balances `layout` over its own d ranks. See the file comment for the algorithms, guarantees
/// and errors. Any `cost_model` works: the algorithms compute in `cost_type_t<C>` (a model
/// returning `unsigned` or `short` plans exactly like one returning `std::int64_t`; `float` like
/// `double`). Complexity: that of the chosen algorithm plus O(n log n) for the canonical order
/// and the lower bound. In compiled mode (orchmllm/config.hpp) the algorithms run in the library
/// through one indirect call per cost evaluation; the plan is the same.
template <cost_model C>
balance_result<cost_type_t<C>> balance(const batch_layout& layout, const C& cost,
                                       padding_policy policy = packed,
                                       const balance_options& options = {}) {
#if ORCHMLLM_USE_COMPILED
  return detail::balance_compiled(layout, detail::cost_ref<cost_type_t<C>>(cost), policy, options);
#else
  return detail::with_normal_cost(cost, [&](const auto& c) {
    return detail::balance_impl(layout, c, policy, options);
  });
#endif
}

/// Balances `layout` over its own d ranks with the balancer `b` under the constraints `limits`:
/// a built-in one (balance/balancers.hpp) or the application's own (balance/problem.hpp).
/// `balance` computes the costs, checks them and the constraints as above, hands `b` the
/// problem, and returns `b`'s plan with its makespan, the reported lower bound and whether it is
/// proven optimal. A plan from the application's balancer is checked: a wrong size or a rank
/// outside [0, d) raises `invalid_argument_error`; a plan that breaks a constraint, or no plan,
/// is replaced by the constrained first-fit-decreasing packing (refined; `fallback` is set) and
/// `infeasible_error` is raised only when that finds none either (or `b` proved that none
/// exists). With a built-in balancer the plan is bit-identical to `balance(layout, cost, policy,
/// b.options(limits))`, and only that balancer's algorithms are instantiated (header-only).
/// Complexity: that of `b` plus O(n log n). Throws what the overload above throws, what `b`
/// throws, and the errors just named.
template <cost_model C, class B>
  requires balancer_for<B, C>
balance_result<cost_type_t<C>> balance(const batch_layout& layout, const C& cost,
                                       padding_policy policy, const B& b,
                                       const constraints& limits = {}) {
#if ORCHMLLM_USE_COMPILED
  using T = cost_type_t<C>;
  if constexpr (is_builtin_balancer_v<B>) {
    return detail::balance_compiled(layout, detail::cost_ref<T>(cost), policy, b.options(limits));
  } else {
    return detail::balance_custom_compiled(
        layout, detail::cost_ref<T>(cost), policy, limits,
        detail::erased_balancer<T>([&b](const balance_problem<detail::cost_ref<T>>& p) {
          return detail::to_balancer_plan(b(p));
        }));
  }
#else
  return detail::with_normal_cost(cost, [&](const auto& c) {
    return detail::balance_with(layout, c, policy, b, limits);
  });
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
  requires item_projection<P, ranks_item_t<R>> && balancer_for<B, C>
balance_result<cost_type_t<C>> balance(R&& ranks, const C& cost, P proj,
                                       padding_policy policy = packed, const B& b = {},
                                       const constraints& limits = {}) {
  return balance(make_layout(ranks, std::move(proj)), cost, policy, b, limits);
}

ORCHMLLM_MODE_NAMESPACE_END

}  // namespace orchmllm

#if !ORCHMLLM_USE_COMPILED
#include "orchmllm/detail/balance/balance_impl.hpp"
#endif
