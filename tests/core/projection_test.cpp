// Tests for include/orchmllm/core/projection.hpp and the trainer-type overloads built on it:
// make_layout through member pointers, member functions and lambdas (lengths, item_size with
// bytes, empty ranks, bad values rejected); balance(ranks, cost, proj, ...) gives the plan of
// balance(make_layout(...), ...) on random batches under several policies and balancers; the
// plan applied back to the trainer's own items (apply_by_rank) puts every item once on the
// rank the plan names, copies from lvalues and moves move-only items out of rvalues.

#include "orchmllm/core/projection.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::batch_layout;
using orchmllm::item_size;
using orchmllm::rank_t;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;

// A trainer's own sample type: the library never sees it except through projections.
struct sample {
  int id = 0;
  int tokens = 0;
  std::vector<float> pixels;
  [[nodiscard]] std::int64_t payload() const {
    return static_cast<std::int64_t>(pixels.size() * sizeof(float));
  }
};

std::vector<std::vector<sample>> random_samples(std::mt19937_64& rng, rank_t d) {
  std::vector<std::vector<sample>> ranks(static_cast<std::size_t>(d));
  int id = 0;
  for (auto& r : ranks) {
    const auto n = uniform(rng, 0, 6);
    for (std::int64_t i = 0; i < n; ++i) {
      sample s;
      s.id = id++;
      s.tokens = static_cast<int>(uniform(rng, 0, 500));
      s.pixels.resize(static_cast<std::size_t>(uniform(rng, 0, 40)));
      r.push_back(std::move(s));
    }
  }
  return ranks;
}

auto sized = [](const sample& s) { return item_size{s.tokens, s.payload()}; };

}  // namespace

TEST_CASE("make_layout reads lengths and bytes through projections") {
  const std::vector<std::vector<sample>> ranks{
      {{0, 5, std::vector<float>(3)}, {1, 0, {}}}, {}, {{2, 9, std::vector<float>(1)}}};
  const auto by_member = orchmllm::make_layout(ranks, &sample::tokens);
  CHECK(by_member == batch_layout({0, 2, 2, 3}, {5, 0, 9}));
  CHECK_FALSE(by_member.has_bytes());

  const auto by_function = orchmllm::make_layout(ranks, &sample::payload);
  CHECK(by_function == batch_layout({0, 2, 2, 3}, {12, 0, 4}));

  const auto with_bytes = orchmllm::make_layout(ranks, sized);
  CHECK(with_bytes == batch_layout({0, 2, 2, 3}, {5, 0, 9}, {12, 0, 4}));

  // A range of plain lengths needs only std::identity; spans of spans work like vectors.
  const std::vector<vec> plain{{3, 4}, {5}};
  CHECK(orchmllm::make_layout(plain, std::identity{}) == batch_layout({0, 2, 3}, {3, 4, 5}));
  const std::vector<std::span<const std::int64_t>> spans{plain[0], plain[1]};
  CHECK(orchmllm::make_layout(spans, std::identity{}) == batch_layout({0, 2, 3}, {3, 4, 5}));

  // No ranks: an empty layout.
  CHECK(orchmllm::make_layout(std::vector<std::vector<sample>>{}, &sample::tokens).num_ranks() ==
        0);
}

TEST_CASE("make_layout rejects what the layout rejects, naming the item") {
  const std::vector<std::vector<sample>> ranks{{{0, 5, {}}}, {{1, -3, {}}}};
  expect_invalid([&] { (void)orchmllm::make_layout(ranks, &sample::tokens); }, {"-3"});
  expect_invalid(
      [&] {
        (void)orchmllm::make_layout(ranks, [](const sample& s) { return item_size{s.id, -1}; });
      },
      {"-1"});
  const std::vector<std::vector<std::uint64_t>> huge{{std::uint64_t{1} << 63}};
  expect_invalid([&] { (void)orchmllm::make_layout(huge, std::identity{}); }, {"2^63 - 1"});
}

TEST_CASE("balance through a projection plans exactly like balance on the layout") {
  std::mt19937_64 rng(11);
  const auto cost = [](std::int64_t l) { return l * l / 64 + l; };  // a trainer's lambda
  for (int trial = 0; trial < 60; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 8));
    const auto ranks = random_samples(rng, d);
    const auto layout = orchmllm::make_layout(ranks, sized);
    INFO("trial ", trial, ", d = ", d);

    const auto a = orchmllm::balance(ranks, cost, sized);
    const auto b =
        orchmllm::balance(layout, cost, orchmllm::packed, orchmllm::balancers::automatic{});
    CHECK(a.plan == b.plan);
    CHECK(a.makespan == b.makespan);

    const orchmllm::constraints limits{
        .cap = orchmllm::capacity{orchmllm::capacity::measure::tokens, 4000}};
    const auto c = orchmllm::balance(ranks, cost, &sample::tokens, orchmllm::padded,
                                     orchmllm::balancers::lpt{}, limits);
    const auto e = orchmllm::balance(orchmllm::make_layout(ranks, &sample::tokens), cost,
                                     orchmllm::padded, orchmllm::balancers::lpt{}, limits);
    CHECK(c.plan == e.plan);
  }
}

TEST_CASE("apply_by_rank puts the trainer's items where the plan says") {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 60; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 8));
    const auto ranks = random_samples(rng, d);
    const auto result = orchmllm::balance(ranks, orchmllm::linear_cost{}, &sample::tokens);
    const auto& plan = result.plan;
    INFO("trial ", trial, ", d = ", d);

    const auto moved = orchmllm::apply_by_rank(plan, ranks);  // copies: `ranks` is an lvalue
    REQUIRE(moved.size() == static_cast<std::size_t>(d));
    std::vector<int> seen;
    std::int64_t max_load = 0;
    for (rank_t r = 0; r < d; ++r) {
      const auto& items = moved[static_cast<std::size_t>(r)];
      REQUIRE(static_cast<std::int64_t>(items.size()) ==
              plan.dst_offsets()[r + 1] - plan.dst_offsets()[r]);
      std::int64_t load = 0;
      for (std::size_t slot = 0; slot < items.size(); ++slot) {
        // The item in destination slot h is the plan's source_of(h), whose global id is its
        // position in the flattened ranks.
        const auto g = plan.source_of(plan.dst_offsets()[r] + static_cast<std::int64_t>(slot));
        const auto src = static_cast<std::size_t>(
            std::upper_bound(plan.src_offsets().begin(), plan.src_offsets().end(), g) -
            plan.src_offsets().begin() - 1);
        const auto& original = ranks[src][static_cast<std::size_t>(g - plan.src_offsets()[src])];
        CHECK(items[slot].id == original.id);
        CHECK(items[slot].pixels.size() == original.pixels.size());
        seen.push_back(items[slot].id);
        load += items[slot].tokens;
      }
      max_load = std::max(max_load, load);
    }
    CHECK(max_load == result.makespan);  // linear cost: the makespan is the largest token sum
    std::sort(seen.begin(), seen.end());
    std::vector<int> all(seen.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    CHECK(seen == all);
    CHECK(ranks.size() == static_cast<std::size_t>(d));  // the input is untouched
  }
}

TEST_CASE("apply_by_rank moves move-only items out of an rvalue") {
  std::mt19937_64 rng(13);
  const rank_t d = 5;
  const auto samples = random_samples(rng, d);
  std::vector<std::vector<std::unique_ptr<sample>>> owned(static_cast<std::size_t>(d));
  for (rank_t r = 0; r < d; ++r)
    for (const auto& s : samples[static_cast<std::size_t>(r)])
      owned[static_cast<std::size_t>(r)].push_back(std::make_unique<sample>(s));
  const auto tokens = [](const std::unique_ptr<sample>& p) { return p->tokens; };
  const auto result = orchmllm::balance(owned, orchmllm::linear_cost{}, tokens);
  const auto moved = orchmllm::apply_by_rank(result.plan, std::move(owned));
  std::vector<int> ids;
  for (rank_t r = 0; r < d; ++r)
    for (const auto& p : moved[static_cast<std::size_t>(r)]) {
      REQUIRE(p != nullptr);
      ids.push_back(p->id);
      CHECK(result.plan.dst_ranks()[static_cast<std::size_t>(p->id)] == r);  // id == global id
    }
  CHECK(static_cast<std::int64_t>(ids.size()) == result.plan.num_items());
}

TEST_CASE("apply_by_rank rejects a batch of another shape") {
  const auto plan = orchmllm::rearrangement::identity(std::vector<std::int64_t>{0, 2, 3});
  expect_invalid(
      [&] {
        (void)orchmllm::apply_by_rank(plan, std::vector<vec>{{1, 2}});
      },
      {"1 ranks", "2"});
  expect_invalid(
      [&] {
        (void)orchmllm::apply_by_rank(plan, std::vector<vec>{{1, 2}, {}});
      },
      {"rank 1 holds 0 items", "expects 1"});
}
