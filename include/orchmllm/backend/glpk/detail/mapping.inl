#pragma once
// The GLPK backend's definitions (included at the end of backend/glpk/mapping.hpp): the
// bottleneck integer program (model, warm start, branch-and-cut callback, reading and checking
// GLPK's assignment), the transport LP, and the public functions over them. Not API. See
// docs/algorithms.md, "Mapping balanced bins to ranks".

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
  orchmllm::detail::bottleneck_local_search(p, warm, orchmllm::detail::bottleneck_step_budget(d));
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
    glp_set_row_bnds(lp.get(), cap_row(m) + 1, GLP_LO, static_cast<double>(p.node_held[um] / unit),
                     0.0);
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
    iocp.tm_lim = timed
                      ? gb::to_milliseconds(std::max(1e-3, options.time_limit_seconds - elapsed()))
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
  out.best_bound = out.proven_optimal ? static_cast<double>(out.objective)
                                      : std::max({0.0, lp_bound * static_cast<double>(unit),
                                                  state.tree_bound * static_cast<double>(unit)});
  out.solve_seconds = elapsed();
  return finish(warm);
}

// The transport LP's optimum in bytes (glpk::transport_lp_optimum).
inline double transport_lp(const rearrangement& binned, std::span<const std::int64_t> item_bytes,
                           const topology& topo) {
  const auto p = orchmllm::detail::build_mapping_problem(binned, item_bytes, topo);
  const rank_t d = p.num_bins();
  const std::int32_t nn = p.num_nodes();
  const std::int64_t columns = static_cast<std::int64_t>(d) * nn;
  ORCHMLLM_REQUIRE(columns <= (std::int64_t{1} << 28), invalid_argument_error, "transport LP with ",
                   d, " bins and ", nn, " nodes has ", columns, " columns, above 2^28");
  const std::int64_t unit = byte_unit(item_bytes);
  const quiet_terminal quiet;
  prob_ptr lp(glp_create_prob());
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

}  // namespace orchmllm::detail::glpk_backend

namespace orchmllm::glpk {

inline bottleneck_result map_bins_bottleneck(const rearrangement& binned,
                                             std::span<const std::int64_t> item_bytes,
                                             const topology& topo,
                                             const bottleneck_options& options) {
  options.validate();
  const auto p = orchmllm::detail::build_mapping_problem(binned, item_bytes, topo);
  return orchmllm::detail::glpk_backend::solve_bottleneck(p, options, true);
}

inline std::vector<rank_t> bottleneck_ilp::operator()(const bin_mapping_problem& p) const {
  const auto o = options();
  o.validate();
  return orchmllm::detail::glpk_backend::solve_bottleneck(p.internal(), o, false)
      .mapping.rank_of_bin;
}

inline double transport_lp_optimum(const rearrangement& binned,
                                   std::span<const std::int64_t> item_bytes, const topology& topo) {
  return orchmllm::detail::glpk_backend::transport_lp(binned, item_bytes, topo);
}

}  // namespace orchmllm::glpk
