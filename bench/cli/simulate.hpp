#pragma once
// orchmllm-bench simulate: one SIMULATED training step of a benchmark workload under one
// rearrangement scenario (bench/support/simulator.hpp states the model), printed as one JSON
// object.
//
//   orchmllm-bench simulate --workload vl-sft --ranks 512 --gpus-per-node 8 --scenario full
//     -> {"simulated":true,"scenario":"full","workload":"vl-sft","ranks":512,...}
//
// Every figure is a model output except plan_seconds (measured on this machine). The same
// --workload, --ranks, --samples-per-rank and --seed give the same sampled batch for every
// --scenario, so runs compare side by side.

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>

#include "bench/cli/command.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"
#include "bench/support/simulator.hpp"

namespace orchmllm::tool {

/// Largest global batch `simulate` accepts (ranks × samples per rank), a typo guard.
inline constexpr std::int64_t simulate_max_samples = 20'000'000;

/// The `simulate` subcommand.
const command& simulate_command();

/// The result as one JSON object (no trailing newline). `trace`: the trace file the batch was
/// drawn from (workload "trace" and a trace key), or empty for a generated workload.
std::string simulation_json(const bench::sim_result& r, const bench::sim_options& o,
                            const std::string& trace = {});

/// Runs `simulate`. Returns the exit code (see command.hpp).
int run_simulate(const parsed_args& args, std::ostream& out, std::ostream& err);

}  // namespace orchmllm::tool
