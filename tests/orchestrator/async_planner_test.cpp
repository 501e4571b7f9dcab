// Tests for include/orchmllm/orchestrator/async_planner.hpp: plans equal plan_step's, in
// submission order (also on every rank of a local group, each with its own planner); the queue
// is bounded (in_flight never exceeds max_pending, submit beyond it throws and works again after
// next()); plans can be taken on another thread; a step whose
// planning throws rethrows from its own next() and later steps are fine; next() without a
// submitted step throws; destruction with queued or unconsumed work returns.

#include "orchmllm/orchestrator/async_planner.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "orchmllm/comm/local.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::async_planner;
using orchmllm::capacity;
using orchmllm::encoder_stage;
using orchmllm::infeasible_error;
using orchmllm::invalid_argument_error;
using orchmllm::local_batch;
using orchmllm::rank_t;
using orchmllm::stage_declarations;
using orchmllm::step_metadata;
using orchmllm::step_plan;
using orchmllm::sub_item;
using orchmllm::topology;
using orchmllm::test::uniform;
using namespace std::chrono_literals;

constexpr rank_t ranks = 6;

stage_declarations declarations() {
  stage_declarations decl;
  decl.encoders.push_back(encoder_stage{.name = "vision",
                                        .cost = orchmllm::quadratic_cost{0, 1, 0.01},
                                        .input_row_bytes = 24,
                                        .output_row_bytes = 32});
  decl.encoders.push_back(encoder_stage{
      .name = "audio", .policy = orchmllm::padded, .input_row_bytes = 16, .output_row_bytes = 32});
  decl.encoders[0].limits.cap = capacity{capacity::measure::tokens, 1000};
  decl.llm.cost = orchmllm::quadratic_cost{0, 1, 0.001};
  decl.llm.text_row_bytes = 8;
  return decl;
}

std::vector<local_batch> random_batches(std::mt19937_64& rng, rank_t d) {
  std::vector<local_batch> out(static_cast<std::size_t>(d));
  for (auto& b : out) {
    const auto samples = uniform(rng, 0, 6);
    for (std::int64_t i = 0; i < samples; ++i) {
      b.text_tokens.push_back(uniform(rng, 0, 60));
      const auto subs = uniform(rng, 0, 3);
      for (std::int64_t s = 0; s < subs; ++s)
        b.sub_items.push_back(sub_item{.modality = static_cast<std::int32_t>(uniform(rng, 0, 1)),
                                       .parent = i,
                                       .encoder_length = uniform(rng, 1, 200),
                                       .input_rows = uniform(rng, 0, 4),
                                       .llm_tokens = uniform(rng, 0, 8)});
    }
  }
  return out;
}

std::vector<step_metadata> random_steps(std::uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  std::vector<step_metadata> steps;
  for (int t = 0; t < count; ++t)
    steps.push_back(orchmllm::make_step_metadata(random_batches(rng, ranks), 2));
  return steps;
}

// Everything but plan_seconds (a wall time).
bool same_plan(const step_plan& a, const step_plan& b) {
  if (!(a.llm == b.llm) || a.encoders.size() != b.encoders.size() ||
      a.stages.size() != b.stages.size() ||
      a.llm_layout.lengths().size() != b.llm_layout.lengths().size())
    return false;
  for (std::size_t k = 0; k < a.encoders.size(); ++k) {
    const auto& x = a.encoders[k];
    const auto& y = b.encoders[k];
    if (!(x.input == y.input) || !(x.lifted == y.lifted) || !(x.output == y.output) ||
        !(x.gradient == y.gradient))
      return false;
  }
  if (a.routes.rank != b.routes.rank || a.routes.all.size() != b.routes.all.size()) return false;
  for (std::size_t i = 0; i < a.routes.all.size(); ++i)
    if (a.routes.all[i].fingerprint() != b.routes.all[i].fingerprint()) return false;
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    const auto& x = a.stages[s];
    const auto& y = b.stages[s];
    if (x.name != y.name || x.used != y.used || x.makespan_before != y.makespan_before ||
        x.makespan_after != y.makespan_after || x.imbalance_after != y.imbalance_after ||
        x.moved_bytes != y.moved_bytes || x.inter_node_bytes != y.inter_node_bytes ||
        x.max_tokens_after != y.max_tokens_after || x.max_bytes_after != y.max_bytes_after)
      return false;
  }
  return true;
}

}  // namespace

TEST_CASE("async_planner: the same plans as plan_step, in submission order, bounded") {
  const auto decl = declarations();
  const auto topo = topology::uniform(ranks, 4);  // nodes of 4 + 2 ranks
  const auto steps = random_steps(101, 10);
  std::vector<step_plan> inline_plans;
  for (const auto& m : steps) inline_plans.push_back(orchmllm::plan_step(decl, m, topo));

  for (std::size_t max_pending : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
    INFO("max_pending = ", max_pending);
    async_planner planner(decl, topo, max_pending);
    CHECK(planner.in_flight() == 0);
    std::size_t submitted = 0;
    for (; submitted < max_pending; ++submitted) {
      planner.submit(steps[submitted]);
      CHECK(planner.in_flight() == submitted + 1);
    }
    for (std::size_t t = 0; t < steps.size(); ++t) {
      const auto plan = planner.next();
      CHECK(same_plan(plan, inline_plans[t]));
      CHECK(planner.in_flight() == submitted - t - 1);
      if (submitted < steps.size()) {
        planner.submit(steps[submitted++]);
        CHECK(planner.in_flight() <= max_pending);
      }
    }
    CHECK(planner.in_flight() == 0);
    CHECK_THROWS_AS((void)planner.next(), invalid_argument_error);
  }
}

TEST_CASE("async_planner: identical plans on every rank of a group") {
  const auto decl = declarations();
  std::mt19937_64 rng(7);
  std::vector<std::vector<local_batch>> batches;
  for (int t = 0; t < 4; ++t) batches.push_back(random_batches(rng, ranks));
  std::vector<std::vector<std::uint64_t>> prints(ranks);
  std::vector<int> matches(ranks, 0);
  orchmllm::local::run(
      ranks,
      [&](orchmllm::local::communicator& comm) {
        const auto me = static_cast<std::size_t>(comm.rank());
        const auto topo = topology::uniform(ranks, 2);
        // The worker also builds this rank's routes; the training thread agrees on them.
        const orchmllm::plan_options options{.routes_for = comm.rank()};
        async_planner planner(decl, topo, 2, options);
        planner.submit(orchmllm::gather_step_metadata(comm, decl, batches[0][me]));
        for (std::size_t t = 0; t < batches.size(); ++t) {
          const auto plan = planner.next();
          if (t + 1 < batches.size())
            planner.submit(orchmllm::gather_step_metadata(comm, decl, batches[t + 1][me]));
          orchmllm::agree_on_routes(comm, std::span<const orchmllm::route>(plan.routes.all));
          const auto meta = orchmllm::make_step_metadata(batches[t], 2);
          if (plan.routes.rank == comm.rank() &&
              same_plan(plan, orchmllm::plan_step(decl, meta, topo, options)))
            ++matches[me];
          prints[me].push_back(orchmllm::fingerprint(plan.llm) ^
                               (orchmllm::fingerprint(plan.encoders[0].output) << 1));
        }
      },
      {.ranks_per_node = 2, .timeout = 60s});
  for (std::size_t r = 0; r < ranks; ++r) {
    CHECK(matches[r] == 4);
    CHECK(prints[r] == prints[0]);
  }
}

TEST_CASE("async_planner: submit refuses a step beyond max_pending, accepts again after next()") {
  const auto decl = declarations();
  const auto topo = topology::uniform(ranks, 2);
  const auto steps = random_steps(202, 3);
  async_planner planner(decl, topo, 2);
  planner.submit(steps[0]);
  planner.submit(steps[1]);
  CHECK(planner.in_flight() == 2);
  orchmllm::test::expect_invalid([&] { planner.submit(steps[2]); },
                                 {"2 steps are in flight", "limit is 2", "next()"});
  CHECK(planner.in_flight() == 2);
  CHECK(same_plan(planner.next(), orchmllm::plan_step(decl, steps[0], topo)));
  planner.submit(steps[2]);
  CHECK(planner.in_flight() == 2);
  CHECK(same_plan(planner.next(), orchmllm::plan_step(decl, steps[1], topo)));
  CHECK(same_plan(planner.next(), orchmllm::plan_step(decl, steps[2], topo)));
  CHECK(planner.in_flight() == 0);
}

TEST_CASE("async_planner: a consumer thread takes plans in submission order") {
  const auto decl = declarations();
  const auto topo = topology::uniform(ranks, 2);
  const auto steps = random_steps(404, 6);
  async_planner planner(decl, topo, 6);
  for (const auto& m : steps) planner.submit(m);  // next() without a submitted step throws
  std::vector<orchmllm::step_plan> got;
  std::thread consumer([&] {
    for (std::size_t t = 0; t < steps.size(); ++t) got.push_back(planner.next());
  });
  consumer.join();
  REQUIRE(got.size() == steps.size());
  for (std::size_t t = 0; t < steps.size(); ++t)
    CHECK(same_plan(got[t], orchmllm::plan_step(decl, steps[t], topo)));
}

TEST_CASE("async_planner: planning errors surface at their own step") {
  const auto decl = declarations();  // vision: per-rank cap of 1000 tokens
  const auto topo = topology::uniform(ranks, 3);
  auto steps = random_steps(303, 5);
  // Step 1: a vision item of 5000 tokens, above the cap. Step 3: metadata of another rank count.
  {
    std::mt19937_64 rng(9);
    auto b = random_batches(rng, ranks);
    b[2].text_tokens.push_back(1);
    b[2].sub_items.push_back(
        sub_item{.modality = 0,
                 .parent = static_cast<std::int64_t>(b[2].text_tokens.size()) - 1,
                 .encoder_length = 5000,
                 .input_rows = 1,
                 .llm_tokens = 1});
    steps[1] = orchmllm::make_step_metadata(b, 2);
    b.pop_back();
    steps[3] = orchmllm::make_step_metadata(b, 2);
  }
  async_planner planner(decl, topo, 5);
  for (const auto& m : steps) planner.submit(m);
  CHECK(same_plan(planner.next(), orchmllm::plan_step(decl, steps[0], topo)));
  orchmllm::test::expect_error<infeasible_error>([&] { (void)planner.next(); },
                                                 {"stage 'vision'", "cap of 1000"});
  CHECK(same_plan(planner.next(), orchmllm::plan_step(decl, steps[2], topo)));
  orchmllm::test::expect_invalid([&] { (void)planner.next(); },
                                 {"metadata of 5 ranks", "topology of 6"});
  CHECK(same_plan(planner.next(), orchmllm::plan_step(decl, steps[4], topo)));
  CHECK(planner.in_flight() == 0);
  // The planner keeps working after errors.
  planner.submit(steps[1]);
  planner.submit(steps[0]);
  CHECK_THROWS_AS((void)planner.next(), infeasible_error);
  CHECK(same_plan(planner.next(), orchmllm::plan_step(decl, steps[0], topo)));
}

TEST_CASE("async_planner: bad use and destruction") {
  const auto decl = declarations();
  const auto topo = topology::uniform(ranks, 2);
  orchmllm::test::expect_invalid([&] { async_planner p(decl, topo, 0); }, {"max_pending is 0"});
  auto bad = decl;
  bad.encoders[1].name = "vision";
  orchmllm::test::expect_invalid([&] { async_planner p(bad, topo); },
                                 {"two stages are named 'vision'"});
  {
    async_planner p(decl, topo);
    orchmllm::test::expect_invalid([&] { (void)p.next(); }, {"without a submitted step"});
  }  // destroyed without any work
  const auto steps = random_steps(404, 4);
  {
    async_planner p(decl, topo, 4);
    for (const auto& m : steps) p.submit(m);
  }  // destroyed with queued work: returns (the test would hang otherwise)
  {
    async_planner p(decl, topo, 4);
    for (const auto& m : steps) p.submit(m);
    (void)p.next();
    (void)p.next();
  }  // destroyed with planned, unconsumed results
  CHECK(true);
}
