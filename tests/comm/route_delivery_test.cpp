// Tests for include/orchmllm/comm/route.hpp without a communicator: every rank's route of a plan,
// run by the emulator of support/route_fixtures.hpp, delivers every item exactly once.
//
// Covered: random canonical and shuffled plans, byte sizes with zeros, uniform topologies with
// G in {0, 1, 2, 3, 4, 8} and random uneven/non-consecutive node maps, all three schedules
// (identical outputs), identity plans (no hops), byte accounting (sent() vs plan_traffic,
// inter-node bytes schedule-independent), the automatic choice on random plans, the fingerprint
// of one exchange, 64-bit counts above 2^31 and 2^32 (built, not executed), and plan_traffic on
// a hand example.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/route_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::placement;
using orchmllm::plan_traffic;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::schedule;
using orchmllm::topology;
using orchmllm::traffic_stats;
using orchmllm::test::uniform;
using namespace orchmllm::test::route_fixtures;  // support/route_fixtures.hpp

}  // namespace

TEST_CASE("route: random plans deliver every item exactly once under every schedule") {
  std::mt19937_64 rng(31337);
  int node_wise_chosen = 0, multi_hop = 0, pruned = 0, ended_early = 0;
  for (int it = 0; it < 400; ++it) {
    const auto c = make_random_case(rng, it);
    INFO(c.what);
    const auto direct = emulate(c.plan, c.bytes, c.topo, schedule::direct);
    require_clean(direct);
    const auto nw = emulate(c.plan, c.bytes, c.topo, schedule::node_wise);
    require_clean(nw);
    const auto aut = emulate(c.plan, c.bytes, c.topo, schedule::automatic);
    require_clean(aut);
    CHECK(direct.outputs == direct.expected);
    CHECK(nw.outputs == direct.outputs);
    CHECK(aut.outputs == direct.outputs);
    CHECK(direct.routes[0].hops().size() <= 1);
    CHECK(nw.routes[0].hops().size() <= 3);
    if (nw.routes[0].hops().size() > 1) ++multi_hop;
    // Wire order: blocks by source rank, items by destination id. For a canonical plan that is
    // slot order, so the direct route receives straight into the output on every rank.
    if (c.canonical && !direct.routes[0].hops().empty())
      for (const auto& r : direct.routes) CHECK(r.unpack_identity());

    // Byte accounting: direct's sent() is plan_traffic; node-wise's sent() matches what its hops
    // carry; inter-node bytes do not depend on the schedule.
    const auto planned = plan_traffic(c.plan, c.bytes, c.topo);
    const auto d = static_cast<std::size_t>(c.topo.num_ranks());
    const auto nw_carried = traffic_from_matrices(nw, c.topo);
    const auto direct_carried = traffic_from_matrices(direct, c.topo);
    for (std::size_t r = 0; r < d; ++r) {
      CHECK(direct.routes[r].sent() == planned[r]);
      CHECK(direct.routes[r].sent() == direct_carried[r]);
      CHECK(nw.routes[r].sent() == nw_carried[r]);
    }
    CHECK(sum(planned).inter_node_bytes == [&] {
      std::int64_t t = 0;
      for (const auto& r : nw.routes) t += r.sent().inter_node_bytes;
      return t;
    }());
    // Forwarding adds intra-node bytes, never removes any.
    CHECK(sum(nw_carried).intra_node_bytes >= sum(planned).intra_node_bytes);
    check_node_wise_structure(nw, c.plan, c.bytes, c.topo);

    // The automatic choice: both predictions equal the single-schedule routes', and the faster
    // one is used (ties: direct).
    const auto& a = aut.routes[0];
    const double pd = direct.routes[0].predicted_seconds();
    const double pn = nw.routes[0].predicted_seconds();
    CHECK(pd == doctest::Approx(model_seconds(direct, c.topo)).epsilon(1e-12));
    CHECK(pn == doctest::Approx(model_seconds(nw, c.topo)).epsilon(1e-12));
    CHECK(a.predicted_seconds(schedule::direct) == pd);
    // Node-wise is skipped exactly when its lower bound reaches direct's time, and then it
    // would not have been chosen.
    const double bound = orchmllm::detail::node_wise_lower_bound(
        c.plan, c.bytes, c.topo, orchmllm::detail::source_ranks(c.plan));
    // The pass that ends at the first final term reaching direct's time: a lower bound too,
    // with the same decision.
    const auto reaches = [pd](double b) { return b * (1 - 1e-6) >= pd; };
    const double early = orchmllm::detail::node_wise_lower_bound(
        c.plan, c.bytes, c.topo, orchmllm::detail::source_ranks(c.plan), reaches);
    CHECK(early <= bound);
    CHECK(reaches(early) == reaches(bound));
    // A test that a smaller term passes too: the pass ends at a final term in [bound/2, bound].
    const double half = orchmllm::detail::node_wise_lower_bound(
        c.plan, c.bytes, c.topo, orchmllm::detail::source_ranks(c.plan),
        [bound](double b) { return b >= bound / 2; });
    CHECK(half <= bound);
    CHECK(half >= bound / 2);
    ended_early += half < bound ? 1 : 0;
    if (bound * (1 - 1e-6) >= pd) {
      ++pruned;
      CHECK(std::isnan(a.predicted_seconds(schedule::node_wise)));
      CHECK(pn >= pd);
    } else {
      CHECK(a.predicted_seconds(schedule::node_wise) == pn);
    }
    CHECK(a.used() == (pn < pd ? schedule::node_wise : schedule::direct));
    CHECK(a.predicted_seconds() == std::min(pd, pn));
    if (a.used() == schedule::node_wise) ++node_wise_chosen;
    for (std::size_t r = 0; r < d; ++r)
      CHECK(same_route(aut.routes[r],
                       a.used() == schedule::direct ? direct.routes[r] : nw.routes[r]));

    // Deterministic: building again gives the same route.
    const auto r0 = static_cast<rank_t>(uniform(rng, 0, static_cast<std::int64_t>(d) - 1));
    for (const auto s : all_schedules)
      CHECK(same_route(route::build(c.plan, c.bytes, c.topo, r0, s),
                       route::build(c.plan, c.bytes, c.topo, r0, s)));
  }
  // The sample exercises real forwarding and both automatic outcomes.
  INFO("node-wise forwarded in ", multi_hop, " of 400 plans; automatic chose it ", node_wise_chosen,
       " times and skipped it ", pruned, " times (", ended_early, " before the bound's end)");
  CHECK(multi_hop > 50);
  CHECK(node_wise_chosen > 0);
  CHECK(ended_early > 0);
}

TEST_CASE("route: every uniform G and uneven shapes with busy plans") {
  // Denser plans (every rank sends to many peers) on fixed shapes, including G in {0,1,2,3,4,8}
  // on 12 and 16 ranks and uneven nodes {3, 1, 4} and {5, 2}.
  std::mt19937_64 rng(7);
  std::vector<topology> shapes;
  for (const rank_t d : {12, 16})
    for (const rank_t g : {0, 1, 2, 3, 4, 8}) shapes.push_back(topology::uniform(d, g));
  shapes.push_back(topology(ranks{0, 0, 0, 1, 2, 2, 2, 2}));
  shapes.push_back(topology(ranks{0, 1, 0, 0, 1, 0, 0}));
  for (const auto& topo : shapes) {
    for (int it = 0; it < 6; ++it) {
      const rank_t d = topo.num_ranks();
      const auto n = uniform(rng, 2 * d, 8 * d);
      const auto off = orchmllm::test::random_offsets(rng, d, n);
      const auto plan = orchmllm::test::random_rearrangement(rng, off, d, it % 2 == 1, 20);
      vec bytes;
      for (std::int64_t g = 0; g < n; ++g)
        bytes.push_back(uniform(rng, 0, 2) == 0 ? 0 : uniform(rng, 1, 50));
      INFO("d = ", d, ", nodes ", topo.num_nodes(), ", iteration ", it);
      const auto direct = emulate(plan, bytes, topo, schedule::direct);
      const auto nw = emulate(plan, bytes, topo, schedule::node_wise);
      require_clean(direct);
      require_clean(nw);
      CHECK(direct.outputs == direct.expected);
      CHECK(nw.outputs == direct.outputs);
      check_node_wise_structure(nw, plan, bytes, topo);
      if (topo.num_nodes() == 1) {
        // One node: node-wise degenerates to direct (its inter- and scatter hops are idle).
        for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r) {
          CHECK(nw.routes[r].hops().size() == direct.routes[r].hops().size());
          CHECK(nw.routes[r].sent() == direct.routes[r].sent());
        }
        CHECK(nw.routes[0].predicted_seconds() == direct.routes[0].predicted_seconds());
        CHECK(route::build(plan, bytes, topo, 0, schedule::automatic).used() == schedule::direct);
      }
    }
  }
}

TEST_CASE("route: a plan that moves nothing has no hops") {
  std::mt19937_64 rng(3);
  for (int it = 0; it < 40; ++it) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 10));
    const auto n = uniform(rng, 0, 30);
    const auto off = orchmllm::test::random_offsets(rng, d, n);
    vec bytes;
    for (std::int64_t g = 0; g < n; ++g) bytes.push_back(uniform(rng, 0, 20));
    const auto topo = topology::uniform(d, static_cast<rank_t>(uniform(rng, 0, 3)));
    // The identity, and a permutation of slots inside every rank (no item changes rank).
    std::vector<placement> pl(static_cast<std::size_t>(n));
    for (rank_t r = 0; r < d; ++r) {
      const auto lo = off[static_cast<std::size_t>(r)], hi = off[static_cast<std::size_t>(r) + 1];
      vec slots(static_cast<std::size_t>(hi - lo));
      for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<std::int64_t>(i);
      std::shuffle(slots.begin(), slots.end(), rng);
      for (auto g = lo; g < hi; ++g)
        pl[static_cast<std::size_t>(g)] = {r, slots[static_cast<std::size_t>(g - lo)]};
    }
    for (const auto& plan :
         {rearrangement::identity(off), rearrangement::from_placements(off, pl, d)}) {
      for (const auto s : all_schedules) {
        const auto e = emulate(plan, bytes, topo, s);
        require_clean(e);
        CHECK(e.outputs == e.expected);
        for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r) {
          CHECK(e.routes[r].hops().empty());
          CHECK_FALSE(e.routes[r].unpack_identity());
          CHECK(e.routes[r].predicted_seconds() == 0.0);
          CHECK(e.routes[r].sent() == traffic_stats{e.routes[r].input_bytes(), 0, 0, 0, 0});
        }
      }
      // The identity's unpack is one copy of the whole input (a single merged segment).
      if (plan == rearrangement::identity(off))
        for (rank_t r = 0; r < d; ++r) {
          const auto rt = route::build(plan, bytes, topo, r, schedule::direct);
          CHECK(rt.unpack().is_identity(rt.input_bytes()));
        }
    }
  }
}

TEST_CASE("route: the fingerprint is shared by every rank's route of one exchange, and only") {
  std::mt19937_64 rng(31);
  for (int it = 0; it < 30; ++it) {
    const auto d = static_cast<rank_t>(uniform(rng, 2, 9));
    const auto n = uniform(rng, 1, 30);
    const auto off = orchmllm::test::random_offsets(rng, d, n);
    const auto plan = orchmllm::test::random_rearrangement(rng, off, d, true, 10);
    vec bytes;
    for (std::int64_t g = 0; g < n; ++g) bytes.push_back(uniform(rng, 0, 20));
    const auto topo = topology::uniform(d, 2);
    for (const auto s : {schedule::direct, schedule::node_wise}) {
      INFO("it ", it, ", ", std::string(to_string(s)));
      const auto fp = route::build(plan, bytes, topo, 0, s).fingerprint();
      CHECK(fp != 0);
      for (rank_t r = 1; r < d; ++r)
        CHECK(route::build(plan, bytes, topo, r, s).fingerprint() == fp);
      const auto r = static_cast<rank_t>(uniform(rng, 0, d - 1));
      // Another plan, other sizes, other nodes, another schedule: another fingerprint.
      auto other = orchmllm::test::random_rearrangement(rng, off, d, true, 10);
      if (other != plan) CHECK(route::build(other, bytes, topo, r, s).fingerprint() != fp);
      vec more = bytes;
      more[static_cast<std::size_t>(uniform(rng, 0, n - 1))] += 1;
      CHECK(route::build(plan, more, topo, r, s).fingerprint() != fp);
      if (d > 2)  // two ranks are one node either way
        CHECK(route::build(plan, bytes, topology::uniform(d, 3), r, s).fingerprint() != fp);
      const auto flip = s == schedule::direct ? schedule::node_wise : schedule::direct;
      CHECK(route::build(plan, bytes, topo, r, flip).fingerprint() != fp);
    }
  }
  CHECK(route().fingerprint() == 0);
}

TEST_CASE("route: counts above 2^31 and 2^32 bytes (built, not executed)") {
  const std::int64_t G31 = std::int64_t{1} << 31, G32 = std::int64_t{1} << 32;
  // rank 0 holds g0 (3·2^31 B → rank 1) and g1 (2^32 + 7 B, stays); rank 1 holds g2 (2^31 + 1 B
  // → rank 0) and g3 (5 B, stays).
  const auto plan = rearrangement::from_destinations(vec{0, 2, 4}, ranks{1, 0, 0, 1}, 2);
  const vec bytes{3 * G31, G32 + 7, G31 + 1, 5};
  for (const rank_t g : {0, 1}) {
    const auto topo = topology::uniform(2, g);
    for (const auto s : {schedule::direct, schedule::node_wise}) {
      INFO("G = ", g, ", ", std::string(orchmllm::to_string(s)));
      const auto e = emulate(plan, bytes, topo, s, /*move_data=*/false);
      require_clean(e);
      const auto& r0 = e.routes[0];
      const auto& r1 = e.routes[1];
      CHECK(r0.input_bytes() == 3 * G31 + G32 + 7);
      CHECK(r0.output_bytes() == G32 + 7 + G31 + 1);
      CHECK(r1.output_bytes() == 3 * G31 + 5);
      CHECK(vec(r0.output_item_bytes().begin(), r0.output_item_bytes().end()) ==
            vec{G32 + 7, G31 + 1});
      REQUIRE(r0.hops().size() == 1);  // 2 ranks: node-wise has nothing to regroup or scatter
      const auto& h = r0.hops()[0];
      CHECK(h.send_counts == vec{G32 + 7, 3 * G31});
      CHECK(h.send_displs == vec{0, G32 + 7});
      CHECK(h.recv_counts == vec{G32 + 7, G31 + 1});
      CHECK(h.recv_displs == vec{0, G32 + 7});
      // Pack: g1 (at 3·2^31 in the input) to the front, g0 behind it.
      CHECK(h.pack.src == vec{3 * G31, 0});
      CHECK(h.pack.dst == vec{0, G32 + 7});
      CHECK(h.pack.bytes == vec{G32 + 7, 3 * G31});
      CHECK(r0.unpack_identity());  // arrival order is slot order
      const auto expect_sent = g == 1 ? traffic_stats{G32 + 7, 0, 3 * G31, 0, 1}
                                      : traffic_stats{G32 + 7, 3 * G31, 0, 1, 0};
      CHECK(r0.sent() == expect_sent);
      CHECK(r1.hops()[0].send_counts == vec{G31 + 1, 5});
    }
  }
  // Four ranks on two nodes: node-wise splits a 3 × 2^32 node pair over two rails.
  const auto plan4 = rearrangement::from_destinations(vec{0, 3, 3, 3, 3}, ranks{2, 3, 2}, 4);
  const vec bytes4{G32, G32 + 1, G32 - 1};
  const auto topo4 = topology::uniform(4, 2);
  const auto e = emulate(plan4, bytes4, topo4, schedule::node_wise, false);
  require_clean(e);
  check_node_wise_structure(e, plan4, bytes4, topo4);
  std::int64_t inter = 0;
  for (const auto& r : e.routes) inter += r.sent().inter_node_bytes;
  CHECK(inter == 3 * G32);
  CHECK(e.routes[0].sent().inter_node_bytes + e.routes[1].sent().inter_node_bytes == 3 * G32);
  CHECK(e.routes[1].sent().inter_node_bytes > 0);  // the second rail carries its share
}

TEST_CASE("route: plan_traffic on a hand example") {
  // Nodes {0, 1} and {2, 3}. Items (source → destination, bytes):
  //   rank 0: g0 0→0 5 B, g1 0→1 7 B, g2 0→3 11 B, g3 0→1 2 B
  //   rank 1: g4 1→2 0 B (a zero-byte item sends no message)
  //   rank 2: g5 2→0 3 B, g6 2→0 4 B, g7 2→1 1 B, g8 2→2 9 B
  //   rank 3: nothing
  const auto plan =
      rearrangement::from_destinations(vec{0, 4, 5, 9, 9}, ranks{0, 1, 3, 1, 2, 0, 0, 1, 2}, 4);
  const vec bytes{5, 7, 11, 2, 0, 3, 4, 1, 9};
  const auto topo = topology::uniform(4, 2);
  const auto t = plan_traffic(plan, bytes, topo);
  REQUIRE(t.size() == 4);
  CHECK(t[0] == traffic_stats{5, 9, 11, 1, 1});
  CHECK(t[1] == traffic_stats{0, 0, 0, 0, 0});
  CHECK(t[2] == traffic_stats{9, 0, 8, 0, 2});
  CHECK(t[3] == traffic_stats{});
  CHECK(t[0].moved_bytes() == 20);
  CHECK(t[0].total_bytes() == 25);
  auto all = t[0];
  all += t[2];
  CHECK(all == traffic_stats{14, 9, 19, 1, 3});
  // Everything on one node: the inter-node bytes become intra-node ones.
  const auto one = plan_traffic(plan, bytes, topology::uniform(4, 0));
  CHECK(one[0] == traffic_stats{5, 20, 0, 2, 0});
  CHECK(one[2] == traffic_stats{9, 8, 0, 2, 0});
  // The direct route of every rank sends exactly this.
  for (rank_t r = 0; r < 4; ++r)
    CHECK(route::build(plan, bytes, topo, r, schedule::direct).sent() ==
          t[static_cast<std::size_t>(r)]);
}
