#pragma once
// orchmllm-bench simulate --workload long-context: one simulated step of the long-context
// workload under no, static or per-sample context parallelism (bench/support/long_context.hpp).
// See docs/tool.md, "Context parallelism".

#include <ostream>
#include <vector>

#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// The flags only the long-context workload reads, in usage order.
std::vector<flag_spec> simulate_cp_flags();

/// Runs `simulate` for --workload long-context: scenarios cp-none, cp-static (--cp-size C,
/// default 8) and cp (--cp-sizes, default 1,2,4,8), in --micro-batches M (each synchronising
/// every rank) under --micro-batch-tokens; --model, --seed, --samples-per-rank,
/// --achievable, --peak-flops and the link figures as for the other workloads; the flags of
/// the multimodal step are usage errors. Prints the JSON line; returns the exit code.
int run_simulate_cp(const parsed_args& args, std::ostream& out);

}  // namespace orchmllm::tool
