#pragma once
/// @file environment.hpp
/// Process-wide MPI setup for the MPI backend (CMake target `orchmllm::mpi`, option
/// `ORCHMLLM_ENABLE_MPI`, macro `ORCHMLLM_HAS_MPI`); included by backend/mpi/communicator.hpp.
///
/// - `orchmllm::mpi::environment`: RAII MPI_Init_thread / MPI_Finalize.
/// - The environment variable `ORCHMLLM_RANKS_PER_NODE=G` (G >= 1) fakes nodes as consecutive
///   blocks of G ranks whenever `communicator_options::ranks_per_node` is 0; unset, empty or
///   "0" means real nodes. Anything else (not a non-negative integer) raises
///   invalid_argument_error from the `mpi::communicator` constructor on every rank.

#include <mpi.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>

#include "orchmllm/backend/mpi/detail/error_and_wait.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"

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
/// initialised (then it only records the thread level); the destructor calls MPI_Finalize only
/// if this object initialised MPI and MPI is not finalised yet. Destroy every
/// `mpi::communicator` before it. Not copyable or movable. Throws communication_error when
/// MPI_Init_thread fails and invalid_argument_error when MPI was already finalised.
class environment {
 public:
  /// Initialises MPI without command-line arguments.
  explicit environment(int required = MPI_THREAD_FUNNELED)
      : environment(nullptr, nullptr, required) {}

  /// Initialises MPI with main's arguments (MPI may strip its own from them).
  environment(int* argc, char*** argv, int required = MPI_THREAD_FUNNELED) {
    int finalized = 0;
    detail::mpi_backend::check(MPI_Finalized(&finalized), "MPI_Finalized");
    ORCHMLLM_REQUIRE(!finalized, invalid_argument_error,
                     "MPI was already finalised; it cannot be initialised again");
    int initialized = 0;
    detail::mpi_backend::check(MPI_Initialized(&initialized), "MPI_Initialized");
    if (initialized) {
      detail::mpi_backend::check(MPI_Query_thread(&provided_), "MPI_Query_thread");
    } else {
      detail::mpi_backend::check(MPI_Init_thread(argc, argv, required, &provided_),
                                 "MPI_Init_thread");
      owns_ = true;
    }
  }

  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  environment(environment&&) = delete;
  environment& operator=(environment&&) = delete;

  ~environment() {
    if (!owns_) return;
    int finalized = 0;
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
  }

  /// True when this object called MPI_Init_thread (and will call MPI_Finalize).
  [[nodiscard]] bool initialised_here() const noexcept { return owns_; }
  /// The thread support level MPI provides (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE); may be
  /// below the requested one, which the caller should check if it matters.
  [[nodiscard]] int thread_level() const noexcept { return provided_; }

 private:
  bool owns_ = false;
  int provided_ = MPI_THREAD_SINGLE;
};

}  // namespace orchmllm::mpi
