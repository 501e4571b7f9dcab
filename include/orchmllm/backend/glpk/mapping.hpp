#pragma once
/// @file mapping.hpp
/// GLPK backend of the `bottleneck` mapping (CMake target `orchmllm::glpk`, option
/// `ORCHMLLM_ENABLE_GLPK`, default OFF; macro `ORCHMLLM_HAS_GLPK`).
///
/// License: GLPK is GPL-3.0. Linking it makes the resulting program subject to the GPL, which is
/// why this backend is opt-in and never needed by the default build: the header-only
/// `map_bins(..., mappers::bottleneck{})` (topology/mapping.hpp) is the method for builds
/// without GLPK.
///
/// One header (about 600 lines) on purpose: the whole backend is one integer program, and
/// keeping its formulation, warm start and mapper together keeps the GPL code in one file.
///
/// - `orchmllm::glpk::map_bins_bottleneck`: the exact integer program for the `bottleneck`
///   mapping (minimum over bin → node assignments of F = max over nodes of max(inter-node
///   egress, ingress)), solved by GLPK's branch-and-cut with a time limit, warm-started from the
///   header-only method (transport + local search). Returns the best known plan on timeout; never
///   worse than the warm start on F.
/// - `orchmllm::glpk::transport_lp_optimum`: the optimum of the LP relaxation of the transport
///   problem (minimum total inter-node bytes), solved by GLPK's simplex. The transport problem is
///   totally unimodular, so this equals the integral optimum that `map_bins(...,
///   mappers::transport{})` finds with its own min-cost flow: a cross-check for tests.
///
/// - `orchmllm::glpk::bottleneck_ilp`: the same integer program as a mapper
///   (topology/mapper.hpp), for `map_bins(..., mapper)` and stage declarations; it runs without
///   a clock, stopped by a branch-and-bound node budget, so every rank gets the same plan.
///
/// Determinism: GLPK's search is deterministic for a given GLPK build and input as long as it
/// completes or is stopped by `bottleneck_options::node_limit` (a count of subproblems), but when
/// the time limit is hit the returned plan depends on how far the search got, i.e. on the
/// machine's speed and load. Ranks that must agree on a plan should therefore use
/// `bottleneck_ilp` (no time limit, a node limit), plan on one rank and broadcast the result, or
/// use the header-only method (fully deterministic). With `time_limit_seconds` large enough for
/// the search to finish (`proven_optimal`), every rank gets the same result.
///
/// Thread-safety: the functions keep no state of their own, but GLPK's environment (terminal
/// output switch, memory accounting) is per thread only when GLPK was built with thread-local
/// storage (`glp_config("TLS")` not null, true for the Debian/Ubuntu package); otherwise do not
/// call them from several threads at once. Both functions switch GLPK's terminal output off
/// while they run (`glp_term_out`) and restore the previous setting before returning.
///
/// Performance (GLPK 5.0, one core, balanced plans at 8 GPUs per node, 10 s limit): d = 64 takes
/// milliseconds; d = 512 (32,769 columns) spends 1-3 s in the root LP. On those workloads the
/// warm start already met the root LP bound, so it was proven optimal without branching; GLPK
/// improves on the warm start mostly on irregular (random) plans. Without the warm start GLPK
/// found no incumbent at d = 512 within 10 s.
///
/// Failures inside GLPK: GLPK reports solver failures through return codes, which are handled
/// (the warm start is returned). GLPK's *fatal* errors (invalid arguments to its API, which this
/// code never passes, or running out of memory) abort the process inside GLPK; the size guard
/// `bottleneck_options::max_columns` keeps the model small enough for ordinary machines.

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
  /// capped at INT_MAX ms (about 24 days). The warm start is not counted. GLPK checks the clock between its
  /// steps, so a run may overshoot by about one LP re-solve (measured: up to 0.75 s at d = 512,
  /// G = 8). With `presolve` GLPK's own root LP ignores the limit (GLPK 5.0 does not pass it on).
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

}  // namespace orchmllm::glpk

namespace orchmllm::detail::glpk_backend {

// RAII owner of a glp_prob: freed on every path, exceptions included.
struct prob_deleter {
  void operator()(glp_prob* p) const noexcept { glp_delete_prob(p); }
};
using prob_ptr = std::unique_ptr<glp_prob, prob_deleter>;

// Switches GLPK's terminal output off for the guard's lifetime, then restores the old setting.
class quiet_terminal {
 public:
  quiet_terminal() noexcept : previous_(glp_term_out(GLP_OFF)) {}
  ~quiet_terminal() { glp_term_out(previous_); }
  quiet_terminal(const quiet_terminal&) = delete;
  quiet_terminal& operator=(const quiet_terminal&) = delete;

 private:
  int previous_;
};

// Byte unit of the model: gcd of the non-zero item byte counts (every W_b, w[b][m] and held_m
// is a sum of item bytes, hence a multiple of it).
inline std::int64_t byte_unit(std::span<const std::int64_t> item_bytes) {
  std::int64_t g = 0;
  for (auto b : item_bytes)
    if (b > 0) g = std::gcd(g, b);
  return g == 0 ? 1 : g;
}

// Milliseconds for GLPK's `tm_lim` (int): rounded up, at least 1, at most INT_MAX.
inline int to_milliseconds(double seconds) {
  const double ms = std::ceil(seconds * 1000.0);
  if (!(ms < static_cast<double>(INT_MAX))) return INT_MAX;
  return std::max(1, static_cast<int>(ms));
}

// State shared with the branch-and-cut callback.
struct callback_state {
  const std::vector<double>* warm_x = nullptr;  // 1-based column values, or null
  std::int64_t node_limit = -1;                 // bottleneck_options::node_limit
  bool stopped = false;                         // the callback hit node_limit
  bool offered = false;
  double tree_bound = -std::numeric_limits<double>::infinity();
};

// GLPK calls this from C: it must never throw (noexcept turns a bug into std::terminate rather
// than unwinding through GLPK's frames).
inline void branch_cut_callback(glp_tree* tree, void* info) noexcept {
  auto* st = static_cast<callback_state*>(info);
  // Global lower bound = the best bound among the open subproblems (non-decreasing).
  if (const int p = glp_ios_best_node(tree); p != 0)
    st->tree_bound = std::max(st->tree_bound, glp_ios_node_bound(tree, p));
  if (glp_ios_reason(tree) == GLP_IHEUR && st->warm_x != nullptr && !st->offered) {
    st->offered = true;  // once: GLPK keeps it as the incumbent unless something beats it
    (void)glp_ios_heur_sol(tree, st->warm_x->data());
  }
  if (st->node_limit >= 0 && !st->stopped) {
    int created = 0;  // subproblems created so far, removed ones included
    glp_ios_tree_size(tree, nullptr, nullptr, &created);
    if (created > st->node_limit) {
      st->stopped = true;
      glp_ios_terminate(tree);  // glp_intopt returns GLP_ESTOP with the incumbent kept
    }
  }
}

// Reads GLPK's integer solution back into a node per bin; empty when it is not an assignment
// (a bin on no node or on two), which the caller then ignores.
inline std::vector<std::int32_t> read_assignment(glp_prob* lp, rank_t d, std::int32_t nn) {
  std::vector<std::int32_t> node(static_cast<std::size_t>(d), -1);
  for (rank_t b = 0; b < d; ++b)
    for (std::int32_t m = 0; m < nn; ++m) {
      const int col = 1 + static_cast<int>(b) * nn + m;
      if (glp_mip_col_val(lp, col) > 0.5) {
        if (node[static_cast<std::size_t>(b)] >= 0) return {};
        node[static_cast<std::size_t>(b)] = m;
      }
    }
  for (auto m : node)
    if (m < 0) return {};
  return node;
}

// Σ_m ingress_m (total inter-node bytes) of an assignment: the tie-break between equal F.
inline std::int64_t total_inter_node(const mapping_problem& p, std::span<const std::int32_t> node) {
  const auto t = orchmllm::detail::node_traffic_of(p, node);
  return std::accumulate(t.ingress.begin(), t.ingress.end(), std::int64_t{0});
}

// The body of map_bins_bottleneck and of glpk::bottleneck_ilp (defined below).
inline glpk::bottleneck_result solve_bottleneck(const mapping_problem& p,
                                                const glpk::bottleneck_options& options,
                                                bool timed);

}  // namespace orchmllm::detail::glpk_backend

namespace orchmllm::glpk {

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
inline bottleneck_result map_bins_bottleneck(const rearrangement& binned,
                                             std::span<const std::int64_t> item_bytes,
                                             const topology& topo,
                                             const bottleneck_options& options = {}) {
  options.validate();
  const auto p = orchmllm::detail::build_mapping_problem(binned, item_bytes, topo);
  return orchmllm::detail::glpk_backend::solve_bottleneck(p, options, true);
}

}  // namespace orchmllm::glpk

namespace orchmllm::detail::glpk_backend {

// map_bins_bottleneck on a gathered problem. `timed`: apply options.time_limit_seconds; false
// runs GLPK without a clock (tm_lim = INT_MAX, GLPK's own "no limit"), so only the node limit
// can stop it: the deterministic variant that glpk::bottleneck_ilp uses. options are valid.
inline glpk::bottleneck_result solve_bottleneck(const mapping_problem& p,
                                                const glpk::bottleneck_options& options,
                                                bool timed) {
  namespace gb = orchmllm::detail::glpk_backend;
  using clock = std::chrono::steady_clock;
  using glpk::bottleneck_result;
  const std::span<const std::int64_t> item_bytes = p.item_bytes;
  const rank_t d = p.num_bins();
  const std::int32_t nn = p.num_nodes();

  // Warm start: exactly what map_bins(..., mappers::bottleneck{}) computes.
  auto warm = orchmllm::detail::solve_transport(p.by_node, p.capacity);
  bottleneck_result out;
  out.transport_objective = orchmllm::detail::worst_node_bytes(p, warm);
  orchmllm::detail::bottleneck_local_search(p, warm,
                                            orchmllm::detail::bottleneck_step_budget(d));
  out.warm_start_objective = orchmllm::detail::worst_node_bytes(p, warm);
  out.objective = out.warm_start_objective;
  out.model_unit_bytes = gb::byte_unit(item_bytes);
  const std::int64_t unit = out.model_unit_bytes;

  const auto finish = [&](std::span<const std::int32_t> node) {
    out.mapping = orchmllm::detail::finish_mapping(p, node);
    out.best_bound = std::min(out.best_bound, static_cast<double>(out.objective));
    return std::move(out);
  };
  if (nn < 2 || out.warm_start_objective == 0) {
    out.proven_optimal = true;
    out.best_bound = static_cast<double>(out.objective);
    return finish(warm);
  }
  const std::int64_t columns = static_cast<std::int64_t>(d) * nn + 1;
  if (columns > options.max_columns) return finish(warm);

  const auto t0 = clock::now();
  out.solver_ran = true;
  const gb::quiet_terminal quiet;
  gb::prob_ptr lp(glp_create_prob());
  glp_set_obj_dir(lp.get(), GLP_MIN);

  // Rows: 1..d assignment, then per node: capacity, egress, ingress.
  const int n_cols = static_cast<int>(columns);
  const int t_col = n_cols;  // T is the last column
  const auto cap_row = [&](std::int32_t m) { return static_cast<int>(d) + 1 + 3 * m; };
  glp_add_rows(lp.get(), static_cast<int>(d) + 3 * nn);
  for (rank_t b = 0; b < d; ++b) glp_set_row_bnds(lp.get(), static_cast<int>(b) + 1, GLP_FX, 1, 1);
  for (std::int32_t m = 0; m < nn; ++m) {
    const auto um = static_cast<std::size_t>(m);
    const double cap = p.capacity[um];
    glp_set_row_bnds(lp.get(), cap_row(m), GLP_FX, cap, cap);
    // egress: Σ_b w x + T ≥ held ; ingress: Σ_b (W − w) x − T ≤ 0
    glp_set_row_bnds(lp.get(), cap_row(m) + 1, GLP_LO,
                     static_cast<double>(p.node_held[um] / unit), 0.0);
    glp_set_row_bnds(lp.get(), cap_row(m) + 2, GLP_UP, 0.0, 0.0);
  }
  glp_add_cols(lp.get(), n_cols);
  for (int j = 1; j < t_col; ++j) glp_set_col_kind(lp.get(), j, GLP_BV);
  glp_set_col_kind(lp.get(), t_col, GLP_IV);
  const auto warm_t = static_cast<double>(out.warm_start_objective / unit);
  if (options.warm_start)
    glp_set_col_bnds(lp.get(), t_col, GLP_DB, 0.0, warm_t);
  else
    glp_set_col_bnds(lp.get(), t_col, GLP_LO, 0.0, 0.0);
  glp_set_obj_coef(lp.get(), t_col, 1.0);

  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0.0};
  const auto nz_guess = static_cast<std::size_t>(columns) * 3 + p.by_node.arcs.size() + 1;
  ia.reserve(nz_guess);
  ja.reserve(nz_guess);
  ar.reserve(nz_guess);
  const auto put = [&](int i, int j, double v) {
    ia.push_back(i);
    ja.push_back(j);
    ar.push_back(v);
  };
  for (rank_t b = 0; b < d; ++b) {
    const auto ub = static_cast<std::size_t>(b);
    const auto first = p.by_node.offsets[ub];
    const auto last = p.by_node.offsets[ub + 1];
    auto k = first;
    for (std::int32_t m = 0; m < nn; ++m) {
      std::int64_t w = 0;  // walk b's sorted sparse row alongside m
      if (k < last && p.by_node.arcs[static_cast<std::size_t>(k)].node == m)
        w = p.by_node.arcs[static_cast<std::size_t>(k++)].profit;
      const int j = 1 + static_cast<int>(b) * nn + m;
      put(static_cast<int>(b) + 1, j, 1.0);
      put(cap_row(m), j, 1.0);
      if (w > 0) put(cap_row(m) + 1, j, static_cast<double>(w / unit));
      if (p.bin_bytes[ub] - w > 0)
        put(cap_row(m) + 2, j, static_cast<double>((p.bin_bytes[ub] - w) / unit));
    }
  }
  for (std::int32_t m = 0; m < nn; ++m) {
    put(cap_row(m) + 1, t_col, 1.0);
    put(cap_row(m) + 2, t_col, -1.0);
  }
  glp_load_matrix(lp.get(), static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
  std::vector<int>().swap(ia);
  std::vector<int>().swap(ja);
  std::vector<double>().swap(ar);

  // Warm start as 1-based column values.
  std::vector<double> warm_x(static_cast<std::size_t>(n_cols) + 1, 0.0);
  for (rank_t b = 0; b < d; ++b)
    warm_x[static_cast<std::size_t>(1 + b * nn + warm[static_cast<std::size_t>(b)])] = 1.0;
  warm_x[static_cast<std::size_t>(t_col)] = warm_t;

  const auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  double lp_bound = -std::numeric_limits<double>::infinity();
  bool root_ok = true;
  if (!options.presolve) {
    // Root LP first (glp_intopt without its presolver requires an optimal basis).
    glp_smcp smcp;
    glp_init_smcp(&smcp);
    smcp.msg_lev = GLP_MSG_OFF;
    smcp.presolve = GLP_OFF;
    smcp.tm_lim = timed ? gb::to_milliseconds(options.time_limit_seconds - elapsed()) : INT_MAX;
    // Scaling matters: byte coefficients next to the ±1 of the assignment rows make the
    // unscaled root LP 8-10x slower (d = 512, G = 8: ~1 s scaled, 8-10 s unscaled). The dual
    // simplex and glp_adv_basis were slower still on the same instances.
    glp_scale_prob(lp.get(), GLP_SF_AUTO);
    out.glpk_return_code = glp_simplex(lp.get(), &smcp);
    if (out.glpk_return_code == GLP_ETMLIM) out.timed_out = true;
    root_ok = out.glpk_return_code == 0 && glp_get_status(lp.get()) == GLP_OPT;
    if (root_ok) {
      lp_bound = glp_get_obj_val(lp.get());
      // F is integral in model units: no plan beats ⌈LP⌉ (with a margin for GLPK's tolerance),
      // so a warm start at that value is optimal and the search is skipped. Not for cold starts,
      // whose purpose is to see what GLPK finds on its own.
      if (options.warm_start &&
          std::ceil(lp_bound - rounded_mul(1e-6, std::max(1.0, std::fabs(lp_bound)))) >= warm_t) {
        out.proven_optimal = true;
        root_ok = false;  // nothing to search for
      }
    }
  }
  gb::callback_state state;
  if (root_ok) {
    glp_iocp iocp;
    glp_init_iocp(&iocp);
    iocp.msg_lev = GLP_MSG_OFF;
    iocp.presolve = options.presolve ? GLP_ON : GLP_OFF;
    iocp.tm_lim = timed ? gb::to_milliseconds(
                              std::max(1e-3, options.time_limit_seconds - elapsed()))
                        : INT_MAX;
    iocp.cb_func = &gb::branch_cut_callback;
    iocp.cb_info = &state;
    state.node_limit = options.node_limit;
    if (options.warm_start && !options.presolve) state.warm_x = &warm_x;
    out.glpk_return_code = glp_intopt(lp.get(), &iocp);
    if (out.glpk_return_code == GLP_ETMLIM) out.timed_out = true;
    out.node_limit_reached = state.stopped;
    const int status = glp_mip_status(lp.get());
    if (status == GLP_OPT || status == GLP_FEAS) {
      auto node = gb::read_assignment(lp.get(), d, nn);
      if (!node.empty() && orchmllm::detail::respects_capacity(p, node)) {
        const auto f = orchmllm::detail::worst_node_bytes(p, node);
        out.solver_objective = f;
        const bool better =
            f < out.objective ||
            (f == out.objective && gb::total_inter_node(p, node) < gb::total_inter_node(p, warm));
        if (better) {
          out.objective = f;
          warm = std::move(node);
          out.improved_by_solver = true;
        }
        // Proven: GLPK finished, and the returned F is at most its optimum (our integer figures
        // agree with GLPK's floating-point claim).
        const double opt = glp_mip_obj_val(lp.get()) * static_cast<double>(unit);
        if (out.glpk_return_code == 0 && status == GLP_OPT &&
            static_cast<double>(out.objective) <= opt + 0.5 * static_cast<double>(unit))
          out.proven_optimal = true;
      }
    }
  }
  out.best_bound = out.proven_optimal
                       ? static_cast<double>(out.objective)
                       : std::max({0.0, lp_bound * static_cast<double>(unit),
                                   state.tree_bound * static_cast<double>(unit)});
  out.solve_seconds = elapsed();
  return finish(warm);
}

}  // namespace orchmllm::detail::glpk_backend

namespace orchmllm::glpk {

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

  std::vector<rank_t> operator()(const bin_mapping_problem& p) const {
    const auto o = options();
    o.validate();
    return orchmllm::detail::glpk_backend::solve_bottleneck(p.internal(), o, false)
        .mapping.rank_of_bin;
  }
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
inline double transport_lp_optimum(const rearrangement& binned,
                                   std::span<const std::int64_t> item_bytes,
                                   const topology& topo) {
  namespace gb = orchmllm::detail::glpk_backend;
  const auto p = orchmllm::detail::build_mapping_problem(binned, item_bytes, topo);
  const rank_t d = p.num_bins();
  const std::int32_t nn = p.num_nodes();
  const std::int64_t columns = static_cast<std::int64_t>(d) * nn;
  ORCHMLLM_REQUIRE(columns <= (std::int64_t{1} << 28), invalid_argument_error,
                   "transport LP with ", d, " bins and ", nn, " nodes has ", columns,
                   " columns, above 2^28");
  const std::int64_t unit = gb::byte_unit(item_bytes);
  const gb::quiet_terminal quiet;
  gb::prob_ptr lp(glp_create_prob());
  glp_set_obj_dir(lp.get(), GLP_MIN);
  glp_add_rows(lp.get(), static_cast<int>(d) + nn);
  for (rank_t b = 0; b < d; ++b) glp_set_row_bnds(lp.get(), static_cast<int>(b) + 1, GLP_FX, 1, 1);
  for (std::int32_t m = 0; m < nn; ++m) {
    const double cap = p.capacity[static_cast<std::size_t>(m)];
    glp_set_row_bnds(lp.get(), static_cast<int>(d) + 1 + m, GLP_FX, cap, cap);
  }
  glp_add_cols(lp.get(), static_cast<int>(columns));
  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0.0};
  ia.reserve(static_cast<std::size_t>(2 * columns + 1));
  ja.reserve(static_cast<std::size_t>(2 * columns + 1));
  ar.reserve(static_cast<std::size_t>(2 * columns + 1));
  for (rank_t b = 0; b < d; ++b) {
    const auto ub = static_cast<std::size_t>(b);
    auto k = p.by_node.offsets[ub];
    const auto last = p.by_node.offsets[ub + 1];
    for (std::int32_t m = 0; m < nn; ++m) {
      std::int64_t w = 0;
      if (k < last && p.by_node.arcs[static_cast<std::size_t>(k)].node == m)
        w = p.by_node.arcs[static_cast<std::size_t>(k++)].profit;
      const int j = 1 + static_cast<int>(b) * nn + m;
      glp_set_col_bnds(lp.get(), j, GLP_LO, 0.0, 0.0);
      glp_set_obj_coef(lp.get(), j, static_cast<double>((p.bin_bytes[ub] - w) / unit));
      for (int i : {static_cast<int>(b) + 1, static_cast<int>(d) + 1 + m}) {
        ia.push_back(i);
        ja.push_back(j);
        ar.push_back(1.0);
      }
    }
  }
  glp_load_matrix(lp.get(), static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
  glp_smcp smcp;
  glp_init_smcp(&smcp);
  smcp.msg_lev = GLP_MSG_OFF;
  smcp.presolve = GLP_ON;
  const int rc = glp_simplex(lp.get(), &smcp);
  ORCHMLLM_REQUIRE(rc == 0, error, "GLPK's simplex failed on the transport LP (return code ", rc,
                   ")");
  const int status = glp_get_status(lp.get());
  ORCHMLLM_REQUIRE(status == GLP_OPT, error, "GLPK's simplex ended with status ", status,
                   " instead of GLP_OPT (", GLP_OPT, ") on the transport LP");
  return glp_get_obj_val(lp.get()) * static_cast<double>(unit);
}

}  // namespace orchmllm::glpk
