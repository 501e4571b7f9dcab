#pragma once
// orchmllm-bench dispatch --backend mpi: the launcher, `run_dispatch_mpi` in dispatch_mpi.cpp.
// That unit is compiled only into orchmllm-bench built with MPI (ORCHMLLM_ENABLE_MPI: it links
// orchmllm::mpi) and sets `dispatch_mpi_runner()` before main runs; `run_dispatch` calls the
// backend through it, so the CLI library (orchmllm_cli) and the tests' in-process tool need no
// MPI. MPI is initialised only when this backend is chosen. Rank 0 reads both files and shares
// their text, so the other ranks need not see the same file system; every rank parses the same
// text and so fails (or not) identically. Only rank 0 writes to stdout and stderr, except for
// usage errors found before MPI starts (each process reports those).

#include <ostream>

#include "bench/cli/dispatch_settings.hpp"

namespace orchmllm::tool {

/// A dispatch backend's entry point.
using dispatch_runner = int (*)(const dispatch_settings& s, std::ostream& out, std::ostream& err);

/// The `mpi` backend: null unless the program links bench/cli/dispatch_mpi.cpp.
dispatch_runner& dispatch_mpi_runner();

/// Whether this build of the tool can run `--backend mpi` (`dispatch_mpi_runner()` is set):
/// converts to bool, `if (dispatch_has_mpi)`.
struct dispatch_mpi_support {
  explicit operator bool() const { return dispatch_mpi_runner() != nullptr; }
};
inline constexpr dispatch_mpi_support dispatch_has_mpi{};

}  // namespace orchmllm::tool
