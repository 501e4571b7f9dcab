// Tests for include/orchmllm/orchestrator/orchestrator.hpp: the topology a step is planned on.
//
// gather_step_metadata checks the topology against the communicator (another node split,
// another size, ranks that disagree: the same error everywhere, the group still usable), and a
// trainer's own topology model passes wherever a topology does, with the same plans, mappings,
// routes and gathers.

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/comm/local.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/orchestrator_fixtures.hpp"

namespace {

using orchmllm::invalid_argument_error;
using orchmllm::rank_t;
using orchmllm::topology;
using orchmllm::test::uniform;
using namespace orchmllm::test::orchestrator_fixtures;  // support/orchestrator_fixtures.hpp
using namespace std::chrono_literals;

}  // namespace

TEST_CASE(
    "gather_step_metadata: a topology that does not match the communicator fails everywhere") {
  const rank_t d = 4;
  std::mt19937_64 rng(5);
  const auto decl = random_decl(rng, 1);
  const auto batches = random_batches(rng, d, 1);
  // The communicator puts ranks {0,1} and {2,3} on two nodes (ranks_per_node = 2).
  auto run_with = [&](auto make_topology) {
    std::vector<std::string> errors(static_cast<std::size_t>(d));
    std::vector<int> ok(static_cast<std::size_t>(d), 0);
    orchmllm::local::run(d,
                         [&](orchmllm::local::communicator& comm) {
                           const auto r = static_cast<std::size_t>(comm.rank());
                           try {
                             const orchmllm::topology topo = make_topology(comm);
                             const auto meta =
                                 orchmllm::gather_step_metadata(comm, decl, batches[r], topo);
                             (void)orchmllm::plan_step(decl, meta, topo);
                             ok[r] = 1;
                           } catch (const orchmllm::invalid_argument_error& e) {
                             errors[r] = e.what();
                           }
                           // The group is still usable.
                           (void)orchmllm::gather_step_metadata(comm, decl, batches[r]);
                         },
                         {.ranks_per_node = 2, .timeout = 30s});
    return std::make_pair(ok, errors);
  };
  SUBCASE("gathered: accepted") {
    const auto [ok, errors] = run_with([](auto& comm) { return orchmllm::gather_topology(comm); });
    for (const int o : ok) CHECK(o == 1);
  }
  SUBCASE("another node split") {
    const auto [ok, errors] = run_with([](auto&) {
      return orchmllm::topology(std::vector<rank_t>{0, 0, 0, 1});
    });
    for (const auto& e : errors) {
      CHECK(e == errors[0]);
      CHECK(e.find("rank 2 is on node 1 of the communicator but on node 0 of the topology") !=
            std::string::npos);
    }
  }
  SUBCASE("another size") {
    const auto [ok, errors] = run_with([](auto&) { return orchmllm::topology::uniform(8, 2); });
    for (const auto& e : errors)
      CHECK(e.find("the topology has 8 ranks but the communicator 4") != std::string::npos);
  }
  SUBCASE("ranks disagree") {
    const auto [ok, errors] = run_with([](auto& comm) {
      auto t = orchmllm::topology::uniform(4, 2);
      if (comm.rank() == 3) t.links.inter_bandwidth = 1e9;
      return t;
    });
    for (const auto& e : errors)
      CHECK(e.find("rank 3 passed another topology than rank 0") != std::string::npos);
  }
  SUBCASE("rank 0 alone disagrees: rank 0 is named") {
    const auto [ok, errors] = run_with([](auto& comm) {
      auto t = orchmllm::topology::uniform(4, 2);
      if (comm.rank() == 0) t.links.inter_bandwidth = 1e9;
      return t;
    });
    for (const auto& e : errors)
      CHECK(e.find("rank 0 passed another topology than the other 3 ranks, which agree") !=
            std::string::npos);
  }
}

TEST_CASE("a trainer's topology model passes wherever a topology does, with the same results") {
  // Two hosts of two ranks each, named by sparse ids the way a launcher might number them.
  struct pairs_model {
    [[nodiscard]] rank_t num_ranks() const { return 4; }
    [[nodiscard]] std::int64_t node_of(rank_t r) const { return 1000 - 7 * (r / 2); }
  };
  const auto shipped = orchmllm::topology::uniform(4, 2);
  const rank_t d = 4;
  std::mt19937_64 rng(0x70b1);
  const auto decl = random_decl(rng, 2);
  const auto batches = random_batches(rng, d, 2);
  const auto meta = orchmllm::make_step_metadata(batches, 2);
  // The planner and the mappers.
  const auto a = orchmllm::plan_step(decl, meta, pairs_model{});
  const auto b = orchmllm::plan_step(decl, meta, shipped);
  CHECK(a.llm == b.llm);
  for (std::size_t k = 0; k < a.encoders.size(); ++k) {
    CHECK(a.encoders[k].input == b.encoders[k].input);
    CHECK(a.encoders[k].output == b.encoders[k].output);
    CHECK(a.stages[k].inter_node_bytes == b.stages[k].inter_node_bytes);
  }
  const auto bytes = a.llm_layout.item_bytes();
  const auto mapped = orchmllm::map_bins(a.llm, bytes, pairs_model{});
  CHECK(mapped.rank_of_bin == orchmllm::map_bins(a.llm, bytes, shipped).rank_of_bin);
  // The routes.
  for (rank_t r = 0; r < d; ++r) {
    const auto ra = orchmllm::route::build(a.llm, bytes, pairs_model{}, r);
    const auto rb = orchmllm::route::build(a.llm, bytes, shipped, r);
    CHECK(ra.used() == rb.used());
    CHECK(ra.input_bytes() == rb.input_bytes());
  }
  // The metadata gather checks the model against the communicator like a topology.
  std::vector<int> ok(static_cast<std::size_t>(d), 0);
  orchmllm::local::run(d,
                       [&](orchmllm::local::communicator& comm) {
                         const auto r = static_cast<std::size_t>(comm.rank());
                         const auto m =
                             orchmllm::gather_step_metadata(comm, decl, batches[r], pairs_model{});
                         ok[r] = orchmllm::plan_step(decl, m, pairs_model{}).llm == b.llm ? 1 : 0;
                       },
                       {.ranks_per_node = 2, .timeout = 30s});
  for (const int o : ok) CHECK(o == 1);
}
