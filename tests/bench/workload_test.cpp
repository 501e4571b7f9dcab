// Tests of the benchmark workload generators (bench/support/workload.hpp): the encoder token rule
// against the worked examples of the workload reference, determinism, and the consistency of
// the per-stage layouts with the samples they come from.

#include "bench/support/workload.hpp"

#include <doctest/doctest.h>

#include <cstdint>

using namespace orchmllm;
using namespace orchmllm::bench;

TEST_CASE("qwen2vl_smart_resize reproduces the published worked examples") {
  // Default Qwen2-VL limits: 4..16384 tokens; README override 256..1280 tokens (pixels = 28²·t).
  constexpr std::int64_t px = 28 * 28;
  auto tokens = [](std::pair<std::int64_t, std::int64_t> hw) {
    return (hw.first / 28) * (hw.second / 28);
  };
  CHECK(tokens(qwen2vl_smart_resize(480, 640, 4 * px, 16384 * px)) == 391);
  CHECK(tokens(qwen2vl_smart_resize(427, 640, 4 * px, 16384 * px)) == 345);
  CHECK(tokens(qwen2vl_smart_resize(336, 336, 256 * px, 1280 * px)) == 256);
  CHECK(tokens(qwen2vl_smart_resize(3000, 4000, 256 * px, 1280 * px)) == 1230);
  CHECK(tokens(qwen2vl_smart_resize(2200, 1700, 256 * px, 1280 * px)) == 1240);
  CHECK(tokens(qwen2vl_smart_resize(720, 1280, 4 * px, 16384 * px)) == 1196);
}

TEST_CASE("lognormal_layout is deterministic, clipped and independent of the rank count") {
  const lognormal_spec spec{};
  const auto a = lognormal_layout(16, 8, spec, 7);
  const auto b = lognormal_layout(16, 8, spec, 7);
  const auto c = lognormal_layout(32, 8, spec, 7);
  CHECK(a == b);
  CHECK(a.num_items() == 128);
  for (std::int64_t g = 0; g < a.num_items(); ++g) {
    CHECK(a.length(g) >= spec.lo);
    CHECK(a.length(g) <= spec.hi);
    CHECK(a.length(g) == c.length(g));  // rank r draws from stream r: first 16 ranks agree
  }
  CHECK(lognormal_layout(16, 8, spec, 8) != a);
}

TEST_CASE("make_multimodal_batch: stage layouts agree with the samples") {
  multimodal_spec spec;
  spec.ranks = 24;
  spec.samples_per_rank = 6;
  spec.seed = 3;
  const auto batch = make_multimodal_batch(spec);
  const auto again = make_multimodal_batch(spec);
  CHECK(batch.vision == again.vision);
  CHECK(batch.audio == again.audio);
  CHECK(batch.llm == again.llm);
  REQUIRE(batch.llm.num_items() == spec.ranks * spec.samples_per_rank);
  CHECK(batch.llm.num_ranks() == spec.ranks);
  CHECK(batch.vision.num_ranks() == spec.ranks);
  CHECK(batch.audio.num_ranks() == spec.ranks);

  std::int64_t images = 0, clips = 0;
  for (std::int64_t g = 0; g < batch.llm.num_items(); ++g) {
    const auto& s = batch.samples[static_cast<std::size_t>(g)];
    std::int64_t tokens = s.text_tokens;
    for (const auto& im : s.images) {
      CHECK(im.height % 28 == 0);
      CHECK(im.width % 28 == 0);
      CHECK(im.llm_tokens == (im.height / 28) * (im.width / 28));
      CHECK(im.llm_tokens >= spec.min_image_tokens);
      CHECK(im.llm_tokens <= spec.max_image_tokens);
      CHECK(im.vit_patches == 4 * im.llm_tokens);
      tokens += im.llm_tokens;
    }
    for (const auto& a : s.audio) {
      CHECK(a.windows >= 1);
      CHECK(a.encoder_positions == 1500 * a.windows);
      tokens += a.llm_tokens;
    }
    CHECK(batch.llm.length(g) == tokens);
    images += static_cast<std::int64_t>(s.images.size());
    clips += static_cast<std::int64_t>(s.audio.size());
  }
  REQUIRE(batch.vision.num_items() == images);
  REQUIRE(batch.audio.num_items() == clips);
  // Sub-items stay on their parent's rank and point at an existing sample.
  for (std::int64_t i = 0; i < batch.vision.num_items(); ++i) {
    const auto p = batch.vision.parent(i);
    REQUIRE(p >= 0);
    REQUIRE(p < batch.llm.num_items());
    CHECK(batch.vision.rank_of(i) == batch.llm.rank_of(p));
  }
  for (std::int64_t i = 0; i < batch.audio.num_items(); ++i) {
    const auto p = batch.audio.parent(i);
    REQUIRE(p >= 0);
    REQUIRE(p < batch.llm.num_items());
    CHECK(batch.audio.rank_of(i) == batch.llm.rank_of(p));
  }
}
