#pragma once
/// @file balancer.hpp
/// The Batch Post-Balancing Dispatcher: assigns every item of a layout to one of the layout's
/// d ranks so that the largest per-rank load (the makespan, which synchronous data-parallel
/// training waits for) is as small as possible, under a cost model, a padding policy and
/// per-rank constraints. One entry point, `balance`, with the algorithm chosen by option.
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
///   automatic  packed: lpt and its refinement; while the lower bound is missed, kk_equal, then
///              kk (each refined), then the exact search on small inputs. Returns the best plan
///              found (never worse than lpt, kk_equal or kk). Padded: `padded_exact`.
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
#include <type_traits>
#include <string>
#include <string_view>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"

namespace orchmllm {

/// Balancing algorithm; see the file comment.
enum class algorithm : std::uint8_t {
  none,
  lpt,
  kk,
  exact,
  padded_exact,
  automatic,
  locality,
  kk_equal
};

/// Largest n · d for which `algorithm::kk` runs the complete differencing (its tuples hold
/// n · d sums); above it `kk` runs `kk_equal`.
inline constexpr std::int64_t kk_complete_max_entries = std::int64_t{1} << 21;

/// True for the algorithms that balance the packed policy only (`kk`, `kk_equal`).
constexpr bool packed_only(algorithm a) noexcept {
  return a == algorithm::kk || a == algorithm::kk_equal;
}

/// Whether `algorithm::kk` runs the complete differencing for n items on d ranks (n · d ≤
/// `kk_complete_max_entries`) rather than `kk_equal`. O(1).
constexpr bool kk_complete_fits(std::int64_t n, std::int64_t d) noexcept {
  return d <= kk_complete_max_entries / (n > 1 ? n : 1);
}

/// Name of an algorithm as used by the command-line tool ("auto" for automatic, "padded" for
/// padded_exact).
constexpr std::string_view to_string(algorithm a) noexcept {
  switch (a) {
    case algorithm::none: return "none";
    case algorithm::lpt: return "lpt";
    case algorithm::kk: return "kk";
    case algorithm::exact: return "exact";
    case algorithm::padded_exact: return "padded";
    case algorithm::automatic: return "auto";
    case algorithm::locality: return "locality";
    case algorithm::kk_equal: return "kk-equal";
  }
  return "?";
}

/// Parses "none", "lpt", "kk", "kk-equal", "exact", "padded", "auto" or "locality". Throws
/// `invalid_argument_error` naming the unknown name.
inline algorithm parse_algorithm(std::string_view name) {
  for (auto a : {algorithm::none, algorithm::lpt, algorithm::kk, algorithm::kk_equal,
                 algorithm::exact, algorithm::padded_exact, algorithm::automatic,
                 algorithm::locality})
    if (to_string(a) == name) return a;
  detail::raise<invalid_argument_error>(
      detail::concat("unknown algorithm '", name,
                     "' (expected none, lpt, kk, kk-equal, exact, padded, auto or locality)"));
}

/// Options of `balance`.
struct balance_options {
  algorithm method = algorithm::automatic;  ///< which algorithm
  constraints limits{};                     ///< per-rank cap and item counts
  bool refine = false;                      ///< refine lpt/kk results (automatic always does)
  std::int64_t refine_budget = -1;          ///< refinement steps; -1 = 2·n + 64
  std::int64_t exact_node_budget = 2'000'000;  ///< search nodes for `exact`
  std::int64_t exact_max_items = 14;        ///< automatic runs `exact` up to this many items
  /// `locality`: relative makespan slack over automatic's makespan M that the locality plan may
  /// use (target T = M · (1 + tolerance)); the knob that trades balance for moved bytes. Must be
  /// finite and >= 0.
  double locality_tolerance = 0.001;
  /// `locality`: the node of every rank (d entries, nodes numbered 0, 1, … as
  /// `topology::node_map()` gives them); empty = all ranks on one node. Plain data because the
  /// balance layer sits below topology/. Every entry must be in [0, d) (else
  /// `invalid_argument_error`).
  std::vector<rank_t> node_of_rank{};
};

/// What `balance` returns.
template <class Cost>
struct balance_result {
  rearrangement plan;        ///< canonical slot order (see rearrangement.hpp)
  algorithm used{};          ///< the algorithm whose plan was returned (never `automatic`;
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

/// The compiled library's entry points (orchmllm/config.hpp): `balance_impl` on a type-erased
/// model, one per computation type.
#define ORCHMLLM_DETAIL_DECLARE_BALANCE(T)                                               \
  balance_result<T> balance_compiled(const batch_layout& layout, cost_ref<T> cost, \
                                     padding_policy policy, const balance_options& options);
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

ORCHMLLM_MODE_NAMESPACE_END

}  // namespace orchmllm

#if !ORCHMLLM_USE_COMPILED
#include "orchmllm/detail/balance/balance_impl.hpp"
#endif
