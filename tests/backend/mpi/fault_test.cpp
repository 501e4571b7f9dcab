// The fault suite over MPI (ctest backend.mpi.fault, 4 ranks as 2 fake nodes of 2): what one
// rank can get wrong or run out of inside an exchange, and what every rank must see. Each case
// ends with the same communication_error on every rank, raised before any byte moves, and
// the communicator still in step (a correct exchange follows and delivers exactly). The
// communicator runs with a deadline, so a regression aborts the job instead of hanging it.
// Faults that leave a rank outside the protocol (it returns from main, or throws between two
// hops) cannot be agreed on; deadline_probe.cpp shows the deadline ending them.
//
// Covered: the probe's stale route (rank 3 runs the route of an earlier plan: before, 47,813
// of 124,000 bytes arrived wrong, silently, then the job hung); a route for other item sizes;
// a route built for another rank; a receive buffer that cannot be allocated inside dispatch;
// scratch buffers a mover cannot allocate; and a payload that is invalid on one rank.

#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "orchmllm/backend/mpi/communicator.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "support/failing_allocation.hpp"
#include "support/faults.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::mpi::communicator;
using vec = std::vector<std::int64_t>;
using namespace std::chrono_literals;

communicator make_comm(std::int64_t max_chunk_bytes = INT32_MAX) {
  return communicator(MPI_COMM_WORLD,
                      {.ranks_per_node = 2, .max_chunk_bytes = max_chunk_bytes, .timeout = 30s});
}

std::byte item_byte(std::int64_t g, std::int64_t k) {
  return orchmllm::test::content_byte(g, k, 9);
}

// The exchange every case starts from: n items of `item` bytes spread over the ranks, a
// random plan (the same on every rank: same seed), this rank's input and expected output.
struct exchange {
  rearrangement plan, other;  // `other`: another plan of the same items (a later step)
  vec bytes;                  // per item, global id order
  vec mine;                   // this rank's item sizes, slot order
  std::vector<std::byte> in, expected;
};

exchange make_exchange(rank_t d, rank_t me, std::int64_t n, std::int64_t item) {
  std::mt19937_64 rng(77);
  exchange x;
  const auto off = orchmllm::test::random_offsets(rng, d, n);
  x.plan = orchmllm::test::random_rearrangement(rng, off, d, true, 10);
  x.other = orchmllm::test::random_rearrangement(rng, off, d, true, 10);
  x.bytes.assign(static_cast<std::size_t>(n), item);
  for (auto g = off[static_cast<std::size_t>(me)]; g < off[static_cast<std::size_t>(me) + 1]; ++g) {
    x.mine.push_back(item);
    for (std::int64_t k = 0; k < item; ++k) x.in.push_back(item_byte(g, k));
  }
  const auto doff = x.plan.dst_offsets();
  for (auto h = doff[static_cast<std::size_t>(me)]; h < doff[static_cast<std::size_t>(me) + 1]; ++h)
    for (std::int64_t k = 0; k < item; ++k) x.expected.push_back(item_byte(x.plan.source_of(h), k));
  return x;
}

// "communication_error: <message>", "other: <message>" or "ok".
template <class F>
std::string outcome(F&& f) {
  try {
    f();
    return "ok";
  } catch (const orchmllm::communication_error& e) {
    return std::string("communication_error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
}

// Every rank's outcome, gathered on every rank (fixed-size records, truncated).
std::vector<std::string> all_outcomes(communicator& comm, const std::string& mine) {
  constexpr std::size_t width = 400;
  std::string padded = mine.substr(0, width);
  padded.resize(width, '\0');
  std::vector<char> all(width * static_cast<std::size_t>(comm.size()));
  comm.all_gather(reinterpret_cast<const std::byte*>(padded.data()), width,
                  reinterpret_cast<std::byte*>(all.data()));
  std::vector<std::string> out;
  for (rank_t r = 0; r < comm.size(); ++r)
    out.emplace_back(all.data() + static_cast<std::size_t>(r) * width);
  return out;
}

// Checks: every rank raised communication_error with the same message containing every
// needle; then a correct execute of `x.plan` delivers exactly on every rank.
void expect_agreed_failure(communicator& comm, const exchange& x, const std::string& mine,
                           const std::vector<std::string>& needles) {
  const auto all = all_outcomes(comm, mine);
  for (rank_t r = 0; r < comm.size(); ++r) {
    INFO("rank ", r, ": ", all[static_cast<std::size_t>(r)]);
    CHECK(all[static_cast<std::size_t>(r)].rfind("communication_error: ", 0) == 0);
    CHECK(all[static_cast<std::size_t>(r)] == all[0]);
    for (const auto& n : needles) {
      INFO("expected to contain: ", n);
      CHECK(all[static_cast<std::size_t>(r)].find(n) != std::string::npos);
    }
  }
  const route r = orchmllm::build_route(comm, x.plan, x.mine);
  std::vector<std::byte> out(static_cast<std::size_t>(r.output_bytes()));
  orchmllm::host_mover mover;
  orchmllm::execute(comm, r, x.in.data(), out.data(), mover);
  const auto after = all_outcomes(comm, out == x.expected ? "intact" : "corrupt");
  for (const auto& a : after) CHECK(a == "intact");
}

}  // namespace

TEST_CASE("a stale route on one rank: every rank fails before anything moves") {
  // The probe's case: 4 ranks, 124,000 bytes, rank 3 keeps the route of the previous plan.
  for (const std::int64_t chunk : {std::int64_t{INT32_MAX}, std::int64_t{512}}) {
    INFO("max_chunk_bytes = ", chunk);
    auto comm = make_comm(chunk);
    const rank_t last = comm.size() - 1;
    const auto x = make_exchange(comm.size(), comm.rank(), 124, 1000);
    for (const auto s : {orchmllm::schedule::direct, orchmllm::schedule::node_wise}) {
      const orchmllm::dispatch_options opt{.sched = s};
      const route current = orchmllm::build_route(comm, x.plan, x.mine, opt);
      const route stale = orchmllm::build_route(comm, x.other, x.mine, opt);
      orchmllm::host_mover mover;
      const auto mine = outcome([&] {
        orchmllm::test::execute_untouched(comm, comm.rank() == last ? stale : current, x.in.data(),
                                          mover);
      });
      expect_agreed_failure(comm, x, mine,
                            {"routes of different exchanges",
                             "rank " + std::to_string(last) + "'s has", "stale route"});
    }
  }
}

TEST_CASE("a route for other item sizes, or built for another rank, fails on every rank") {
  auto comm = make_comm();
  const auto x = make_exchange(comm.size(), comm.rank(), 40, 64);
  vec twice = x.mine;
  for (auto& b : twice) b *= 2;
  const route right = orchmllm::build_route(comm, x.plan, x.mine);
  const route wide = orchmllm::build_route(comm, x.plan, twice);
  orchmllm::host_mover mover;
  {
    const route& r = comm.rank() == 1 ? wide : right;
    std::vector<std::byte> in(static_cast<std::size_t>(r.input_bytes()));
    const auto mine =
        outcome([&] { orchmllm::test::execute_untouched(comm, r, in.data(), mover); });
    expect_agreed_failure(comm, x, mine, {"routes of different exchanges", "rank 1's has"});
  }
  {
    const auto topo = orchmllm::topology::uniform(comm.size(), 2);
    const route r = route::build(x.plan, x.bytes, topo, comm.rank() == 2 ? 0 : comm.rank());
    const auto mine =
        outcome([&] { orchmllm::test::execute_untouched(comm, r, x.in.data(), mover); });
    expect_agreed_failure(comm, x, mine,
                          {"rank 2 cannot take part", "its route was built for rank 0 of"});
  }
}

TEST_CASE("a rank that cannot allocate inside dispatch or execute: every rank fails together") {
  auto comm = make_comm();
  const auto x = make_exchange(comm.size(), comm.rank(), 64, 4096);
  CHECK(x.expected.size() >= 4096);
  SUBCASE("the receive buffer of dispatch, on rank 1") {
    orchmllm::ragged_payload local{x.mine, 1, x.in}, out;  // one-byte rows: rows = bytes
    const auto mine = outcome([&] {
      const orchmllm::test::failing_allocations guard(comm.rank() == 1 ? x.expected.size() : 0);
      orchmllm::dispatch(comm, x.plan, local, out);
    });
    expect_agreed_failure(comm, x, mine,
                          {"rank 1 cannot take part", "could not allocate its receive buffer"});
  }
  SUBCASE("the scratch buffers of execute, on rank 2") {
    const route r =
        orchmllm::build_route(comm, x.other, x.mine, {.sched = orchmllm::schedule::node_wise});
    orchmllm::test::failing_mover mover;
    mover.fail = comm.rank() == 2;
    const auto mine =
        outcome([&] { orchmllm::test::execute_untouched(comm, r, x.in.data(), mover); });
    expect_agreed_failure(comm, x, mine,
                          {"rank 2 cannot take part", "could not allocate its scratch buffers"});
  }
}

TEST_CASE("an invalid payload on one rank fails on every rank") {
  auto comm = make_comm();
  const auto x = make_exchange(comm.size(), comm.rank(), 32, 16);
  orchmllm::ragged_payload local{x.mine, 1, x.in};
  if (comm.rank() == 3 % comm.size()) local.data.pop_back();
  const auto mine = outcome([&] { (void)orchmllm::dispatch(comm, x.plan, local); });
  expect_agreed_failure(comm, x, mine, {"cannot take part", "payload is invalid"});
}
