// Tests for include/orchmllm/comm/dispatch.hpp on the in-process backend (comm/local.hpp).
//
// Every rank's payload holds content derived from (source rank, slot, byte of the item, which
// encodes the row), so after `dispatch` each rank must hold exactly its planned items in
// destination slot order, intact, and after `combine` exactly what it started with. Covered:
// 1..16 ranks, ranks_per_node 0/2/3/4, plans from the balancer and random (shuffled) plans,
// zero-row items, empty ranks, row widths 1 and 24, all schedules (identical results), a route
// reused for two tensors with `build_route` + `execute`, dispatch_report against plan_traffic
// and route::build, and the agreement check: ranks that disagree on the plan, the row width,
// the schedule or the item count, or hold an invalid payload, all get `communication_error`
// and the group stays usable.
//
// doctest macros are not thread-safe: rank functions only record results (one slot per rank)
// and every CHECK runs on the main thread after `run` returns.

#include "orchmllm/comm/dispatch.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/local.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/counting_communicator.hpp"
#include "support/failing_allocation.hpp"
#include "support/faults.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::communication_error;
using orchmllm::dispatch_options;
using orchmllm::dispatch_report;
using orchmllm::invalid_argument_error;
using orchmllm::ragged_payload;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::schedule;
using orchmllm::topology;
using orchmllm::traffic_stats;
using orchmllm::local::communicator;
using orchmllm::test::content_byte;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;
using ranks = std::vector<rank_t>;
using namespace std::chrono_literals;

constexpr schedule all_schedules[] = {schedule::direct, schedule::node_wise, schedule::automatic};

// Rank `r`'s payload: rows[j] rows of `row_bytes` bytes for slot j; byte b of item j is
// content_byte(r + salt, j, b).
ragged_payload make_payload(rank_t r, const vec& rows, std::int64_t row_bytes,
                            std::int64_t salt = 0) {
  ragged_payload p;
  p.rows = rows;
  p.row_bytes = row_bytes;
  for (std::size_t j = 0; j < rows.size(); ++j)
    for (std::int64_t b = 0; b < rows[j] * row_bytes; ++b)
      p.data.push_back(content_byte(r + salt, static_cast<std::int64_t>(j), b));
  return p;
}

rank_t owner(std::span<const std::int64_t> off, std::int64_t g) {
  rank_t r = 0;
  while (off[static_cast<std::size_t>(r) + 1] <= g) ++r;
  return r;
}

// What rank t must hold after dispatch: its destination items in slot order, each with the
// rows and content of its source (rank, slot). `rows` per source item in global-id order.
ragged_payload expected_at(const rearrangement& plan, const vec& rows, std::int64_t row_bytes,
                           rank_t t, std::int64_t salt = 0) {
  ragged_payload p;
  p.row_bytes = row_bytes;
  const auto off = plan.src_offsets();
  const auto doff = plan.dst_offsets();
  for (auto h = doff[static_cast<std::size_t>(t)]; h < doff[static_cast<std::size_t>(t) + 1]; ++h) {
    const auto g = plan.source_of(h);
    const rank_t s = owner(off, g);
    const auto slot = g - off[static_cast<std::size_t>(s)];
    p.rows.push_back(rows[static_cast<std::size_t>(g)]);
    for (std::int64_t b = 0; b < rows[static_cast<std::size_t>(g)] * row_bytes; ++b)
      p.data.push_back(content_byte(s + salt, slot, b));
  }
  return p;
}

vec rows_of_rank(const vec& rows, std::span<const std::int64_t> off, rank_t r) {
  return vec(rows.begin() + off[static_cast<std::size_t>(r)],
             rows.begin() + off[static_cast<std::size_t>(r) + 1]);
}

bool same_payload(const ragged_payload& a, const ragged_payload& b) {
  return a.rows == b.rows && a.row_bytes == b.row_bytes && a.data == b.data;
}

// Runs body(comm, slot) on d ranks (nodes of rpn ranks) with a timeout, so a hang fails the
// test instead of blocking it. An exception escaping a rank is recorded in slot.error as
// "<kind>: <message>", where kind is communication_error, invalid_argument_error or other.
template <class Slot, class F>
std::vector<Slot> run_group(rank_t d, rank_t rpn, F&& body) {
  std::vector<Slot> out(static_cast<std::size_t>(d));
  orchmllm::local::run(d,
                       [&](communicator& comm) {
                         auto& slot = out[static_cast<std::size_t>(comm.rank())];
                         try {
                           body(comm, slot);
                         } catch (const communication_error& e) {
                           slot.error = std::string("communication_error: ") + e.what();
                         } catch (const invalid_argument_error& e) {
                           slot.error = std::string("invalid_argument_error: ") + e.what();
                         } catch (const std::exception& e) {
                           slot.error = std::string("other: ") + e.what();
                         }
                       },
                       {.ranks_per_node = rpn, .timeout = 60s});
  return out;
}

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

// Random lengths on d ranks: empty ranks and zero-length items included.
std::vector<vec> random_lengths(std::mt19937_64& rng, rank_t d, std::int64_t max_items) {
  std::vector<vec> out(static_cast<std::size_t>(d));
  for (auto& r : out) {
    const auto n = uniform(rng, 0, 4) == 0 ? 0 : uniform(rng, 0, max_items);
    for (std::int64_t i = 0; i < n; ++i)
      r.push_back(uniform(rng, 0, 5) == 0 ? 0 : uniform(rng, 1, 12));
  }
  return out;
}

vec flatten(const std::vector<vec>& v) {
  vec out;
  for (const auto& r : v) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// A random case of the route tests: min_d..8 ranks in nodes of rpn (0..3; 0: one node), up to 6
// items per rank (empty ranks and zero-row items included), a shuffled random plan.
struct random_case {
  rank_t d = 0, rpn = 0;
  vec rows;  // per item, global id order
  rearrangement plan;

  static random_case make(std::mt19937_64& rng, rank_t min_d) {
    random_case c;
    c.d = static_cast<rank_t>(uniform(rng, min_d, 8));
    c.rpn = static_cast<rank_t>(uniform(rng, 0, 3));
    const auto lengths = random_lengths(rng, c.d, 6);
    const auto layout = orchmllm::batch_layout::from_ranks(lengths);
    c.plan = orchmllm::test::random_rearrangement(rng, layout.offsets(), c.d, true, 20);
    c.rows = flatten(lengths);
    return c;
  }
};

// The small case of the fault tests: 4 ranks, a balanced plan and another plan of the same
// items (a stale one, for the tests).
struct fault_case {
  static constexpr rank_t d = 4;
  vec rows;
  rearrangement plan, other;

  static fault_case make() {
    const auto lengths = std::vector<vec>{{3, 0, 5}, {2}, {}, {7, 1, 1, 4}};
    const auto layout = orchmllm::batch_layout::from_ranks(lengths);
    fault_case c{flatten(lengths),
                 orchmllm::balance(layout, orchmllm::linear_cost{}, orchmllm::packed).plan, {}};
    std::mt19937_64 rng(5);
    c.other = orchmllm::test::random_rearrangement(rng, c.plan.src_offsets(), d, true);
    REQUIRE(orchmllm::fingerprint(c.other) != orchmllm::fingerprint(c.plan));
    return c;
  }
};

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

namespace {

struct agreement_slot {
  std::string error;  // the failing call's outcome
  std::string after;  // outcome of a correct dispatch afterwards ("" = ok)
  bool after_intact = false;
};

// Runs `bad(comm)` (expected to fail collectively), then a correct dispatch of `plan` on every
// rank, and checks: every rank got communication_error containing every needle, and the group
// was still usable afterwards (the correct dispatch succeeded with intact content).
template <class Bad>
void expect_collective_failure(rank_t d, rank_t rpn, const rearrangement& plan, const vec& rows,
                               Bad&& bad, const std::vector<std::string>& needles) {
  const auto off = plan.src_offsets();
  const auto res = run_group<agreement_slot>(d, rpn, [&](communicator& comm, agreement_slot& slot) {
    try {
      bad(comm);
      slot.error = "ok";
    } catch (const communication_error& e) {
      slot.error = std::string("communication_error: ") + e.what();
    } catch (const std::exception& e) {
      slot.error = std::string("other: ") + e.what();
    }
    try {
      const auto mine = make_payload(comm.rank(), rows_of_rank(rows, off, comm.rank()), 4);
      const auto moved = orchmllm::dispatch(comm, plan, mine);
      slot.after_intact = same_payload(moved, expected_at(plan, rows, 4, comm.rank()));
    } catch (const std::exception& e) {
      slot.after = e.what();
    }
  });
  for (rank_t r = 0; r < d; ++r) {
    const auto& slot = res[static_cast<std::size_t>(r)];
    INFO("rank ", r, ": ", slot.error, "; afterwards: ", slot.after);
    CHECK(slot.error.rfind("communication_error: ", 0) == 0);
    for (const auto& n : needles) {
      INFO("expected to contain: ", n);
      CHECK(slot.error.find(n) != std::string::npos);
    }
    CHECK(slot.after.empty());
    CHECK(slot.after_intact);
  }
  // Every rank reports the same verdict (the text before "(seen on", if a backend adds it).
  for (rank_t r = 1; r < d; ++r) CHECK(res[static_cast<std::size_t>(r)].error == res[0].error);
}

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

TEST_CASE("execute: a stale route, a route of another rank or a failed allocation on one rank "
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
    expect_collective_failure(
        d, rpn, plan, rows,
        [&](communicator& comm) {
          const auto mine = payload_of(comm.rank());
          const route r = route::build(plan, all_bytes, topo, comm.rank() == 3 ? 0 : comm.rank());
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
          const route r = orchmllm::build_route(comm, other, bytes_of(mine),
                                                {.sched = schedule::direct});
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

namespace {

// A local communicator that counts its collective calls, and a mover that records every
// scratch request with the count at that moment: `execute` must reserve all scratch before
// its agreement (a collective) and never grow a slot afterwards.
using counting_comm = orchmllm::test::counting_communicator<communicator>;
static_assert(orchmllm::communicator<counting_comm>);

struct recording_mover {
  const counting_comm& comm;
  orchmllm::host_mover inner;
  std::vector<std::array<std::int64_t, 3>> requests;  // slot, bytes, collective calls so far
  std::byte* scratch(int slot, std::int64_t bytes) {
    requests.push_back({slot, bytes, comm.total()});
    return inner.scratch(slot, bytes);
  }
  void gather(const std::byte* in, std::byte* out, const orchmllm::detail::segment_list& s) {
    inner.gather(in, out, s);
  }
};

}  // namespace

TEST_CASE("execute: every scratch buffer is reserved before the exchange starts") {
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 12; ++trial) {
    const auto c = random_case::make(rng, 2);
    const rank_t d = c.d, rpn = c.rpn;
    const auto& plan = c.plan;
    const auto& rows = c.rows;
    const auto off = plan.src_offsets();
    for (const auto s : all_schedules) {
      INFO("trial ", trial, ", d = ", d, ", rpn = ", rpn, ", ", std::string(to_string(s)));
      struct slot_t {
        std::string error;
        std::vector<std::array<std::int64_t, 3>> requests;
        std::int64_t calls_before = 0;
        bool intact = false;
      };
      const auto res = run_group<slot_t>(d, rpn, [&](communicator& comm, slot_t& slot) {
        const auto mine = make_payload(comm.rank(), rows_of_rank(rows, off, comm.rank()), 3);
        vec b;
        for (std::size_t j = 0; j < mine.rows.size(); ++j) b.push_back(mine.item_bytes(j));
        const route r = orchmllm::build_route(comm, plan, b, {.sched = s});
        counting_comm counted{comm};
        recording_mover mover{counted, {}, {}};
        std::vector<std::byte> out(static_cast<std::size_t>(r.output_bytes()));
        orchmllm::execute(counted, r, mine.data.data(), out.data(), mover);
        slot.requests = mover.requests;
        slot.intact = out == expected_at(plan, rows, 3, comm.rank()).data;
      });
      for (const auto& slot : res) {
        REQUIRE(slot.error.empty());
        CHECK(slot.intact);
        std::int64_t reserved[2] = {0, 0};
        for (const auto& q : slot.requests) {
          if (q[2] == 0) {  // before the agreement
            reserved[q[0]] = std::max(reserved[q[0]], q[1]);
          } else {
            INFO("slot ", q[0], ": ", q[1], " bytes after the agreement, ", reserved[q[0]],
                 " reserved");
            CHECK(q[1] <= reserved[q[0]]);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dispatch along prebuilt routes: one agreement per step, then only the hops' all-to-alls.

TEST_CASE("dispatch along a prebuilt route: one all-to-all(v) per hop and nothing else") {
  std::mt19937_64 rng(4242);
  int hops_seen[4] = {0, 0, 0, 0};
  for (int trial = 0; trial < 16; ++trial) {
    const auto c = random_case::make(rng, 1);
    const rank_t d = c.d, rpn = c.rpn;
    const auto& plan = c.plan;
    const auto& rows = c.rows;
    const auto off = plan.src_offsets();
    const std::int64_t row_bytes = uniform(rng, 1, 9);
    vec bytes(rows.size());
    for (std::size_t g = 0; g < rows.size(); ++g) bytes[g] = rows[g] * row_bytes;
    const auto back_bytes = orchmllm::apply(plan, bytes);
    const auto inverse = plan.inverse();
    const auto topo = topology::uniform(d, rpn);  // the local backend's nodes
    for (const auto s : all_schedules) {
      INFO("trial ", trial, ", d = ", d, ", rpn = ", rpn, ", ", std::string(to_string(s)));
      struct slot_t {
        std::string error;
        std::int64_t agreement_calls = -1;
        std::int64_t hops = -1;
        std::int64_t forward_calls = -1, forward_all_to_allvs = -1;
        std::int64_t back_calls = -1, verified_calls = -1;
        bool forward_intact = false, back_intact = false, span_intact = false;
        bool scratch_reserved = true;
      };
      const auto res = run_group<slot_t>(d, rpn, [&](communicator& comm, slot_t& slot) {
        const auto me = comm.rank();
        const auto mine = make_payload(me, rows_of_rank(rows, off, me), row_bytes);
        // Built from shared data, no communication; one agreement for both routes.
        const std::vector<route> routes{route::build(plan, bytes, topo, me, s),
                                        route::build(inverse, back_bytes, topo, me, s)};
        counting_comm counted{comm};
        recording_mover mover{counted, {}, {}};
        orchmllm::agree_on_routes(counted, std::span<const route>(routes), mover);
        slot.agreement_calls = counted.total();
        const auto reserved_at = mover.requests.size();

        counted.reset();
        std::vector<std::byte> out(static_cast<std::size_t>(routes[0].output_bytes()));
        orchmllm::dispatch(counted, routes[0], std::span<const std::byte>(mine.data),
                           std::span<std::byte>(out), mover);
        slot.hops = static_cast<std::int64_t>(routes[0].hops().size());
        slot.forward_calls = counted.total();
        slot.forward_all_to_allvs = counted.all_to_allvs;
        const auto want = expected_at(plan, rows, row_bytes, me);
        slot.span_intact = out == want.data;
        // No scratch request after the agreement asks for more than it reserved.
        std::int64_t reserved[2] = {0, 0};
        for (std::size_t i = 0; i < mover.requests.size(); ++i) {
          const auto& q = mover.requests[i];
          if (i < reserved_at)
            reserved[q[0]] = std::max(reserved[q[0]], q[1]);
          else if (q[1] > reserved[q[0]])
            slot.scratch_reserved = false;
        }

        // Without a mover: the call's own host mover (host memory), the same bytes.
        std::vector<std::byte> out2(out.size());
        orchmllm::dispatch(comm, routes[0], std::span<const std::byte>(mine.data),
                           std::span<std::byte>(out2));
        slot.span_intact = slot.span_intact && out2 == want.data;

        // The host payload overload: rows from the route, storage reused, back again.
        counted.reset();
        const auto moved = orchmllm::dispatch(counted, routes[0], mine);
        slot.forward_intact = same_payload(moved, want);
        const auto back = orchmllm::dispatch(counted, routes[1], moved);
        slot.back_calls = counted.total();
        slot.back_intact = same_payload(back, mine);
        // verify: the per-transfer agreement back on, one small collective more.
        counted.reset();
        (void)orchmllm::dispatch(counted, routes[0], mine, {.verify = true});
        slot.verified_calls = counted.total();
      });
      for (const auto& slot : res) {
        REQUIRE(slot.error.empty());
        CHECK(slot.agreement_calls == 1);
        CHECK(slot.forward_calls == slot.hops);
        CHECK(slot.forward_all_to_allvs == slot.hops);
        CHECK(slot.verified_calls == slot.hops + 1);
        CHECK(slot.back_calls >= 0);
        CHECK(slot.span_intact);
        CHECK(slot.forward_intact);
        CHECK(slot.back_intact);
        CHECK(slot.scratch_reserved);
        ++hops_seen[std::clamp<std::int64_t>(slot.hops, 0, 3)];
      }
    }
  }
  // The trials cover routes of 0, 1 and 3 hops.
  CHECK(hops_seen[0] > 0);
  CHECK(hops_seen[1] > 0);
  CHECK(hops_seen[3] > 0);
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
    expect_collective_failure(
        d, rpn, plan, rows,
        [&](communicator& comm) {
          const auto routes = routes_of(comm.rank(), comm.rank() == 2 ? other : plan);
          orchmllm::agree_on_routes(comm, std::span<const route>(routes));
        },
        {"routes of different exchanges", "rank 2's has"});
    // Rank 3 holds the routes built for rank 0.
    expect_collective_failure(
        d, rpn, plan, rows,
        [&](communicator& comm) {
          const auto routes = routes_of(comm.rank() == 3 ? 0 : comm.rank(), plan);
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
