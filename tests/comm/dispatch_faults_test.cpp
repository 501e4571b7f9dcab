// Tests for include/orchmllm/comm/dispatch.hpp on the in-process backend (comm/local.hpp): faults
// fail together.
//
// Ranks that disagree on the plan, the row width, the schedule, the item count or the link
// figures, or hold an invalid payload; a stale route, a route of another rank, a failed
// allocation on one rank; the step's route agreement and verified dispatches: every rank gets
// `communication_error` before anything moves and the group stays usable. Without verify, a
// local fault raises on its rank.
//
// doctest macros are not thread-safe: rank functions only record results (one slot per rank)
// and every CHECK runs on the main thread after `run` returns.

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/local.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/dispatch_fixtures.hpp"
#include "support/failing_allocation.hpp"
#include "support/faults.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::communication_error;
using orchmllm::dispatch_options;
using orchmllm::ragged_payload;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::schedule;
using orchmllm::topology;
using orchmllm::local::communicator;
using orchmllm::test::uniform;
using namespace orchmllm::test::dispatch_fixtures;  // support/dispatch_fixtures.hpp

}  // namespace

TEST_CASE("dispatch: ranks that disagree fail together with communication_error, no hang") {
  const rank_t d = 4;
  const auto lengths = std::vector<vec>{{3, 0, 5}, {2}, {}, {7, 1, 1, 4}};
  const auto layout = orchmllm::batch_layout::from_ranks(lengths);
  const auto rows = flatten(lengths);
  const auto plan = orchmllm::balance(layout, orchmllm::linear_cost{}, orchmllm::packed).plan;
  const auto off = plan.src_offsets();
  auto payload_of = [&](rank_t r, std::int64_t row_bytes = 4) {
    return make_payload(r, rows_of_rank(rows, off, r), row_bytes);
  };

  for (const rank_t rpn : {0, 2}) {
    INFO("ranks_per_node = ", rpn);
    {  // one rank's plan built from different input
      auto other_lengths = lengths;
      other_lengths[3] = {1, 1, 4, 7};  // rank 2 saw rank 3's items in another order
      const auto other = orchmllm::balance(orchmllm::batch_layout::from_ranks(other_lengths),
                                           orchmllm::linear_cost{}, orchmllm::packed)
                             .plan;
      REQUIRE(orchmllm::fingerprint(other) != orchmllm::fingerprint(plan));
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  (void)orchmllm::dispatch(comm, comm.rank() == 2 ? other : plan,
                                                           payload_of(comm.rank()));
                                },
                                {"ranks disagree on the plan", "fingerprint", "rank 2"});
    }
    {  // one rank's plan differs only in slot order
      std::vector<orchmllm::placement> pl;
      for (std::int64_t g = 0; g < plan.num_items(); ++g) pl.push_back(plan.destination_of(g));
      // Swap two items that land on the same rank.
      bool swapped = false;
      for (std::size_t a = 0; a < pl.size() && !swapped; ++a)
        for (std::size_t b = a + 1; b < pl.size() && !swapped; ++b)
          if (pl[a].rank == pl[b].rank) {
            std::swap(pl[a].slot, pl[b].slot);
            swapped = true;
          }
      REQUIRE(swapped);
      const auto other = rearrangement::from_placements(off, pl, d);
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  (void)orchmllm::combine(comm, comm.rank() == 0 ? other : plan,
                                                          expected_at(plan, rows, 4, comm.rank()));
                                },
                                {"fingerprint", "rank 0 has", "rank 1 has"});
    }
    {  // different row widths
      expect_collective_failure(
          d, rpn, plan, rows,
          [&](communicator& comm) {
            (void)orchmllm::dispatch(comm, plan, payload_of(comm.rank(), comm.rank() == 1 ? 2 : 4));
          },
          {"row width", "rank 0 uses 4 bytes", "rank 1 uses 2"});
    }
    {  // different schedules
      expect_collective_failure(
          d, rpn, plan, rows,
          [&](communicator& comm) {
            const dispatch_options opt{.sched = comm.rank() == 3 ? schedule::node_wise
                                                                 : schedule::direct};
            (void)orchmllm::dispatch(comm, plan, payload_of(comm.rank()), opt);
          },
          {"schedule", "rank 0 asks for direct", "rank 3 for node-wise"});
    }
    {  // wrong item count
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  auto p = payload_of(comm.rank());
                                  if (comm.rank() == 1) {
                                    p.rows.push_back(2);
                                    p.data.resize(p.data.size() + 8);
                                  }
                                  (void)orchmllm::dispatch(comm, plan, p);
                                },
                                {"rank 1 holds 2 items but the plan expects 1"});
    }
    {  // invalid payload on one rank
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  auto p = payload_of(comm.rank());
                                  if (comm.rank() == 3) p.data.pop_back();
                                  (void)orchmllm::dispatch(comm, plan, p);
                                },
                                {"rank 3 cannot take part", "payload is invalid"});
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  auto p = payload_of(comm.rank());
                                  if (comm.rank() == 0) p.rows[1] = -1;
                                  (void)orchmllm::dispatch(comm, plan, p);
                                },
                                {"rank 0 cannot take part", "payload is invalid"});
    }
    {  // a plan for another rank count
      const auto five = rearrangement::identity(vec{0, 3, 4, 4, 8, 8});
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  (void)orchmllm::dispatch(comm, comm.rank() == 2 ? five : plan,
                                                           payload_of(comm.rank()));
                                },
                                {"rank 2 cannot take part", "plan for 5 ranks, group of 4"});
      const auto wide = rearrangement::from_destinations(off, ranks(8, 4), 5);
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  (void)orchmllm::dispatch(comm, wide, payload_of(comm.rank()));
                                },
                                {"rank 0 cannot take part", "does not map the group onto itself"});
    }
    {  // different link figures (they steer the automatic choice)
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  dispatch_options opt;
                                  if (comm.rank() == 2) opt.links.inter_latency = 1e-3;
                                  (void)orchmllm::dispatch(comm, plan, payload_of(comm.rank()),
                                                           opt);
                                },
                                {"ranks disagree on the link figures", "rank 2 has", "0.001 s"});
    }
    {  // invalid link figures on one rank
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  dispatch_options opt;
                                  if (comm.rank() == 1) opt.links.intra_bandwidth = 0;
                                  (void)orchmllm::build_route(
                                      comm, plan, rows_of_rank(rows, off, comm.rank()), opt);
                                },
                                {"rank 1 cannot take part", "link figures"});
    }
    {  // build_route with a negative byte count on one rank
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  vec b = rows_of_rank(rows, off, comm.rank());
                                  if (comm.rank() == 3) b[2] = -5;
                                  (void)orchmllm::build_route(comm, plan, b);
                                },
                                {"rank 3 cannot take part"});
      expect_collective_failure(d, rpn, plan, rows,
                                [&](communicator& comm) {
                                  vec b = rows_of_rank(rows, off, comm.rank());
                                  if (comm.rank() == 0) b.pop_back();
                                  (void)orchmllm::build_route(comm, plan, b);
                                },
                                {"rank 0 holds 2 items but the plan expects 3"});
    }
  }
}

TEST_CASE(
    "execute: a stale route, a route of another rank or a failed allocation on one rank "
    "fail together before anything moves") {
  const auto c = fault_case::make();
  const rank_t d = fault_case::d;
  const auto& rows = c.rows;
  const auto& plan = c.plan;
  const auto& other = c.other;
  const auto off = plan.src_offsets();
  constexpr std::int64_t row_bytes = 4;
  auto payload_of = [&](rank_t r) {
    return make_payload(r, rows_of_rank(rows, off, r), row_bytes);
  };
  auto bytes_of = [&](const ragged_payload& p) {
    vec b;
    for (std::size_t j = 0; j < p.rows.size(); ++j) b.push_back(p.item_bytes(j));
    return b;
  };

  for (const rank_t rpn : {0, 2}) {
    INFO("ranks_per_node = ", rpn);
    for (const auto s : all_schedules) {
      INFO("schedule ", std::string(orchmllm::to_string(s)));
      const dispatch_options opt{.sched = s};
      // Rank 2 runs the route of an earlier plan (the probe's silent corruption).
      expect_collective_failure(
          d, rpn, plan, rows,
          [&](communicator& comm) {
            const auto mine = payload_of(comm.rank());
            const route current = orchmllm::build_route(comm, plan, bytes_of(mine), opt);
            const route stale = orchmllm::build_route(comm, other, bytes_of(mine), opt);
            orchmllm::host_mover mover;
            orchmllm::test::execute_untouched(comm, comm.rank() == 2 ? stale : current,
                                              mine.data.data(), mover);
          },
          {"routes of different exchanges", "rank 2's has", "stale route"});
      // Rank 1 runs a route of the same plan built for items twice as large.
      expect_collective_failure(
          d, rpn, plan, rows,
          [&](communicator& comm) {
            const auto mine = payload_of(comm.rank());
            vec twice = bytes_of(mine);
            for (auto& b : twice) b *= 2;
            const route right = orchmllm::build_route(comm, plan, bytes_of(mine), opt);
            const route wide = orchmllm::build_route(comm, plan, twice, opt);
            const route& r = comm.rank() == 1 ? wide : right;
            std::vector<std::byte> in(static_cast<std::size_t>(r.input_bytes()));
            orchmllm::host_mover mover;
            orchmllm::test::execute_untouched(comm, r, in.data(), mover);
          },
          {"routes of different exchanges", "rank 1's has"});
    }
    // Rank 3 runs the route built for rank 0.
    vec all_bytes(rows.size());
    for (std::size_t g = 0; g < rows.size(); ++g) all_bytes[g] = rows[g] * row_bytes;
    const auto topo = topology::uniform(d, rpn);
    expect_collective_failure(d, rpn, plan, rows,
                              [&](communicator& comm) {
                                const auto mine = payload_of(comm.rank());
                                const route r = route::build(plan, all_bytes, topo,
                                                             comm.rank() == 3 ? 0 : comm.rank());
                                orchmllm::host_mover mover;
                                orchmllm::test::execute_untouched(comm, r, mine.data.data(), mover);
                              },
                              {"rank 3 cannot take part", "its route was built for rank 0 of 4"});
    // Rank 1's mover cannot allocate its scratch buffers (the shuffled plan needs a pack and
    // an unpack on every rank that sends and receives).
    REQUIRE(orchmllm::detail::scratch_needs(
                route::build(other, all_bytes, topo, 1, schedule::direct), false)[0] > 0);
    expect_collective_failure(
        d, rpn, plan, rows,
        [&](communicator& comm) {
          const auto mine = payload_of(comm.rank());
          const route r =
              orchmllm::build_route(comm, other, bytes_of(mine), {.sched = schedule::direct});
          orchmllm::test::failing_mover mover;
          mover.fail = comm.rank() == 1;
          orchmllm::test::execute_untouched(comm, r, mine.data.data(), mover);
        },
        {"rank 1 cannot take part", "could not allocate its scratch buffers"});
    // Rank 2 cannot allocate the receive buffer of a dispatch (items of 4 KiB rows, so the
    // buffer is far larger than anything else dispatch allocates).
    const auto want = expected_at(plan, rows, 4096, 2);
    REQUIRE(want.data.size() >= 4096);
    expect_collective_failure(
        d, rpn, plan, rows,
        [&](communicator& comm) {
          const auto mine = make_payload(comm.rank(), rows_of_rank(rows, off, comm.rank()), 4096);
          ragged_payload out;
          {
            const orchmllm::test::failing_allocations guard(comm.rank() == 2 ? want.data.size()
                                                                             : 0);
            orchmllm::dispatch(comm, plan, mine, out);
          }
        },
        {"rank 2 cannot take part", "could not allocate its receive buffer",
         std::to_string(want.data.size()) + " bytes"});
  }
}

TEST_CASE("routes: the step's agreement and verified dispatches fail together, no hang") {
  const auto c = fault_case::make();
  const rank_t d = fault_case::d;
  const auto& rows = c.rows;
  const auto& plan = c.plan;
  const auto& other = c.other;
  const auto off = plan.src_offsets();
  constexpr std::int64_t row_bytes = 4;
  vec bytes(rows.size());
  for (std::size_t g = 0; g < rows.size(); ++g) bytes[g] = rows[g] * row_bytes;
  for (const rank_t rpn : {0, 2}) {
    INFO("ranks_per_node = ", rpn);
    const auto topo = topology::uniform(d, rpn);
    auto routes_of = [&](rank_t me, const rearrangement& p) {
      return std::vector<route>{route::build(p, bytes, topo, me),
                                route::build(p.inverse(), orchmllm::apply(p, bytes), topo, me)};
    };
    // Rank 2 kept a route of an earlier plan.
    expect_collective_failure(d, rpn, plan, rows,
                              [&](communicator& comm) {
                                const auto routes =
                                    routes_of(comm.rank(), comm.rank() == 2 ? other : plan);
                                orchmllm::agree_on_routes(comm, std::span<const route>(routes));
                              },
                              {"routes of different exchanges", "rank 2's has"});
    // Rank 3 holds the routes built for rank 0.
    expect_collective_failure(d, rpn, plan, rows,
                              [&](communicator& comm) {
                                const auto routes =
                                    routes_of(comm.rank() == 3 ? 0 : comm.rank(), plan);
                                orchmllm::agree_on_routes(comm, std::span<const route>(routes));
                              },
                              {"rank 3 cannot take part", "its route was built for rank 0 of 4"});
    // Rank 1's mover cannot reserve the scratch buffers of the shuffled plan.
    expect_collective_failure(
        d, rpn, plan, rows,
        [&](communicator& comm) {
          const auto routes = routes_of(comm.rank(), other);
          orchmllm::test::failing_mover mover;
          mover.fail = comm.rank() == 1;
          orchmllm::agree_on_routes(comm, std::span<const route>(routes), mover);
        },
        {"rank 1 cannot take part", "could not allocate its scratch buffers"});
    // verify: rank 1's buffers do not have its route's sizes.
    expect_collective_failure(
        d, rpn, plan, rows,
        [&](communicator& comm) {
          const auto r = route::build(plan, bytes, topo, comm.rank());
          std::vector<std::byte> in(static_cast<std::size_t>(r.input_bytes()) +
                                    (comm.rank() == 1 ? 1 : 0));
          std::vector<std::byte> out(static_cast<std::size_t>(r.output_bytes()));
          orchmllm::host_mover mover;
          orchmllm::dispatch(comm, r, std::span<const std::byte>(in), std::span<std::byte>(out),
                             mover, {.verify = true});
        },
        {"rank 1 cannot take part", "its buffers hold"});
    // verify: rank 0's payload has another row width than the route was built for.
    expect_collective_failure(
        d, rpn, plan, rows,
        [&](communicator& comm) {
          const auto r = route::build(plan, bytes, topo, comm.rank());
          auto mine = make_payload(comm.rank(), rows_of_rank(rows, off, comm.rank()), row_bytes);
          if (comm.rank() == 0) {  // the same bytes as rows of 3 bytes: not whole rows
            mine.row_bytes = 3;
            mine.rows.assign(mine.rows.size(), 0);
            if (!mine.rows.empty()) mine.rows[0] = static_cast<std::int64_t>(mine.data.size()) / 3;
            mine.data.resize(static_cast<std::size_t>(mine.total_rows() * 3));
          }
          (void)orchmllm::dispatch(comm, r, mine, {.verify = true});
        },
        {"rank 0 cannot take part", "its payload is invalid or holds"});
    // verify: rank 3's payload has the route's bytes in rows of another width.
    expect_collective_failure(
        d, rpn, plan, rows,
        [&](communicator& comm) {
          const auto r = route::build(plan, bytes, topo, comm.rank());
          auto mine = make_payload(comm.rank(), rows_of_rank(rows, off, comm.rank()), row_bytes);
          if (comm.rank() == 3) {  // its 52 bytes as 4 rows of 13: no received item divides
            mine.row_bytes = 13;
            mine.rows.assign(1, static_cast<std::int64_t>(mine.data.size()) / 13);
            REQUIRE(mine.rows[0] * 13 == static_cast<std::int64_t>(mine.data.size()));
          }
          (void)orchmllm::dispatch(comm, r, mine, {.verify = true});
        },
        {"rank 3 cannot take part", "row width of 13 bytes"});
  }
}

TEST_CASE("dispatch along a route without verify: a local fault raises on its rank") {
  // Every rank passes buffers of the wrong size, so every rank raises before its all-to-all
  // (a fault on some ranks only would leave the others waiting: that is what verify is for).
  const rank_t d = 3;
  const auto layout = orchmllm::batch_layout::from_ranks(std::vector<vec>{{4, 1}, {2}, {5}});
  const auto plan = orchmllm::balance(layout, orchmllm::linear_cost{}, orchmllm::packed).plan;
  vec bytes{4, 1, 2, 5};
  const auto topo = topology::uniform(d, 0);
  struct slot_t {
    std::string error;
  };
  const auto res = run_group<slot_t>(d, 0, [&](communicator& comm, slot_t&) {
    const auto r = route::build(plan, bytes, topo, comm.rank());
    std::vector<std::byte> in(static_cast<std::size_t>(r.input_bytes()) + 1);
    std::vector<std::byte> out(static_cast<std::size_t>(r.output_bytes()));
    orchmllm::host_mover mover;
    orchmllm::dispatch(comm, r, std::span<const std::byte>(in), std::span<std::byte>(out), mover);
  });
  for (rank_t r = 0; r < d; ++r) {
    const auto& e = res[static_cast<std::size_t>(r)].error;
    INFO(e);
    CHECK(e.rfind("communication_error: ", 0) == 0);
    CHECK(e.find("rank " + std::to_string(r) + " cannot take part") != std::string::npos);
    CHECK(e.find("unchecked dispatch") != std::string::npos);
  }
}
