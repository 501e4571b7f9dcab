#pragma once
// orchmllm-bench dispatch, its command line: the flags (`dispatch_command`, with the help
// text) and their validation (`parse_dispatch_settings`). The subcommand: dispatch.hpp.

#include <chrono>
#include <cstdint>
#include <optional>
#include <orchmllm/comm/route.hpp>
#include <string>

#include "bench/cli/command.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// Largest rank count of the local backend (one thread per rank).
inline constexpr std::int64_t dispatch_max_local_ranks = 4096;
/// Largest --repeat.
inline constexpr std::int64_t dispatch_max_repeat = 1000;

/// The `dispatch` subcommand.
const command& dispatch_command();

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

/// Which transport moves the bytes.
enum class dispatch_backend { local, mpi };

/// The command line of `dispatch`, validated.
struct dispatch_settings {
  dispatch_backend backend = dispatch_backend::local;
  std::string items_path;
  std::string plan_path;
  std::optional<rank_t> ranks;  ///< --ranks; nullopt: inferred from the files
  rank_t gpus_per_node = 0;     ///< --gpus-per-node; 0: default (see the flag)
  schedule sched = schedule::automatic;
  int repeat = 5;
  std::chrono::milliseconds timeout{0};  ///< --timeout; 0: none
};

/// Reads and checks every flag of `dispatch`. Throws usage_error naming the flag and value.
dispatch_settings parse_dispatch_settings(const parsed_args& args);

}  // namespace orchmllm::tool
