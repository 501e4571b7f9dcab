// Tests for include/orchmllm/topology/topology.hpp: uniform shapes (divisible, smaller last node,
// G = 0, G > d), topologies from a node map (non-consecutive nodes, numbering errors), the
// consistency of node_of / local_rank / rank_at / ranks_of on random maps, link_params
// validation, and the trainer's own topology models (the topology_model concept).

#include "orchmllm/topology/topology.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::link_params;
using orchmllm::rank_t;
using orchmllm::topology;
using orchmllm::test::expect_invalid;
using ranks = std::vector<rank_t>;

ranks to_vec(std::span<const rank_t> s) { return ranks(s.begin(), s.end()); }

// Every accessor checked against the node map alone (no library logic): nodes numbered by
// lowest rank, local indices in increasing rank order.
void check_shape(const topology& t, const ranks& node_map) {
  const auto d = static_cast<rank_t>(node_map.size());
  REQUIRE(t.num_ranks() == d);
  CHECK(to_vec(t.node_map()) == node_map);
  rank_t nodes = 0;
  for (const rank_t m : node_map) nodes = std::max(nodes, m + 1);
  REQUIRE(t.num_nodes() == nodes);
  rank_t total = 0;
  for (rank_t m = 0; m < nodes; ++m) {
    ranks members;
    for (rank_t r = 0; r < d; ++r)
      if (node_map[static_cast<std::size_t>(r)] == m) members.push_back(r);
    CHECK(t.node_size(m) == static_cast<rank_t>(members.size()));
    CHECK(to_vec(t.ranks_of(m)) == members);
    for (rank_t l = 0; l < static_cast<rank_t>(members.size()); ++l) {
      const rank_t r = members[static_cast<std::size_t>(l)];
      CHECK(t.rank_at(m, l) == r);
      CHECK(t.node_of(r) == m);
      CHECK(t.local_rank(r) == l);
    }
    total += t.node_size(m);
  }
  CHECK(total == d);
  for (rank_t r = 0; r < d; ++r)
    for (rank_t q = 0; q < d; ++q)
      CHECK(t.same_node(r, q) ==
            (node_map[static_cast<std::size_t>(r)] == node_map[static_cast<std::size_t>(q)]));
}

}  // namespace

TEST_CASE("topology: the default is one rank on one node") {
  const topology t;
  check_shape(t, ranks{0});
  CHECK(t.links == link_params{});
}

TEST_CASE("topology: uniform, G divides d") {
  const auto t = topology::uniform(8, 4);
  check_shape(t, ranks{0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(t.rank_at(1, 2) == 6);
  CHECK(t.local_rank(5) == 1);
  CHECK(to_vec(t.ranks_of(1)) == ranks{4, 5, 6, 7});
  check_shape(topology::uniform(6, 1), ranks{0, 1, 2, 3, 4, 5});
  check_shape(topology::uniform(6, 6), ranks{0, 0, 0, 0, 0, 0});
}

TEST_CASE("topology: uniform, last node smaller") {
  const auto t = topology::uniform(10, 4);
  check_shape(t, ranks{0, 0, 0, 0, 1, 1, 1, 1, 2, 2});
  CHECK(t.node_size(2) == 2);
  CHECK(to_vec(t.ranks_of(2)) == ranks{8, 9});
  check_shape(topology::uniform(7, 3), ranks{0, 0, 0, 1, 1, 1, 2});
}

TEST_CASE("topology: uniform, G = 0 and G > d put every rank on one node") {
  check_shape(topology::uniform(5, 0), ranks{0, 0, 0, 0, 0});
  check_shape(topology::uniform(3, 8), ranks{0, 0, 0});
  check_shape(topology::uniform(1, 0), ranks{0});
  CHECK(topology::uniform(5, 0) == topology::uniform(5, 5));
  CHECK(topology::uniform(5, 0) == topology::uniform(5, 99));
  CHECK(topology::uniform(4, 2) != topology::uniform(4, 1));
}

TEST_CASE("topology: uniform carries the link figures") {
  link_params L;
  L.inter_bandwidth = 12.5e9;
  L.inter_latency = 0;
  const auto t = topology::uniform(4, 2, L);
  CHECK(t.links == L);
  CHECK(t != topology::uniform(4, 2));
  auto u = topology::uniform(4, 2);
  u.links = L;  // a plain settable field
  CHECK(u == t);
}

TEST_CASE("topology: uniform errors") {
  expect_invalid([] { (void)topology::uniform(0, 2); }, {"at least one rank", "0"});
  expect_invalid([] { (void)topology::uniform(-3, 2); }, {"-3"});
  expect_invalid([] { (void)topology::uniform(4, -1); }, {"GPUs per node", "-1", "negative"});
}

TEST_CASE("topology: from a node map with non-consecutive nodes (round-robin placement)") {
  const ranks map{0, 1, 0, 1, 2, 2};
  const topology t(map);
  check_shape(t, map);
  CHECK(t.num_nodes() == 3);
  CHECK(to_vec(t.ranks_of(0)) == ranks{0, 2});
  CHECK(to_vec(t.ranks_of(1)) == ranks{1, 3});
  CHECK(t.local_rank(2) == 1);
  CHECK(t.local_rank(3) == 1);
  CHECK(t.rank_at(1, 1) == 3);
  CHECK(t.rank_at(2, 0) == 4);
  CHECK(t.same_node(0, 2));
  CHECK_FALSE(t.same_node(0, 1));
  // Round robin over 2 nodes of 4.
  check_shape(topology(ranks{0, 1, 0, 1, 0, 1, 0, 1}), ranks{0, 1, 0, 1, 0, 1, 0, 1});
  // Uniform equals the same map given explicitly.
  CHECK(topology::uniform(5, 2) == topology(ranks{0, 0, 1, 1, 2}));
}

TEST_CASE("topology: node numbering errors name the rank") {
  expect_invalid([] { (void)topology(ranks{}); }, {"at least one rank"});
  expect_invalid(
      [] {
        (void)topology(ranks{1, 0});
      },
      {"rank 0 is on node 1", "next new node would be 0"});
  expect_invalid([] { (void)topology(ranks{0, 2, 1}); }, {"rank 1 is on node 2", "would be 1"});
  expect_invalid([] { (void)topology(ranks{0, 1, 1, 3}); }, {"rank 3 is on node 3", "would be 2"});
  expect_invalid([] { (void)topology(ranks{0, -1}); }, {"rank 1 is on node -1"});
}

TEST_CASE("topology: random node maps are consistent") {
  std::mt19937_64 rng(20240611);
  for (int it = 0; it < 300; ++it) {
    const auto d = static_cast<rank_t>(orchmllm::test::uniform(rng, 1, 24));
    const auto max_nodes = static_cast<rank_t>(orchmllm::test::uniform(rng, 1, 6));
    const auto map = orchmllm::test::random_node_map(rng, d, max_nodes);
    INFO("iteration ", it);
    const topology t(map);
    check_shape(t, map);
    const topology copy = t;
    CHECK(copy == t);
  }
}

TEST_CASE("topology: link_params validation") {
  CHECK_NOTHROW(link_params{}.validate());
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto with = [](auto set) {
    link_params p;
    set(p);
    return p;
  };
  // Zero latencies are allowed (an idealised model), zero bandwidths are not.
  CHECK_NOTHROW(with([](link_params& p) { p.intra_latency = p.inter_latency = 0; }).validate());
  expect_invalid([&] { with([](link_params& p) { p.intra_bandwidth = 0; }).validate(); },
                 {"intra-node bandwidth", "positive"});
  expect_invalid([&] { with([](link_params& p) { p.inter_bandwidth = -5; }).validate(); },
                 {"inter-node bandwidth", "-5"});
  expect_invalid([&] { with([&](link_params& p) { p.inter_bandwidth = inf; }).validate(); },
                 {"inter-node bandwidth", "finite"});
  expect_invalid([&] { with([&](link_params& p) { p.intra_bandwidth = nan; }).validate(); },
                 {"intra-node bandwidth"});
  expect_invalid([&] { with([](link_params& p) { p.intra_latency = -1e-6; }).validate(); },
                 {"intra-node latency", "non-negative"});
  expect_invalid([&] { with([&](link_params& p) { p.inter_latency = nan; }).validate(); },
                 {"inter-node latency"});
  expect_invalid([&] { with([&](link_params& p) { p.inter_latency = inf; }).validate(); },
                 {"inter-node latency", "finite"});
  // Constructors validate the figures they are given.
  const auto bad = with([](link_params& p) { p.inter_bandwidth = 0; });
  expect_invalid([&] { (void)topology::uniform(4, 2, bad); }, {"inter-node bandwidth"});
  expect_invalid([&] { (void)topology(ranks{0, 0}, bad); }, {"inter-node bandwidth"});
  CHECK(with([](link_params& p) { p.intra_latency = 1; }) != link_params{});
}

namespace {

// A trainer's model: the host name of every rank, as its launcher reports them. Node ids are
// the host's index in a sorted host list: not in rank order, not dense in rank order.
struct hosts_model {
  std::vector<std::string> host_of_rank;
  [[nodiscard]] std::size_t num_ranks() const { return host_of_rank.size(); }
  [[nodiscard]] std::int64_t node_of(rank_t r) const {
    std::map<std::string, std::int64_t> id;
    for (const auto& h : host_of_rank) id.emplace(h, 0);
    std::int64_t k = 0;
    for (auto& [h, v] : id) v = 10 * k++;  // sparse ids: 0, 10, 20, ...
    return id.at(host_of_rank[static_cast<std::size_t>(r)]);
  }
  [[nodiscard]] link_params links() const {
    link_params p;
    p.inter_bandwidth = 12.5e9;
    return p;
  }
};
// Without link figures: the defaults.
struct blocks_model {
  rank_t d = 6;
  rank_t g = 4;
  [[nodiscard]] rank_t num_ranks() const { return d; }
  [[nodiscard]] rank_t node_of(rank_t r) const { return r / g; }
};
// Link figures as a data member, like topology's.
struct member_links_model {
  link_params links;
  [[nodiscard]] rank_t num_ranks() const { return 2; }
  [[nodiscard]] rank_t node_of(rank_t r) const { return 7 - r; }
};

static_assert(orchmllm::topology_model<topology>);
static_assert(orchmllm::topology_model<hosts_model>);
static_assert(!orchmllm::topology_model<int>);
static_assert(!orchmllm::topology_model<ranks>);
static_assert(std::is_convertible_v<hosts_model, topology>);
static_assert(!std::is_convertible_v<ranks, topology>);  // the node map constructor is explicit

}  // namespace

TEST_CASE("topology: a trainer's model converts, nodes renumbered by their lowest rank") {
  const hosts_model hosts{{"gpu-b", "gpu-b", "gpu-a", "gpu-c", "gpu-a", "gpu-b"}};
  const topology t = hosts;
  // gpu-b holds rank 0 -> node 0; gpu-a (rank 2) -> 1; gpu-c (rank 3) -> 2.
  check_shape(t, ranks{0, 0, 1, 2, 1, 0});
  CHECK(t.links.inter_bandwidth == 12.5e9);
  CHECK(t.links.intra_bandwidth == link_params{}.intra_bandwidth);
  CHECK(orchmllm::fingerprint(t) ==
        orchmllm::fingerprint(topology(ranks{0, 0, 1, 2, 1, 0}, hosts.links())));

  const topology b = blocks_model{};
  CHECK(b == topology::uniform(6, 4));
  const topology m = member_links_model{link_params{.intra_latency = 1e-5}};
  check_shape(m, ranks{0, 1});
  CHECK(m.links.intra_latency == 1e-5);
  CHECK(orchmllm::link_figures(topology::uniform(2, 1)) == link_params{});

  // The converted model equals the node map read through the concept, on random models.
  std::mt19937_64 rng(0x70b0);
  for (int iter = 0; iter < 200; ++iter) {
    const auto d = static_cast<std::size_t>(1 + rng() % 40);
    hosts_model h;
    for (std::size_t r = 0; r < d; ++r) {
      std::string host = "h";  // built with += (GCC 12's -Wrestrict false positive on "h" + s)
      host += std::to_string(rng() % 7);
      h.host_of_rank.push_back(host);
    }
    const topology c = h;
    REQUIRE(c.num_ranks() == static_cast<rank_t>(d));
    for (std::size_t r = 0; r < d; ++r)
      for (std::size_t q = 0; q < d; ++q)
        CHECK(c.same_node(static_cast<rank_t>(r), static_cast<rank_t>(q)) ==
              (h.host_of_rank[r] == h.host_of_rank[q]));
    // Node numbers in order of lowest rank: node_of(r) never exceeds the nodes seen before r.
    rank_t seen = 0;
    for (std::size_t r = 0; r < d; ++r) {
      CHECK(c.node_of(static_cast<rank_t>(r)) <= seen);
      seen = std::max<rank_t>(seen, c.node_of(static_cast<rank_t>(r)) + 1);
    }
  }
}

TEST_CASE("topology: a model that breaks the concept's contract is a clear error") {
  struct negative {
    rank_t num_ranks() const { return 3; }
    rank_t node_of(rank_t r) const { return r == 2 ? -4 : 0; }
  };
  struct empty {
    rank_t num_ranks() const { return 0; }
    rank_t node_of(rank_t) const { return 0; }
  };
  struct bad_links {
    rank_t num_ranks() const { return 1; }
    rank_t node_of(rank_t) const { return 0; }
    link_params links() const { return link_params{.inter_bandwidth = -1}; }
  };
  expect_invalid([] { (void)topology(negative{}); }, {"rank 2 is on node -4", "non-negative"});
  expect_invalid([] { (void)topology(empty{}); }, {"1 to 2^31 - 1 ranks", "has 0"});
  expect_invalid([] { (void)topology(bad_links{}); }, {"inter-node bandwidth"});
}
