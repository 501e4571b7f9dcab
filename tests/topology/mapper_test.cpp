// Tests for include/orchmllm/topology/mapper.hpp (bin_mapping_problem, the mapper concept,
// mappers::identity / transport / bottleneck / auction, any_mapper, parse_mapper, map_bins with
// a mapper):
//  - every built-in mapper type gives the result of an any_mapper holding it and of the same
//    mapper called from the application's own bit for bit, and all equal the detail algorithms
//    run by hand, on random instances (uniform and uneven topologies, fixed seeds);
//  - parse_mapper gives back every name of mapper_names() and names the valid ones for any other;
//  - the problem view agrees with the instance (bytes per bin and per node, sparse rows, bounds)
//    and `evaluate` gives what map_bins returns;
//  - an application's mapper (struct or lambda) through map_bins: a valid result, equal to
//    evaluate on its ranks;
//  - a mapper returning the wrong size, a rank out of range or a repeated rank raises
//    invalid_argument_error naming the fault; so does evaluate.

#include "orchmllm/topology/mapper.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/topology/auction.hpp"
#include "orchmllm/detail/topology/bottleneck.hpp"
#include "orchmllm/detail/topology/mapping_problem.hpp"
#include "orchmllm/detail/topology/min_cost_flow.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/mapping_check.hpp"
#include "support/mapping_reference.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using orchmllm::test::uniform;

static_assert(mapper<mappers::identity> && mapper<mappers::transport> &&
              mapper<mappers::bottleneck> && mapper<mappers::auction> && mapper<any_mapper>);
static_assert(is_builtin_mapper_v<mappers::bottleneck> && !is_builtin_mapper_v<int>);
static_assert(!is_builtin_mapper_v<any_mapper>);
static_assert(std::is_convertible_v<mappers::auction, any_mapper>);
static_assert(!std::is_convertible_v<int, any_mapper>);
static_assert(mapper_names().size() == std::variant_size_v<any_mapper::variant>);
static_assert(!mapper<int>);

topology random_topology(std::mt19937_64& rng, rank_t d) {
  if (uniform(rng, 0, 1) == 0) return topology::uniform(d, static_cast<rank_t>(uniform(rng, 0, d)));
  return topology(test::random_node_map(rng, d, 1 + static_cast<rank_t>(uniform(rng, 0, d - 1))));
}

void check_same(const mapping_result& a, const mapping_result& b) {
  CHECK(a.rank_of_bin == b.rank_of_bin);
  CHECK(a.plan == b.plan);
  CHECK(a.moved_bytes == b.moved_bytes);
  CHECK(a.inter_node_bytes == b.inter_node_bytes);
  CHECK(a.inter_node_bytes_lower_bound == b.inter_node_bytes_lower_bound);
  CHECK(a.max_node_egress_bytes == b.max_node_egress_bytes);
  CHECK(a.max_node_ingress_bytes == b.max_node_ingress_bytes);
  CHECK(a.worst_node_bytes_lower_bound == b.worst_node_bytes_lower_bound);
}

// A built-in mapper with its default knobs, by its name: the detail algorithms by hand.
mapping_result reference(const test::mapping_instance& in, std::string_view name) {
  const auto p = detail::build_mapping_problem(in.binned, in.bytes, in.topo);
  if (name == mappers::identity::name) {
    std::vector<rank_t> ranks(static_cast<std::size_t>(in.topo.num_ranks()));
    std::iota(ranks.begin(), ranks.end(), rank_t{0});
    return detail::result_from_ranks(p, std::move(ranks));
  }
  if (name == mappers::auction::name)
    return detail::finish_mapping(
        p, detail::solve_transport_auction(p.by_node, p.capacity,
                                           mappers::auction::default_tolerance));
  auto node = detail::solve_transport(p.by_node, p.capacity);
  if (name == mappers::bottleneck::name)
    detail::bottleneck_local_search(p, node, detail::bottleneck_step_budget(in.topo.num_ranks()));
  return detail::finish_mapping(p, node);
}

// An application's mapper: bins by decreasing bytes, each to the free rank holding most of its
// bytes (ties: lowest rank). Reads the view only.
struct greedy_home {
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const {
    const rank_t d = p.num_bins();
    const auto w = test::bin_rank_bytes(p.binned(), p.item_bytes());
    std::vector<rank_t> order(static_cast<std::size_t>(d));
    std::iota(order.begin(), order.end(), rank_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](rank_t a, rank_t b) { return p.bin_bytes(a) > p.bin_bytes(b); });
    std::vector<rank_t> rank_of(static_cast<std::size_t>(d), -1);
    std::vector<char> used(static_cast<std::size_t>(d), 0);
    for (const rank_t b : order) {
      rank_t best = -1;
      for (rank_t r = 0; r < d; ++r) {
        if (used[static_cast<std::size_t>(r)]) continue;
        const auto bytes = w[static_cast<std::size_t>(b) * static_cast<std::size_t>(d) +
                             static_cast<std::size_t>(r)];
        if (best < 0 || bytes > w[static_cast<std::size_t>(b) * static_cast<std::size_t>(d) +
                                  static_cast<std::size_t>(best)])
          best = r;
      }
      rank_of[static_cast<std::size_t>(b)] = best;
      used[static_cast<std::size_t>(best)] = 1;
    }
    return rank_of;
  }
};

}  // namespace

TEST_CASE("built-in mapper types equal an any_mapper holding them and the detail algorithms") {
  std::mt19937_64 rng(20261203);
  for (int rep = 0; rep < 300; ++rep) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, rep < 200 ? 24 : 160));
    const auto in =
        test::random_mapping_instance(rng, random_topology(rng, d), rep % 3 == 0 ? 4 : 1000);
    INFO("rep ", rep, ", d = ", d, ", nodes = ", in.topo.num_nodes());
    for (const std::string_view name : mapper_names()) {
      INFO("mapper ", name);
      const any_mapper held = parse_mapper(name);
      const auto by_any = map_bins(in.binned, in.bytes, in.topo, held);
      check_same(by_any, reference(in, name));
      test::check_mapping_result(by_any, in.binned, in.bytes, in.topo);
      held.visit([&](const auto& m) {
        CHECK(m.name == name);
        check_same(map_bins(in.binned, in.bytes, in.topo, m), by_any);
        // The same mapper called from the application's own.
        check_same(map_bins(in.binned, in.bytes, in.topo,
                            [&m](const bin_mapping_problem& p) { return m(p); }),
                   by_any);
      });
    }
    // The default mapper is transport.
    check_same(map_bins(in.binned, in.bytes, in.topo),
               map_bins(in.binned, in.bytes, in.topo, mappers::transport{}));
    check_same(map_bins(in.binned, in.bytes, in.topo, any_mapper{}),
               map_bins(in.binned, in.bytes, in.topo, mappers::transport{}));
    // The default budget spelled out is the same mapper; a zero budget is transport.
    check_same(map_bins(in.binned, in.bytes, in.topo,
                        mappers::bottleneck{detail::bottleneck_step_budget(d)}),
               map_bins(in.binned, in.bytes, in.topo, mappers::bottleneck{}));
    check_same(map_bins(in.binned, in.bytes, in.topo, mappers::bottleneck{0}),
               map_bins(in.binned, in.bytes, in.topo, mappers::transport{}));
    // An auction with its own tolerance: the detail solver with that tolerance.
    const auto p = detail::build_mapping_problem(in.binned, in.bytes, in.topo);
    check_same(
        map_bins(in.binned, in.bytes, in.topo, mappers::auction{.tolerance = 0.25}),
        detail::finish_mapping(p, detail::solve_transport_auction(p.by_node, p.capacity, 0.25)));
  }
}

TEST_CASE("mappers::auction rejects a tolerance outside (0, 1]") {
  std::mt19937_64 rng(5);
  const auto in = test::random_mapping_instance(rng, topology::uniform(8, 2), 100);
  for (const double bad : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()})
    test::expect_invalid(
        [&] { (void)map_bins(in.binned, in.bytes, in.topo, mappers::auction{.tolerance = bad}); },
        {"mappers::auction: tolerance", "outside (0, 1]"});
  (void)map_bins(in.binned, in.bytes, in.topo, mappers::auction{.tolerance = 1.0});
}

TEST_CASE("bin_mapping_problem: the view agrees with the instance, evaluate with map_bins") {
  std::mt19937_64 rng(77);
  for (int rep = 0; rep < 60; ++rep) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 40));
    const auto in = test::random_mapping_instance(rng, random_topology(rng, d));
    INFO("rep ", rep, ", d = ", d);
    const auto w = test::bin_rank_bytes(in.binned, in.bytes);
    const auto ud = static_cast<std::size_t>(d);
    const auto want = map_bins(in.binned, in.bytes, in.topo, mappers::transport{});
    int calls = 0;
    const auto got = map_bins(in.binned, in.bytes, in.topo, [&](const bin_mapping_problem& p) {
      ++calls;
      CHECK(p.num_bins() == d);
      CHECK(p.num_nodes() == in.topo.num_nodes());
      CHECK(&p.binned() == &in.binned);
      CHECK(p.item_bytes().data() == in.bytes.data());
      CHECK(p.topology().num_ranks() == d);
      CHECK(p.inter_node_bytes_lower_bound() == want.inter_node_bytes_lower_bound);
      CHECK(p.worst_node_bytes_lower_bound() == want.worst_node_bytes_lower_bound);
      std::vector<std::int64_t> held(static_cast<std::size_t>(in.topo.num_nodes()), 0);
      for (rank_t b = 0; b < d; ++b) {
        std::vector<std::int64_t> on_node(static_cast<std::size_t>(in.topo.num_nodes()), 0);
        std::int64_t total = 0;
        for (std::size_t r = 0; r < ud; ++r) {
          const auto x = w[static_cast<std::size_t>(b) * ud + r];
          on_node[static_cast<std::size_t>(in.topo.node_of(static_cast<rank_t>(r)))] += x;
          total += x;
        }
        CHECK(p.bin_bytes(b) == total);
        CHECK(p.bin_bytes()[static_cast<std::size_t>(b)] == total);
        rank_t previous = -1;
        std::size_t nonzero = 0;
        for (const auto& e : p.bytes_by_node(b)) {
          CHECK(e.node > previous);  // nodes ascending, entries positive
          CHECK(e.profit > 0);
          previous = e.node;
        }
        for (rank_t m = 0; m < in.topo.num_nodes(); ++m) {
          CHECK(p.bytes_on_node(b, m) == on_node[static_cast<std::size_t>(m)]);
          nonzero += on_node[static_cast<std::size_t>(m)] > 0 ? 1 : 0;
          held[static_cast<std::size_t>(m)] += on_node[static_cast<std::size_t>(m)];
        }
        CHECK(p.bytes_by_node(b).size() == nonzero);
      }
      CHECK(std::ranges::equal(p.node_bytes(), held));
      // evaluate: what map_bins returns for the same ranks.
      check_same(p.evaluate(want.rank_of_bin), want);
      return mappers::transport{}(p);
    });
    CHECK(calls == 1);
    check_same(got, want);
  }
}

TEST_CASE("an application's mapper through map_bins: a valid result, equal to evaluate") {
  std::mt19937_64 rng(31337);
  for (int rep = 0; rep < 80; ++rep) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 32));
    const auto in = test::random_mapping_instance(rng, random_topology(rng, d));
    INFO("rep ", rep, ", d = ", d);
    mapping_result evaluated;
    const auto spy = [&](const bin_mapping_problem& p) {
      auto ranks = greedy_home{}(p);
      evaluated = p.evaluate(ranks);
      return ranks;
    };
    const auto res = map_bins(in.binned, in.bytes, in.topo, spy);
    test::check_mapping_result(res, in.binned, in.bytes, in.topo);
    check_same(res, evaluated);
    check_same(map_bins(in.binned, in.bytes, in.topo, greedy_home{}), res);
    // Reversed ranks, from a generic lambda.
    const auto reversed = map_bins(in.binned, in.bytes, in.topo, [](const auto& p) {
      std::vector<rank_t> r(static_cast<std::size_t>(p.num_bins()));
      for (rank_t b = 0; b < p.num_bins(); ++b)
        r[static_cast<std::size_t>(b)] = p.num_bins() - 1 - b;
      return r;
    });
    test::check_mapping_result(reversed, in.binned, in.bytes, in.topo);
    CHECK(reversed.rank_of_bin.front() == d - 1);
  }
}

TEST_CASE("a mapper's answer is checked: wrong size, out of range, not a permutation") {
  std::mt19937_64 rng(5);
  const auto in = test::random_mapping_instance(rng, topology::uniform(4, 2));
  const auto answer = [&](std::vector<rank_t> ranks) {
    return [ranks](const bin_mapping_problem&) { return ranks; };
  };
  test::expect_invalid(
      [&] {
        (void)map_bins(in.binned, in.bytes, in.topo, answer({0, 1, 2}));
      },
      {"mapper", "3 ranks", "4 bins"});
  test::expect_invalid(
      [&] {
        (void)map_bins(in.binned, in.bytes, in.topo, answer({0, 1, 2, 3, 0}));
      },
      {"mapper", "5 ranks", "4 bins"});
  test::expect_invalid(
      [&] {
        (void)map_bins(in.binned, in.bytes, in.topo, answer({0, 4, 1, 2}));
      },
      {"mapper", "bin 1", "rank 4", "[0, 4)"});
  test::expect_invalid(
      [&] {
        (void)map_bins(in.binned, in.bytes, in.topo, answer({0, 1, -1, 2}));
      },
      {"bin 2", "rank -1"});
  test::expect_invalid(
      [&] {
        (void)map_bins(in.binned, in.bytes, in.topo, answer({2, 1, 2, 0}));
      },
      {"bin 2", "rank 2", "not a permutation"});
  CHECK_NOTHROW((void)map_bins(in.binned, in.bytes, in.topo, answer({3, 2, 1, 0})));
  // evaluate checks the same way.
  (void)map_bins(in.binned, in.bytes, in.topo, [](const bin_mapping_problem& p) {
    test::expect_invalid(
        [&] {
          (void)p.evaluate(std::vector<rank_t>{0, 0, 1, 2});
        },
        {"evaluate", "bin 1", "not a permutation"});
    test::expect_invalid([&] { (void)p.evaluate(std::vector<rank_t>{}); },
                         {"evaluate", "0 ranks", "4 bins"});
    return mappers::identity{}(p);
  });
  // Bad inputs are rejected before the mapper runs, as with a built-in.
  bool ran = false;
  const std::vector<std::int64_t> short_bytes(in.bytes.size() + 1, 1);
  test::expect_invalid(
      [&] {
        (void)map_bins(in.binned, short_bytes, in.topo, [&](const bin_mapping_problem& p) {
          ran = true;
          return mappers::identity{}(p);
        });
      },
      {"item sizes"});
  CHECK(!ran);
  // A mapper's own exception passes through.
  CHECK_THROWS_AS((void)map_bins(in.binned, in.bytes, in.topo,
                                 [](const bin_mapping_problem&) -> std::vector<rank_t> {
                                   throw infeasible_error("mine");
                                 }),
                  infeasible_error);
}

TEST_CASE("parse_mapper gives back every name and rejects any other") {
  const std::vector<std::string_view> expected = {"identity", "transport", "bottleneck", "auction"};
  REQUIRE(mapper_names().size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const std::string_view n = mapper_names()[i];
    CHECK(n == expected[i]);
    const any_mapper m = parse_mapper(n);
    CHECK(m.name() == n);
    m.visit([&](const auto& x) { CHECK(x.name == n); });
  }
  CHECK(any_mapper{}.name() == "transport");
  CHECK(any_mapper{}.get_if<mappers::transport>() != nullptr);
  CHECK(any_mapper{}.get_if<mappers::identity>() == nullptr);
  // Parsed mappers hold their default knobs.
  const any_mapper bottleneck = parse_mapper("bottleneck");
  REQUIRE(bottleneck.get_if<mappers::bottleneck>() != nullptr);
  CHECK(bottleneck.get_if<mappers::bottleneck>()->step_budget == -1);
  const any_mapper auction = parse_mapper("auction");
  REQUIRE(auction.get_if<mappers::auction>() != nullptr);
  CHECK(auction.get_if<mappers::auction>()->tolerance == mappers::auction::default_tolerance);
  // An any_mapper holds a built-in with its own knobs.
  const any_mapper tuned = mappers::auction{.tolerance = 0.25};
  CHECK(tuned.name() == "auction");
  REQUIRE(tuned.get_if<mappers::auction>() != nullptr);
  CHECK(tuned.get_if<mappers::auction>()->tolerance == 0.25);
  for (const std::string_view bad : {"Transport", "custom", "", "glpk", "hungarian"})
    test::expect_invalid([&] { (void)parse_mapper(bad); },
                         {"unknown mapper '" + std::string(bad) +
                          "'; expected one of: identity, transport, bottleneck, auction"});
}

TEST_CASE("a binned plan that stays home: every built-in mapper keeps it, as home_mapping") {
  // plan_step skips the mapping of such a stage (detail::stays_home): this is what makes the
  // skip give the same plans. Uniform and uneven topologies, and one node above the dense
  // assignment limit (the sparse greedy placement).
  std::mt19937_64 rng(2718);
  for (int rep = 0; rep < 80; ++rep) {
    const auto d = rep == 0 ? rank_t{600} : static_cast<rank_t>(uniform(rng, 1, 48));
    const topology topo = rep == 0 ? topology::uniform(d, d) : random_topology(rng, d);
    INFO("rep ", rep, ", d = ", d);
    // 1-5 items per rank, bytes 0-1000 with at least one positive per rank (the byte scales
    // differ by rank, so the auction's ε is large against some bins).
    std::vector<std::int64_t> offsets{0}, bytes;
    for (rank_t r = 0; r < d; ++r) {
      const auto k = uniform(rng, 1, 5);
      const auto scale = uniform(rng, 0, 1) == 0 ? 1 : 1000;
      for (std::int64_t i = 0; i < k; ++i) bytes.push_back(uniform(rng, 0, 1) * scale);
      bytes.back() = std::max<std::int64_t>(bytes.back(), 1);
      offsets.push_back(static_cast<std::int64_t>(bytes.size()));
    }
    const auto home = rearrangement::identity(offsets);
    REQUIRE(detail::stays_home(home, bytes));
    const mapping_result want = detail::home_mapping(home);
    CHECK(want.plan == home);
    const auto problem = detail::build_mapping_problem(home, bytes, topo);
    std::vector<rank_t> iota(static_cast<std::size_t>(d));
    std::iota(iota.begin(), iota.end(), rank_t{0});
    for (const std::string_view name : mapper_names()) {
      INFO("mapper ", name);
      check_same(map_bins(home, bytes, topo, parse_mapper(name)), want);
    }
    for (const double tolerance : {0.25, 1.0}) {
      INFO("auction tolerance ", tolerance);
      CHECK(detail::rank_of_bin(problem, mappers::auction{.tolerance = tolerance}) == iota);
    }
    CHECK(detail::rank_of_bin(problem, mappers::bottleneck{3}) == iota);

    // Not home: an item moved to another rank, or a rank whose bytes are all zero.
    if (d > 1) {
      std::vector<rank_t> dst(bytes.size());
      for (rank_t r = 0; r < d; ++r)
        for (auto g = offsets[static_cast<std::size_t>(r)];
             g < offsets[static_cast<std::size_t>(r) + 1]; ++g)
          dst[static_cast<std::size_t>(g)] = r;
      dst[0] = 1;
      CHECK(!detail::stays_home(rearrangement::from_destinations(offsets, dst, d), bytes));
    }
    auto zero = bytes;
    std::fill(zero.begin(), zero.begin() + offsets[1], 0);
    CHECK(!detail::stays_home(home, zero));
  }
  // A rank without items holds an empty bin: not home (any rank can take it).
  const std::vector<std::int64_t> offsets{0, 1, 1, 2};
  CHECK(!detail::stays_home(rearrangement::identity(offsets), std::vector<std::int64_t>{5, 7}));
}
