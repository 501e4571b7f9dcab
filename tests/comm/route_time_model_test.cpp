// Tests for include/orchmllm/comm/route.hpp without a communicator: the time model and the
// automatic choice of a schedule.
//
// Hand examples (latencies and bandwidths per rank and direction, zero-byte items, forwarding
// costs), automatic picks node-wise when latency-bound and direct on one node, NaN for a schedule
// that was not built, and the exact doubles of a reference (support/route_fixtures.hpp) on
// random plans.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/route_fixtures.hpp"

namespace {

using orchmllm::link_params;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::schedule;
using orchmllm::topology;
using orchmllm::traffic_stats;
using orchmllm::test::uniform;
using namespace orchmllm::test::route_fixtures;  // support/route_fixtures.hpp

}  // namespace

TEST_CASE("route: time model on hand examples") {
  link_params L;
  L.intra_bandwidth = 100;
  L.intra_latency = 1;
  L.inter_bandwidth = 10;
  L.inter_latency = 2;
  SUBCASE("one GPU per node: node-wise is direct, a tie goes to direct") {
    const auto topo = topology::uniform(2, 1, L);
    // rank 0 holds {50 B → rank 1}; rank 1 holds {20 B → rank 0, 30 B stays}.
    const auto plan = rearrangement::from_destinations(vec{0, 1, 3}, ranks{1, 0, 1}, 2);
    const vec bytes{50, 20, 30};
    // Slowest side: rank 0 sends 50/10 + 2 = 7 s (rank 1 receives the same); self copies are free.
    const auto a = route::build(plan, bytes, topo, 0, schedule::automatic);
    CHECK(a.predicted_seconds(schedule::direct) == 7.0);
    // Node-wise's lower bound is 7 s too: within the rounding margin, so both are built.
    CHECK(a.predicted_seconds(schedule::node_wise) == 7.0);
    CHECK(a.used() == schedule::direct);
  }
  SUBCASE("two GPUs per node: forwarding costs an intra-node hop") {
    const auto topo = topology::uniform(4, 2, L);
    // rank 1 sends 40 B to rank 2. Direct: 40/10 + 2 = 6 s. Node-wise: one item on 2 rails, its
    // byte midpoint is at 1/2, so rail 1: 1 → 3 (6 s), then 3 → 2 inside node 1 (0.4 + 1 s).
    const auto plan = rearrangement::from_destinations(vec{0, 0, 1, 1, 1}, ranks{2}, 4);
    const vec bytes{40};
    const auto a = route::build(plan, bytes, topo, 3, schedule::automatic);
    CHECK(a.predicted_seconds(schedule::direct) == doctest::Approx(6.0));
    CHECK(a.predicted_seconds(schedule::node_wise) == doctest::Approx(7.4));
    CHECK(a.used() == schedule::direct);
    const auto nw = emulate(plan, bytes, topo, schedule::node_wise);
    require_clean(nw);
    REQUIRE(nw.matrix.size() == 2);  // the regroup hop is idle (1 is its own rail)
    CHECK(nw.matrix[0][1 * 4 + 3] == 40);
    CHECK(nw.matrix[1][3 * 4 + 2] == 40);
    CHECK(nw.routes[3].sent() == traffic_stats{0, 40, 0, 1, 0});
    CHECK(nw.routes[1].sent() == traffic_stats{0, 0, 40, 0, 1});
  }
  SUBCASE("zero-byte items post no message and cost nothing") {
    const auto topo = topology::uniform(3, 1, L);
    // rank 0 sends a 0-byte item to rank 1 and a 10-byte item to rank 2.
    const auto plan = rearrangement::from_destinations(vec{0, 2, 2, 2}, ranks{1, 2}, 3);
    const auto r = route::build(plan, vec{0, 10}, topo, 0, schedule::direct);
    CHECK(r.predicted_seconds() == doctest::Approx(10.0 / 10 + 2));
    CHECK(r.sent() == traffic_stats{0, 0, 10, 0, 1});
    const auto z = route::build(plan, vec{0, 0}, topo, 0, schedule::direct);
    CHECK(z.predicted_seconds() == 0.0);
    CHECK(z.sent() == traffic_stats{});
  }
  SUBCASE("latencies and bandwidths add per rank and direction; the slowest rank sets the hop") {
    const auto topo = topology::uniform(3, 3, L);  // one node
    // rank 0 sends 100 B to rank 1 and 200 B to rank 2; rank 2 sends 50 B to rank 1.
    const auto plan = rearrangement::from_destinations(vec{0, 2, 2, 3}, ranks{1, 2, 1}, 3);
    const vec bytes{100, 200, 50};
    // rank 0 sends: 2 messages (2 s) + 300/100 = 5 s; rank 1 receives 2 + 150/100 = 3.5 s.
    const auto r = route::build(plan, bytes, topo, 1, schedule::direct);
    CHECK(r.predicted_seconds() == doctest::Approx(5.0));
  }
}

TEST_CASE("route: automatic picks node-wise when latency-bound, direct on one node") {
  // 4 nodes × 8 GPUs; every rank sends one 1-byte item to every rank (itself included).
  const rank_t d = 32;
  vec off{0};
  ranks dst;
  for (rank_t r = 0; r < d; ++r) {
    for (rank_t t = 0; t < d; ++t) dst.push_back(t);
    off.push_back(off.back() + d);
  }
  const auto plan = rearrangement::from_destinations(off, dst, d);
  const vec bytes(dst.size(), 1);
  link_params L;
  L.inter_latency = 1e-3;
  const auto multi = topology::uniform(d, 8, L);
  const auto a = route::build(plan, bytes, multi, 5, schedule::automatic);
  INFO("direct ", a.predicted_seconds(schedule::direct), " s, node-wise ",
       a.predicted_seconds(schedule::node_wise), " s");
  CHECK(a.used() == schedule::node_wise);
  // Direct: 24 remote peers per rank at 1 ms each; node-wise: 3 remote messages per rank.
  CHECK(a.predicted_seconds(schedule::direct) > 24e-3);
  CHECK(a.predicted_seconds(schedule::node_wise) < 4e-3);
  CHECK(a.sent().inter_node_messages == 3);
  const auto e = emulate(plan, bytes, multi, schedule::automatic);
  require_clean(e);
  CHECK(e.outputs == e.expected);

  const auto one = topology::uniform(d, 0, L);
  const auto b = route::build(plan, bytes, one, 5, schedule::automatic);
  CHECK(b.used() == schedule::direct);
  CHECK(b.predicted_seconds(schedule::direct) == b.predicted_seconds(schedule::node_wise));
}

TEST_CASE("route: predicted_seconds is NaN for a schedule that was not built") {
  const auto plan = rearrangement::from_destinations(vec{0, 2, 3}, ranks{1, 0, 0}, 2);
  const vec bytes{5, 6, 7};
  const auto topo = topology::uniform(2, 1);
  const auto d = route::build(plan, bytes, topo, 0, schedule::direct);
  CHECK(d.used() == schedule::direct);
  CHECK_FALSE(std::isnan(d.predicted_seconds()));
  CHECK_FALSE(std::isnan(d.predicted_seconds(schedule::direct)));
  CHECK(std::isnan(d.predicted_seconds(schedule::node_wise)));
  CHECK(d.predicted_seconds(schedule::automatic) == d.predicted_seconds());
  const auto n = route::build(plan, bytes, topo, 0, schedule::node_wise);
  CHECK(n.used() == schedule::node_wise);
  CHECK(std::isnan(n.predicted_seconds(schedule::direct)));
  CHECK_FALSE(std::isnan(n.predicted_seconds(schedule::node_wise)));
  CHECK(n.predicted_seconds() == n.predicted_seconds(schedule::node_wise));
  // Automatic builds both on one node (node-wise has no inter-node hop to bound it)...
  const auto a = route::build(plan, bytes, topology::uniform(2, 0), 0, schedule::automatic);
  CHECK_FALSE(std::isnan(a.predicted_seconds(schedule::direct)));
  CHECK_FALSE(std::isnan(a.predicted_seconds(schedule::node_wise)));
  CHECK(a.predicted_seconds() == a.predicted_seconds(a.used()));
  // ... and only direct when node-wise's lower bound reaches direct's time. 3 nodes × 2 GPUs:
  // rank 0 sends one item to node 1, rank 1 one to node 2. Each node pair carries one item,
  // so both take rail ⌊2/2⌋ = 1: rank 1 sends two inter-node messages in node-wise's middle
  // hop, direct's ranks one each.
  const auto spread = rearrangement::from_destinations(vec{0, 1, 2, 2, 2, 2, 2}, ranks{2, 4}, 6);
  const auto six = topology::uniform(6, 2);
  const auto b = route::build(spread, vec{100, 100}, six, 0, schedule::automatic);
  const auto bn = route::build(spread, vec{100, 100}, six, 0, schedule::node_wise);
  CHECK(b.used() == schedule::direct);
  CHECK(std::isnan(b.predicted_seconds(schedule::node_wise)));
  CHECK(bn.predicted_seconds() > 2 * b.predicted_seconds(schedule::direct));
  const route empty;
  CHECK(empty.num_ranks() == 0);
  CHECK(empty.hops().empty());
}

TEST_CASE("route: the time model gives the reference's exact doubles on random plans") {
  std::mt19937_64 rng(4711);
  for (int it = 0; it < 300; ++it) {
    const auto c = make_random_case(rng, it);
    INFO(c.what);
    const auto src = orchmllm::detail::source_ranks(c.plan);
    const auto direct = orchmllm::detail::direct_paths(c.plan, src);
    const auto nw = orchmllm::detail::node_wise_paths(c.plan, c.bytes, c.topo, src);
    CHECK(orchmllm::detail::predict_seconds(direct, c.bytes, c.topo) ==
          reference_prediction(direct, c.bytes, c.topo));
    CHECK(orchmllm::detail::predict_seconds(nw, c.bytes, c.topo) ==
          reference_prediction(nw, c.bytes, c.topo));
  }
}
