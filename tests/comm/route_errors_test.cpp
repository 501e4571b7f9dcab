// Tests for include/orchmllm/comm/route.hpp without a communicator: bad input (sizes, ranks,
// topologies, plans), item sizes whose total overflows 2^63 - 1 (an error on every rank), and
// schedule names.

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/route_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::plan_traffic;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::schedule;
using orchmllm::topology;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;
using namespace orchmllm::test::route_fixtures;  // support/route_fixtures.hpp

}  // namespace

TEST_CASE("route: bad input") {
  const auto plan = rearrangement::from_destinations(vec{0, 2, 4}, ranks{1, 0, 0, 1}, 2);
  const vec bytes{1, 2, 3, 4};
  const auto topo = topology::uniform(2, 1);
  expect_invalid(
      [&] {
        (void)route::build(plan, vec{1, 2, 3}, topo, 0);
      },
      {"3 item sizes for a plan of 4 items"});
  expect_invalid(
      [&] {
        (void)route::build(plan, vec{1, 2, -3, 4}, topo, 0);
      },
      {"item 2 has -3 bytes"});
  expect_invalid([&] { (void)route::build(plan, bytes, topo, 2); }, {"rank 2 outside [0, 2)"});
  expect_invalid([&] { (void)route::build(plan, bytes, topo, -1); }, {"rank -1 outside [0, 2)"});
  expect_invalid([&] { (void)route::build(plan, bytes, topology::uniform(3, 1), 0); },
                 {"topology has 3 ranks but the plan 2"});
  const auto wide = rearrangement::from_destinations(vec{0, 2, 4}, ranks{1, 0, 2, 1}, 3);
  expect_invalid([&] { (void)route::build(wide, bytes, topology::uniform(2, 1), 0); },
                 {"equal rank counts", "2 source and 3 destination"});
  expect_invalid([&] { (void)plan_traffic(plan, vec{1}, topo); }, {"1 item sizes"});
  expect_invalid(
      [&] {
        (void)plan_traffic(plan, vec{1, 2, 3, -4}, topo);
      },
      {"item 3 has -4 bytes"});
  expect_invalid([&] { (void)plan_traffic(plan, bytes, topology::uniform(5, 2)); },
                 {"topology has 5 ranks"});
  expect_invalid([&] { (void)plan_traffic(wide, bytes, topology::uniform(3, 1)); },
                 {"equal rank counts"});
}

TEST_CASE("route: item sizes whose total overflows 2^63 - 1 are an error on every rank") {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t e62 = std::int64_t{1} << 62;
  // 11 items of 2^62 bytes over 2 ranks: every rank's sum, and the total, used to wrap (a
  // negative split on one rank, a crash on another).
  const auto plan =
      rearrangement::from_destinations(vec{0, 5, 11}, ranks{1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}, 2);
  const vec huge(11, e62);
  for (const rank_t r : {0, 1}) {
    for (const auto s : {schedule::direct, schedule::node_wise, schedule::automatic}) {
      expect_invalid([&] { (void)route::build(plan, huge, topology::uniform(2, 1), r, s); },
                     {"the total of the item sizes at item 1: 4611686018427387904 + "
                      "4611686018427387904 exceeds 2^63 - 1 (int64 overflow)"});
    }
  }
  expect_invalid([&] { (void)plan_traffic(plan, huge, topology::uniform(2, 1)); },
                 {"item sizes at item 1", "overflow"});
  // One rank's items alone fit, the total does not: still refused (another rank's sums would
  // not fit).
  const auto two = rearrangement::from_destinations(vec{0, 1, 2}, ranks{1, 0}, 2);
  expect_invalid(
      [&] {
        (void)route::build(two, vec{max, 1}, topology::uniform(2, 1), 0);
      },
      {"at item 1", "9223372036854775807 + 1 exceeds 2^63 - 1 (int64 overflow)"});
  // A total of exactly 2^63 - 1 is built.
  const auto r = route::build(two, vec{max - 5, 5}, topology::uniform(2, 1), 0);
  CHECK(r.input_bytes() == max - 5);
  CHECK(r.output_bytes() == 5);
}

TEST_CASE("route: schedule names") {
  for (const auto s : all_schedules) CHECK(orchmllm::parse_schedule(orchmllm::to_string(s)) == s);
  CHECK(std::string(orchmllm::to_string(schedule::direct)) == "direct");
  CHECK(std::string(orchmllm::to_string(schedule::node_wise)) == "node-wise");
  CHECK(std::string(orchmllm::to_string(schedule::automatic)) == "auto");
  CHECK(orchmllm::parse_schedule("node_wise") == schedule::node_wise);
  CHECK(orchmllm::parse_schedule("automatic") == schedule::automatic);
  for (const char* bad : {"", "Direct", "nodewise", "auto ", "node-wise2"})
    expect_invalid([&] { (void)orchmllm::parse_schedule(bad); },
                   {"unknown schedule '" + std::string(bad) + "'", "direct, node-wise, auto"});
}
