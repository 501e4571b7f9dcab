// Tests for include/orchmllm/orchestrator/stages.hpp: stage_cost, stage_declarations::validate,
// fingerprint (equal declarations agree, every single field change differs), and
// make_step_metadata (global ids, CSR offsets, per-sample sub-item order, sequence lengths
// against a hand-written reference; every malformed batch rejected naming the rank).

#include "orchmllm/orchestrator/stages.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "support/test_support.hpp"

namespace {

namespace balancers = orchmllm::balancers;
namespace mappers = orchmllm::mappers;
using orchmllm::capacity;
using orchmllm::encoder_stage;
using orchmllm::invalid_argument_error;
using orchmllm::linear_cost;
using orchmllm::local_batch;
using orchmllm::quadratic_cost;
using orchmllm::stage_cost;
using orchmllm::stage_declarations;
using orchmllm::step_metadata;
using orchmllm::sub_item;
using orchmllm::test::expect_invalid;
using vec = std::vector<std::int64_t>;

stage_declarations two_encoders() {
  stage_declarations d;
  encoder_stage vision;
  vision.name = "vision";
  vision.cost = quadratic_cost{0.0, 1.0, 0.01};
  vision.input_row_bytes = 24;
  vision.output_row_bytes = 32;
  encoder_stage audio;
  audio.name = "audio";
  audio.cost = linear_cost{3};
  audio.policy = orchmllm::padded;
  audio.input_row_bytes = 16;
  audio.output_row_bytes = 32;
  d.encoders = {vision, audio};
  d.llm.cost = quadratic_cost{1.0, 2.0, 0.001};
  d.llm.text_row_bytes = 8;
  return d;
}

}  // namespace

TEST_CASE("stage_cost wraps integer and floating cost models") {
  const stage_cost id;
  CHECK(id(0) == 0.0);
  CHECK(id(17) == 17.0);
  const stage_cost lin = linear_cost{5};
  CHECK(lin(7) == 35.0);
  const stage_cost quad = quadratic_cost{1.0, 2.0, 0.5};
  CHECK(quad(4) == 1.0 + 8.0 + 8.0);
  const stage_cost copy = quad;  // copies share nothing mutable
  CHECK(copy(4) == quad(4));
  static_assert(orchmllm::cost_model<stage_cost>);
  static_assert(std::is_copy_constructible_v<stage_cost>);
  CHECK(id.integral());
  CHECK(lin.integral());
  CHECK_FALSE(quad.integral());
}

TEST_CASE("stage_cost keeps integer costs exact") {
  // 2^53 + 1 is not a double: an integral model must reach the balancer unrounded.
  const std::int64_t big = (std::int64_t{1} << 53) + 1;
  const stage_cost lin = linear_cost{big};
  REQUIRE(lin.integral());
  const auto exact = lin.visit([](const auto& c) {
    using cost = decltype(c(1));
    if constexpr (std::is_integral_v<cost>) {
      return static_cast<std::int64_t>(c(1));
    } else {
      return std::int64_t{-1};
    }
  });
  CHECK(exact == big);
  // Narrow and unsigned integral models are held as std::int64_t too.
  const stage_cost narrow = [](std::int64_t l) { return static_cast<std::uint16_t>(l % 1000); };
  CHECK(narrow.integral());
  CHECK(narrow.visit([](const auto& c) { return static_cast<double>(c(1234)); }) == 234.0);
  // Floating models (float included) are held as double.
  const stage_cost f = [](std::int64_t l) { return 0.5f * static_cast<float>(l); };
  CHECK_FALSE(f.integral());
  CHECK(f(3) == 1.5);
}

TEST_CASE("stage_balancer: the default, built-in and the application's balancers, their names") {
  const orchmllm::stage_balancer none;
  CHECK_FALSE(none.custom());
  REQUIRE(none.builtin() != nullptr);
  CHECK(none.builtin()->get_if<balancers::automatic>() != nullptr);
  CHECK(none.name() == "automatic");
  CHECK(orchmllm::encoder_stage{}.balancer.name() == "automatic");
  CHECK(orchmllm::llm_stage{}.balancer.name() == "automatic");
  // A built-in object keeps its knobs; an any_balancer (e.g. parsed) is a built-in too.
  const orchmllm::stage_balancer lpt = balancers::lpt{.refine = true, .refine_budget = 9};
  CHECK_FALSE(lpt.custom());
  REQUIRE(lpt.builtin() != nullptr);
  REQUIRE(lpt.builtin()->get_if<balancers::lpt>() != nullptr);
  CHECK(lpt.builtin()->get_if<balancers::lpt>()->refine);
  CHECK(lpt.builtin()->get_if<balancers::lpt>()->refine_budget == 9);
  CHECK(lpt.name() == "lpt");
  for (const std::string_view name : orchmllm::balancer_names()) {
    const orchmllm::stage_balancer parsed = orchmllm::parse_balancer(name);
    REQUIRE(parsed.builtin() != nullptr);
    CHECK(parsed.name() == name);
  }
  const orchmllm::stage_balancer equal = balancers::karmarkar_karp_equal{};
  CHECK(equal.name() == "karmarkar_karp_equal");
  // The application's balancer, under the name it is given ("custom" by default).
  const auto mine = [](const auto& p) { return balancers::lpt{}(p); };
  const orchmllm::stage_balancer unnamed = mine;
  CHECK(unnamed.custom());
  CHECK(unnamed.builtin() == nullptr);
  CHECK(unnamed.name() == "custom");
  const orchmllm::stage_balancer named(mine, "mine");
  CHECK(named.custom());
  CHECK(named.name() == "mine");
}

TEST_CASE("stage_declarations::validate") {
  CHECK_NOTHROW(two_encoders().validate());
  CHECK_NOTHROW(stage_declarations{}.validate());  // K = 0, default LLM stage

  SUBCASE("empty names") {
    auto d = two_encoders();
    d.encoders[1].name.clear();
    expect_invalid([&] { d.validate(); }, {"no name"});
    auto e = two_encoders();
    e.llm.name.clear();
    expect_invalid([&] { e.validate(); }, {"LLM stage has no name"});
  }
  SUBCASE("split options, named by stage") {
    auto d = two_encoders();
    d.encoders[1].split = orchmllm::split_options{};  // padded without segments: allowed
    CHECK_NOTHROW(d.validate());
    d.encoders[0].split = orchmllm::split_options{.min_piece_segments = 0};
    expect_invalid([&] { d.validate(); }, {"stage 'vision'", "min_piece_segments is 0"});
    d.encoders[0].split = orchmllm::split_options{.max_pieces = 0};
    expect_invalid([&] { d.validate(); }, {"stage 'vision'", "max_pieces is 0"});
    d.encoders[0].split = orchmllm::split_options{.rounds = 0};
    expect_invalid([&] { d.validate(); }, {"stage 'vision'", "rounds is 0"});
    d.encoders[0].split = orchmllm::split_options{.tolerance = -1};
    expect_invalid([&] { d.validate(); }, {"stage 'vision'", "tolerance is -1"});
    // Splitting runs balance_split: the application's balancer is refused.
    d.encoders[0].split = orchmllm::split_options{};
    d.encoders[0].balancer = orchmllm::stage_balancer(
        [](const auto& p) { return orchmllm::balancers::lpt{}(p); }, "mine");
    expect_invalid([&] { d.validate(); },
                   {"stage 'vision'", "splitting needs a built-in balancer", "'mine'"});
    d.encoders[0].balancer = orchmllm::balancers::lpt{};  // a built-in object is fine
    CHECK_NOTHROW(d.validate());
  }
  SUBCASE("duplicate names") {
    auto d = two_encoders();
    d.encoders[1].name = "vision";
    expect_invalid([&] { d.validate(); }, {"two stages are named 'vision'"});
    auto e = two_encoders();
    e.llm.name = "audio";
    expect_invalid([&] { e.validate(); }, {"two stages are named 'audio'"});
  }
  SUBCASE("negative row widths") {
    auto d = two_encoders();
    d.encoders[0].input_row_bytes = -1;
    expect_invalid([&] { d.validate(); }, {"'vision'", "-1"});
    auto e = two_encoders();
    e.encoders[1].output_row_bytes = -8;
    expect_invalid([&] { e.validate(); }, {"'audio'", "-8"});
    auto f = two_encoders();
    f.llm.text_row_bytes = -4;
    expect_invalid([&] { f.validate(); }, {"'llm'", "-4"});
  }
  SUBCASE("bad balancer knobs and limits") {
    auto d = two_encoders();
    d.encoders[0].balancer = balancers::automatic{.refine_budget = -2};
    expect_invalid([&] { d.validate(); },
                   {"stage 'vision': automatic: refine_budget is -2, must be >= -1"});
    auto lpt = two_encoders();
    lpt.encoders[0].balancer = balancers::lpt{.refine = true, .refine_budget = -3};
    expect_invalid([&] { lpt.validate(); }, {"stage 'vision': lpt: refine_budget is -3"});
    auto e = two_encoders();
    e.llm.balancer = balancers::automatic{.exact_node_budget = -1};
    expect_invalid([&] { e.validate(); },
                   {"stage 'llm': automatic: exact_node_budget -1 and exact_max_items 14 must be "
                    ">= 0"});
    auto exact = two_encoders();
    exact.llm.balancer = balancers::exact{.node_budget = -1};
    expect_invalid([&] { exact.validate(); }, {"stage 'llm': exact: node_budget is -1"});
    auto f = two_encoders();
    f.encoders[1].balancer = balancers::karmarkar_karp{};  // audio is padded
    expect_invalid([&] { f.validate(); },
                   {"stage 'audio': karmarkar_karp balances the packed policy only"});
    auto f2 = two_encoders();
    f2.encoders[1].balancer = orchmllm::parse_balancer("karmarkar_karp_equal");
    expect_invalid([&] { f2.validate(); },
                   {"stage 'audio': karmarkar_karp_equal balances the packed policy only"});
    auto g = two_encoders();
    g.encoders[0].balancer = balancers::padded_exact{};  // vision is packed
    expect_invalid([&] { g.validate(); }, {"stage 'vision': padded_exact needs a padded policy"});
    auto h = two_encoders();
    h.encoders[1].balancer = balancers::locality{.tolerance = -0.5};
    expect_invalid([&] { h.validate(); }, {"stage 'audio': locality: tolerance is -0.5"});
    auto i = two_encoders();
    i.llm.balancer = balancers::locality{.tolerance = std::numeric_limits<double>::quiet_NaN()};
    expect_invalid([&] { i.validate(); }, {"stage 'llm': locality: tolerance is nan"});
    auto gap = two_encoders();
    gap.llm.balancer = balancers::automatic{.gap_tolerance = -1e-3};
    expect_invalid([&] { gap.validate(); }, {"stage 'llm': automatic: gap_tolerance is -0.001"});
    auto j = two_encoders();
    j.encoders[0].limits.cap = capacity{capacity::measure::tokens, -3};
    expect_invalid([&] { j.validate(); }, {"stage 'vision': per-rank cap -3 is negative"});
    auto k = two_encoders();
    k.llm.limits.min_items = 4;
    k.llm.limits.max_items = 2;
    expect_invalid([&] { k.validate(); }, {"stage 'llm': items per rank 4..2"});
    auto l = two_encoders();
    l.encoders[1].balancer = balancers::locality{.node_of_rank = {0, -1}};
    expect_invalid([&] { l.validate(); }, {"stage 'audio': locality: node_of_rank holds -1"});
    // The policy each algorithm balances is checked with the stage's policy.
    auto m = two_encoders();
    m.encoders[1].balancer = balancers::padded_exact{};
    m.encoders[0].balancer = balancers::karmarkar_karp_equal{.refine = true};
    CHECK_NOTHROW(m.validate());
  }
}

namespace {
// A trainer's padding rule, named (core/padding.hpp): fingerprinted by its name.
struct pow2_rule {
  const char* rule_name = "pow2";
  [[nodiscard]] std::int64_t padded_length(std::int64_t l) const {
    std::int64_t p = 1;
    while (p < l) p *= 2;
    return p;
  }
  [[nodiscard]] std::string_view name() const { return rule_name; }
  bool operator==(const pow2_rule& o) const { return std::string_view(rule_name) == o.rule_name; }
};
}  // namespace

TEST_CASE("fingerprint: equal declarations agree, every field change differs") {
  const auto base = two_encoders();
  const auto h = orchmllm::fingerprint(base);
  CHECK(orchmllm::fingerprint(two_encoders()) == h);
  {
    // Equal cost values from another model type of the same kind are the same declaration.
    auto d = two_encoders();
    d.encoders[1].cost = [](std::int64_t l) { return static_cast<unsigned>(3 * l); };
    CHECK(orchmllm::fingerprint(d) == h);
    // The same values as floating costs are balanced in double, not in exact integers: another
    // declaration.
    d.encoders[1].cost = quadratic_cost{0.0, 3.0, 0.0};
    CHECK(orchmllm::fingerprint(d) != h);
  }

  std::vector<std::pair<std::string, std::function<void(stage_declarations&)>>> changes = {
      {"encoder name", [](auto& d) { d.encoders[0].name = "visioN"; }},
      {"encoder cost",
       [](auto& d) {
         d.encoders[0].cost = quadratic_cost{0.0, 1.0, 0.011};
       }},
      {"encoder cost constant",
       [](auto& d) {
         d.encoders[1].cost = quadratic_cost{1.0, 3.0, 0};
       }},
      {"encoder policy", [](auto& d) { d.encoders[1].policy = orchmllm::packed; }},
      {"encoder padding multiple",
       [](auto& d) { d.encoders[1].policy = orchmllm::padded_to_multiple(8); }},
      {"encoder buckets", [](auto& d) { d.encoders[1].policy = orchmllm::bucketed({4096}); }},
      {"encoder bucket lengths",
       [](auto& d) {
         d.encoders[1].policy = orchmllm::bucketed({1024, 4096});
       }},
      {"encoder padding rule", [](auto& d) { d.encoders[1].policy = pow2_rule{}; }},
      {"encoder padding rule name", [](auto& d) { d.encoders[1].policy = pow2_rule{"other"}; }},
      {"encoder lpt", [](auto& d) { d.encoders[0].balancer = balancers::lpt{}; }},
      {"encoder identity", [](auto& d) { d.encoders[0].balancer = balancers::identity{}; }},
      {"encoder cap set",
       [](auto& d) { d.encoders[0].limits.cap = capacity{capacity::measure::tokens}; }},
      {"encoder cap measure",
       [](auto& d) {
         d.encoders[0].limits.cap =
             capacity{capacity::measure::bytes, std::numeric_limits<std::int64_t>::max()};
       }},
      {"encoder cap limit",
       [](auto& d) {
         d.encoders[0].limits.cap = capacity{capacity::measure::tokens, 99};
       }},
      {"encoder min items", [](auto& d) { d.encoders[0].limits.min_items = 1; }},
      {"encoder max items", [](auto& d) { d.encoders[0].limits.max_items = 50; }},
      {"encoder lpt refine",
       [](auto& d) { d.encoders[0].balancer = balancers::lpt{.refine = true}; }},
      {"encoder lpt refine budget",
       [](auto& d) { d.encoders[0].balancer = balancers::lpt{.refine_budget = 7}; }},
      {"encoder karmarkar_karp",
       [](auto& d) { d.encoders[0].balancer = balancers::karmarkar_karp{}; }},
      {"encoder karmarkar_karp refine",
       [](auto& d) { d.encoders[0].balancer = balancers::karmarkar_karp{.refine = true}; }},
      {"encoder karmarkar_karp_equal",
       [](auto& d) { d.encoders[0].balancer = balancers::karmarkar_karp_equal{}; }},
      {"encoder karmarkar_karp_equal refine budget",
       [](auto& d) {
         d.encoders[0].balancer = balancers::karmarkar_karp_equal{.refine_budget = 9};
       }},
      {"encoder exact", [](auto& d) { d.encoders[0].balancer = balancers::exact{}; }},
      {"encoder exact node budget",
       [](auto& d) { d.encoders[0].balancer = balancers::exact{.node_budget = 5}; }},
      {"encoder padded_exact", [](auto& d) { d.encoders[1].balancer = balancers::padded_exact{}; }},
      {"encoder padded_exact refine budget",
       [](auto& d) { d.encoders[1].balancer = balancers::padded_exact{.refine_budget = 3}; }},
      {"encoder refine budget",
       [](auto& d) { d.encoders[0].balancer = balancers::automatic{.refine_budget = 7}; }},
      {"encoder exact budget",
       [](auto& d) { d.encoders[0].balancer = balancers::automatic{.exact_node_budget = 5}; }},
      {"encoder exact items",
       [](auto& d) { d.encoders[0].balancer = balancers::automatic{.exact_max_items = 3}; }},
      {"encoder gap tolerance",
       [](auto& d) { d.encoders[0].balancer = balancers::automatic{.gap_tolerance = 0.001}; }},
      {"llm gap tolerance",
       [](auto& d) { d.llm.balancer = balancers::automatic{.gap_tolerance = 0.005}; }},
      {"encoder locality", [](auto& d) { d.encoders[0].balancer = balancers::locality{}; }},
      {"encoder tolerance",
       [](auto& d) { d.encoders[0].balancer = balancers::locality{.tolerance = 0.01}; }},
      {"encoder locality base",
       [](auto& d) {
         d.encoders[0].balancer = balancers::locality{.base = {.gap_tolerance = 0.002}};
       }},
      {"encoder node map",
       [](auto& d) {
         d.encoders[0].balancer = balancers::locality{.node_of_rank = {0, 0, 1}};
       }},
      {"encoder node map values",
       [](auto& d) {
         d.encoders[0].balancer = balancers::locality{.node_of_rank = {0, 1, 1}};
       }},
      {"encoder own balancer",
       [](auto& d) {
         d.encoders[0].balancer =
             orchmllm::stage_balancer([](const auto& p) { return balancers::lpt{}(p); }, "mine");
       }},
      {"encoder own balancer name",
       [](auto& d) {
         d.encoders[0].balancer =
             orchmllm::stage_balancer([](const auto& p) { return balancers::lpt{}(p); }, "theirs");
       }},
      {"encoder mapping", [](auto& d) { d.encoders[0].mapper = mappers::bottleneck{}; }},
      {"encoder bottleneck budget",
       [](auto& d) { d.encoders[0].mapper = mappers::bottleneck{.step_budget = 5}; }},
      {"encoder auction", [](auto& d) { d.encoders[0].mapper = mappers::auction{}; }},
      {"encoder auction tolerance",
       [](auto& d) { d.encoders[0].mapper = mappers::auction{.tolerance = 0.02}; }},
      {"encoder own mapper",
       [](auto& d) {
         d.encoders[0].mapper = orchmllm::stage_mapper(
             [](const orchmllm::bin_mapping_problem& p) { return mappers::transport{}(p); },
             "mine");
       }},
      {"encoder input row bytes", [](auto& d) { d.encoders[0].input_row_bytes = 25; }},
      {"encoder output row bytes", [](auto& d) { d.encoders[1].output_row_bytes = 31; }},
      {"encoder order", [](auto& d) { std::swap(d.encoders[0], d.encoders[1]); }},
      {"encoder split", [](auto& d) { d.encoders[0].split = orchmllm::split_options{}; }},
      {"encoder split rules",
       [](auto& d) { d.encoders[0].split = orchmllm::split_options{.max_pieces = 4}; }},
      {"one encoder fewer", [](auto& d) { d.encoders.pop_back(); }},
      {"one encoder more", [](auto& d) { d.encoders.push_back(encoder_stage{.name = "video"}); }},
      {"llm name", [](auto& d) { d.llm.name = "llm2"; }},
      {"llm cost",
       [](auto& d) {
         d.llm.cost = quadratic_cost{1.0, 2.0, 0.002};
       }},
      {"llm policy", [](auto& d) { d.llm.policy = orchmllm::padded; }},
      {"llm balancer", [](auto& d) { d.llm.balancer = balancers::karmarkar_karp{}; }},
      {"llm cap",
       [](auto& d) {
         d.llm.limits.cap = capacity{capacity::measure::bytes, 1};
       }},
      {"llm mapping", [](auto& d) { d.llm.mapper = mappers::identity{}; }},
      {"llm text row bytes", [](auto& d) { d.llm.text_row_bytes = 16; }},
  };
  {
    // The defaults spelled out, parsed or held in an any_balancer / any_mapper are the same
    // declaration; so is automatic's `concurrent` (plans do not depend on it).
    const std::vector<std::function<void(stage_declarations&)>> same = {
        [](auto& d) { d.encoders[0].balancer = balancers::automatic{}; },
        [](auto& d) { d.encoders[0].balancer = orchmllm::parse_balancer("automatic"); },
        [](auto& d) { d.encoders[0].balancer = orchmllm::any_balancer{}; },
        [](auto& d) { d.encoders[0].balancer = balancers::automatic{.concurrent = true}; },
        [](auto& d) { d.llm.mapper = mappers::transport{}; },
        [](auto& d) { d.llm.mapper = orchmllm::parse_mapper("transport"); },
        [](auto& d) { d.llm.mapper = orchmllm::any_mapper{}; },
    };
    for (std::size_t k = 0; k < same.size(); ++k) {
      auto d = two_encoders();
      same[k](d);
      INFO("same declaration ", k);
      CHECK(orchmllm::fingerprint(d) == h);
    }
    // A built-in's knobs from parse_balancer and from the object are the same declaration.
    auto typed = two_encoders();
    typed.llm.balancer = balancers::lpt{.refine = true};
    auto parsed = two_encoders();
    auto lpt = orchmllm::parse_balancer("lpt");
    lpt.get_if<balancers::lpt>()->refine = true;
    parsed.llm.balancer = lpt;
    CHECK(orchmllm::fingerprint(typed) == orchmllm::fingerprint(parsed));
    CHECK(orchmllm::fingerprint(typed) != h);
  }
  {
    // The same rule declared twice is the same declaration.
    auto a = two_encoders();
    auto b = two_encoders();
    a.encoders[1].policy = pow2_rule{};
    b.encoders[1].policy = pow2_rule{};
    CHECK(orchmllm::fingerprint(a) == orchmllm::fingerprint(b));
  }
  std::vector<std::uint64_t> seen{h};
  for (auto& [what, change] : changes) {
    auto d = two_encoders();
    change(d);
    const auto f = orchmllm::fingerprint(d);
    INFO("change: ", what);
    CHECK(f != h);
    CHECK(orchmllm::fingerprint(d) == f);  // deterministic
    seen.push_back(f);
  }
  // All variants are pairwise distinct too.
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
}

TEST_CASE("make_step_metadata: ids, offsets and per-sample order") {
  // Rank 0: samples A (text 5), B (text 0); sub-items interleave between samples.
  // Rank 1: no samples. Rank 2: sample C (text 3, no sub-items), D (text 2).
  local_batch r0;
  r0.text_tokens = {5, 0};
  r0.sub_items = {
      sub_item{.modality = 1, .parent = 1, .encoder_length = 10, .input_rows = 2, .llm_tokens = 3},
      sub_item{.modality = 0, .parent = 0, .encoder_length = 20, .input_rows = 4, .llm_tokens = 1},
      sub_item{.modality = 1, .parent = 0, .encoder_length = 30, .input_rows = 0, .llm_tokens = 2},
      sub_item{.modality = 0, .parent = 1, .encoder_length = 40, .input_rows = 1, .llm_tokens = 0},
      sub_item{.modality = 0, .parent = 0, .encoder_length = 50, .input_rows = 5, .llm_tokens = 4},
  };
  local_batch r1;
  local_batch r2;
  r2.text_tokens = {3, 2};
  r2.sub_items = {
      sub_item{.modality = 1, .parent = 1, .encoder_length = 7, .input_rows = 7, .llm_tokens = 7},
  };
  const auto m = orchmllm::make_step_metadata({r0, r1, r2}, 2);
  CHECK(m.ranks == 3);
  CHECK(m.num_samples() == 4);
  CHECK(m.sample_offsets == vec{0, 2, 2, 4});
  CHECK(m.text_tokens == vec{5, 0, 3, 2});
  REQUIRE(m.modalities.size() == 2);
  CHECK(m.modalities[0].offsets == vec{0, 3, 3, 3});
  CHECK(m.modalities[0].parent == vec{0, 1, 0});
  CHECK(m.modalities[0].encoder_length == vec{20, 40, 50});
  CHECK(m.modalities[0].input_rows == vec{4, 1, 5});
  CHECK(m.modalities[0].llm_tokens == vec{1, 0, 4});
  CHECK(m.modalities[1].offsets == vec{0, 2, 2, 3});
  CHECK(m.modalities[1].parent == vec{1, 0, 3});
  CHECK(m.modalities[1].encoder_length == vec{10, 30, 7});
  CHECK(m.modalities[1].llm_tokens == vec{3, 2, 7});
  CHECK(m.sample_sub_offsets == vec{0, 3, 5, 5, 6});
  using item = std::pair<std::int32_t, std::int64_t>;
  CHECK(m.sample_sub_items == std::vector<item>{{0, 0}, {1, 1}, {0, 2}, {1, 0}, {0, 1}, {1, 2}});
  CHECK(m.sequence_length(0) == 5 + 1 + 2 + 4);
  CHECK(m.sequence_length(1) == 0 + 3 + 0);
  CHECK(m.sequence_length(2) == 3);
  CHECK(m.sequence_length(3) == 2 + 7);

  // K = 0: samples only.
  local_batch plain;
  plain.text_tokens = {1, 2, 3};
  const auto p = orchmllm::make_step_metadata({plain}, 0);
  CHECK(p.modalities.empty());
  CHECK(p.sample_sub_offsets == vec{0, 0, 0, 0});
  CHECK(p.sequence_length(2) == 3);
}

TEST_CASE("make_step_metadata rejects malformed batches naming the rank") {
  local_batch ok;
  ok.text_tokens = {4, 4};
  ok.sub_items = {
      sub_item{.modality = 0, .parent = 1, .encoder_length = 3, .input_rows = 1, .llm_tokens = 1}};
  CHECK_NOTHROW((void)orchmllm::make_step_metadata({ok, ok}, 1));
  expect_invalid([] { (void)orchmllm::make_step_metadata({}, 1); }, {"at least one rank"});
  expect_invalid([&] { (void)orchmllm::make_step_metadata({ok}, -1); }, {"-1 encoder stages"});

  auto bad = ok;
  bad.sub_items[0].parent = 2;
  expect_invalid(
      [&] {
        (void)orchmllm::make_step_metadata({ok, ok, bad}, 1);
      },
      {"rank 2", "sub-item 0", "parent sample 2", "does not exist"});
  bad = ok;
  bad.sub_items[0].parent = -1;
  expect_invalid(
      [&] {
        (void)orchmllm::make_step_metadata({bad, ok}, 1);
      },
      {"rank 0", "parent sample -1"});
  bad = ok;
  bad.sub_items.push_back(bad.sub_items[0]);
  bad.sub_items[1].modality = 1;
  expect_invalid(
      [&] {
        (void)orchmllm::make_step_metadata({ok, bad}, 1);
      },
      {"rank 1", "sub-item 1", "modality 1", "1 encoder stages"});
  bad = ok;
  bad.sub_items[0].modality = -3;
  expect_invalid([&] { (void)orchmllm::make_step_metadata({bad}, 1); }, {"modality -3"});
  bad = ok;
  bad.text_tokens[1] = -5;
  expect_invalid(
      [&] {
        (void)orchmllm::make_step_metadata({ok, bad}, 1);
      },
      {"rank 1", "sample 1", "-5 text tokens"});
  for (int field = 0; field < 3; ++field) {
    bad = ok;
    (field == 0   ? bad.sub_items[0].encoder_length
     : field == 1 ? bad.sub_items[0].input_rows
                  : bad.sub_items[0].llm_tokens) = -1;
    expect_invalid([&] { (void)orchmllm::make_step_metadata({bad}, 1); },
                   {"rank 0", "sub-item 0", "negative"});
  }
  // Segments: at least 1, at most 2^31, dividing the encoder length, input rows and LLM tokens.
  for (const auto [length, rows, tokens, segments] :
       std::vector<std::array<std::int64_t, 4>>{{9, 4, 2, 2},
                                                {8, 3, 2, 2},
                                                {8, 4, 3, 2},
                                                {8, 4, 2, 0},
                                                {8, 4, 2, -3},
                                                {0, 0, 0, (std::int64_t{1} << 31) + 1}}) {
    bad = ok;
    bad.sub_items[0] = {0, 1, length, rows, tokens, segments};
    expect_invalid(
        [&] {
          (void)orchmllm::make_step_metadata({ok, bad}, 1);
        },
        {"rank 1", "sub-item 0 has " + std::to_string(segments) + " segments",
         "divide its encoder length, input rows and LLM tokens"});
  }
  bad = ok;
  bad.sub_items[0] = {0, 1, 0, 0, 0, std::int64_t{1} << 31};  // zero sizes: any S divides
  CHECK(orchmllm::make_step_metadata({bad}, 1).modalities[0].segments ==
        vec{std::int64_t{1} << 31});
  // A sub-item in a batch without samples has no parent.
  local_batch orphan;
  orphan.sub_items = ok.sub_items;
  orphan.sub_items[0].parent = 0;
  expect_invalid(
      [&] {
        (void)orchmllm::make_step_metadata({ok, orphan}, 1);
      },
      {"rank 1", "parent sample 0"});
}
