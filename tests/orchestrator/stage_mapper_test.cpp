// Tests for `stage_mapper` (include/orchmllm/orchestrator/stages.hpp) and its use by `plan_step`
// (orchestrator.hpp):
//  - the default (transport), built-in and custom holders, their names; a bad auction tolerance
//    fails at declaration;
//  - fingerprints: a built-in object, an any_mapper holding it and a parsed name agree; knobs
//    and custom mappers (by name) differ;
//  - a built-in mapper object plans exactly like an any_mapper holding it (parsed by name);
//  - an application's mapper in a stage: the stage's plan is that mapper applied to the stage's
//    balanced bins (checked against map_bins with the same mapper), a permutation of the bins,
//    the same loads as the identity mapping; its fingerprint differs, and by name;
//  - every built-in, with its default knobs or its own (an auction's tolerance, a bottleneck's
//    budget), plans like the same object behind an application's wrapper, on small steps, on
//    steps large enough for the parallel paths and on a stage without items;
//  - a stage mapper that returns a non-permutation makes plan_step throw invalid_argument_error.

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/mapper.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/mapping_check.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using orchmllm::test::uniform;

// Two encoders and the LLM, with built-in mappers other than the default on two stages.
stage_declarations mapped_two_encoders() {
  stage_declarations decl;
  decl.encoders.push_back({.name = "vision",
                           .cost = quadratic_cost{0.0, 1.0, 1e-3},
                           .mapper = mappers::bottleneck{},
                           .input_row_bytes = 3 * 14 * 14,
                           .output_row_bytes = 2048});
  decl.encoders.push_back({.name = "audio",
                           .cost = linear_cost{2},
                           .policy = padded,
                           .input_row_bytes = 128,
                           .output_row_bytes = 2048});
  decl.llm.cost = linear_cost{};
  decl.llm.mapper = mappers::identity{};
  decl.llm.text_row_bytes = 8;
  return decl;
}

// One vision stage and the LLM; every sample has text, about half an image.
struct step_input {
  topology topo;
  step_metadata meta;
};

step_input random_step(std::mt19937_64& rng, rank_t d) {
  std::vector<local_batch> batches(static_cast<std::size_t>(d));
  for (auto& b : batches) {
    const auto samples = uniform(rng, 0, 6);
    for (std::int64_t s = 0; s < samples; ++s) {
      b.text_tokens.push_back(uniform(rng, 1, 700));
      if (uniform(rng, 0, 1) == 1)
        b.sub_items.push_back({.modality = 0,
                               .parent = s,
                               .encoder_length = uniform(rng, 1, 1024),
                               .input_rows = uniform(rng, 0, 16),
                               .llm_tokens = uniform(rng, 1, 64)});
    }
  }
  const auto g = static_cast<rank_t>(uniform(rng, 1, d));
  return {topology::uniform(d, g), make_step_metadata(batches, 1)};
}

stage_declarations vision_and_llm() {
  stage_declarations decl;
  decl.encoders.push_back({.name = "vision",
                           .cost = quadratic_cost{0.0, 1.0, 1e-3},
                           .input_row_bytes = 588,
                           .output_row_bytes = 2048});
  decl.llm.cost = linear_cost{};
  decl.llm.text_row_bytes = 8;
  return decl;
}

// Reversed bins on the LLM stage; counts its calls (plan_step may call from several threads).
struct reverse_bins {
  std::atomic<int>* calls;
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const {
    ++*calls;
    std::vector<rank_t> r(static_cast<std::size_t>(p.num_bins()));
    for (rank_t b = 0; b < p.num_bins(); ++b) r[static_cast<std::size_t>(b)] = p.num_bins() - 1 - b;
    return r;
  }
};

struct named_mapper {
  [[nodiscard]] std::string name() const { return "named-by-itself"; }
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const {
    return mappers::identity{}(p);
  }
};

}  // namespace

TEST_CASE("stage_mapper: default, built-in and custom holders and their names") {
  const stage_mapper none;
  CHECK(!none.custom());
  REQUIRE(none.builtin() != nullptr);
  CHECK(none.builtin()->get_if<mappers::transport>() != nullptr);
  CHECK(none.name() == "transport");

  const stage_mapper tr = mappers::transport{};
  CHECK(!tr.custom());
  REQUIRE(tr.builtin() != nullptr);
  CHECK(tr.builtin()->name() == "transport");
  CHECK(tr.name() == "transport");
  const stage_mapper bn = mappers::bottleneck{};
  REQUIRE(bn.builtin() != nullptr);
  CHECK(bn.builtin()->get_if<mappers::bottleneck>() != nullptr);
  CHECK(bn.name() == "bottleneck");

  // A built-in with its own knob is still that built-in, under its name, knob kept.
  const stage_mapper budget = mappers::bottleneck{.step_budget = 5};
  CHECK(!budget.custom());
  REQUIRE(budget.builtin() != nullptr);
  REQUIRE(budget.builtin()->get_if<mappers::bottleneck>() != nullptr);
  CHECK(budget.builtin()->get_if<mappers::bottleneck>()->step_budget == 5);
  CHECK(budget.name() == "bottleneck");
  const stage_mapper auc = mappers::auction{};
  CHECK(auc.name() == "auction");
  const stage_mapper loose = mappers::auction{.tolerance = 0.25};
  CHECK(!loose.custom());
  REQUIRE(loose.builtin() != nullptr);
  REQUIRE(loose.builtin()->get_if<mappers::auction>() != nullptr);
  CHECK(loose.builtin()->get_if<mappers::auction>()->tolerance == 0.25);
  CHECK(loose.name() == "auction");
  // An any_mapper, e.g. parsed from a config, is a built-in too.
  const stage_mapper parsed = parse_mapper("identity");
  REQUIRE(parsed.builtin() != nullptr);
  CHECK(parsed.builtin()->get_if<mappers::identity>() != nullptr);
  CHECK(parsed.name() == "identity");
  // A tolerance no auction accepts fails at the declaration, not at a later map, also held in
  // an any_mapper.
  for (const double bad : {0.0, -0.5, 1.5}) {
    test::expect_invalid([&] { (void)stage_mapper(mappers::auction{.tolerance = bad}); },
                         {"mappers::auction: tolerance", "outside (0, 1]"});
    test::expect_invalid(
        [&] { (void)stage_mapper(any_mapper(mappers::auction{.tolerance = bad})); },
        {"mappers::auction: tolerance", "outside (0, 1]"});
  }

  std::atomic<int> calls{0};
  const stage_mapper mine = reverse_bins{&calls};
  CHECK(mine.custom());
  CHECK(mine.builtin() == nullptr);
  CHECK(mine.name() == "custom");
  CHECK(stage_mapper(reverse_bins{&calls}, "reverse").name() == "reverse");
  CHECK(stage_mapper(named_mapper{}).name() == "named-by-itself");
  CHECK(stage_mapper(named_mapper{}, "given").name() == "given");
  static_assert(mapper<stage_mapper>);
}

TEST_CASE("fingerprint: built-in mappers by name and knobs, custom ones by name") {
  const auto base = mapped_two_encoders();
  const auto h = fingerprint(base);
  CHECK(fingerprint(mapped_two_encoders()) == h);
  // The same built-in, spelled as an object, an any_mapper or a parsed name.
  auto same = base;
  same.encoders[0].mapper = any_mapper(mappers::bottleneck{});
  CHECK(fingerprint(same) == h);
  same.llm.mapper = parse_mapper("identity");
  CHECK(fingerprint(same) == h);
  same.encoders[0].mapper = mappers::bottleneck{.step_budget = -1};
  CHECK(fingerprint(same) == h);
  auto other = base;
  other.llm.mapper = mappers::transport{};  // replaces the stage's identity
  const auto h_other = fingerprint(other);
  CHECK(h_other != h);
  auto by_default = base;
  by_default.llm.mapper = stage_mapper{};
  CHECK(fingerprint(by_default) == h_other);
  auto loose = base;
  loose.llm.mapper = mappers::auction{.tolerance = 0.25};
  CHECK(fingerprint(loose) != h);
  CHECK(fingerprint(loose) != h_other);
  auto looser = base;
  looser.llm.mapper = mappers::auction{.tolerance = 0.5};
  CHECK(fingerprint(looser) != fingerprint(loose));

  std::atomic<int> calls{0};
  auto custom = base;
  custom.encoders[1].mapper = stage_mapper(reverse_bins{&calls}, "reverse");
  const auto h_custom = fingerprint(custom);
  CHECK(h_custom != h);
  CHECK(fingerprint(custom) == h_custom);
  auto renamed = base;
  renamed.encoders[1].mapper = stage_mapper(reverse_bins{&calls}, "reverse2");
  CHECK(fingerprint(renamed) != h_custom);
  auto elsewhere = base;
  elsewhere.llm.mapper = stage_mapper(reverse_bins{&calls}, "reverse");
  CHECK(fingerprint(elsewhere) != h_custom);
  auto budget = base;
  budget.encoders[0].mapper = mappers::bottleneck{.step_budget = 3};
  CHECK(fingerprint(budget) != h);
  CHECK_NOTHROW(custom.validate());
  CHECK(calls == 0);  // fingerprints and validation never run the mapper
}

TEST_CASE("plan_step: a built-in mapper object plans like a parsed any_mapper") {
  std::mt19937_64 rng(808);
  for (int trial = 0; trial < 30; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 16));
    const auto in = random_step(rng, d);
    INFO("trial ", trial, ", d = ", d);
    for (const std::string_view name : mapper_names()) {
      INFO("mapper ", name);
      auto by_name = vision_and_llm();
      by_name.encoders[0].mapper = parse_mapper(name);
      by_name.llm.mapper = parse_mapper(name);
      auto by_type = vision_and_llm();
      parse_mapper(name).visit([&](const auto& m) {
        by_type.encoders[0].mapper = m;
        by_type.llm.mapper = m;
      });
      CHECK(fingerprint(by_type) == fingerprint(by_name));
      const auto a = plan_step(by_name, in.meta, in.topo);
      const auto b = plan_step(by_type, in.meta, in.topo);
      CHECK(a.llm == b.llm);
      CHECK(a.encoders[0].input == b.encoders[0].input);
      CHECK(a.encoders[0].output == b.encoders[0].output);
    }
  }
}

// A step of d ranks with `per_rank` samples each (text, and an image on every third sample
// when `images`): large enough for plan_step's parallel paths from 65,536 samples.
step_input wide_step(std::mt19937_64& rng, rank_t d, std::int64_t per_rank, bool images) {
  std::vector<local_batch> batches(static_cast<std::size_t>(d));
  for (auto& b : batches)
    for (std::int64_t s = 0; s < per_rank; ++s) {
      b.text_tokens.push_back(uniform(rng, 1, 900));
      if (images && s % 3 == 0)
        b.sub_items.push_back({.modality = 0,
                               .parent = s,
                               .encoder_length = uniform(rng, 1, 1024),
                               .input_rows = uniform(rng, 0, 16),
                               .llm_tokens = uniform(rng, 1, 64)});
    }
  return {topology::uniform(d, 8), make_step_metadata(batches, 1)};
}

// `trials` random steps of 1 to 24 ranks, then a wide one with images (the parallel paths).
std::vector<step_input> mapper_steps(std::mt19937_64& rng, int trials) {
  std::vector<step_input> steps;
  for (int trial = 0; trial < trials; ++trial)
    steps.push_back(random_step(rng, static_cast<rank_t>(uniform(rng, 1, 24))));
  steps.push_back(wide_step(rng, 1024, 72, true));  // 73,728 samples: the parallel paths
  return steps;
}

// Two plans of the same step that must agree: the same plans, hence the same bytes moved.
void check_same_mapped_plans(const step_plan& a, const step_plan& b) {
  CHECK(a.llm == b.llm);
  CHECK(a.encoders[0].input == b.encoders[0].input);
  CHECK(a.encoders[0].output == b.encoders[0].output);
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    CHECK(a.stages[s].moved_bytes == b.stages[s].moved_bytes);
    CHECK(a.stages[s].inter_node_bytes == b.stages[s].inter_node_bytes);
  }
  CHECK(a.routes.all.size() == b.routes.all.size());
}

TEST_CASE("plan_step: a built-in mapper with its own knob plans like the object behind a wrapper") {
  // A built-in runs with plan_step's fast paths (no map without items, the worst-node bound
  // only for bottleneck, which reads it); an application's wrapper around the same object runs
  // the generic path. Same ranks, hence the same plans, reports and routes.
  std::mt19937_64 rng(4242);
  std::vector<step_input> steps = mapper_steps(rng, 12);
  steps.push_back(wide_step(rng, 1024, 72, false));  // and a vision stage without items
  for (std::size_t t = 0; t < steps.size(); ++t) {
    const auto& in = steps[t];
    INFO("step ", t, ", d = ", in.topo.num_ranks());
    for (const any_mapper& knob : {any_mapper(mappers::auction{.tolerance = 0.25}),
                                   any_mapper(mappers::auction{.tolerance = 1.0}),
                                   any_mapper(mappers::bottleneck{.step_budget = 3})}) {
      INFO("mapper ", knob.name());
      auto fast = vision_and_llm();
      fast.encoders[0].mapper = knob;
      fast.llm.mapper = knob;
      REQUIRE(fast.llm.mapper.builtin() != nullptr);
      auto wrapped = vision_and_llm();
      const stage_mapper wrapper([knob](const bin_mapping_problem& p) { return knob(p); },
                                 "wrapper");
      REQUIRE(wrapper.custom());
      wrapped.encoders[0].mapper = wrapper;
      wrapped.llm.mapper = wrapper;
      check_same_mapped_plans(plan_step(fast, in.meta, in.topo, plan_options{.routes_for = 0}),
                              plan_step(wrapped, in.meta, in.topo, plan_options{.routes_for = 0}));
    }
  }
}

TEST_CASE("plan_step: every built-in mapper plans like its object behind a wrapper") {
  // As a built-in, plan_step computes the problem's worst-node bound only for `bottleneck`
  // (the one built-in that reads it); a wrapper runs the generic path, which computes it for
  // the application. Same ranks either way, on the serial and the parallel paths.
  std::mt19937_64 rng(5151);
  const std::vector<step_input> steps = mapper_steps(rng, 10);
  for (std::size_t t = 0; t < steps.size(); ++t) {
    const auto& in = steps[t];
    INFO("step ", t, ", d = ", in.topo.num_ranks());
    for (const std::string_view name : mapper_names()) {
      INFO("mapper ", name);
      const any_mapper builtin = parse_mapper(name);
      auto by_builtin = vision_and_llm();
      by_builtin.encoders[0].mapper = builtin;
      by_builtin.llm.mapper = builtin;
      auto wrapped = vision_and_llm();
      builtin.visit([&](const auto& m) {
        const stage_mapper wrapper([m](const bin_mapping_problem& p) { return m(p); }, "wrapper");
        wrapped.encoders[0].mapper = wrapper;
        wrapped.llm.mapper = wrapper;
      });
      for (const bool parallel : {false, true}) {
        const plan_options opt{.parallel_stages = parallel, .routes_for = 0};
        check_same_mapped_plans(plan_step(by_builtin, in.meta, in.topo, opt),
                                plan_step(wrapped, in.meta, in.topo, opt));
      }
    }
  }
}

TEST_CASE("plan_step: an application's mapper in a stage declaration") {
  std::mt19937_64 rng(909);
  for (int trial = 0; trial < 30; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 16));
    const auto in = random_step(rng, d);
    INFO("trial ", trial, ", d = ", d);
    std::atomic<int> calls{0};
    auto identity = vision_and_llm();
    identity.llm.mapper = mappers::identity{};
    auto custom = vision_and_llm();
    custom.llm.mapper = stage_mapper(reverse_bins{&calls}, "reverse");
    CHECK(fingerprint(custom) != fingerprint(identity));
    const auto base = plan_step(identity, in.meta, in.topo);
    const auto got = plan_step(custom, in.meta, in.topo);
    CHECK(calls == 1);
    // The identity mapping's plan is the balanced bins; the custom stage maps exactly those.
    const auto bytes = got.llm_layout.item_bytes();
    const auto want = map_bins(base.llm, bytes, in.topo, reverse_bins{&calls});
    test::check_mapping_result(want, base.llm, bytes, in.topo);
    CHECK(got.llm == want.plan);
    CHECK(got.stages[1].moved_bytes == want.moved_bytes);
    CHECK(got.stages[1].inter_node_bytes == want.inter_node_bytes);
    // A permutation of the bins: the loads, hence the makespan, are those of the balanced plan.
    CHECK(got.stages[1].makespan_after == base.stages[1].makespan_after);
    CHECK(got.stages[1].used == base.stages[1].used);
    // The other stage is untouched.
    CHECK(got.encoders[0].input == base.encoders[0].input);
    // Deterministic, on parallel and serial planning alike.
    const auto serial = plan_step(custom, in.meta, in.topo, plan_options{.parallel_stages = false});
    CHECK(serial.llm == got.llm);
  }
}

TEST_CASE("plan_step: a stage mapper that returns no permutation is an error") {
  std::mt19937_64 rng(1);
  const auto in = random_step(rng, 4);
  auto decl = vision_and_llm();
  decl.encoders[0].mapper = stage_mapper(
      [](const bin_mapping_problem& p) {
        return std::vector<rank_t>(static_cast<std::size_t>(p.num_bins()), 0);
      },
      "all-to-zero");
  test::expect_invalid([&] { (void)plan_step(decl, in.meta, in.topo); },
                       {"mapper", "not a permutation"});
  decl.encoders[0].mapper =
      stage_mapper([](const bin_mapping_problem&) { return std::vector<rank_t>{0}; }, "too-short");
  test::expect_invalid([&] { (void)plan_step(decl, in.meta, in.topo); },
                       {"mapper", "1 ranks", "4 bins"});
}
