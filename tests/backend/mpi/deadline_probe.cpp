// Fault probes of `mpi::communicator_options::timeout` (ctest backend.mpi.deadline.*): after
// one healthy exchange the last rank leaves the protocol at one of three points, none of
// which its peers can learn from it:
//   leave          it skips its next dispatch (a rank stuck elsewhere);
//   return-before  it throws before its next dispatch and main catches the error;
//   throw-inside   its mover throws in the middle of an execute (after the agreement, while
//                  packing the first hop, as a device mover's failed kernel would) and main
//                  catches the error.
// With a 1.5 s timeout the other ranks must abort the job within that deadline, naming the
// operation and their rank; without one they would wait forever (ctest's TIMEOUT fails the
// test then). The failed rank then waits to be killed instead of returning through
// MPI_Finalize: Open MPI 4.1's launcher sometimes hangs itself when one rank finalizes while
// the others abort (a launcher race outside this library; the peers' behaviour, which is what
// is tested, is the same either way). Not a doctest program: the job is meant to end in
// MPI_Abort; ctest checks the message (PASS_REGULAR_EXPRESSION).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include "orchmllm/backend/mpi/communicator.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/route.hpp"

namespace {

using namespace std::chrono_literals;

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

int probe(std::string_view scenario) {
  // A tiny chunk limit makes execute pack with the mover (no MPI datatype path), so
  // throw-inside fails between the agreement and the first all_to_allv.
  orchmllm::mpi::communicator comm(MPI_COMM_WORLD, {.max_chunk_bytes = 64, .timeout = 1500ms});
  const bool last = comm.rank() == comm.size() - 1;
  const auto plan = alternating_plan(comm.size());
  orchmllm::ragged_payload mine{std::vector<std::int64_t>(4, 256), 1,
                                std::vector<std::byte>(1024, std::byte{7})};
  const auto moved = orchmllm::dispatch(comm, plan, mine);  // healthy
  if (moved.data.size() != 1024 || moved.data != mine.data) return 3;
  if (comm.rank() == 0) {
    std::printf("healthy dispatch under a 1500 ms timeout: ok\n");
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
  } else {
    std::fprintf(stderr, "unknown scenario\n");
    return 2;
  }
  std::printf("unreachable: the exchange completed without rank %d\n", comm.size() - 1);
  return 4;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  orchmllm::mpi::environment env(&argc, &argv);
  int code = 0;
  try {
    code = probe(argc > 1 ? argv[1] : "leave");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe: %s; leaving the protocol\n", e.what());
    std::fflush(stderr);
    code = 1;
  }
  if (code == 1) std::this_thread::sleep_for(30s);  // the peers' MPI_Abort ends it sooner
  return code;
}
