// Tests for include/orchmllm/orchestrator/samples.hpp: make_local_batch from a trainer's own
// sample struct (a vector of images, an optional audio clip, a pointer, a single object) through
// projections gives the batch written by hand, modality by modality within a sample; through a
// sample_traits specialisation sub-items keep the emitted (interleaved) order; the batches plan
// like hand-written ones (make_step_metadata + plan_step), and bad sizes are reported by the
// metadata checks.

#include "orchmllm/orchestrator/samples.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::local_batch;
using orchmllm::sub_item;
using orchmllm::sub_item_size;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;

// The trainer's own types.
struct image {
  std::int64_t height = 0, width = 0;  // in 14-pixel patches
  [[nodiscard]] sub_item_size size() const {
    const auto patches = height * width;
    return {patches, patches, patches / 4};  // 2 × 2 patch merge
  }
};
struct audio {
  std::int64_t frames = 0;
};
struct sample {
  std::int64_t text = 0;
  std::vector<image> images;
  std::optional<audio> clip;
};

const auto audio_size = [](const audio& a) {
  return sub_item_size{(a.frames + 1) / 2, a.frames, (a.frames + 1) / 4};
};

std::vector<sample> random_samples(std::mt19937_64& rng) {
  std::vector<sample> out(static_cast<std::size_t>(uniform(rng, 0, 6)));
  for (auto& s : out) {
    s.text = uniform(rng, 1, 300);
    for (auto n = uniform(rng, 0, 3); n > 0; --n)
      s.images.push_back({uniform(rng, 1, 40), uniform(rng, 1, 40)});
    if (uniform(rng, 0, 1) == 1) s.clip = audio{uniform(rng, 1, 3000)};
  }
  return out;
}

// The batch written by hand: images, then the clip.
local_batch by_hand(const std::vector<sample>& samples) {
  local_batch b;
  for (std::size_t p = 0; p < samples.size(); ++p) {
    const auto parent = static_cast<std::int64_t>(p);
    b.text_tokens.push_back(samples[p].text);
    for (const auto& i : samples[p].images) {
      const auto s = i.size();
      b.sub_items.push_back({0, parent, s.encoder_length, s.input_rows, s.llm_tokens});
    }
    if (samples[p].clip) {
      const auto s = audio_size(*samples[p].clip);
      b.sub_items.push_back({1, parent, s.encoder_length, s.input_rows, s.llm_tokens});
    }
  }
  return b;
}

auto from_projections(const std::vector<sample>& samples) {
  return orchmllm::make_local_batch(samples, &sample::text,
                                    orchmllm::modality(&sample::images, &image::size),
                                    orchmllm::modality(&sample::clip, audio_size));
}

orchmllm::stage_declarations declarations() {
  orchmllm::stage_declarations decl;
  decl.encoders.resize(2);
  decl.encoders[0].name = "vision";
  decl.encoders[0].cost = orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 256};
  decl.encoders[1].name = "audio";
  decl.encoders[1].policy = orchmllm::padded;
  decl.llm.cost = orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 1024};
  return decl;
}

// A second sample type described by traits: its parts interleave modalities.
struct part {
  int modality = 0;
  std::int64_t length = 0;
};
struct mixed_sample {
  std::int64_t text = 0;
  std::vector<part> parts;
};

}  // namespace

template <>
struct orchmllm::sample_traits<mixed_sample> {
  static std::int64_t text_tokens(const mixed_sample& s) { return s.text; }
  template <class Emit>
  static void sub_items(const mixed_sample& s, Emit&& emit) {
    for (const auto& p : s.parts) emit(p.modality, sub_item_size{p.length, 2 * p.length, p.length});
  }
};

static_assert(orchmllm::has_sample_traits<mixed_sample>);
static_assert(!orchmllm::has_sample_traits<sample>);

TEST_CASE("make_local_batch through projections equals the hand-written batch") {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 200; ++trial) {
    const auto samples = random_samples(rng);
    INFO("trial ", trial);
    CHECK(from_projections(samples) == by_hand(samples));
  }
  // Other shapes of a modality: a pointer (null: none), one object, a lambda returning a range.
  struct framed {
    std::int64_t text;
    const audio* clip;
    image cover;
  };
  const audio a{10};
  const std::vector<framed> samples{{7, &a, {2, 3}}, {5, nullptr, {1, 1}}};
  const auto b = orchmllm::make_local_batch(
      samples, [](const framed& s) { return s.text; },
      orchmllm::modality(&framed::clip, audio_size),
      orchmllm::modality(&framed::cover, &image::size),
      orchmllm::modality([](const framed& s) { return std::vector<image>(2, s.cover); },
                         [](const image& i) {
                           return sub_item_size{i.width, 0, 0};
                         }));
  local_batch want;
  want.text_tokens = {7, 5};
  want.sub_items = {{0, 0, 5, 10, 2}, {1, 0, 6, 6, 1}, {2, 0, 3, 0, 0}, {2, 0, 3, 0, 0},
                    {1, 1, 1, 1, 0},  {2, 1, 1, 0, 0}, {2, 1, 1, 0, 0}};
  CHECK(b == want);
}

TEST_CASE("make_local_batch through sample_traits keeps the emitted order") {
  const std::vector<mixed_sample> samples{{4, {{1, 9}, {0, 3}, {1, 2}}}, {6, {}}, {2, {{0, 5}}}};
  local_batch want;
  want.text_tokens = {4, 6, 2};
  want.sub_items = {{1, 0, 9, 18, 9}, {0, 0, 3, 6, 3}, {1, 0, 2, 4, 2}, {0, 2, 5, 10, 5}};
  CHECK(orchmllm::make_local_batch(samples) == want);
}

TEST_CASE("batches from projections plan like hand-written ones") {
  std::mt19937_64 rng(22);
  const auto decl = declarations();
  for (int trial = 0; trial < 20; ++trial) {
    const auto d = static_cast<orchmllm::rank_t>(uniform(rng, 1, 8));
    std::vector<local_batch> projected, written;
    for (orchmllm::rank_t r = 0; r < d; ++r) {
      const auto samples = random_samples(rng);
      projected.push_back(from_projections(samples));
      written.push_back(by_hand(samples));
    }
    const auto topo = orchmllm::topology::uniform(d, 2);
    const auto a = orchmllm::plan_step(decl, orchmllm::make_step_metadata(projected, 2), topo);
    const auto b = orchmllm::plan_step(decl, orchmllm::make_step_metadata(written, 2), topo);
    INFO("trial ", trial, ", d = ", d);
    CHECK(a.llm == b.llm);
    for (std::size_t k = 0; k < 2; ++k) CHECK(a.encoders[k].input == b.encoders[k].input);
  }
  // Nothing is validated while projecting: the metadata check names the fault.
  const std::vector<sample> bad{{-3, {}, std::nullopt}};
  const auto batch = from_projections(bad);
  expect_invalid([&] { (void)orchmllm::make_step_metadata({batch}, 2); }, {"rank 0", "-3"});
}

TEST_CASE("make_local_batch carries every sub-item's segment count") {
  struct Video {
    std::int64_t groups;
  };
  struct Clip {
    std::vector<Video> videos;
  };
  const auto size = [](const Video& v) {
    return sub_item_size{v.groups * 64, v.groups * 64, v.groups * 16, v.groups};
  };
  const std::vector<Clip> samples = {{{{3}, {1}}}, {{}}, {{{24}}}};
  const auto b = orchmllm::make_local_batch(
      samples, [](const Clip&) { return 5; }, orchmllm::modality(&Clip::videos, size));
  REQUIRE(b.sub_items.size() == 3);
  CHECK(b.sub_items[0] == sub_item{0, 0, 192, 192, 48, 3});
  CHECK(b.sub_items[1] == sub_item{0, 0, 64, 64, 16, 1});
  CHECK(b.sub_items[2] == sub_item{0, 2, 1536, 1536, 384, 24});
  // A size without segments is one segment.
  const auto plain = orchmllm::make_local_batch(
      samples, [](const Clip&) { return 5; }, orchmllm::modality(&Clip::videos, [](const Video& v) {
        return sub_item_size{v.groups, v.groups, v.groups};
      }));
  for (const auto& s : plain.sub_items) CHECK(s.segments == 1);
}
