// Tests of micro-batches in the orchestrator (`encoder_stage::micro_batches`,
// `llm_stage::micro_batches`, `step_plan::micro_batches`): on random steps and topologies every
// rank runs the same M micro-batches, each a range of its received slots under the token limit,
// the stage report's objective is what the cells cost (recomputed from the plan), stages
// without the option have none; bad declarations raise errors naming the stage, and the
// fingerprint tells declarations with and without micro-batches apart. (End to end along the
// routes, with the payloads checked: orchestrator_routes_test.cpp.)

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "orchmllm/balance/micro_batches.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/micro_batch_objective.hpp"
#include "support/orchestrator_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::micro_batching;
using orchmllm::rank_t;
using orchmllm::sync_model;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;
using namespace orchmllm::test::orchestrator_fixtures;  // support/orchestrator_fixtures.hpp

// Per cell (r, m) of the LLM stage: its physical tokens and its load under the stage's model.
struct llm_cells {
  std::vector<std::int64_t> tokens;
  std::vector<double> load;
};

llm_cells llm_cells_of(const orchmllm::step_plan& plan, const orchmllm::step_metadata& meta,
                       const orchmllm::llm_stage& llm, rank_t d) {
  const auto& mb = plan.micro_batches.back();
  llm_cells out;
  out.tokens.assign(static_cast<std::size_t>(d * mb.count), 0);
  out.load.assign(out.tokens.size(), 0.0);
  for (rank_t r = 0; r < d; ++r) {
    const auto samples = plan.llm_view(meta, r).samples;
    for (std::int64_t m = 0; m < mb.count; ++m) {
      const auto [first, last] = mb.slots(r, m);
      std::int64_t sum = 0, longest = 0, count = last - first;
      double load = 0;
      for (auto s = first; s < last; ++s) {
        const auto len = meta.sequence_length(samples[static_cast<std::size_t>(s)]);
        sum += len;
        longest = std::max(longest, len);
        llm.cost.visit([&](const auto& c) { load += static_cast<double>(c(len)); });
      }
      const auto i = static_cast<std::size_t>(r * mb.count + m);
      if (llm.policy.is_padded()) {
        out.tokens[i] = count * llm.policy.padded_length(longest);
        double unit = 0;
        llm.cost.visit([&](const auto& c) {
          unit = static_cast<double>(c(llm.policy.padded_length(longest)));
        });
        out.load[i] = count > 0 ? static_cast<double>(count) * unit : 0.0;
      } else {
        out.tokens[i] = sum;
        out.load[i] = load;
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("plan_step with micro-batches: the same M everywhere, ranges under the token limit") {
  std::mt19937_64 rng(4242);
  int checked = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 12));
    const int k_count = trial % 3;
    auto decl = random_decl(rng, k_count);
    const auto batches = random_batches(rng, d, k_count);
    const auto meta = orchmllm::make_step_metadata(batches, k_count);
    std::int64_t longest = 1;
    for (std::int64_t g = 0; g < meta.num_samples(); ++g)
      longest = std::max(longest, meta.sequence_length(g));
    micro_batching llm_micro;
    llm_micro.limits.tokens = decl.llm.policy.padded_length(longest) * uniform(rng, 1, 3);
    llm_micro.allow_empty = true;
    llm_micro.sync = trial % 2 == 0 ? sync_model::micro_batch : sync_model::step;
    llm_micro.multiple_of = trial % 4 == 0 ? 2 : 1;
    decl.llm.micro_batches = llm_micro;
    if (k_count > 0) {
      micro_batching enc;
      enc.count = 2;
      enc.allow_empty = true;
      enc.sync = sync_model::step;
      decl.encoders[0].micro_batches = enc;
    }
    const auto topo = random_topology(rng, d);
    const auto plan = orchmllm::plan_step(decl, meta, topo);
    CAPTURE(trial);
    REQUIRE(plan.micro_batches.size() == static_cast<std::size_t>(k_count + 1));
    const auto& mb = plan.micro_batches.back();
    CHECK(mb.count >= 1);
    CHECK(mb.count % llm_micro.multiple_of == 0);
    REQUIRE(mb.offsets.size() == static_cast<std::size_t>(d * mb.count + 1));
    CHECK(mb.offsets.front() == 0);
    CHECK(mb.offsets.back() == meta.num_samples());
    CHECK(std::is_sorted(mb.offsets.begin(), mb.offsets.end()));
    // Rank r's cells tile its received slots.
    for (rank_t r = 0; r < d; ++r)
      CHECK(mb.slots(r, mb.count - 1).second ==
            static_cast<std::int64_t>(plan.llm_view(meta, r).samples.size()));
    const auto cells = llm_cells_of(plan, meta, decl.llm, d);
    CHECK(*std::max_element(cells.tokens.begin(), cells.tokens.end()) <= llm_micro.limits.tokens);
    const auto& report = plan.stages.back();
    CHECK(report.micro_batches == mb.count);
    CHECK(report.objective_after ==
          doctest::Approx(orchmllm::test::cells_objective(cells.load, d, mb.count, llm_micro.sync))
              .epsilon(1e-9));
    CHECK(report.objective_lower_bound <= report.objective_after * (1 + 1e-12));
    CHECK(report.objective_before >= report.objective_lower_bound * (1 - 1e-12));
    if (k_count > 0) {
      const auto& enc = plan.micro_batches.front();
      CHECK(enc.count == 2);
      REQUIRE(enc.offsets.size() == static_cast<std::size_t>(2 * d + 1));
      CHECK(enc.offsets.back() == plan.encoders.front().units().num_items());
      for (rank_t r = 0; r < d; ++r)
        CHECK(enc.slots(r, 1).second ==
              static_cast<std::int64_t>(plan.encoder_view(meta, 0, r).size()));
    }
    for (int k = 1; k < k_count; ++k) {
      CHECK(plan.micro_batches[static_cast<std::size_t>(k)].count == 0);
      CHECK(plan.stages[static_cast<std::size_t>(k)].micro_batches == 0);
    }
    ++checked;
  }
  CHECK(checked == 30);
}

TEST_CASE("plan_step with micro-batches: the cells of one rank follow its slots in run order") {
  // Eight equal samples on two ranks, four micro-batches each: every cell holds one sample, and
  // rank r's micro-batch m is its slot m.
  std::vector<orchmllm::local_batch> batches(2);
  for (auto& b : batches) b.text_tokens = {100, 100, 100, 100};
  const auto meta = orchmllm::make_step_metadata(batches, 0);
  orchmllm::stage_declarations decl;
  micro_batching micro;
  micro.limits.tokens = 100;
  decl.llm.micro_batches = micro;
  const auto plan = orchmllm::plan_step(decl, meta, orchmllm::topology::uniform(2, 0));
  const auto& mb = plan.micro_batches.back();
  REQUIRE(mb.count == 4);
  for (rank_t r = 0; r < 2; ++r)
    for (std::int64_t m = 0; m < 4; ++m)
      CHECK(mb.slots(r, m) == std::pair<std::int64_t, std::int64_t>{m, m + 1});
  CHECK(plan.stages.back().objective_after == 400);
  CHECK(plan.stages.back().objective_lower_bound == 400);
  expect_invalid([&] { (void)mb.slots(2, 0); }, {"rank 2"});
  expect_invalid([&] { (void)mb.slots(0, 4); }, {"micro-batch 4"});
  expect_invalid([] { (void)orchmllm::stage_micro_batches{}.slots(0, 0); }, {"no micro-batches"});
}

TEST_CASE("micro-batch declarations: bad options name the stage; the fingerprint sees them") {
  orchmllm::stage_declarations decl;
  decl.encoders.push_back(orchmllm::encoder_stage{.name = "vision"});
  const auto plain = orchmllm::fingerprint(decl);
  auto with = decl;
  with.llm.micro_batches = micro_batching{};
  CHECK(orchmllm::fingerprint(with) != plain);
  auto other = with;
  other.llm.micro_batches->sync = sync_model::step;
  CHECK(orchmllm::fingerprint(other) != orchmllm::fingerprint(with));

  auto bad = decl;
  bad.encoders[0].micro_batches = micro_batching{.count = -1};
  expect_invalid([&] { bad.validate(); }, {"stage 'vision'", "micro-batch count"});
  bad = decl;
  bad.encoders[0].micro_batches = micro_batching{};
  bad.encoders[0].split = orchmllm::split_options{};
  expect_invalid([&] { bad.validate(); }, {"stage 'vision'", "split and micro_batches"});
  bad = decl;
  bad.llm.micro_batches = micro_batching{};
  bad.llm.balancer = orchmllm::stage_balancer(
      [](const auto& p) { return std::vector<rank_t>(static_cast<std::size_t>(p.num_items()), 0); },
      "mine");
  expect_invalid([&] { bad.validate(); }, {"stage 'llm'", "built-in balancer", "'mine'"});
}

TEST_CASE("plan_step counts the loss tokens of every LLM micro-batch; loss_scale is per token") {
  std::mt19937_64 rng(9001);
  for (int trial = 0; trial < 24; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 10));
    const int k_count = trial % 3;
    auto decl = random_decl(rng, k_count);
    const auto batches = random_batches(rng, d, k_count);  // odd ranks name their loss tokens
    const auto meta = orchmllm::make_step_metadata(batches, k_count);
    if (trial % 2 == 1) {
      micro_batching micro;
      micro.count = uniform(rng, 1, 3);
      micro.allow_empty = true;
      decl.llm.micro_batches = micro;
    }
    const auto plan = orchmllm::plan_step(decl, meta, random_topology(rng, d));
    CAPTURE(trial);
    std::int64_t total = 0;
    for (rank_t r = 0; r < d; ++r) {
      const auto& b = batches[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < b.text_tokens.size(); ++i) {
        const auto want = r % 2 == 1 ? (b.text_tokens[i] + 1) / 2 : b.text_tokens[i];
        CHECK(meta.loss_tokens_of(meta.sample_offsets[static_cast<std::size_t>(r)] +
                                  static_cast<std::int64_t>(i)) == want);
        total += want;
      }
    }
    CHECK(plan.loss_tokens == total);
    const auto& mb = plan.micro_batches.back();
    const std::int64_t m_count = mb.count > 0 ? mb.count : 1;
    REQUIRE(plan.micro_batch_loss_tokens.size() == static_cast<std::size_t>(d * m_count));
    for (rank_t r = 0; r < d; ++r) {
      const auto samples = plan.llm_view(meta, r).samples;
      for (std::int64_t m = 0; m < m_count; ++m) {
        const auto [first, last] = mb.count > 0 ? mb.slots(r, m)
                                                : std::pair<std::int64_t, std::int64_t>{
                                                      0, static_cast<std::int64_t>(samples.size())};
        std::int64_t sum = 0;
        for (auto s = first; s < last; ++s)
          sum += meta.loss_tokens_of(samples[static_cast<std::size_t>(s)]);
        CHECK(plan.loss_tokens_of(r, m) == sum);
      }
    }
    if (total > 0) {
      CHECK(plan.loss_scale(orchmllm::gradient_reduction::sum) == 1.0 / static_cast<double>(total));
      CHECK(plan.loss_scale() == static_cast<double>(d) / static_cast<double>(total));
    } else {
      CHECK(plan.loss_scale() == 0.0);
    }
    expect_invalid([&] { (void)plan.loss_tokens_of(d, 0); }, {"rank"});
  }
}

TEST_CASE("loss tokens of a local batch: one per sample and non-negative, or none") {
  std::vector<orchmllm::local_batch> batches(2);
  batches[0].text_tokens = {10, 20};
  batches[1].text_tokens = {5};
  batches[1].loss_tokens = {1, 2};
  expect_invalid([&] { (void)orchmllm::make_step_metadata(batches, 0); },
                 {"rank 1", "loss_tokens has 2 entries for 1 samples"});
  batches[1].loss_tokens = {-3};
  expect_invalid([&] { (void)orchmllm::make_step_metadata(batches, 0); },
                 {"rank 1", "sample 0 has -3 loss tokens"});
  batches[1].loss_tokens = {4};
  const auto meta = orchmllm::make_step_metadata(batches, 0);
  CHECK(meta.loss_tokens == std::vector<std::int64_t>{10, 20, 4});
}
