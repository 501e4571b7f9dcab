// Fault probe of `mpi::communicator_options::timeout` (ctest backend.mpi.deadline): after one
// healthy exchange the last rank leaves the protocol — it skips the next all_gather and sleeps,
// as a rank that failed alone and returned would. With a 1.5 s timeout the other ranks must
// abort the job within that deadline, naming the operation and their rank; without one they
// would wait forever (ctest's TIMEOUT fails the test then). Not a doctest program: the job is
// meant to end in MPI_Abort; ctest checks the message (PASS_REGULAR_EXPRESSION).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "orchmllm/backend/mpi/communicator.hpp"

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  orchmllm::mpi::environment env(&argc, &argv);
  orchmllm::mpi::communicator comm(MPI_COMM_WORLD, {.timeout = 1500ms});
  auto bytes = [](auto* p) { return reinterpret_cast<std::byte*>(p); };
  std::int64_t mine = comm.rank();
  std::vector<std::int64_t> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(bytes(&mine), sizeof mine, bytes(all.data()));
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != static_cast<std::int64_t>(r)) return 3;
  if (comm.rank() == 0) {
    std::printf("healthy exchange under a 1500 ms timeout: ok\n");
    std::fflush(stdout);
  }
  if (comm.rank() == comm.size() - 1) {
    std::this_thread::sleep_for(30s);  // gone from the protocol; MPI_Abort ends it sooner
    return 0;
  }
  comm.all_gather(bytes(&mine), sizeof mine, bytes(all.data()));  // rank size-1 never comes
  std::printf("unreachable: the all_gather completed without rank %d\n", comm.size() - 1);
  return 4;
}
