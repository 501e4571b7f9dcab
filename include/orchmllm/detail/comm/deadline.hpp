#pragma once
// The deadline of the MPI and NCCL communicators' waits, as each constructor resolves it: an
// explicit value in code (`communicator_options::timeout`) wins, else the environment variable
// ORCHMLLM_TIMEOUT_MS (read when the communicator is made), else the built-in default of 5
// minutes. 0 means no deadline. Shared by backend/mpi and backend/nccl (no dependency here, so
// nccl::communicator_ref, which has no MPI, uses it too); the constructors agree on the
// resolved value across ranks. See docs/communication.md, "Deadlines".

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <system_error>

#include "orchmllm/core/error.hpp"

namespace orchmllm::detail {

// The built-in deadline: long enough for any legitimate skew between ranks arriving at one
// collective in a training step (a slow data loader, a checkpoint written by one rank), short
// enough that a lost peer costs minutes, not the job's allocation. NCCL's backend and
// torch.distributed's NCCL process groups use the same order of magnitude (5 and 10 minutes).
inline constexpr std::chrono::milliseconds default_comm_timeout{std::chrono::minutes(5)};

// The largest accepted deadline (one year): a steady_clock deadline now + timeout never
// overflows.
inline constexpr std::chrono::milliseconds max_comm_timeout{std::chrono::hours(24 * 365)};

// Throws invalid_argument_error naming `who` when `t` is negative or above max_comm_timeout.
inline void check_comm_timeout(std::string_view who, std::chrono::milliseconds t) {
  ORCHMLLM_REQUIRE(t.count() >= 0 && t <= max_comm_timeout, invalid_argument_error, who,
                   ": timeout = ", t.count(), " ms is outside [0, ", max_comm_timeout.count(),
                   "] (0 means no deadline)");
}

// ORCHMLLM_TIMEOUT_MS: nullopt when unset or empty; throws invalid_argument_error when it is
// not a decimal integer in [0, max_comm_timeout] (no sign, no spaces, no unit).
inline std::optional<std::chrono::milliseconds> comm_timeout_from_env() {
  const char* text = std::getenv("ORCHMLLM_TIMEOUT_MS");
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string_view s(text);
  std::int64_t value = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  ORCHMLLM_REQUIRE(ec == std::errc() && end == s.data() + s.size() && value >= 0 &&
                       value <= max_comm_timeout.count(),
                   invalid_argument_error, "ORCHMLLM_TIMEOUT_MS='", s,
                   "' is not an integer number of milliseconds in [0, ", max_comm_timeout.count(),
                   "] (0 means no deadline)");
  return std::chrono::milliseconds(value);
}

// The deadline in effect: `in_code` when set (checked), else ORCHMLLM_TIMEOUT_MS, else
// `builtin`. Throws invalid_argument_error for an invalid value in code or in the environment
// (an explicit value in code means the environment is not read at all).
inline std::chrono::milliseconds resolve_comm_timeout(
    std::string_view who, std::optional<std::chrono::milliseconds> in_code,
    std::chrono::milliseconds builtin = default_comm_timeout) {
  if (in_code) {
    check_comm_timeout(who, *in_code);
    return *in_code;
  }
  if (auto env = comm_timeout_from_env()) return *env;
  return builtin;
}

}  // namespace orchmllm::detail
