// Dispatch along agreed routes over orchmllm::mpi::communicator (ctest
// backend.mpi.agreed_route, 4 ranks): after the step's one agreement (`agree_on_routes`: one
// MPI_Allreduce), a dispatch along a route issues exactly one MPI all-to-all per hop
// (MPI_Alltoallw on the datatype path, MPI_Alltoallv when packing) and no other MPI collective:
// no argument agreement, no size exchange; `verify` adds one MPI_Allreduce; a dispatch along a
// plan adds one MPI_Allgather of records and that reduction. Counted with the MPI profiling
// interface (this executable defines the collectives it counts and forwards them to PMPI_*), so the
// count is what MPI saw, not what the library thinks it called. Also: the chunked path (tiny
// max_chunk_bytes, decided from the route's group figures on every rank alike) and `verify`
// deliver the same bytes. Collective throughout: every rank runs the same statements.

#include <doctest/doctest.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "orchmllm/backend/mpi/communicator.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/metadata.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/detail/comm/plan_agreement.hpp"
#include "support/test_support.hpp"

namespace {

struct mpi_calls {
  std::int64_t all_to_all = 0;  // MPI_(I)alltoallv, MPI_(I)alltoallw
  std::int64_t other = 0;       // every other collective the backend uses
};
mpi_calls counted;  // MPI runs on the main thread only here

}  // namespace

// The MPI profiling interface: these definitions take the place of the library's, count, and
// forward to the PMPI_ entry points.
extern "C" {
int MPI_Alltoallv(const void* sb, const int sc[], const int sd[], MPI_Datatype st, void* rb,
                  const int rc[], const int rd[], MPI_Datatype rt, MPI_Comm comm) {
  ++counted.all_to_all;
  return PMPI_Alltoallv(sb, sc, sd, st, rb, rc, rd, rt, comm);
}
int MPI_Ialltoallv(const void* sb, const int sc[], const int sd[], MPI_Datatype st, void* rb,
                   const int rc[], const int rd[], MPI_Datatype rt, MPI_Comm comm, MPI_Request* r) {
  ++counted.all_to_all;
  return PMPI_Ialltoallv(sb, sc, sd, st, rb, rc, rd, rt, comm, r);
}
int MPI_Alltoallw(const void* sb, const int sc[], const int sd[], const MPI_Datatype st[], void* rb,
                  const int rc[], const int rd[], const MPI_Datatype rt[], MPI_Comm comm) {
  ++counted.all_to_all;
  return PMPI_Alltoallw(sb, sc, sd, st, rb, rc, rd, rt, comm);
}
int MPI_Ialltoallw(const void* sb, const int sc[], const int sd[], const MPI_Datatype st[],
                   void* rb, const int rc[], const int rd[], const MPI_Datatype rt[], MPI_Comm comm,
                   MPI_Request* r) {
  ++counted.all_to_all;
  return PMPI_Ialltoallw(sb, sc, sd, st, rb, rc, rd, rt, comm, r);
}
int MPI_Allreduce(const void* s, void* r, int c, MPI_Datatype t, MPI_Op o, MPI_Comm comm) {
  ++counted.other;
  return PMPI_Allreduce(s, r, c, t, o, comm);
}
int MPI_Iallreduce(const void* s, void* r, int c, MPI_Datatype t, MPI_Op o, MPI_Comm comm,
                   MPI_Request* q) {
  ++counted.other;
  return PMPI_Iallreduce(s, r, c, t, o, comm, q);
}
int MPI_Allgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                  MPI_Comm comm) {
  ++counted.other;
  return PMPI_Allgather(s, sc, st, r, rc, rt, comm);
}
int MPI_Allgatherv(const void* s, int sc, MPI_Datatype st, void* r, const int rc[], const int rd[],
                   MPI_Datatype rt, MPI_Comm comm) {
  ++counted.other;
  return PMPI_Allgatherv(s, sc, st, r, rc, rd, rt, comm);
}
int MPI_Alltoall(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                 MPI_Comm comm) {
  ++counted.other;
  return PMPI_Alltoall(s, sc, st, r, rc, rt, comm);
}
int MPI_Barrier(MPI_Comm comm) {
  ++counted.other;
  return PMPI_Barrier(comm);
}
}

namespace {

using orchmllm::rank_t;
using orchmllm::route;
using orchmllm::mpi::communicator;

static_assert(orchmllm::agreed_exchange_communicator<communicator>);
static_assert(orchmllm::agreed_gathering_communicator<communicator>);

// True on every rank iff `ok` holds on every rank (PMPI: not counted).
bool all_ranks(const communicator& comm, bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm.native_handle());
  return all == 1;
}

std::byte item_byte(std::int64_t g, std::int64_t k) {
  return orchmllm::test::content_byte(g, k, 9);
}

struct step_check {
  bool delivered = true;         // every route delivered exactly the planned bytes
  bool one_per_hop = true;       // each dispatch: all-to-alls == hops, nothing else
  bool agreement_is_one = true;  // agree_on_routes: one reduction, nothing else
  bool verify_adds_one = true;   // verify: the agreement comes back, one reduction
  std::int64_t hops = 0;         // over all routes
};

// Random plans (the same on every rank), every schedule: build every route locally, agree
// once, dispatch along each and count what MPI saw.
step_check run_routes(communicator& comm, int trials, std::uint64_t seed, bool count_hops) {
  const rank_t d = comm.size();
  const rank_t me = comm.rank();
  const auto topo = orchmllm::gather_topology(comm);
  std::mt19937_64 rng(seed);
  step_check c;
  for (int t = 0; t < trials; ++t) {
    const auto n = orchmllm::test::uniform(rng, 0, 6 * d);
    const auto off = orchmllm::test::random_offsets(rng, d, n);
    const auto plan = orchmllm::test::random_rearrangement(rng, off, d, t % 2 == 1, 20);
    std::vector<std::int64_t> bytes(static_cast<std::size_t>(n));
    for (auto& b : bytes)
      b = orchmllm::test::uniform(rng, 0, 4) == 0 ? 0 : orchmllm::test::uniform(rng, 1, 3000);
    std::vector<std::byte> in, expected;
    for (auto g = off[static_cast<std::size_t>(me)]; g < off[static_cast<std::size_t>(me) + 1]; ++g)
      for (std::int64_t k = 0; k < bytes[static_cast<std::size_t>(g)]; ++k)
        in.push_back(item_byte(g, k));
    const auto doff = plan.dst_offsets();
    for (auto h = doff[static_cast<std::size_t>(me)]; h < doff[static_cast<std::size_t>(me) + 1];
         ++h) {
      const auto g = plan.source_of(h);
      for (std::int64_t k = 0; k < bytes[static_cast<std::size_t>(g)]; ++k)
        expected.push_back(item_byte(g, k));
    }
    std::vector<route> routes;
    for (const auto s :
         {orchmllm::schedule::direct, orchmllm::schedule::node_wise, orchmllm::schedule::automatic})
      routes.push_back(route::build(plan, bytes, topo, me, s));
    orchmllm::host_mover mover;
    counted = {};
    orchmllm::agree_on_routes(comm, std::span<const route>(routes), mover);
    c.agreement_is_one = c.agreement_is_one && counted.other == 1 && counted.all_to_all == 0;
    for (const auto& r : routes) {
      std::vector<std::byte> out(static_cast<std::size_t>(r.output_bytes()), std::byte{0x11});
      counted = {};
      orchmllm::dispatch(comm, r, std::span<const std::byte>(in), std::span<std::byte>(out), mover);
      c.hops += static_cast<std::int64_t>(r.hops().size());
      if (count_hops)
        c.one_per_hop = c.one_per_hop && counted.other == 0 &&
                        counted.all_to_all == static_cast<std::int64_t>(r.hops().size());
      c.delivered = c.delivered && out == expected;
      // verify: the per-transfer agreement is back (and the bytes are the same).
      std::fill(out.begin(), out.end(), std::byte{0x11});
      counted = {};
      orchmllm::dispatch(comm, r, std::span<const std::byte>(in), std::span<std::byte>(out), mover,
                         {.verify = true});
      c.verify_adds_one = c.verify_adds_one && counted.other == 1 &&
                          counted.all_to_all == static_cast<std::int64_t>(r.hops().size());
      c.delivered = c.delivered && out == expected;
    }
  }
  c.delivered = all_ranks(comm, c.delivered);
  c.one_per_hop = all_ranks(comm, c.one_per_hop);
  c.agreement_is_one = all_ranks(comm, c.agreement_is_one);
  c.verify_adds_one = all_ranks(comm, c.verify_adds_one);
  return c;
}

}  // namespace

TEST_CASE("agreed routes over MPI: one all-to-all per hop and no other collective") {
  for (const rank_t g : {2, 1, 4}) {
    INFO("ranks per node: ", g);
    communicator comm(MPI_COMM_WORLD, communicator::options{.ranks_per_node = g});
    const auto c = run_routes(comm, 10, 300 + static_cast<std::uint64_t>(g), true);
    CHECK(c.delivered);
    CHECK(c.agreement_is_one);
    CHECK(c.one_per_hop);
    CHECK(c.verify_adds_one);
    CHECK(c.hops > 0);
    CHECK(comm.chunked_calls() == 0);
  }
}

// Along a plan: the records (one MPI_Allgather, carrying the item counts when no rank holds more
// than detail::inline_item_counts items, else one MPI_Allgatherv more), one MPI_Allreduce that
// agrees every rank could allocate, then one all-to-all per hop of the route it builds.
TEST_CASE("dispatch along a plan over MPI: one gather, one reduction, one all-to-all per hop") {
  communicator comm(MPI_COMM_WORLD, communicator::options{.ranks_per_node = 2});
  const rank_t d = comm.size();
  const rank_t me = comm.rank();
  const auto topo = orchmllm::gather_topology(comm);
  constexpr auto inline_items = static_cast<std::int64_t>(orchmllm::detail::inline_item_counts);
  std::mt19937_64 rng(41);
  bool delivered = true, counts_ok = true;
  for (const std::int64_t per_rank :
       {std::int64_t{0}, inline_items / 2, inline_items, inline_items + 1, 3 * inline_items}) {
    for (int t = 0; t < 4; ++t) {
      // Exactly `per_rank` items on rank 0 and at most as many elsewhere.
      std::vector<std::int64_t> off{0};
      for (rank_t r = 0; r < d; ++r)
        off.push_back(off.back() + (r == 0 ? per_rank : orchmllm::test::uniform(rng, 0, per_rank)));
      const auto n = off.back();
      const auto plan = orchmllm::test::random_rearrangement(rng, off, d, t % 2 == 1, 20);
      orchmllm::ragged_payload in;
      in.row_bytes = 3;
      std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
      for (auto& x : rows) x = orchmllm::test::uniform(rng, 0, 40);
      for (auto g = off[static_cast<std::size_t>(me)]; g < off[static_cast<std::size_t>(me) + 1];
           ++g) {
        in.rows.push_back(rows[static_cast<std::size_t>(g)]);
        for (std::int64_t k = 0; k < rows[static_cast<std::size_t>(g)] * 3; ++k)
          in.data.push_back(item_byte(g, k));
      }
      std::vector<std::int64_t> bytes(rows.size());
      for (std::size_t g = 0; g < rows.size(); ++g) bytes[g] = rows[g] * 3;
      const auto hops = static_cast<std::int64_t>(
          route::build(plan, bytes, topo, me, orchmllm::schedule::automatic).hops().size());
      orchmllm::ragged_payload out;
      counted = {};
      orchmllm::dispatch(comm, plan, in, out);
      // Beyond the inline counts: one MPI_Allgatherv more (its counts are agreed by the records).
      const std::int64_t metadata = per_rank > inline_items ? 2 : 1;
      counts_ok = counts_ok && counted.other == metadata + 1 && counted.all_to_all == hops;
      const auto doff = plan.dst_offsets();
      std::vector<std::byte> expected;
      for (auto h = doff[static_cast<std::size_t>(me)]; h < doff[static_cast<std::size_t>(me) + 1];
           ++h) {
        const auto g = plan.source_of(h);
        for (std::int64_t k = 0; k < bytes[static_cast<std::size_t>(g)]; ++k)
          expected.push_back(item_byte(g, k));
      }
      delivered = delivered && out.data == expected;
    }
  }
  CHECK(all_ranks(comm, delivered));
  CHECK(all_ranks(comm, counts_ok));
}

TEST_CASE("agreed routes over MPI: the chunked path, chosen alike on every rank") {
  communicator comm(MPI_COMM_WORLD,
                    communicator::options{.ranks_per_node = 2, .max_chunk_bytes = 64});
  const auto c = run_routes(comm, 6, 77, false);
  CHECK(c.delivered);
  CHECK(c.agreement_is_one);
  CHECK(comm.chunked_calls() > 0);
}

TEST_CASE("agreed routes over MPI: a timeout changes nothing but the waits") {
  communicator comm(
      MPI_COMM_WORLD,
      communicator::options{.ranks_per_node = 2, .timeout = std::chrono::milliseconds(60000)});
  const auto c = run_routes(comm, 4, 5, true);
  CHECK(c.delivered);
  CHECK(c.one_per_hop);
}
