#pragma once
// orchmllm-bench: the command-line front end of the library, for trying it on files.
//
//   orchmllm-bench generate --ranks D --items-per-rank K --out ITEMS.csv
//   orchmllm-bench workload --name vl-sft --ranks D --out-dir DIR
//   orchmllm-bench plan     --items ITEMS.csv --ranks D --out PLAN.csv
//   orchmllm-bench compare  --items ITEMS.csv --ranks D
//   orchmllm-bench dispatch --backend local|mpi --items ITEMS.csv --plan PLAN.csv
//   orchmllm-bench simulate --workload vl-sft --ranks D --gpus-per-node G --scenario full
//   orchmllm-bench demo
//   orchmllm-bench help [SUBCOMMAND]
//
// `run` dispatches to one subcommand; each is declared in its own header, defined in its .cpp
// (compiled once into the orchmllm_cli library, bench/cli/CMakeLists.txt) and listed in
// `commands()` (tool.cpp). Adding a subcommand = one header and one .cpp with a `command` + an
// entry there.
// Documentation with an example session: docs/tool.md.

#include <orchmllm/version.hpp>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/compare.hpp"
#include "bench/cli/demo.hpp"
#include "bench/cli/dispatch.hpp"
#include "bench/cli/generate.hpp"
#include "bench/cli/plan.hpp"
#include "bench/cli/simulate.hpp"
#include "bench/cli/workload.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// Every subcommand, in the order `help` lists them.
const std::vector<const command*>& commands();

/// The command named `name`, or nullptr.
const command* find_command(std::string_view name);

/// Help listing all subcommands.
std::string general_help();

/// Runs the tool on the arguments after the program name. Returns the exit code.
int run(std::span<const std::string> args, std::ostream& out, std::ostream& err);

/// `run` on main's arguments (argv[0] is the program and is skipped).
int run(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace orchmllm::tool
