// Tests for include/orchmllm/comm/dispatch.hpp on the in-process backend (comm/local.hpp):
// dispatch and combine along a plan.
//
// Every rank's payload holds content derived from (source rank, slot, byte of the item), so after
// `dispatch` each rank must hold exactly its planned items in destination slot order, intact, and
// after `combine` exactly what it started with. Covered: 1..16 ranks, ranks_per_node 0/2/3/4,
// plans from the balancer and random (shuffled) plans, zero-row items, empty ranks, row widths
// 0, 1 and 24, all schedules (identical results), a route reused for two tensors with
// `build_route` + `execute`, and dispatch_report against plan_traffic and route::build.
//
// doctest macros are not thread-safe: rank functions only record results (one slot per rank)
// and every CHECK runs on the main thread after `run` returns.

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
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
#include "support/test_support.hpp"

namespace {

using orchmllm::dispatch_options;
using orchmllm::dispatch_report;
using orchmllm::ragged_payload;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::schedule;
using orchmllm::topology;
using orchmllm::local::communicator;
using orchmllm::test::uniform;
using namespace orchmllm::test::dispatch_fixtures;  // support/dispatch_fixtures.hpp

struct moved_slot {
  std::string error;
  std::vector<ragged_payload> moved, back;
  std::vector<dispatch_report> report, back_report;
};

// Dispatches and combines `rows` (per source item, global-id order) along `plan` under every
// schedule on d ranks, and checks content, round trip, reports and schedule independence.
void check_round_trip(const rearrangement& plan, const vec& rows, std::int64_t row_bytes,
                      rank_t rpn, const std::string& what) {
  INFO(what);
  const rank_t d = plan.num_src_ranks();
  const auto off = plan.src_offsets();
  const auto res = run_group<moved_slot>(d, rpn, [&](communicator& comm, moved_slot& slot) {
    const auto mine = make_payload(comm.rank(), rows_of_rank(rows, off, comm.rank()), row_bytes);
    for (const auto s : all_schedules) {
      const dispatch_options opt{.sched = s};
      slot.report.emplace_back();
      slot.moved.push_back(orchmllm::dispatch(comm, plan, mine, opt, &slot.report.back()));
      slot.back_report.emplace_back();
      slot.back.push_back(
          orchmllm::combine(comm, plan, slot.moved.back(), opt, &slot.back_report.back()));
    }
  });
  // The topology the local backend reports: consecutive blocks of rpn ranks.
  const auto topo = topology::uniform(d, rpn);
  vec bytes(rows.size());
  for (std::size_t g = 0; g < rows.size(); ++g) bytes[g] = rows[g] * row_bytes;
  const auto planned = plan_traffic(plan, bytes, topo);
  const auto inverse = plan.inverse();
  const auto back_bytes = orchmllm::apply(plan, bytes);
  const auto planned_back = plan_traffic(inverse, back_bytes, topo);
  std::int64_t plan_inter = 0;
  for (const auto& t : planned) plan_inter += t.inter_node_bytes;
  std::vector<std::int64_t> inter(3, 0);
  for (rank_t r = 0; r < d; ++r) {
    const auto& slot = res[static_cast<std::size_t>(r)];
    INFO("rank ", r);
    REQUIRE(slot.error.empty());
    REQUIRE(slot.moved.size() == 3);
    const auto want = expected_at(plan, rows, row_bytes, r);
    const auto mine = make_payload(r, rows_of_rank(rows, off, r), row_bytes);
    for (std::size_t i = 0; i < 3; ++i) {
      const auto s = all_schedules[i];
      INFO("schedule ", std::string(orchmllm::to_string(s)));
      CHECK(same_payload(slot.moved[i], want));
      CHECK(same_payload(slot.back[i], mine));
      CHECK_NOTHROW(slot.moved[i].validate());
      // The report is what route::build gives for the same inputs.
      const auto rt = route::build(plan, bytes, topo, r, s);
      const auto& rep = slot.report[i];
      CHECK(rep.used == rt.used());
      CHECK(rep.sent == rt.sent());
      CHECK(rep.predicted_seconds == rt.predicted_seconds());
      CHECK(rep.input_bytes == static_cast<std::int64_t>(mine.data.size()));
      CHECK(rep.output_bytes == static_cast<std::int64_t>(want.data.size()));
      // Direct routes send exactly what plan_traffic says (forward and back may choose
      // differently under automatic).
      if (rep.used == schedule::direct) CHECK(rep.sent == planned[static_cast<std::size_t>(r)]);
      if (slot.back_report[i].used == schedule::direct)
        CHECK(slot.back_report[i].sent == planned_back[static_cast<std::size_t>(r)]);
      CHECK(slot.back_report[i].input_bytes == rep.output_bytes);
      CHECK(slot.back_report[i].output_bytes == rep.input_bytes);
      if (s != schedule::automatic) CHECK(rep.used == s);
      inter[i] += rep.sent.inter_node_bytes;
    }
  }
  // Inter-node bytes do not depend on the schedule.
  for (const auto t : inter) CHECK(t == plan_inter);
}

}  // namespace

TEST_CASE("dispatch: balanced and random plans, 1..16 ranks, every node shape and schedule") {
  std::mt19937_64 rng(2024);
  for (rank_t d = 1; d <= 16; ++d) {
    for (const rank_t rpn : {0, 2, 3, 4}) {
      const std::int64_t row_bytes = (d + rpn) % 2 == 0 ? 24 : 1;
      const auto lengths = random_lengths(rng, d, 6);
      const auto layout = orchmllm::batch_layout::from_ranks(lengths);
      const auto rows = flatten(lengths);  // one row per token: zero-length items have no rows
      const auto balanced =
          orchmllm::balance(layout, orchmllm::linear_cost{}, orchmllm::packed).plan;
      check_round_trip(
          balanced, rows, row_bytes, rpn,
          orchmllm::detail::concat("balanced: d = ", d, ", rpn = ", rpn,
                                   ", row_bytes = ", row_bytes, ", n = ", rows.size()));
      const auto random = orchmllm::test::random_rearrangement(rng, layout.offsets(), d, true, 30);
      check_round_trip(
          random, rows, 25 - row_bytes, rpn,
          orchmllm::detail::concat("random: d = ", d, ", rpn = ", rpn,
                                   ", row_bytes = ", 25 - row_bytes, ", n = ", rows.size()));
    }
  }
}

TEST_CASE("dispatch: edge cases (no items, only zero-row items, one rank holds everything)") {
  SUBCASE("no items anywhere") {
    const auto plan = rearrangement::identity(vec{0, 0, 0, 0});
    check_round_trip(plan, vec{}, 24, 2, "no items");
  }
  SUBCASE("only zero-row items") {
    const vec off{0, 3, 3, 5, 6};
    const auto plan = rearrangement::from_destinations(off, ranks{3, 3, 0, 1, 2, 1}, 4);
    check_round_trip(plan, vec(6, 0), 24, 2, "zero rows");
  }
  SUBCASE("one rank holds everything and spreads it; then gathers it back") {
    const vec off{0, 0, 0, 12, 0 + 12, 12, 12};
    ranks dst;
    for (int i = 0; i < 12; ++i) dst.push_back(static_cast<rank_t>(i % 6));
    const auto plan = rearrangement::from_destinations(off, dst, 6);
    vec rows;
    for (int i = 0; i < 12; ++i) rows.push_back(i % 4 == 0 ? 0 : i);
    check_round_trip(plan, rows, 1, 3, "scatter");
    check_round_trip(plan.inverse(), orchmllm::apply(plan, rows), 24, 3, "gather");
  }
  SUBCASE("zero-width rows") {
    const auto plan = rearrangement::from_destinations(vec{0, 2, 3}, ranks{1, 0, 0}, 2);
    check_round_trip(plan, vec{4, 5, 6}, 0, 0, "row_bytes 0");
  }
}

TEST_CASE("dispatch: build_route + execute move two tensors along one route") {
  std::mt19937_64 rng(11);
  for (const rank_t rpn : {0, 2, 3}) {
    const rank_t d = 7;
    const auto lengths = random_lengths(rng, d, 5);
    const auto layout = orchmllm::batch_layout::from_ranks(lengths);
    const auto plan = orchmllm::test::random_rearrangement(rng, layout.offsets(), d, true, 20);
    const auto rows = flatten(lengths);
    const auto off = plan.src_offsets();
    struct slot_t {
      std::string error;
      schedule used = schedule::automatic;
      std::vector<std::byte> a, b, back;
      std::int64_t output_bytes = -1;
    };
    for (const auto s : all_schedules) {
      INFO("rpn = ", rpn, ", schedule ", std::string(orchmllm::to_string(s)));
      const auto res = run_group<slot_t>(d, rpn, [&](communicator& comm, slot_t& slot) {
        const rank_t r = comm.rank();
        // Tensor A: rows of 24 bytes; tensor B: rows of 8 bytes, three times as many rows (the
        // same bytes per item, so the same route serves both).
        const auto a = make_payload(r, rows_of_rank(rows, off, r), 24);
        vec rows_b = rows_of_rank(rows, off, r);
        for (auto& x : rows_b) x *= 3;
        const auto b = make_payload(r, rows_b, 8, 1000);
        vec item_bytes;
        for (std::size_t j = 0; j < a.rows.size(); ++j) item_bytes.push_back(a.item_bytes(j));
        const route rt = orchmllm::build_route(comm, plan, item_bytes, {.sched = s});
        slot.used = rt.used();
        slot.output_bytes = rt.output_bytes();
        orchmllm::host_mover mover;
        slot.a.resize(static_cast<std::size_t>(rt.output_bytes()));
        slot.b.resize(static_cast<std::size_t>(rt.output_bytes()));
        orchmllm::execute(comm, rt, a.data.data(), slot.a.data(), mover);
        orchmllm::execute(comm, rt, b.data.data(), slot.b.data(), mover);
        // And back along the inverse route, with the sizes the forward route reports.
        const auto out_bytes = rt.output_item_bytes();
        const route back = orchmllm::build_route(comm, plan.inverse(), out_bytes, {.sched = s});
        slot.back.resize(static_cast<std::size_t>(back.output_bytes()));
        orchmllm::execute(comm, back, slot.b.data(), slot.back.data(), mover);
      });
      const rank_t used_by_0 = static_cast<rank_t>(res[0].used);
      for (rank_t r = 0; r < d; ++r) {
        const auto& slot = res[static_cast<std::size_t>(r)];
        INFO("rank ", r);
        REQUIRE(slot.error.empty());
        CHECK(static_cast<rank_t>(slot.used) == used_by_0);
        CHECK(slot.a == expected_at(plan, rows, 24, r).data);
        vec rows3 = rows;
        for (auto& x : rows3) x *= 3;
        CHECK(slot.b == expected_at(plan, rows3, 8, r, 1000).data);
        CHECK(slot.back == make_payload(
                               r,
                               [&] {
                                 vec v = rows_of_rank(rows, off, r);
                                 for (auto& x : v) x *= 3;
                                 return v;
                               }(),
                               8, 1000)
                               .data);
      }
    }
  }
}
