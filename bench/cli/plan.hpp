#pragma once
// orchmllm-bench plan: balance one ITEMS.csv, map the balanced bins to ranks (identity, or
// topology-aware with --gpus-per-node), write PLAN.csv, print the figures as JSON.
// `--mapping bottleneck` uses the GLPK integer program when the tool is built with
// ORCHMLLM_ENABLE_GLPK (orchmllm-bench then links plan_glpk.cpp, which registers it as
// `glpk_bottleneck_solver`), else the header-only local search.

#include <cstdint>
#include <optional>
#include <orchmllm/orchmllm.hpp>
#include <ostream>
#include <span>
#include <string>
#include <utility>

#include "bench/cli/command.hpp"
#include "bench/cli/file_io.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/plan_csv.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// The `plan` subcommand.
const command& plan_command();

/// JSON `null` or the integer.
std::string json_optional(std::optional<std::int64_t> v);

/// Parses --gpus-per-node (0 when absent: one node) and --mapping (a mapper name,
/// `orchmllm::mapper_names()`; default transport with --gpus-per-node, identity without).
/// Throws usage_error for an unknown mapper, a G outside [1, max_ranks], or a mapper other than
/// identity without --gpus-per-node.
std::pair<rank_t, any_mapper> parse_mapping_flags(const parsed_args& args);

/// A mapped plan and how it was found.
struct mapped_plan {
  mapping_result result;
  std::string solver;  ///< none (identity), flow (transport), auction, local-search or glpk
                       ///< (bottleneck)
  bool proven_optimal = false;
  double seconds = 0;
};

/// The exact `bottleneck` mapping (GLPK's integer program within `time_limit` seconds): fills
/// `result` and `proven_optimal` of a mapped_plan.
using bottleneck_solver = void (*)(const rearrangement& binned, std::span<const std::int64_t> bytes,
                                   const topology& topo, double time_limit, mapped_plan& out);

/// The solver `--mapping bottleneck` uses instead of the header-only local search: null unless
/// the program links bench/cli/plan_glpk.cpp (orchmllm-bench built with ORCHMLLM_ENABLE_GLPK),
/// which sets it before main runs; the tests' in-process tool has none.
bottleneck_solver& glpk_bottleneck_solver();

/// Maps the balancer's bins with `m`; bottleneck goes to GLPK when the tool has it.
mapped_plan map_for_tool(const rearrangement& binned, std::span<const std::int64_t> bytes,
                         const topology& topo, const any_mapper& m, double time_limit);

/// Runs `plan`: reads the problem, calls orchmllm::balance (timed alone), maps the bins to
/// ranks with orchmllm::map_bins, writes the mapped PLAN.csv atomically, prints the JSON line.
/// Returns the exit code (see command.hpp).
int run_plan(const parsed_args& args, std::ostream& out, std::ostream& err);

}  // namespace orchmllm::tool
