// Tests for include/orchmllm/comm/route.hpp without a communicator: the node-wise schedule.
//
// Node-wise balances NIC bytes when one GPU per node holds all remote traffic; its paths, the
// time model and every hop's group figures equal references written the obvious way
// (support/route_fixtures.hpp) on larger groups, contiguous and scattered node maps; the rails
// bound of automatic's node-wise lower bound holds for every item order.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/route_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::schedule;
using orchmllm::topology;
using orchmllm::test::uniform;
using namespace orchmllm::test::route_fixtures;  // support/route_fixtures.hpp

}  // namespace

TEST_CASE("route: node-wise balances NIC bytes when one GPU per node holds all remote traffic") {
  for (const rank_t G : {4, 8}) {
    const rank_t d = 2 * G;
    const auto topo = topology::uniform(d, G);
    // Rank 0 (node 0) sends 64 items of 1000 bytes to node 1, round robin over its ranks; rank G
    // (node 1) sends 64 to node 0. Every other rank sends 10 items of 1000 bytes to a neighbour
    // in its own node.
    vec off{0};
    ranks dst;
    for (rank_t r = 0; r < d; ++r) {
      const bool hot = r == 0 || r == G;
      const int items = hot ? 64 : 10;
      for (int i = 0; i < items; ++i) {
        if (hot) {
          dst.push_back(static_cast<rank_t>((r == 0 ? G : 0) + i % G));
        } else {
          const rank_t base = r / G * G;
          dst.push_back(static_cast<rank_t>(base + (r - base + 1) % G));
        }
      }
      off.push_back(off.back() + items);
    }
    const auto plan = rearrangement::from_destinations(off, dst, d);
    const vec bytes(dst.size(), 1000);
    const auto direct = emulate(plan, bytes, topo, schedule::direct);
    const auto nw = emulate(plan, bytes, topo, schedule::node_wise);
    require_clean(direct);
    require_clean(nw);
    CHECK(nw.outputs == direct.outputs);
    CHECK(direct.outputs == direct.expected);
    std::int64_t max_d = 0, max_n = 0, sum_d = 0, sum_n = 0;
    for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r) {
      max_d = std::max(max_d, direct.routes[r].sent().inter_node_bytes);
      max_n = std::max(max_n, nw.routes[r].sent().inter_node_bytes);
      sum_d += direct.routes[r].sent().inter_node_bytes;
      sum_n += nw.routes[r].sent().inter_node_bytes;
    }
    INFO("G = ", G, ": direct max ", max_d, ", node-wise max ", max_n);
    CHECK(sum_d == 2 * 64 * 1000);
    CHECK(sum_n == sum_d);
    CHECK(max_d == 64 * 1000);
    // 64 equal items over G rails: exactly 64/G items per rail.
    CHECK(max_n == 64 * 1000 / G);
    check_node_wise_structure(nw, plan, bytes, topo);
    // Direct: the hot rank sends to G remote peers; node-wise: one inter-node message per rank.
    CHECK(direct.routes[0].sent().inter_node_messages == G);
    for (const auto& r : nw.routes) CHECK(r.sent().inter_node_messages <= 1);
  }
}

TEST_CASE(
    "route: node-wise paths, the time model and hop figures are the reference's on larger groups") {
  std::mt19937_64 rng(2718);
  int contiguous = 0, scattered = 0, bounded = 0;
  for (int it = 0; it < 400; ++it) {
    auto c = make_random_case(rng, it);
    // Every other case on larger groups, so that node pairs carry runs of several items.
    if (it % 2 == 1) {
      const auto d = static_cast<rank_t>(uniform(rng, 16, 64));
      const auto g = static_cast<rank_t>(uniform(rng, 2, 8));
      c.topo = uniform(rng, 0, 1) == 0
                   ? topology::uniform(d, g)
                   : topology(orchmllm::test::random_node_map(rng, d, (d + g - 1) / g));
      const auto off = orchmllm::test::random_offsets(rng, d, uniform(rng, 0, 12 * d));
      c.plan = orchmllm::test::random_rearrangement(rng, off, d, uniform(rng, 0, 1) == 1, 0);
      c.bytes.clear();
      for (std::int64_t x = 0; x < c.plan.num_items(); ++x)
        c.bytes.push_back(uniform(rng, 0, 4) == 0 ? 0 : uniform(rng, 1, 500));
    }
    INFO(c.what);
    const auto map = c.topo.node_map();
    (std::is_sorted(map.begin(), map.end()) ? contiguous : scattered) += 1;
    const auto src = orchmllm::detail::source_ranks(c.plan);
    const auto nw = orchmllm::detail::node_wise_paths(c.plan, c.bytes, c.topo, src);
    CHECK(nw.at == reference_node_wise(c.plan, c.bytes, c.topo, src));
    // And the time model's exact doubles on these larger groups (many receivers per sender).
    const auto direct = orchmllm::detail::direct_paths(c.plan, src);
    CHECK(orchmllm::detail::predict_seconds(direct, c.bytes, c.topo) ==
          reference_prediction(direct, c.bytes, c.topo));
    CHECK(orchmllm::detail::predict_seconds(nw, c.bytes, c.topo) ==
          reference_prediction(nw, c.bytes, c.topo));
    // Automatic's lower bound of node-wise's time holds (0 on scattered node maps).
    const double bound = orchmllm::detail::node_wise_lower_bound(c.plan, c.bytes, c.topo, src);
    CHECK(bound <= orchmllm::detail::predict_seconds(nw, c.bytes, c.topo) * (1 + 1e-12));
    if (bound > 0) ++bounded;
    // And every hop's group figures.
    for (const auto* paths : {&direct, &nw})
      for (int k = 1; k <= paths->hops; ++k) {
        const auto got =
            orchmllm::detail::hop_group_figures(*paths, c.bytes, k, c.topo.num_ranks());
        const auto want = reference_group(*paths, c.bytes, k, c.topo.num_ranks());
        CHECK(got.max_block == want.max_block);
        CHECK(got.max_buffer == want.max_buffer);
        CHECK(got.max_items == want.max_items);
      }
  }
  CHECK(contiguous > 100);
  CHECK(scattered > 50);
  CHECK(bounded > 100);
}

TEST_CASE("route: the rails bound of automatic's node-wise bound holds for every item order") {
  // One node pair's items, in random orders and sizes (with zeros), split over R rails by the
  // midpoint rule of node_wise_paths: the rails that get a positive item are at least
  // rails_lower_bound(count of positive items, bytes, largest, R).
  std::mt19937_64 rng(99);
  int above_one = 0;
  for (int it = 0; it < 20000; ++it) {
    const auto rails = static_cast<rank_t>(uniform(rng, 1, 16));
    const auto n = uniform(rng, 1, 40);
    const auto top = uniform(rng, 0, 3) == 0 ? 1000000 : uniform(rng, 1, 50);
    const bool two_sizes = uniform(rng, 0, 1) == 0;  // a few large items among small ones
    vec bytes;
    for (std::int64_t i = 0; i < n; ++i)
      bytes.push_back(uniform(rng, 0, 5) == 0 ? 0
                      : two_sizes             ? (uniform(rng, 0, 4) == 0 ? top : 1)
                                              : uniform(rng, 1, top));
    std::int64_t total = 0, largest = 0, count = 0;
    for (const auto b : bytes) {
      total += b;
      largest = std::max(largest, b);
      count += b > 0 ? 1 : 0;
    }
    if (count == 0) continue;
    std::vector<char> hit(static_cast<std::size_t>(rails), 0);
    std::int64_t cum = 0;
    for (const auto b : bytes) {
      const double mid =
          (static_cast<double>(cum) + 0.5 * static_cast<double>(b)) / static_cast<double>(total);
      const auto rail =
          static_cast<std::size_t>(std::min<double>(rails - 1, std::floor(mid * rails)));
      if (b > 0) hit[rail] = 1;
      cum += b;
    }
    const auto used = std::count(hit.begin(), hit.end(), 1);
    const auto bound = orchmllm::detail::rails_lower_bound(count, total, largest, rails);
    INFO("rails ", rails, ", items ", n, ", total ", total, ", largest ", largest);
    CHECK(bound >= 1);
    CHECK(used >= bound);
    if (bound > 1) ++above_one;
  }
  CHECK(above_one > 5000);  // the bound is not the trivial 1
}
