// Tests for include/orchmllm/backend/glpk/mapping.hpp (map_bins_bottleneck, transport_lp_optimum):
//  - map_bins(transport)'s inter-node bytes equal GLPK's optimum of the transport LP on random
//    instances (d up to 256, G in {1, 2, 4, 8}, uneven last node, random plans with locality and
//    balancer plans);
//  - the integer program is optimal on F (worst node's inter-node egress/ingress) against brute
//    force over all bijections for d <= 8, with and without warm start / presolver;
//  - a tiny time limit on a hard instance still returns a valid plan, never worse than the warm
//    start, which is never worse than transport;
//  - F(ILP) <= F(map_bins bottleneck) <= F(map_bins transport) on random instances, with the
//    warm-start figures equal to map_bins' own; every result's figures recomputed item by item;
//  - the size guard returns the warm start; bad options and bad inputs throw;
//  - node_limit stops the search at the same point on every run; glpk::bottleneck_ilp as a
//    mapper equals map_bins_bottleneck with its options, through map_bins and through a stage
//    declaration in plan_step (deterministic, fingerprinted by its knobs).

#include "orchmllm/backend/glpk/mapping.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "bench/support/workload.hpp"
#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/mapper.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/mapping_check.hpp"
#include "support/mapping_reference.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using orchmllm::test::uniform;

using instance = test::mapping_instance;

instance random_instance(std::mt19937_64& rng, topology topo, std::int64_t max_bytes = 1000) {
  return test::random_mapping_instance(rng, std::move(topo), max_bytes);
}

// A balancer plan: lognormal lengths, bytes = 4096 · length, balanced by `automatic`.
instance balancer_instance(rank_t d, rank_t g, std::int64_t items_per_rank, std::uint64_t seed) {
  auto layout = bench::lognormal_layout(d, items_per_rank, {}, seed);
  auto res = balance(layout, linear_cost{});
  std::vector<std::int64_t> bytes(layout.lengths().begin(), layout.lengths().end());
  for (auto& b : bytes) b *= 4096;
  return {topology::uniform(d, g), std::move(res.plan), std::move(bytes)};
}

// Checks a mapping result against the instance: bijection, plan, figures recomputed item by item.
void check_mapping(const mapping_result& res, const instance& in) {
  test::check_mapping_result(res, in.binned, in.bytes, in.topo);
}

// Checks the invariants of a bottleneck result (given map_bins' results on the same instance).
void check_bottleneck(const glpk::bottleneck_result& res, const instance& in) {
  check_mapping(res.mapping, in);
  const auto tr = map_bins(in.binned, in.bytes, in.topo, mappers::transport{});
  const auto bn = map_bins(in.binned, in.bytes, in.topo, mappers::bottleneck{});
  CHECK(res.objective == res.mapping.worst_node_bytes());
  CHECK(res.transport_objective == tr.worst_node_bytes());
  CHECK(res.warm_start_objective == bn.worst_node_bytes());
  CHECK(res.objective <= res.warm_start_objective);
  CHECK(res.warm_start_objective <= res.transport_objective);
  CHECK(res.best_bound <= static_cast<double>(res.objective));
  CHECK(res.best_bound >= 0.0);
  if (!res.improved_by_solver) CHECK(res.mapping.rank_of_bin == bn.rank_of_bin);
  if (!res.solver_ran) CHECK(res.solve_seconds == 0.0);
}

TEST_CASE("transport's inter-node bytes equal the GLPK transport LP optimum") {
  std::mt19937_64 rng(20261203);
  int cases = 0;
  for (rank_t d : {1, 2, 3, 5, 8, 13, 16, 31, 64, 100, 128, 256})
    for (rank_t g : {1, 2, 4, 8}) {
      if (g == 1 && d > 128) continue;  // 65,536 LP columns: slow in Debug, adds nothing
      INFO("d = ", d, ", G = ", g);
      const auto check = [&](const instance& in) {
        const auto tr = map_bins(in.binned, in.bytes, in.topo, mappers::transport{});
        const double lp = glpk::transport_lp_optimum(in.binned, in.bytes, in.topo);
        CHECK(std::llround(lp) == tr.inter_node_bytes);
        CHECK(std::fabs(lp - static_cast<double>(tr.inter_node_bytes)) <= 1e-6 * (1.0 + lp));
        ++cases;
      };
      check(random_instance(rng, topology::uniform(d, g)));
      if (d >= 2 && d <= 64) check(random_instance(rng, topology::uniform(d, g), 1'000'000'000));
      if (d >= 4)
        check(balancer_instance(d, g, 1 + uniform(rng, 0, 6), static_cast<std::uint64_t>(cases)));
    }
  CHECK(cases > 100);
}

TEST_CASE("the bottleneck integer program is optimal against brute force (d <= 8)") {
  std::mt19937_64 rng(20261204);
  int cases = 0, improved = 0, cold = 0;
  for (rank_t d = 1; d <= 8; ++d) {
    const int reps = d <= 6 ? 16 : (d == 7 ? 6 : 3);
    for (int rep = 0; rep < reps; ++rep) {
      const bool uneven = rep % 2 == 1;
      topology topo = uneven ? topology(test::random_node_map(
                                   rng, d, 1 + static_cast<rank_t>(uniform(rng, 0, d - 1))))
                             : topology::uniform(d, static_cast<rank_t>(uniform(rng, 1, d)));
      const auto in = random_instance(rng, std::move(topo), rep % 3 == 0 ? 5 : 1000);
      INFO("d = ", d, ", rep = ", rep, ", nodes = ", in.topo.num_nodes());
      const auto w = test::bin_rank_bytes(in.binned, in.bytes);
      const std::int64_t best = test::best_worst_node(w, in.topo);

      glpk::bottleneck_options opt;
      opt.warm_start = rep % 4 != 2;  // also cold starts
      opt.presolve = rep % 5 == 3;    // and GLPK's MIP presolver
      const auto res = glpk::map_bins_bottleneck(in.binned, in.bytes, in.topo, opt);
      check_bottleneck(res, in);
      CHECK(res.proven_optimal);
      CHECK_FALSE(res.timed_out);
      CHECK(res.objective == best);
      CHECK(test::worst_node_of(w, res.mapping.rank_of_bin, in.topo) == best);
      CHECK(res.best_bound == doctest::Approx(static_cast<double>(best)));
      // GLPK's own incumbent (not just the warm start it may have kept) is optimal whenever the
      // search ran to the end; cold starts always have one.
      if (res.solver_objective >= 0) CHECK(res.solver_objective == best);
      if (!opt.warm_start && in.topo.num_nodes() > 1 && best > 0) {
        CHECK(res.solver_ran);
        CHECK(res.solver_objective == best);
        ++cold;
      }
      if (res.objective < res.warm_start_objective) ++improved;
      ++cases;
    }
  }
  CHECK(cases == 6 * 16 + 6 + 3);
  CHECK(cold >= 10);
  MESSAGE("GLPK beat the header-only bottleneck on ", improved, " of ", cases, " instances");
}

TEST_CASE("a tiny time limit still returns a valid plan no worse than the warm start") {
  for (const auto& [d, g] : {std::pair<rank_t, rank_t>{256, 8}, {512, 8}, {250, 8}}) {
    INFO("d = ", d, ", G = ", g);
    const auto in = balancer_instance(d, g, 6, 7);
    glpk::bottleneck_options opt;
    opt.time_limit_seconds = 0.002;
    const auto res = glpk::map_bins_bottleneck(in.binned, in.bytes, in.topo, opt);
    check_bottleneck(res, in);
    CHECK(res.solver_ran);
    CHECK(res.model_unit_bytes % 4096 == 0);
    // Either GLPK ran out of time or (a very fast machine) finished: both are reported.
    CHECK((res.timed_out || res.proven_optimal || res.glpk_return_code != 0));
  }
}

TEST_CASE("F(ILP) <= F(map_bins bottleneck) <= F(map_bins transport) on random instances") {
  std::mt19937_64 rng(20261205);
  int cases = 0, improved = 0;
  for (rank_t d : {6, 12, 16, 24, 33, 48, 64})
    for (rank_t g : {2, 4, 8}) {
      INFO("d = ", d, ", G = ", g);
      glpk::bottleneck_options opt;
      opt.time_limit_seconds = 0.5;
      const auto a = random_instance(rng, topology::uniform(d, g));
      const auto ra = glpk::map_bins_bottleneck(a.binned, a.bytes, a.topo, opt);
      check_bottleneck(ra, a);
      const auto b = balancer_instance(d, g, 4, static_cast<std::uint64_t>(d * 10 + g));
      const auto rb = glpk::map_bins_bottleneck(b.binned, b.bytes, b.topo, opt);
      check_bottleneck(rb, b);
      for (const auto* r : {&ra, &rb}) {
        if (r->objective < r->warm_start_objective) {
          ++improved;
          CHECK(r->improved_by_solver);
        }
        if (r->solver_objective >= 0) CHECK(r->objective <= r->solver_objective);
      }
      cases += 2;
    }
  CHECK(cases == 42);
  MESSAGE("GLPK beat the header-only bottleneck on ", improved, " of ", cases, " instances");
}

TEST_CASE("the size guard and trivial instances skip GLPK") {
  std::mt19937_64 rng(20261206);
  const auto in = balancer_instance(64, 8, 4, 3);
  glpk::bottleneck_options opt;
  opt.max_columns = 64 * 8;  // the model needs 64 · 8 + 1
  const auto res = glpk::map_bins_bottleneck(in.binned, in.bytes, in.topo, opt);
  check_bottleneck(res, in);
  CHECK_FALSE(res.solver_ran);
  CHECK_FALSE(res.timed_out);
  CHECK_FALSE(res.improved_by_solver);
  CHECK(res.objective == res.warm_start_objective);

  // One node: F = 0, nothing to solve.
  const auto one = random_instance(rng, topology::uniform(8, 8));
  const auto r1 = glpk::map_bins_bottleneck(one.binned, one.bytes, one.topo);
  check_bottleneck(r1, one);
  CHECK(r1.objective == 0);
  CHECK(r1.proven_optimal);
  CHECK_FALSE(r1.solver_ran);

  // No items at all.
  const instance empty{topology::uniform(4, 2),
                       rearrangement::identity(std::vector<std::int64_t>{0, 0, 0, 0, 0}),
                       {}};
  const auto r2 = glpk::map_bins_bottleneck(empty.binned, empty.bytes, empty.topo);
  check_bottleneck(r2, empty);
  CHECK(r2.objective == 0);
  CHECK(glpk::transport_lp_optimum(empty.binned, empty.bytes, empty.topo) == 0.0);
}

TEST_CASE("bad options and bad inputs throw invalid_argument_error") {
  const auto in = balancer_instance(8, 4, 3, 1);
  const auto run = [&](glpk::bottleneck_options opt) {
    (void)glpk::map_bins_bottleneck(in.binned, in.bytes, in.topo, opt);
  };
  for (double t : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    glpk::bottleneck_options opt;
    opt.time_limit_seconds = t;
    test::expect_invalid([&] { run(opt); }, {"time limit", "positive and finite"});
  }
  for (std::int64_t c : {std::int64_t{-1}, (std::int64_t{1} << 28) + 1}) {
    glpk::bottleneck_options opt;
    opt.max_columns = c;
    test::expect_invalid([&] { run(opt); }, {"max_columns", std::to_string(c)});
  }
  const std::vector<std::int64_t> short_bytes(in.bytes.begin(), in.bytes.end() - 1);
  test::expect_invalid([&] { (void)glpk::map_bins_bottleneck(in.binned, short_bytes, in.topo); },
                       {"item sizes"});
  test::expect_invalid([&] { (void)glpk::transport_lp_optimum(in.binned, short_bytes, in.topo); },
                       {"item sizes"});
  test::expect_invalid(
      [&] { (void)glpk::map_bins_bottleneck(in.binned, in.bytes, topology::uniform(9, 3)); },
      {"9 ranks"});
  auto negative = in.bytes;
  negative[0] = -5;
  test::expect_invalid([&] { (void)glpk::map_bins_bottleneck(in.binned, negative, in.topo); },
                       {"-5 bytes"});
}

}  // namespace

// The integer program as a mapper (glpk::bottleneck_ilp) and its node limit.

TEST_CASE(
    "node_limit stops the branch-and-cut deterministically, never worse than the warm start") {
  std::mt19937_64 rng(20261207);
  int stopped = 0, runs = 0;
  for (rank_t d : {12, 16, 24, 33, 48})
    for (rank_t g : {2, 4}) {
      INFO("d = ", d, ", G = ", g);
      const auto in = random_instance(rng, topology::uniform(d, g));
      for (std::int64_t limit : {0, 1, 5}) {
        glpk::bottleneck_options opt;
        opt.time_limit_seconds = 60;
        opt.node_limit = limit;
        const auto a = glpk::map_bins_bottleneck(in.binned, in.bytes, in.topo, opt);
        check_bottleneck(a, in);
        // Counting nodes, not seconds: the same stop, the same plan.
        const auto b = glpk::map_bins_bottleneck(in.binned, in.bytes, in.topo, opt);
        CHECK(a.mapping.rank_of_bin == b.mapping.rank_of_bin);
        CHECK(a.node_limit_reached == b.node_limit_reached);
        if (a.node_limit_reached) {
          ++stopped;
          CHECK_FALSE(a.proven_optimal);
          CHECK(a.glpk_return_code == GLP_ESTOP);
        }
        ++runs;
      }
    }
  MESSAGE("the node limit stopped GLPK in ", stopped, " of ", runs, " runs");
  CHECK(stopped > 0);  // these instances do branch
  glpk::bottleneck_options bad;
  bad.node_limit = -2;
  const auto in = balancer_instance(8, 4, 3, 1);
  test::expect_invalid([&] { (void)glpk::map_bins_bottleneck(in.binned, in.bytes, in.topo, bad); },
                       {"node_limit", "-2"});
}

TEST_CASE("glpk::bottleneck_ilp as a mapper: map_bins_bottleneck's plan, deterministic") {
  static_assert(mapper<glpk::bottleneck_ilp>);
  std::mt19937_64 rng(20261208);
  for (rank_t d : {6, 12, 16, 24, 40})
    for (rank_t g : {2, 4, 8}) {
      INFO("d = ", d, ", G = ", g);
      const auto in = random_instance(rng, topology::uniform(d, g));
      const glpk::bottleneck_ilp ilp{.node_limit = 50};
      const auto got = map_bins(in.binned, in.bytes, in.topo, ilp);
      check_mapping(got, in);
      CHECK(got.worst_node_bytes() <=
            map_bins(in.binned, in.bytes, in.topo, mappers::bottleneck{}).worst_node_bytes());
      // The same as the function with the mapper's options (a time limit it never reaches).
      auto opt = ilp.options();
      opt.time_limit_seconds = 600;
      const auto want = glpk::map_bins_bottleneck(in.binned, in.bytes, in.topo, opt);
      CHECK_FALSE(want.timed_out);
      CHECK(got.rank_of_bin == want.mapping.rank_of_bin);
      CHECK(got.plan == want.mapping.plan);
      CHECK(map_bins(in.binned, in.bytes, in.topo, ilp).rank_of_bin == got.rank_of_bin);
    }
  test::expect_invalid(
      [] {
        const auto in = balancer_instance(8, 4, 3, 1);
        (void)map_bins(in.binned, in.bytes, in.topo, glpk::bottleneck_ilp{.node_limit = -3});
      },
      {"node_limit", "-3"});
  CHECK(glpk::bottleneck_ilp{}.name() ==
        "glpk::bottleneck_ilp(node_limit=2000,warm_start=1,max_columns=131073)");
}

TEST_CASE("glpk::bottleneck_ilp in a stage declaration: plan_step maps the LLM stage with it") {
  std::mt19937_64 rng(20261209);
  for (int trial = 0; trial < 6; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 4, 24));
    const auto topo = topology::uniform(d, static_cast<rank_t>(uniform(rng, 1, 4)));
    std::vector<local_batch> batches(static_cast<std::size_t>(d));
    for (auto& b : batches)
      for (std::int64_t s = 0, k = uniform(rng, 0, 6); s < k; ++s)
        b.text_tokens.push_back(uniform(rng, 1, 2000));
    const auto meta = make_step_metadata(batches, 0);
    INFO("trial ", trial, ", d = ", d);
    stage_declarations identity;
    identity.llm.cost = linear_cost{};
    identity.llm.text_row_bytes = 8;
    identity.llm.mapper = mappers::identity{};
    auto decl = identity;
    decl.llm.mapper = glpk::bottleneck_ilp{.node_limit = 20};
    CHECK(decl.llm.mapper.custom());
    CHECK(decl.llm.mapper.name() == glpk::bottleneck_ilp{.node_limit = 20}.name());
    auto other_limit = identity;
    other_limit.llm.mapper = glpk::bottleneck_ilp{.node_limit = 21};
    CHECK(fingerprint(decl) != fingerprint(identity));
    CHECK(fingerprint(decl) != fingerprint(other_limit));
    CHECK_NOTHROW(decl.validate());
    const auto base = plan_step(identity, meta, topo);  // the balanced bins
    const auto got = plan_step(decl, meta, topo);
    const auto bytes = got.llm_layout.item_bytes();
    const auto want = map_bins(base.llm, bytes, topo, glpk::bottleneck_ilp{.node_limit = 20});
    test::check_mapping_result(want, base.llm, bytes, topo);
    CHECK(got.llm == want.plan);
    CHECK(got.stages.back().inter_node_bytes == want.inter_node_bytes);
    CHECK(want.worst_node_bytes() <=
          map_bins(base.llm, bytes, topo, mappers::bottleneck{}).worst_node_bytes());
    CHECK(plan_step(decl, meta, topo).llm == got.llm);  // every rank gets the same plan
  }
}
