// doctest main for tests that run on several MPI ranks (tests/backend/mpi/, launched by ctest
// through mpiexec; see orchmllm_add_mpi_test in cmake/orchmllm_backend_mpi.cmake).
//
// - MPI is initialised before and finalised after the doctest run (orchmllm::mpi::environment).
// - Every rank runs the same test cases in the same order (doctest's default file/line order and
//   the same command line), so collectives inside test cases line up.
// - Only rank 0 prints; the other ranks write their report to a buffer that is printed to stderr,
//   prefixed by the rank, only when that rank had a failure.
// - The exit code is nonzero on every rank when any rank failed (MPI_Allreduce of the failure
//   flags), so mpiexec and ctest report the failure whichever rank saw it.
//
// Test cases must keep ranks in step: prefer CHECK over REQUIRE around collectives (a REQUIRE
// that fails on one rank only skips that rank's remaining collectives and the others wait until
// ctest's timeout), and agree on outcomes collectively before branching.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <iostream>
#include <sstream>

#include "orchmllm/backend/mpi/environment.hpp"

namespace {

int run(int argc, char** argv) {
  orchmllm::mpi::environment env(&argc, &argv, MPI_THREAD_FUNNELED);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  doctest::Context context(argc, argv);
  std::ostringstream quiet;
  if (rank != 0) context.setCout(&quiet);
  const int result = context.run();
  if (context.shouldExit()) return result;  // --help, --list-test-cases, ...

  const int failed = result != 0 ? 1 : 0;
  int failed_ranks = 0;
  MPI_Allreduce(&failed, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank != 0 && failed) {
    std::cerr << "===== rank " << rank << " of " << size << " failed:\n"
              << quiet.str() << std::flush;
  }
  if (rank == 0 && failed_ranks > 0) {
    std::cout << "===== " << failed_ranks << " of " << size << " ranks failed\n" << std::flush;
  }
  return failed_ranks > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The environment is destroyed (MPI_Finalize) inside run(), before main returns.
  return run(argc, argv);
}
