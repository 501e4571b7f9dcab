#pragma once
// orchmllm-bench compare: run every applicable balancer on one input and tabulate the results.

#include <cstdint>
#include <ostream>

#include "bench/cli/command.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// `compare` runs the exact search only up to this many items (it is exponential).
inline constexpr std::int64_t compare_exact_max_items = 16;

/// The `compare` subcommand.
const command& compare_command();

/// Runs `compare`. Returns the exit code (see command.hpp).
int run_compare(const parsed_args& args, std::ostream& out, std::ostream& err);

}  // namespace orchmllm::tool
