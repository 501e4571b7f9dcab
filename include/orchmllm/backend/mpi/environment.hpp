#pragma once
/// @file environment.hpp
/// Process-wide MPI setup for the MPI backend (CMake target `orchmllm::mpi`, option
/// `ORCHMLLM_ENABLE_MPI`, macro `ORCHMLLM_HAS_MPI`); included by backend/mpi/communicator.hpp.
///
/// - `orchmllm::mpi::environment`: RAII MPI_Init_thread / MPI_Finalize, the latter only once
///   every rank has reached it (within the deadline; else the job is aborted).
/// - The environment variable `ORCHMLLM_RANKS_PER_NODE=G` (G >= 1) fakes nodes as consecutive
///   blocks of G ranks whenever `communicator_options::ranks_per_node` is 0; unset, empty or
///   "0" means real nodes. Anything else (not a non-negative integer) raises
///   invalid_argument_error from the `mpi::communicator` constructor on every rank.
/// - ORCHMLLM_TIMEOUT_MS (detail/comm/deadline.hpp) sets the deadline of the communicators'
///   waits and of the environment's final wait.

#include <mpi.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>

#include "orchmllm/backend/mpi/detail/error_and_wait.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/deadline.hpp"

namespace orchmllm::detail::mpi_backend {

// Parses ORCHMLLM_RANKS_PER_NODE; nullopt when unset or empty.
inline std::optional<std::int64_t> ranks_per_node_from_env() {
  const char* text = std::getenv("ORCHMLLM_RANKS_PER_NODE");
  if (text == nullptr || *text == '\0') return std::nullopt;
  std::string_view s(text);
  std::int64_t value = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  ORCHMLLM_REQUIRE(ec == std::errc() && end == s.data() + s.size() && value >= 0 &&
                       value <= std::numeric_limits<rank_t>::max(),
                   invalid_argument_error, "ORCHMLLM_RANKS_PER_NODE='", s,
                   "' is not an integer in [0, ", std::numeric_limits<rank_t>::max(), "]");
  return value;
}

}  // namespace orchmllm::detail::mpi_backend

namespace orchmllm::mpi {

/// RAII owner of the MPI library's lifetime for programs that do not manage it themselves.
///
/// The constructor calls MPI_Init_thread(argc, argv, required) unless MPI is already
/// initialised (then it only records the thread level and does nothing else, ever); the
/// destructor finalises MPI only if this object initialised it and MPI is not finalised yet.
/// Destroy every `mpi::communicator` before it.
///
/// Exit without a hang: MPI_Finalize is not a safe place to wait for peers (with Open MPI 4.1 a
/// rank inside it while a peer aborts the job sometimes hangs or crashes the launcher). So the
/// destructor first waits for every rank at a barrier on a duplicate of MPI_COMM_WORLD made by
/// the constructor (MPI_Ibarrier, polled) and calls MPI_Finalize only once all have arrived. A
/// rank that returns from `main` while its peers are still inside an operation (it failed
/// alone) thus waits there; its peers reach their own deadline and abort the job, naming the
/// operation. Should the wait outlast twice the deadline (the deadline: `finalize_timeout`,
/// else ORCHMLLM_TIMEOUT_MS, else `default_timeout`, 5 minutes; twice, so that peers inside an
/// operation speak first), this rank prints "orchmllm: mpi::environment: MPI_Finalize on rank
/// <r> did not complete within <t> ms (...)" and calls MPI_Abort(MPI_COMM_WORLD): the job ends
/// whichever rank is missing. A program whose ranks legitimately reach the end further apart
/// (one rank writing a long checkpoint) raises the deadline or sets 0 (no deadline: plain
/// MPI_Finalize). A malformed ORCHMLLM_TIMEOUT_MS here means the default (the communicators
/// report it). Not copyable or movable.
class environment {
 public:
  /// Initialises MPI without command-line arguments.
  explicit environment(int required = MPI_THREAD_FUNNELED)
      : environment(nullptr, nullptr, required) {}

  /// Initialises MPI with main's arguments (MPI may strip its own from them), then duplicates
  /// MPI_COMM_WORLD for the final barrier (collective). `finalize_timeout`, when set, is the
  /// deadline of that barrier's wait (see the class comment; in [0, 365 days], 0: none). Throws
  /// communication_error when MPI_Init_thread or MPI_Comm_dup fails and invalid_argument_error
  /// when MPI was already finalised or `finalize_timeout` is out of range.
  environment(int* argc, char*** argv, int required = MPI_THREAD_FUNNELED,
              std::optional<std::chrono::milliseconds> finalize_timeout = std::nullopt);

  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  environment(environment&&) = delete;
  environment& operator=(environment&&) = delete;

  /// Waits for every rank (at most twice the deadline, else aborts the job; see the class
  /// comment), then MPI_Finalize. Nothing when this object did not initialise MPI.
  ~environment();

  /// True when this object called MPI_Init_thread (and will call MPI_Finalize).
  [[nodiscard]] bool initialised_here() const noexcept { return owns_; }
  /// The thread support level MPI provides (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE); may be
  /// below the requested one, which the caller should check if it matters.
  [[nodiscard]] int thread_level() const noexcept { return provided_; }
  /// The deadline of the final barrier (0: none; the wait lasts at most twice it). 0 when this
  /// object did not initialise MPI.
  [[nodiscard]] std::chrono::milliseconds finalize_timeout() const noexcept { return timeout_; }

 private:
  void wait_for_every_rank() noexcept;

  bool owns_ = false;
  int provided_ = MPI_THREAD_SINGLE;
  std::chrono::milliseconds timeout_{0};
  MPI_Comm final_ = MPI_COMM_NULL;  // duplicate of MPI_COMM_WORLD for the final barrier
};

}  // namespace orchmllm::mpi

// The out-of-line members.
#include "orchmllm/backend/mpi/detail/environment.inl"  // IWYU pragma: export
