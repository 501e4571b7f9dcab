#pragma once
/// @file mapping.hpp
/// GLPK backend of the `bottleneck` mapping (CMake target `orchmllm::glpk`, option
/// `ORCHMLLM_ENABLE_GLPK`, default OFF because GLPK is GPL-3.0; macro `ORCHMLLM_HAS_GLPK`):
///
/// - `glpk::map_bins_bottleneck`: the exact integer program for the smallest worst node
///   (max over nodes of inter-node egress and ingress), GLPK's branch-and-cut with a time limit,
///   warm-started from the header-only `mappers::bottleneck`; never worse than that on F.
/// - `glpk::bottleneck_ilp`: the same program as a mapper, stopped by a node budget instead of a
///   clock, so every rank gets the same plan.
/// - `glpk::transport_lp_optimum`: the transport problem's LP optimum (a cross-check).
///
/// Deterministic for one GLPK build unless the time limit stops the search. Thread-safe when
/// GLPK has thread-local storage (the Debian build does). License, determinism, threads,
/// failures and measured sizes: docs/algorithms.md, "Mapping balanced bins to ranks" (GLPK).

#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/topology/bottleneck.hpp"
#include "orchmllm/detail/topology/mapping_problem.hpp"
#include "orchmllm/detail/topology/min_cost_flow.hpp"
#include "orchmllm/topology/mapper.hpp"
#include "orchmllm/topology/mapping_result.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm::glpk {

/// Options of `map_bins_bottleneck`.
struct bottleneck_options {
  /// Wall-clock limit of the GLPK part (model build, root LP, branch-and-cut), seconds. Must be
  /// > 0 and finite. Rounded up to whole milliseconds (GLPK's unit), at least 1 ms per GLPK call,
  /// capped at INT_MAX ms (about 24 days). The warm start is not counted. GLPK checks the clock
  /// between its steps, so a run may overshoot by about one LP re-solve (measured: up to 0.75 s at
  /// d = 512, G = 8). With `presolve` GLPK's own root LP ignores the limit (GLPK 5.0 does not pass
  /// it on).
  double time_limit_seconds = 10.0;
  /// Hand the header-only solution (transport + local search) to GLPK: as its first incumbent
  /// (through the branch-and-cut callback, reason GLP_IHEUR, `glp_ios_heur_sol`) and as the upper
  /// bound T ≤ F_warm of the objective column. When false GLPK starts cold (useful to measure
  /// GLPK alone); the warm start is still computed and still returned when GLPK finds nothing
  /// better, so the result is never worse than it in either case.
  bool warm_start = true;
  /// Use GLPK's MIP presolver. Off by default: with the presolver GLPK's branch-and-cut works on
  /// a transformed problem whose columns differ from ours, so the callback cannot hand it the
  /// warm start; the warm start then reaches GLPK only as the bound T ≤ F_warm. Without the
  /// presolver the root LP is solved first by `glp_simplex` (its optimum is also reported as a
  /// lower bound). The presolver also leaves GLPK's root LP without a time limit (see
  /// `time_limit_seconds`; measured 12.5 s for a 10 s limit at d = 512, G = 8), another reason
  /// it is off by default.
  bool presolve = false;
  /// Size guard: when the model would have more than this many columns (d · N binaries plus one,
  /// N = number of nodes), GLPK is not run and the warm start is returned with `solver_ran =
  /// false`. The default admits d = 1024 at 8 GPUs per node (131,073 columns, about 4 · d · N
  /// non-zeros); d = 2560 at 8 GPUs per node would need 819,201 columns, far beyond what GLPK's
  /// branch-and-cut can improve in seconds. Must be ≥ 0 and ≤ 2^28 (GLPK counts in `int`).
  std::int64_t max_columns = 131'073;
  /// Branch-and-bound budget: once GLPK's search tree has created more than this many
  /// subproblems (`glp_ios_tree_size`'s total count), the search is stopped from the callback
  /// (`glp_ios_terminate`) and the best plan so far is returned (`node_limit_reached`). Unlike
  /// the time limit it counts work, so where it stops does not depend on the machine. -1: no
  /// limit. Must be ≥ -1.
  std::int64_t node_limit = -1;

  /// Throws `invalid_argument_error` naming the bad field and its value.
  void validate() const {
    ORCHMLLM_REQUIRE(std::isfinite(time_limit_seconds) && time_limit_seconds > 0,
                     invalid_argument_error, "GLPK time limit ", time_limit_seconds,
                     " s must be positive and finite");
    ORCHMLLM_REQUIRE(max_columns >= 0 && max_columns <= (std::int64_t{1} << 28),
                     invalid_argument_error, "GLPK max_columns ", max_columns,
                     " must be in [0, 2^28]");
    ORCHMLLM_REQUIRE(node_limit >= -1, invalid_argument_error, "GLPK node_limit ", node_limit,
                     " must be >= -1 (-1: no limit)");
  }
};

/// What `map_bins_bottleneck` returns. Byte figures are exact integers computed by this library
/// from the returned assignment, never taken from GLPK's floating-point values.
struct bottleneck_result {
  /// The mapping (bijection, plan, byte figures), bins placed inside each node by the same G × G
  /// Hungarian as `map_bins`.
  mapping_result mapping;
  /// F of the returned mapping (= mapping.worst_node_bytes()).
  std::int64_t objective = 0;
  /// F of the warm start (transport + header-only local search, what `map_bins(...,
  /// mappers::bottleneck{})` returns). objective ≤ warm_start_objective always.
  std::int64_t warm_start_objective = 0;
  /// F of the plain `transport` solution. warm_start_objective ≤ transport_objective always.
  std::int64_t transport_objective = 0;
  /// A lower bound on the optimal F, in bytes: the objective itself when `proven_optimal`, else
  /// the best of the root LP optimum and GLPK's best open node bound seen by the callback (0 when
  /// GLPK did not run). Computed by GLPK in floating point (see `model_unit_bytes`), so it is as
  /// reliable as GLPK's tolerances (relative 1e-7); never above `objective`.
  double best_bound = 0.0;
  /// GLPK completed the search and the returned F equals its optimum: no bin → node assignment
  /// has a smaller F (up to GLPK's tolerances). Also true without GLPK when F = 0 or there is one
  /// node.
  bool proven_optimal = false;
  /// GLPK stopped at the time limit (root LP or branch-and-cut).
  bool timed_out = false;
  /// The branch-and-cut was stopped by `bottleneck_options::node_limit`.
  bool node_limit_reached = false;
  /// GLPK ran (false when the size guard `max_columns` skipped it, or the instance is trivial:
  /// one node or F_warm = 0).
  bool solver_ran = false;
  /// F (recomputed here in integers) of GLPK's final incumbent when it had one that is a valid
  /// assignment, else −1. Equals `warm_start_objective` when GLPK kept the warm start it was
  /// given; with `warm_start = false` it is what GLPK found on its own.
  std::int64_t solver_objective = -1;
  /// The returned assignment is GLPK's incumbent, which beat the warm start (smaller F, or equal
  /// F with fewer total inter-node bytes); false when it is the warm start.
  bool improved_by_solver = false;
  /// GLPK's model counts bytes in units of this many bytes: the greatest common divisor of the
  /// item byte counts (exact, so the model's integers are the true figures divided by it). Keeps
  /// GLPK's numbers smaller; doubles hold every model figure exactly up to 2^53 units.
  std::int64_t model_unit_bytes = 1;
  /// Return code of the last GLPK call (0, or GLP_ETMLIM, GLP_EFAIL, ... from glp_intopt /
  /// glp_simplex), for diagnostics.
  int glpk_return_code = 0;
  /// Wall-clock seconds of GLPK's part (model build, root LP, branch-and-cut); 0 when it did not
  /// run.
  double solve_seconds = 0.0;
};

/// The `bottleneck` mapping by integer programming.
///
/// Model (N nodes, d bins, bytes divided by `model_unit_bytes`): binary x[b][m] (bin b on node
/// m); Σ_m x[b][m] = 1 for every bin; Σ_b x[b][m] = node_size(m) for every node;
/// egress_m = held_m − Σ_b w[b][m] x[b][m] ≤ T and ingress_m = Σ_b (W_b − w[b][m]) x[b][m] ≤ T
/// for every node; minimise the integer T. (W_b = bytes of bin b, w[b][m] = its bytes already
/// on node m, held_m = bytes on node m.) Inside each node bins are placed on GPUs as by
/// `map_bins` (G × G Hungarian maximising the bytes already on their final GPU).
///
/// Result: GLPK's incumbent if its F (recomputed here in integers) is smaller than the warm
/// start's, or equal with fewer total inter-node bytes; otherwise the warm start. So the
/// returned F ≤ warm_start_objective ≤ transport_objective, on timeout and GLPK failure too,
/// and the plan is always a valid bijection (GLPK's assignment is checked against the node
/// capacities before use). The ILP optimises F only: among plans of equal F it does not seek
/// the fewest inter-node bytes (only the tie-break above).
///
/// Complexity: the warm start as `map_bins(..., bottleneck)`; then a model with d·N + 1 columns,
/// d + 3N rows and about 3·d·N non-zeros (O(d·N) memory), and GLPK's branch-and-cut, exponential
/// in the worst case, cut off by `time_limit_seconds`. GLPK is skipped when d·N + 1 >
/// `max_columns`, when there is one node, or when the warm start has F = 0.
///
/// Throws `invalid_argument_error` for bad options (`bottleneck_options::validate`) and for the
/// inputs `map_bins` rejects (plan not square, rank count differs from the topology, wrong
/// item_bytes size, negative bytes, a bin of more than 2^62 / (d + N + 4 + 2G) bytes).
[[nodiscard]] bottleneck_result map_bins_bottleneck(const rearrangement& binned,
                                                    std::span<const std::int64_t> item_bytes,
                                                    const topology& topo,
                                                    const bottleneck_options& options = {});

/// The bottleneck integer program as a mapper (topology/mapper.hpp): usable in
/// `map_bins(binned, item_bytes, topo, glpk::bottleneck_ilp{...})` and in a stage declaration
/// (`.mapper = glpk::bottleneck_ilp{}`), where every rank runs it on the same problem.
///
/// Deterministic for one GLPK build: GLPK runs without a time limit (the root LP and the
/// branch-and-cut are stopped by `node_limit` only, which counts subproblems, not seconds), and
/// the model, the warm start and GLPK's search are the same on every rank. Ranks must therefore
/// link the same GLPK build (GLPK's floating-point pivots could differ between builds). The
/// price: with no clock the root LP of a large model runs to the end (d = 512 at 8 GPUs per
/// node: 1-3 s; see the file comment), so keep `max_columns` at a size the step can afford.
///
/// Returns the rank of every bin as `map_bins_bottleneck` would with these options: F ≤ that
/// of `mappers::bottleneck` (the warm start) always. Complexity: as `map_bins_bottleneck`, with
/// at most `node_limit` + 1 subproblems. Throws `invalid_argument_error` for node_limit < -1 or
/// max_columns outside [0, 2^28].
struct bottleneck_ilp {
  /// Subproblems of the branch-and-cut before it stops (`bottleneck_options::node_limit`);
  /// -1: none (the search runs to optimality, however long that takes).
  std::int64_t node_limit = 2000;
  /// Hand the header-only bottleneck mapping to GLPK as its first incumbent.
  bool warm_start = true;
  /// Above this many model columns (d · N + 1) GLPK is skipped: the warm start is returned.
  std::int64_t max_columns = 131'073;

  /// Name under which a stage declaration's fingerprint records this mapper (all its knobs).
  [[nodiscard]] std::string name() const {
    return orchmllm::detail::concat("glpk::bottleneck_ilp(node_limit=", node_limit,
                                    ",warm_start=", warm_start ? 1 : 0,
                                    ",max_columns=", max_columns, ")");
  }

  /// The options it runs with (the time limit is not used).
  [[nodiscard]] bottleneck_options options() const {
    bottleneck_options o;
    o.warm_start = warm_start;
    o.presolve = false;
    o.max_columns = max_columns;
    o.node_limit = node_limit;
    return o;
  }

  /// The rank of every bin (the mapper contract, topology/mapper.hpp).
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const;
};

/// Optimum of the LP relaxation of the transport problem: minimise Σ_b Σ_m (W_b − w[b][m])
/// x[b][m] subject to Σ_m x[b][m] = 1 per bin, Σ_b x[b][m] = node_size(m) per node, x ≥ 0
/// (continuous), solved by GLPK's simplex (with its LP presolver). In bytes. The constraint
/// matrix is totally unimodular, so this equals the minimum inter-node bytes over all
/// bijections, what `map_bins(..., mappers::transport{})` returns as `inter_node_bytes`;
/// GLPK computes it in doubles (bytes divided by the gcd of the item sizes), so compare after
/// rounding (exact while the total stays below 2^53 units).
///
/// Complexity: d·N columns, d + N rows, 2·d·N non-zeros; the simplex is polynomial in practice.
/// Throws `invalid_argument_error` for the inputs `map_bins` rejects and when d·N exceeds 2^28;
/// `orchmllm::error` when GLPK's simplex fails or does not report an optimum.
[[nodiscard]] double transport_lp_optimum(const rearrangement& binned,
                                          std::span<const std::int64_t> item_bytes,
                                          const topology& topo);
}  // namespace orchmllm::glpk

// The definitions.
#include "orchmllm/backend/glpk/detail/mapping.inl"  // IWYU pragma: export
