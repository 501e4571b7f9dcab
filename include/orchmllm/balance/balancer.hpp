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
///   kk         Karmarkar–Karp largest differencing for d ways: items in descending order are
///              cut into d-tuples, tuples are merged largest-difference first (heap), each merge
///              pairs one tuple's heaviest subsets with the other's lightest. O(n log n) time,
///              O(n + d) memory. Packed policy only.
///   exact      depth-first branch and bound over all assignments with symmetry breaking and a
///              node budget; optimal when it completes (`balance_result::proven_optimal`).
///              Meant for small inputs (n ≲ 20).
///   padded_exact  ("padded" in the tool) the exact algorithm for padded policies: descending
///              lengths, contiguous runs, binary search on the makespan with a greedy feasibility
///              check. Optimal (proof in docs/algorithms.md). O(n log n + d · log T).
///   automatic  packed: lpt and its refinement; if that misses the lower bound, kk and a
///              refinement of the better plan; then the exact search on small inputs. Returns
///              the best plan found (never worse than lpt or kk). Padded: `padded_exact`.
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
/// `padded` with the packed policy, negative budgets); `infeasible_error` when the
/// constraints cannot be met — the message names the total, the cap and the rank count.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/balance/exact.hpp"
#include "orchmllm/detail/balance/first_fit.hpp"
#include "orchmllm/detail/balance/kk.hpp"
#include "orchmllm/detail/balance/locality.hpp"
#include "orchmllm/detail/balance/lpt.hpp"
#include "orchmllm/detail/balance/padded.hpp"
#include "orchmllm/detail/balance/refine.hpp"

namespace orchmllm {

/// Balancing algorithm; see the file comment.
enum class algorithm : std::uint8_t { none, lpt, kk, exact, padded_exact, automatic, locality };

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
  }
  return "?";
}

/// Parses "none", "lpt", "kk", "exact", "padded", "auto" or "locality". Throws
/// `invalid_argument_error` naming the unknown name.
inline algorithm parse_algorithm(std::string_view name) {
  for (auto a : {algorithm::none, algorithm::lpt, algorithm::kk, algorithm::exact,
                 algorithm::padded_exact, algorithm::automatic, algorithm::locality})
    if (to_string(a) == name) return a;
  detail::raise<invalid_argument_error>(detail::concat(
      "unknown algorithm '", name, "' (expected none, lpt, kk, exact, padded, auto or locality)"));
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
  /// balance layer sits below topology/. Every entry must be >= 0.
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

}  // namespace detail

/// Balances `layout` over its own d ranks. See the file comment for the algorithms, guarantees
/// and errors. Complexity: that of the chosen algorithm plus O(n log n) for the canonical order
/// and the lower bound.
template <cost_model C>
balance_result<cost_type_t<C>> balance(const batch_layout& layout, const C& cost,
                                       padding_policy policy = packed,
                                       const balance_options& options = {}) {
  using Cost = cost_type_t<C>;
  const rank_t d = layout.num_ranks();
  const auto n = layout.num_items();
  ORCHMLLM_REQUIRE(options.refine_budget >= -1, invalid_argument_error, "refine_budget is ",
                   options.refine_budget, ", must be >= -1");
  ORCHMLLM_REQUIRE(options.exact_node_budget >= 0 && options.exact_max_items >= 0,
                   invalid_argument_error, "exact budgets must be >= 0");
  ORCHMLLM_REQUIRE(!(options.method == algorithm::kk && policy.is_padded()),
                   invalid_argument_error,
                   "kk balances the packed policy only; use padded or auto for padded batches");
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
    ORCHMLLM_REQUIRE(options.node_of_rank[r] >= 0, invalid_argument_error, "node_of_rank[", r,
                     "] is ", options.node_of_rank[r], ", must be >= 0");

  std::vector<Cost> costs(static_cast<std::size_t>(n));
  for (std::int64_t g = 0; g < n; ++g) {
    costs[static_cast<std::size_t>(g)] = cost(layout.length(g));
    ORCHMLLM_REQUIRE(costs[static_cast<std::size_t>(g)] >= Cost{}, invalid_argument_error,
                     "cost of item ", g, " (length ", layout.length(g), ") is ",
                     costs[static_cast<std::size_t>(g)], ", must be >= 0");
  }
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
      consider(detail::karmarkar_karp(in), algorithm::kk);
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
      balance_result<Cost> base = balance(layout, cost, policy, base_options);
      const Cost target = detail::locality_target(base.makespan, options.locality_tolerance);
      std::vector<rank_t> a =
          detail::locality_assign(in, cost, target, options.node_of_rank, budget);
      if (!detail::satisfies(in, std::span<const rank_t>(a))) return base;
      const Cost m = detail::assignment_makespan(in, cost, std::span<const rank_t>(a));
      if (m > target) return base;
      result.used = algorithm::locality;
      result.makespan = m;
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
          consider(detail::karmarkar_karp(in), algorithm::kk);
          refine_best();
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
  result.proven_optimal = proven || best_makespan <= result.lower_bound;
  result.plan = rearrangement::from_destinations(layout.offsets(), *best, d);
  return result;
}

}  // namespace orchmllm
