// Tests for include/orchmllm/orchestrator/orchestrator.hpp: bad input.
//
// plan_step rejects inconsistent inputs and sizes past 2^63 with an error naming the culprit;
// on the local backend every rank throws the same error type with a message naming the culprit,
// and the group is still usable afterwards (no hang: run timeout).
//
// doctest macros are not thread-safe: rank functions record failures as strings (one slot per
// rank) and every CHECK runs on the main thread after `run` returns.

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/comm/local.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/orchestrator_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::capacity;
using orchmllm::communication_error;
using orchmllm::encoder_stage;
using orchmllm::infeasible_error;
using orchmllm::invalid_argument_error;
using orchmllm::local_batch;
using orchmllm::quadratic_cost;
using orchmllm::rank_t;
using orchmllm::stage_declarations;
using orchmllm::sub_item;
using orchmllm::topology;
using orchmllm::test::uniform;
using namespace orchmllm::test::orchestrator_fixtures;  // support/orchestrator_fixtures.hpp
using namespace std::chrono_literals;

}  // namespace

TEST_CASE("plan_step rejects inconsistent inputs") {
  stage_declarations decl;
  decl.encoders.push_back(encoder_stage{.name = "vision"});
  local_batch b{
      .text_tokens = {3},
      .sub_items = {sub_item{
          .modality = 0, .parent = 0, .encoder_length = 4, .input_rows = 1, .llm_tokens = 1}}};
  const auto meta = orchmllm::make_step_metadata({b, b}, 1);
  orchmllm::test::expect_invalid(
      [&] { (void)orchmllm::plan_step(decl, meta, topology::uniform(3, 0)); },
      {"metadata of 2 ranks", "topology of 3"});
  const auto meta0 = orchmllm::make_step_metadata({local_batch{}, local_batch{}}, 0);
  orchmllm::test::expect_invalid(
      [&] { (void)orchmllm::plan_step(decl, meta0, topology::uniform(2, 0)); },
      {"0 modalities", "1 encoder stages"});
  // A cost model that returns a negative cost: the error names the stage and the item.
  auto negative = decl;
  negative.encoders[0].cost = orchmllm::linear_cost{-1};
  orchmllm::test::expect_invalid(
      [&] { (void)orchmllm::plan_step(negative, meta, topology::uniform(2, 0)); },
      {"stage 'vision': ", "cost of item 0", "must be >= 0"});
  auto bad = decl;
  bad.llm.name = "vision";
  orchmllm::test::expect_invalid(
      [&] { (void)orchmllm::plan_step(bad, meta, topology::uniform(2, 0)); },
      {"two stages are named 'vision'"});
  // Capacities: an encoder cap below the largest item names the encoder stage; an LLM cap
  // below the longest sequence names the LLM stage.
  auto capped = decl;
  capped.encoders[0].limits.cap = capacity{capacity::measure::tokens, 3};
  orchmllm::test::expect_error<infeasible_error>(
      [&] { (void)orchmllm::plan_step(capped, meta, topology::uniform(2, 0)); },
      {"stage 'vision'", "cap of 3"});
  capped = decl;
  capped.llm.limits.cap = capacity{capacity::measure::tokens, 3};
  orchmllm::test::expect_error<infeasible_error>(
      [&] { (void)orchmllm::plan_step(capped, meta, topology::uniform(2, 0)); },
      {"stage 'llm'", "cap of 3"});
  // Item-count limits are capacities too.
  capped = decl;
  capped.llm.limits.max_items = 0;
  orchmllm::test::expect_error<infeasible_error>(
      [&] { (void)orchmllm::plan_step(capped, meta, topology::uniform(2, 0)); }, {"stage 'llm'"});
  // Several stages infeasible at once: the LLM's error, planned in parallel or not; then the
  // first encoder's by index.
  auto two = decl;
  two.encoders.push_back(encoder_stage{.name = "audio"});
  local_batch b2 = b;
  b2.sub_items.push_back(
      sub_item{.modality = 1, .parent = 0, .encoder_length = 9, .input_rows = 1, .llm_tokens = 1});
  const auto meta2 = orchmllm::make_step_metadata({b2, b2}, 2);
  for (const auto& mode :
       {std::pair{true, -1}, std::pair{false, -1}, std::pair{true, 1}, std::pair{false, 1}}) {
    const bool parallel = mode.first;
    const int routes_for = mode.second;
    CAPTURE(parallel);
    CAPTURE(routes_for);
    orchmllm::plan_options po;
    po.parallel_stages = parallel;
    po.routes_for = routes_for;
    // Only the LLM fails: the encoders, planned and waiting for Π_M, stop without it.
    auto llm_only = two;
    llm_only.llm.limits.cap = capacity{capacity::measure::tokens, 3};
    orchmllm::test::expect_error<infeasible_error>(
        [&] { (void)orchmllm::plan_step(llm_only, meta2, topology::uniform(2, 0), po); },
        {"stage 'llm'"});
    auto all = two;
    for (auto& e : all.encoders) e.limits.cap = capacity{capacity::measure::tokens, 3};
    all.llm.limits.cap = capacity{capacity::measure::tokens, 3};
    orchmllm::test::expect_error<infeasible_error>(
        [&] { (void)orchmllm::plan_step(all, meta2, topology::uniform(2, 0), po); },
        {"stage 'llm'"});
    all.llm.limits.cap.reset();
    orchmllm::test::expect_error<infeasible_error>(
        [&] { (void)orchmllm::plan_step(all, meta2, topology::uniform(2, 0), po); },
        {"stage 'vision'"});
  }
}

TEST_CASE("plan_step: byte and token sizes past 2^63 are errors, not wrapped sizes") {
  stage_declarations decl;
  decl.encoders.push_back(
      encoder_stage{.name = "vision", .input_row_bytes = 1 << 20, .output_row_bytes = 8});
  decl.llm.text_row_bytes = 8;
  constexpr std::int64_t big = std::int64_t{1} << 60;
  local_batch fine{
      .text_tokens = {3},
      .sub_items = {sub_item{
          .modality = 0, .parent = 0, .encoder_length = 4, .input_rows = 1, .llm_tokens = 1}}};
  // Text bytes: 2^60 tokens × 8 bytes wraps to 0 unchecked.
  local_batch text = fine;
  text.text_tokens[0] = big;
  orchmllm::test::expect_invalid(
      [&] {
        (void)orchmllm::plan_step(decl, orchmllm::make_step_metadata({text, fine}, 1),
                                  topology::uniform(2, 0));
      },
      {"text bytes of sample 0", "exceeds 2^63 - 1"});
  // Encoder input bytes: rows × row width.
  local_batch rows = fine;
  rows.sub_items[0].input_rows = big;
  orchmllm::test::expect_invalid(
      [&] {
        (void)orchmllm::plan_step(decl, orchmllm::make_step_metadata({fine, rows}, 1),
                                  topology::uniform(2, 0));
      },
      {"stage 'vision': input bytes of item 1"});
  // Sequence length: text + the LLM tokens of the sub-items.
  local_batch seq = fine;
  seq.text_tokens[0] = INT64_MAX;
  decl.llm.text_row_bytes = 0;
  orchmllm::test::expect_invalid(
      [&] {
        (void)orchmllm::plan_step(decl, orchmllm::make_step_metadata({seq, fine}, 1),
                                  topology::uniform(2, 0));
      },
      {"sequence length of sample 0"});
}

// ---------------------------------------------------------------------------------------------
// Bad input: the same error on every rank, never a hang.

namespace {

enum class kind { none, invalid, infeasible, communication, other };

struct caught {
  kind type = kind::none;
  std::string message;
  bool recovered = false;  // a valid gather afterwards worked
};

template <class F>
std::vector<caught> run_bad(rank_t d, F&& body, const stage_declarations& good_decl,
                            const std::vector<local_batch>& good) {
  std::vector<caught> out(static_cast<std::size_t>(d));
  orchmllm::local::run(d,
                       [&](orchmllm::local::communicator& comm) {
                         auto& c = out[static_cast<std::size_t>(comm.rank())];
                         try {
                           body(comm);
                         } catch (const infeasible_error& e) {
                           c = {kind::infeasible, e.what()};
                         } catch (const invalid_argument_error& e) {
                           c = {kind::invalid, e.what()};
                         } catch (const communication_error& e) {
                           c = {kind::communication, e.what()};
                         } catch (const std::exception& e) {
                           c = {kind::other, e.what()};
                         }
                         // The group is still usable: a valid step's gather works on every rank.
                         try {
                           const auto m = orchmllm::gather_step_metadata(
                               comm, good_decl, good[static_cast<std::size_t>(comm.rank())]);
                           c.recovered = m.ranks == d;
                         } catch (...) {
                           c.recovered = false;
                         }
                       },
                       {.ranks_per_node = 2, .timeout = 30s});
  return out;
}

void expect_everywhere(const std::vector<caught>& got, kind type,
                       const std::vector<std::string>& needles) {
  for (std::size_t r = 0; r < got.size(); ++r) {
    INFO("rank ", r, ": ", got[r].message);
    CHECK(got[r].type == type);
    CHECK(got[r].message == got[0].message);
    CHECK(got[r].recovered);
    for (const auto& n : needles) {
      INFO("expected to contain: ", n);
      CHECK(got[r].message.find(n) != std::string::npos);
    }
  }
}

}  // namespace

TEST_CASE("bad input: a clear error on every rank, no hang") {
  constexpr rank_t d = 5;
  stage_declarations decl;
  decl.encoders.push_back(encoder_stage{.name = "vision",
                                        .cost = quadratic_cost{0, 1, 0.01},
                                        .input_row_bytes = 24,
                                        .output_row_bytes = 32});
  decl.encoders.push_back(encoder_stage{
      .name = "audio", .policy = orchmllm::padded, .input_row_bytes = 16, .output_row_bytes = 32});
  decl.llm.text_row_bytes = 8;
  std::mt19937_64 rng(4242);
  auto good = random_batches(rng, d, 2);
  for (auto& b : good) {  // every rank has a sample and one sub-item of each modality
    b.text_tokens.push_back(5);
    if (!b.loss_tokens.empty()) b.loss_tokens.push_back(2);
    const auto p = static_cast<std::int64_t>(b.text_tokens.size()) - 1;
    b.sub_items.push_back(sub_item{
        .modality = 0, .parent = p, .encoder_length = 50, .input_rows = 2, .llm_tokens = 3});
    b.sub_items.push_back(sub_item{
        .modality = 1, .parent = p, .encoder_length = 30, .input_rows = 2, .llm_tokens = 3});
  }

  auto gather_with = [&](const std::vector<local_batch>& batches) {
    return run_bad(
        d,
        [&](orchmllm::local::communicator& comm) {
          const auto m = orchmllm::gather_step_metadata(
              comm, decl, batches[static_cast<std::size_t>(comm.rank())]);
          (void)orchmllm::plan_step(decl, m, topology::uniform(d, 2));
        },
        decl, good);
  };

  SUBCASE("valid input plans everywhere") { expect_everywhere(gather_with(good), kind::none, {}); }
  SUBCASE("a sub-item whose parent does not exist") {
    auto bad = good;
    bad[2].sub_items.back().parent = static_cast<std::int64_t>(bad[2].text_tokens.size());
    expect_everywhere(
        gather_with(bad), kind::invalid,
        {"rank 2", "parent sample " + std::to_string(bad[2].text_tokens.size()), "does not exist"});
  }
  SUBCASE("a sub-item on a rank without samples") {
    auto bad = good;
    bad[4].text_tokens.clear();
    expect_everywhere(gather_with(bad), kind::invalid, {"rank 4", "does not exist"});
  }
  SUBCASE("a modality out of range") {
    auto bad = good;
    bad[3].sub_items.front().modality = 2;
    expect_everywhere(gather_with(bad), kind::invalid,
                      {"rank 3", "sub-item 0", "modality 2", "2 encoder stages"});
  }
  SUBCASE("negative counts") {
    auto bad = good;
    bad[1].text_tokens.back() = -3;
    expect_everywhere(gather_with(bad), kind::invalid, {"rank 1", "-3 text tokens"});
    bad = good;
    bad[4].sub_items.back().input_rows = -1;
    expect_everywhere(gather_with(bad), kind::invalid, {"rank 4", "negative"});
  }
  SUBCASE("loss tokens of the wrong count or sign") {
    auto bad = good;
    bad[3].loss_tokens.assign(bad[3].text_tokens.size() + 1, 1);
    expect_everywhere(gather_with(bad), kind::invalid, {"rank 3", "loss_tokens has"});
    bad = good;
    bad[1].loss_tokens.assign(bad[1].text_tokens.size(), 1);
    bad[1].loss_tokens.back() = -2;
    expect_everywhere(gather_with(bad), kind::invalid, {"rank 1", "-2 loss tokens"});
  }
  SUBCASE("declarations that differ across ranks") {
    // Rank 3 has another cost model for the vision encoder.
    auto other = decl;
    other.encoders[0].cost = quadratic_cost{0, 1, 0.02};
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            (void)orchmllm::gather_step_metadata(
                                comm, comm.rank() == 3 ? other : decl,
                                good[static_cast<std::size_t>(comm.rank())]);
                          },
                          decl, good),
                      kind::invalid, {"rank 3", "declared other stages"});
    // Rank 0 has another LLM row width and every other rank agrees: rank 0 is named.
    other = decl;
    other.llm.text_row_bytes = 16;
    expect_everywhere(
        run_bad(
            d,
            [&](orchmllm::local::communicator& comm) {
              (void)orchmllm::gather_step_metadata(comm, comm.rank() == 0 ? other : decl,
                                                   good[static_cast<std::size_t>(comm.rank())]);
            },
            decl, good),
        kind::invalid, {"rank 0 declared other stages than the other", "which agree"});
    // Rank 4 has one encoder fewer (its batch has no audio then).
    other = decl;
    other.encoders.pop_back();
    auto batches = good;
    std::erase_if(batches[4].sub_items, [](const sub_item& s) { return s.modality == 1; });
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            (void)orchmllm::gather_step_metadata(
                                comm, comm.rank() == 4 ? other : decl,
                                batches[static_cast<std::size_t>(comm.rank())]);
                          },
                          decl, good),
                      kind::invalid, {"rank 4", "declared other stages"});
  }
  SUBCASE("an infeasible capacity") {
    // A per-rank token cap below the largest vision item (length 50).
    auto capped = decl;
    capped.encoders[0].limits.cap = capacity{capacity::measure::tokens, 49};
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            const auto m = orchmllm::gather_step_metadata(
                                comm, capped, good[static_cast<std::size_t>(comm.rank())]);
                            (void)orchmllm::plan_step(capped, m, topology::uniform(d, 2));
                          },
                          decl, good),
                      kind::infeasible, {"stage 'vision'", "cap of 49"});
    // The LLM stage: a cap below the longest sequence.
    capped = decl;
    capped.llm.limits.cap = capacity{capacity::measure::tokens, 10};
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            const auto m = orchmllm::gather_step_metadata(
                                comm, capped, good[static_cast<std::size_t>(comm.rank())]);
                            (void)orchmllm::plan_step(capped, m, topology::uniform(d, 2));
                          },
                          decl, good),
                      kind::infeasible, {"stage 'llm'", "cap of 10"});
    // The collective plan_step: every rank raises the planning error itself.
    expect_everywhere(run_bad(
                          d,
                          [&](orchmllm::local::communicator& comm) {
                            const auto m = orchmllm::gather_step_metadata(
                                comm, capped, good[static_cast<std::size_t>(comm.rank())]);
                            (void)orchmllm::plan_step(comm, capped, m, topology::uniform(d, 2));
                          },
                          decl, good),
                      kind::infeasible, {"stage 'llm'", "cap of 10"});
  }
  SUBCASE("the collective plan_step: ranks that plan different steps fail together") {
    // Rank 3 asks for another schedule; rank 1 maps onto another topology.
    for (int which = 0; which < 2; ++which) {
      expect_everywhere(run_bad(
                            d,
                            [&](orchmllm::local::communicator& comm) {
                              const auto m = orchmllm::gather_step_metadata(
                                  comm, decl, good[static_cast<std::size_t>(comm.rank())]);
                              auto sched = orchmllm::schedule::direct;
                              auto topo = topology::uniform(d, 2);
                              if (which == 0 && comm.rank() == 3)
                                sched = orchmllm::schedule::node_wise;
                              if (which == 1 && comm.rank() == 1) topo = topology::uniform(d, 1);
                              (void)orchmllm::plan_step(comm, decl, m, topo, {.sched = sched});
                            },
                            decl, good),
                        kind::communication, {"ranks planned different steps", "digest"});
    }
  }
}
