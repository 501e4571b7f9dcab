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

using orchmllm::balance_method;
using orchmllm::capacity;
using orchmllm::encoder_stage;
using orchmllm::invalid_argument_error;
using orchmllm::linear_cost;
using orchmllm::local_batch;
using orchmllm::mapping_method;
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
  SUBCASE("bad balancer options") {
    auto d = two_encoders();
    d.encoders[0].options.refine_budget = -2;
    expect_invalid([&] { d.validate(); }, {"'vision'", "refine_budget is -2"});
    auto e = two_encoders();
    e.llm.options.exact_node_budget = -1;
    expect_invalid([&] { e.validate(); }, {"'llm'", "exact budgets must be >= 0"});
    auto f = two_encoders();
    f.encoders[1].options.method = balance_method::kk;  // audio is padded
    expect_invalid([&] { f.validate(); }, {"'audio'", "kk"});
    auto g = two_encoders();
    g.encoders[0].options.method = balance_method::padded_exact;  // vision is packed
    expect_invalid([&] { g.validate(); }, {"'vision'", "padded policy"});
    auto h = two_encoders();
    h.encoders[1].options.locality_tolerance = -0.5;
    expect_invalid([&] { h.validate(); }, {"'audio'", "locality_tolerance is -0.5"});
    auto i = two_encoders();
    i.llm.options.locality_tolerance = std::numeric_limits<double>::quiet_NaN();
    expect_invalid([&] { i.validate(); }, {"'llm'", "locality_tolerance"});
    auto gap = two_encoders();
    gap.llm.options.gap_tolerance = -1e-3;
    expect_invalid([&] { gap.validate(); }, {"'llm'", "gap_tolerance is -0.001"});
    auto j = two_encoders();
    j.encoders[0].options.limits.cap = capacity{capacity::measure::tokens, -3};
    expect_invalid([&] { j.validate(); }, {"'vision'", "cap -3"});
    auto k = two_encoders();
    k.llm.options.limits.min_items = 4;
    k.llm.options.limits.max_items = 2;
    expect_invalid([&] { k.validate(); }, {"'llm'", "4..2"});
    auto l = two_encoders();
    l.encoders[1].options.node_of_rank = {0, -1};
    expect_invalid([&] { l.validate(); }, {"'audio'", "node_of_rank holds -1"});
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
      {"encoder cost", [](auto& d) { d.encoders[0].cost = quadratic_cost{0.0, 1.0, 0.011}; }},
      {"encoder cost constant", [](auto& d) { d.encoders[1].cost = quadratic_cost{1.0, 3.0, 0}; }},
      {"encoder policy", [](auto& d) { d.encoders[1].policy = orchmllm::packed; }},
      {"encoder padding multiple",
       [](auto& d) { d.encoders[1].policy = orchmllm::padded_to_multiple(8); }},
      {"encoder buckets", [](auto& d) { d.encoders[1].policy = orchmllm::bucketed({4096}); }},
      {"encoder bucket lengths",
       [](auto& d) { d.encoders[1].policy = orchmllm::bucketed({1024, 4096}); }},
      {"encoder padding rule", [](auto& d) { d.encoders[1].policy = pow2_rule{}; }},
      {"encoder padding rule name", [](auto& d) { d.encoders[1].policy = pow2_rule{"other"}; }},
      {"encoder method", [](auto& d) { d.encoders[0].options.method = balance_method::lpt; }},
      {"encoder cap set",
       [](auto& d) { d.encoders[0].options.limits.cap = capacity{capacity::measure::tokens}; }},
      {"encoder cap measure",
       [](auto& d) {
         d.encoders[0].options.limits.cap =
             capacity{capacity::measure::bytes, std::numeric_limits<std::int64_t>::max()};
       }},
      {"encoder cap limit",
       [](auto& d) { d.encoders[0].options.limits.cap = capacity{capacity::measure::tokens, 99}; }},
      {"encoder min items", [](auto& d) { d.encoders[0].options.limits.min_items = 1; }},
      {"encoder max items", [](auto& d) { d.encoders[0].options.limits.max_items = 50; }},
      {"encoder refine", [](auto& d) { d.encoders[0].options.refine = true; }},
      {"encoder refine budget", [](auto& d) { d.encoders[0].options.refine_budget = 7; }},
      {"encoder exact budget", [](auto& d) { d.encoders[0].options.exact_node_budget = 5; }},
      {"encoder exact items", [](auto& d) { d.encoders[0].options.exact_max_items = 3; }},
      {"encoder tolerance", [](auto& d) { d.encoders[0].options.locality_tolerance = 0.01; }},
      {"encoder gap tolerance", [](auto& d) { d.encoders[0].options.gap_tolerance = 0.001; }},
      {"llm gap tolerance", [](auto& d) { d.llm.options.gap_tolerance = 0.005; }},
      {"encoder node map", [](auto& d) { d.encoders[0].options.node_of_rank = {0, 0, 1}; }},
      {"encoder node map values", [](auto& d) {
         d.encoders[0].options.node_of_rank = {0, 0, 1};
         d.encoders[1].options.node_of_rank = {0, 1, 1};
       }},
      {"encoder mapping", [](auto& d) { d.encoders[0].mapping = mapping_method::bottleneck; }},
      {"encoder input row bytes", [](auto& d) { d.encoders[0].input_row_bytes = 25; }},
      {"encoder output row bytes", [](auto& d) { d.encoders[1].output_row_bytes = 31; }},
      {"encoder order", [](auto& d) { std::swap(d.encoders[0], d.encoders[1]); }},
      {"encoder split", [](auto& d) { d.encoders[0].split = orchmllm::split_options{}; }},
      {"encoder split rules",
       [](auto& d) { d.encoders[0].split = orchmllm::split_options{.max_pieces = 4}; }},
      {"one encoder fewer", [](auto& d) { d.encoders.pop_back(); }},
      {"one encoder more", [](auto& d) { d.encoders.push_back(encoder_stage{.name = "video"}); }},
      {"llm name", [](auto& d) { d.llm.name = "llm2"; }},
      {"llm cost", [](auto& d) { d.llm.cost = quadratic_cost{1.0, 2.0, 0.002}; }},
      {"llm policy", [](auto& d) { d.llm.policy = orchmllm::padded; }},
      {"llm method", [](auto& d) { d.llm.options.method = balance_method::kk; }},
      {"llm cap", [](auto& d) { d.llm.options.limits.cap = capacity{capacity::measure::bytes, 1}; }},
      {"llm mapping", [](auto& d) { d.llm.mapping = mapping_method::identity; }},
      {"llm text row bytes", [](auto& d) { d.llm.text_row_bytes = 16; }},
  };
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
  CHECK(m.sample_sub_items ==
        std::vector<item>{{0, 0}, {1, 1}, {0, 2}, {1, 0}, {0, 1}, {1, 2}});
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
  ok.sub_items = {sub_item{.modality = 0, .parent = 1, .encoder_length = 3, .input_rows = 1,
                           .llm_tokens = 1}};
  CHECK_NOTHROW((void)orchmllm::make_step_metadata({ok, ok}, 1));
  expect_invalid([] { (void)orchmllm::make_step_metadata({}, 1); }, {"at least one rank"});
  expect_invalid([&] { (void)orchmllm::make_step_metadata({ok}, -1); }, {"-1 encoder stages"});

  auto bad = ok;
  bad.sub_items[0].parent = 2;
  expect_invalid([&] { (void)orchmllm::make_step_metadata({ok, ok, bad}, 1); },
                 {"rank 2", "sub-item 0", "parent sample 2", "does not exist"});
  bad = ok;
  bad.sub_items[0].parent = -1;
  expect_invalid([&] { (void)orchmllm::make_step_metadata({bad, ok}, 1); },
                 {"rank 0", "parent sample -1"});
  bad = ok;
  bad.sub_items.push_back(bad.sub_items[0]);
  bad.sub_items[1].modality = 1;
  expect_invalid([&] { (void)orchmllm::make_step_metadata({ok, bad}, 1); },
                 {"rank 1", "sub-item 1", "modality 1", "1 encoder stages"});
  bad = ok;
  bad.sub_items[0].modality = -3;
  expect_invalid([&] { (void)orchmllm::make_step_metadata({bad}, 1); }, {"modality -3"});
  bad = ok;
  bad.text_tokens[1] = -5;
  expect_invalid([&] { (void)orchmllm::make_step_metadata({ok, bad}, 1); },
                 {"rank 1", "sample 1", "-5 text tokens"});
  for (int field = 0; field < 3; ++field) {
    bad = ok;
    (field == 0 ? bad.sub_items[0].encoder_length
                : field == 1 ? bad.sub_items[0].input_rows
                             : bad.sub_items[0].llm_tokens) = -1;
    expect_invalid([&] { (void)orchmllm::make_step_metadata({bad}, 1); },
                   {"rank 0", "sub-item 0", "negative"});
  }
  // Segments: at least 1, at most 2^31, dividing the encoder length, input rows and LLM tokens.
  for (const auto [length, rows, tokens, segments] :
       std::vector<std::array<std::int64_t, 4>>{{9, 4, 2, 2}, {8, 3, 2, 2}, {8, 4, 3, 2},
                                               {8, 4, 2, 0}, {8, 4, 2, -3},
                                               {0, 0, 0, (std::int64_t{1} << 31) + 1}}) {
    bad = ok;
    bad.sub_items[0] = {0, 1, length, rows, tokens, segments};
    expect_invalid([&] { (void)orchmllm::make_step_metadata({ok, bad}, 1); },
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
  expect_invalid([&] { (void)orchmllm::make_step_metadata({ok, orphan}, 1); },
                 {"rank 1", "parent sample 0"});
}
