// Fault probes of the MPI backend's deadline (ctest backend.mpi.deadline.*, 4 ranks, the
// deadline set through the environment: ORCHMLLM_TIMEOUT_MS=1500). After one healthy exchange
// the last rank leaves the protocol at one of these points, none of which its peers can learn
// from it:
//   leave          it skips its next dispatch (a rank stuck elsewhere, or one that returns
//                  early) and returns from main;
//   return-before  it throws before its next dispatch; main catches the error and returns;
//   throw-inside   its mover throws in the middle of an execute (after the agreement, while
//                  packing the first hop, as a device mover's failed kernel would); main
//                  catches the error and returns;
//   construct      it returns from main before constructing the communicator (its peers wait
//                  in the constructor's MPI_Comm_dup);
//   die            it dies (std::abort, SIGABRT) before its next dispatch;
//   outside        it returns from main while the others wait in the application's own
//                  MPI_Barrier, which has no deadline of ours: its environment's final wait
//                  (twice the deadline) ends the job.
// The failed rank returns through `mpi::environment`'s destructor, which finalises MPI only
// once every rank has reached it: it waits there while its peers reach their deadline, print
// the operation and their rank, and abort the job. A rank that dies is reported by the
// launcher, which ends the job at once. Without a deadline the peers would wait forever
// (ctest's TIMEOUT fails the test then). Not a doctest program: the job is meant to end in
// MPI_Abort; ctest checks the message (PASS_REGULAR_EXPRESSION).
#include <sys/resource.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "orchmllm/backend/mpi/communicator.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/route.hpp"

namespace {

// Every rank holds 4 items of 256 bytes; they go alternately to the next two ranks (so packing
// regroups them: the mover has work before the first hop).
orchmllm::rearrangement alternating_plan(orchmllm::rank_t d) {
  std::vector<std::int64_t> off;
  std::vector<orchmllm::rank_t> dst;
  for (orchmllm::rank_t r = 0; r <= d; ++r) off.push_back(4 * r);
  for (orchmllm::rank_t r = 0; r < d; ++r)
    for (int i = 0; i < 4; ++i) dst.push_back((r + 1 + i % 2) % d);
  return orchmllm::rearrangement::from_destinations(off, dst, d);
}

struct throwing_mover {
  orchmllm::host_mover inner;
  bool fail = false;
  std::byte* scratch(int slot, std::int64_t bytes) { return inner.scratch(slot, bytes); }
  void gather(const std::byte* in, std::byte* out, const orchmllm::detail::segment_list& s) {
    if (fail) throw std::runtime_error("the mover failed on this rank alone");
    inner.gather(in, out, s);
  }
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

int probe(std::string_view scenario) {
  if (scenario == "construct" && world_rank() == world_size() - 1) return 1;
  // A tiny chunk limit makes execute pack with the mover (no MPI datatype path), so
  // throw-inside fails between the agreement and the first all_to_allv. The deadline comes
  // from ORCHMLLM_TIMEOUT_MS.
  orchmllm::mpi::communicator comm(MPI_COMM_WORLD, {.max_chunk_bytes = 64});
  const bool last = comm.rank() == comm.size() - 1;
  const auto plan = alternating_plan(comm.size());
  orchmllm::ragged_payload mine{std::vector<std::int64_t>(4, 256), 1,
                                std::vector<std::byte>(1024, std::byte{7})};
  const auto moved = orchmllm::dispatch(comm, plan, mine);  // healthy
  if (moved.data.size() != 1024 || moved.data != mine.data) return 3;
  if (comm.rank() == 0) {
    std::printf("healthy dispatch under a %lld ms deadline: ok\n",
                static_cast<long long>(comm.timeout().count()));
    std::fflush(stdout);
  }
  if (scenario == "leave") {
    if (last) return 1;                          // gone from the protocol
    (void)orchmllm::dispatch(comm, plan, mine);  // the last rank never comes
  } else if (scenario == "return-before") {
    if (last) throw std::runtime_error("the application failed on this rank before dispatch");
    (void)orchmllm::dispatch(comm, plan, mine);
  } else if (scenario == "throw-inside") {
    const auto r = orchmllm::build_route(comm, plan, mine.rows);
    throwing_mover mover;
    mover.fail = last;
    std::vector<std::byte> out(static_cast<std::size_t>(r.output_bytes()));
    orchmllm::execute(comm, r, mine.data.data(), out.data(), mover);
  } else if (scenario == "outside") {
    if (last) return 1;
    MPI_Barrier(MPI_COMM_WORLD);  // the application's own collective: no deadline
  } else if (scenario == "die") {
    if (last) {
      const rlimit no_core{0, 0};
      setrlimit(RLIMIT_CORE, &no_core);  // no core file per run
      std::abort();
    }
    (void)orchmllm::dispatch(comm, plan, mine);
  } else {
    std::fprintf(stderr, "unknown scenario\n");
    return 2;
  }
  std::printf("unreachable: the exchange completed without rank %d\n", comm.size() - 1);
  return 4;
}

}  // namespace

int main(int argc, char** argv) {
  orchmllm::mpi::environment env(&argc, &argv);
  try {
    return probe(argc > 1 ? argv[1] : "leave");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe: %s; leaving the protocol\n", e.what());
    std::fflush(stderr);
    return 1;  // through env's destructor, as a program that handles its error would
  }
}
