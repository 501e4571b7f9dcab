// Tests of the four benchmark workloads (bench/support/workloads.hpp) and of the
// `orchmllm-bench workload` subcommand (bench/cli/workload.hpp): the §1 encoder token rules
// against the published worked examples (docs/tool.md, `workload`), determinism and rank-count
// independence, the §4–§8 distributions on large draws (fixed seeds, tolerances a few standard
// errors wide or the reference's own fit tolerance), validity of every local batch, the
// omni-pretrain packing against a reference re-implementation, and the ITEMS.csv round trip.

#include "bench/support/workloads.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/cli/file_io.hpp"
#include "bench/cli/items_csv.hpp"
#include "bench/cli/trace_csv.hpp"
#include "bench/cli/workload.hpp"
#include "support/scratch_dir.hpp"
#include "support/test_support.hpp"

using namespace orchmllm;
using namespace orchmllm::bench;
namespace fs = std::filesystem;

namespace {

constexpr workload_name all_names[] = {workload_name::vl_sft, workload_name::omni_pretrain,
                                       workload_name::video_heavy, workload_name::audio_asr};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double sd(const std::vector<double>& v) {
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

template <class F>
std::vector<double> draws(std::uint64_t seed, int n, F&& f) {
  random_source rng(seed, 0);
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back(f(rng));
  return out;
}

// A fresh directory per test case, named after this test.
struct scratch_dir : orchmllm::test::scratch_dir {
  scratch_dir() : orchmllm::test::scratch_dir("orchmllm_workloads_test_") {}
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Names and errors
// ---------------------------------------------------------------------------------------------

TEST_CASE("workload names round-trip and bad names are rejected with the list") {
  for (auto n : all_names) CHECK(parse_workload(to_string(n)) == n);
  CHECK(to_string(workload_name::omni_pretrain) == "omni-pretrain");
  test::expect_invalid([] { (void)parse_workload("vl_sft"); },
                       {"'vl_sft'", "vl-sft", "omni-pretrain", "video-heavy", "audio-asr"});
  test::expect_invalid([] { (void)make_workload({workload_name::vl_sft, 0, 8, 1}); }, {"ranks 0"});
  test::expect_invalid(
      [] {
        (void)make_workload({workload_name::vl_sft, 2, -1, 1});
      },
      {"samples_per_rank -1"});
  test::expect_invalid(
      [] {
        (void)make_workload({workload_name::video_heavy, 2, 1, 1, /*long_form=*/true});
      },
      {"long_form_audio", "video-heavy"});
}

// ---------------------------------------------------------------------------------------------
// §1 token rules
// ---------------------------------------------------------------------------------------------

TEST_CASE("Qwen2-VL image tokens match the §1 worked examples (W x H in the table)") {
  struct row {
    double w, h;
    std::int64_t dflt, capped;
  };
  const row rows[] = {{336, 336, 144, 256},     {640, 480, 391, 391},    {640, 427, 345, 345},
                      {800, 600, 609, 609},     {1280, 720, 1196, 1196}, {1700, 2200, 4819, 1240},
                      {4000, 3000, 15301, 1230}};
  for (const auto& r : rows) {
    CAPTURE(r.w);
    CAPTURE(r.h);
    CHECK(qwen2vl_image_tokens(r.h, r.w, 4, 16384) == r.dflt);
    CHECK(qwen2vl_image_tokens(r.h, r.w, 256, 1280) == r.capped);
  }
}

TEST_CASE("Qwen2-VL video rule matches the §5 figures") {
  // 640x360: 10/30/60/120 s -> 3.0K/9.0K/17.9K/22.8K; 1280x720: 7.2K/21.6K/23.4K/22.8K.
  const double secs[] = {10, 30, 60, 120};
  const std::int64_t sd_tokens[] = {2990, 8970, 17940, 22800};
  const std::int64_t hd_tokens[] = {7200, 21600, 23400, 22800};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(secs[i]);
    CHECK(qwen2vl_video(360, 640, secs[i]).llm_tokens == sd_tokens[i]);
    CHECK(qwen2vl_video(720, 1280, secs[i]).llm_tokens == hd_tokens[i]);
  }
  const auto v = qwen2vl_video(360, 640, 10);
  CHECK(v.frames == 20);
  CHECK(v.height == 364);
  CHECK(v.width == 644);
  CHECK(v.vit_patches == 4 * v.llm_tokens);
  // Floor regime, any resolution: 3 / 5 / >= 6.4 min -> 21.6K / 36K / 46K (768 frames cap).
  for (double h : {360.0, 720.0}) {
    CHECK(qwen2vl_video(h, h * 16 / 9, 180).llm_tokens == 21600);
    CHECK(qwen2vl_video(h, h * 16 / 9, 300).llm_tokens == 36000);
    CHECK(qwen2vl_video(h, h * 16 / 9, 400).llm_tokens == 46080);
    CHECK(qwen2vl_video(h, h * 16 / 9, 900).frames == 768);
  }
  // Short clips get the 4-frame minimum; fewer than 2 source frames are rejected.
  CHECK(qwen2vl_video(360, 640, 1.0).frames == 4);
  CHECK(qwen2vl_video(360, 640, 0.1).frames == 2);  // 3 source frames, floored to even
  test::expect_invalid([] { (void)qwen2vl_video(360, 640, 0.02); }, {"fewer than 2"});
}

TEST_CASE("video sub-items: one segment per Qwen2-VL temporal group (frames / 2)") {
  for (double secs : {1.0, 10.0, 30.0, 60.0, 120.0, 179.0, 400.0}) {
    for (auto [h, w] : {std::pair{360.0, 640.0}, std::pair{720.0, 1280.0}}) {
      CAPTURE(secs);
      CAPTURE(h);
      const auto v = qwen2vl_video(h, w, secs);
      const auto s = video_sub_item(v);
      CHECK(s.modality == vision_modality);
      CHECK(s.segments == v.frames / 2);
      CHECK(s.llm_tokens == v.llm_tokens);
      CHECK(s.encoder_length == v.vit_patches);
      CHECK(s.input_rows == v.vit_patches);
      // A segment is one group: (H/28)(W/28) tokens, (H/14)(W/14) ViT patches.
      CHECK(s.llm_tokens / s.segments == (v.height / 28) * (v.width / 28));
      CHECK(s.encoder_length / s.segments == (v.height / 14) * (v.width / 14));
    }
  }
  // 10 s of 360p at 2 fps: 20 frames, 10 groups of 13 x 23 tokens (§5: 3.0K).
  const auto s = video_sub_item(qwen2vl_video(360, 640, 10));
  CHECK(s.segments == 10);
  CHECK(s.llm_tokens == 10 * 299);
  CHECK(vision_sub_item(391).segments == 1);  // an image
}

TEST_CASE("multi-window audio: one sub-item per 30 s Whisper window, in order") {
  std::vector<sub_item> items;
  append_audio_windows(items, 61.0);
  REQUIRE(items.size() == 3);
  const std::int64_t rows[] = {3000, 3000, 100}, tokens[] = {750, 750, 25};
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(items[i].modality == audio_modality);
    CHECK(items[i].segments == 1);
    CHECK(items[i].encoder_length == 1500);
    CHECK(items[i].input_rows == rows[i]);
    CHECK(items[i].llm_tokens == tokens[i]);
  }
  // Totals match the clip as one item (6100 mel frames, 1525 tokens, 3 windows).
  const auto whole = whisper_audio(61.0);
  CHECK(items[0].input_rows + items[1].input_rows + items[2].input_rows == whole.mel_frames);
  CHECK(items[0].llm_tokens + items[1].llm_tokens + items[2].llm_tokens == whole.llm_tokens);
  for (double secs : {0.4, 10.0, 30.0}) {  // ≤ 30 s: the single sub-item of before
    items.clear();
    append_audio_windows(items, secs);
    REQUIRE(items.size() == 1);
    CHECK(items[0] == audio_sub_item(whisper_audio(secs)));
  }
}

TEST_CASE("Whisper windows and 25 tokens per second") {
  const auto a = whisper_audio(10.0);
  CHECK(a.windows == 1);
  CHECK(a.encoder_positions == 1500);
  CHECK(a.mel_frames == 1000);
  CHECK(a.llm_tokens == 250);
  CHECK(whisper_audio(30.0).llm_tokens == 750);  // §1: 30 s -> 750
  CHECK(whisper_audio(30.0).encoder_positions == 1500);
  CHECK(whisper_audio(30.5).encoder_positions == 3000);
  CHECK(whisper_audio(0.4).encoder_positions == 1500);
  CHECK(whisper_audio(0.4).llm_tokens == 10);
  CHECK(whisper_audio(61.0).encoder_positions == 4500);
  CHECK(whisper_audio(61.0).llm_tokens == 1525);
  const auto s = audio_sub_item(whisper_audio(61.0));
  CHECK(s.modality == audio_modality);
  CHECK(s.encoder_length == 4500);
  CHECK(s.input_rows == 6100);
  CHECK(s.llm_tokens == 1525);
  const auto v = vision_sub_item(391);
  CHECK(v.modality == vision_modality);
  CHECK(v.encoder_length == 1564);
  CHECK(v.input_rows == 1564);
  // workload.hpp's draw_audio applies the same rule.
  random_source r1(5), r2(5);
  for (int i = 0; i < 100; ++i) {
    const auto x = draw_audio(r1);
    const auto y = whisper_audio(draw_librispeech_seconds(r2));
    CHECK(x.encoder_positions == y.encoder_positions);
    CHECK(x.llm_tokens == y.llm_tokens);
    CHECK(x.mel_frames == y.mel_frames);
  }
}

// ---------------------------------------------------------------------------------------------
// Determinism and validity
// ---------------------------------------------------------------------------------------------

TEST_CASE("make_workload is deterministic and rank r does not depend on the rank count") {
  for (auto n : all_names) {
    for (bool long_form : {false, true}) {
      if (long_form && n != workload_name::audio_asr) continue;
      CAPTURE(to_string(n));
      const workload_options o{n, 5, 6, 11, long_form};
      const auto a = make_workload(o);
      const auto b = make_workload(o);
      auto wide = o;
      wide.ranks = 12;
      const auto c = make_workload(wide);
      auto other = o;
      other.seed = 12;
      const auto d = make_workload(other);
      REQUIRE(a.ranks.size() == 5);
      REQUIRE(c.ranks.size() == 12);
      bool differs = false;
      for (std::size_t r = 0; r < 5; ++r) {
        CHECK(a.ranks[r] == b.ranks[r]);
        CHECK(a.ranks[r] == c.ranks[r]);
        differs = differs || a.ranks[r] != d.ranks[r];
        CHECK(a.ranks[r].text_tokens.size() == 6);
      }
      CHECK(differs);
      CHECK(a.ranks[0] != a.ranks[1]);  // streams differ between ranks
    }
  }
  // Zero samples is valid: empty batches.
  const auto e = make_workload({workload_name::omni_pretrain, 3, 0, 1});
  for (const auto& b : e.ranks) CHECK(b.text_tokens.empty());
}

TEST_CASE("every local batch is valid and sub-items follow their modality's rule") {
  for (auto n : all_names) {
    CAPTURE(to_string(n));
    const auto w = make_workload({n, 16, 8, 3, n == workload_name::audio_asr});
    for (const auto& b : w.ranks) {
      CHECK(detail::check_local_batch(b, 2).fault == detail::batch_fault::none);
      for (auto t : b.text_tokens) CHECK(t > 0);
      for (const auto& s : b.sub_items) {
        CHECK(s.llm_tokens > 0);
        if (s.modality == vision_modality) {
          CHECK(n != workload_name::audio_asr);
          CHECK(s.encoder_length == 4 * s.llm_tokens);
          CHECK(s.input_rows == s.encoder_length);
          // Segments (temporal groups of a video; 1 for an image) divide every size.
          REQUIRE(s.segments >= 1);
          CHECK(s.llm_tokens % s.segments == 0);
          CHECK(s.encoder_length % s.segments == 0);
          CHECK(s.input_rows % s.segments == 0);
          if (n == workload_name::vl_sft) CHECK(s.segments == 1);  // images only
        } else {
          REQUIRE(s.modality == audio_modality);
          CHECK((n == workload_name::audio_asr || n == workload_name::omni_pretrain));
          // One 30 s Whisper window per sub-item, no segments (the stage is padded).
          CHECK(s.segments == 1);
          CHECK(s.encoder_length == 1500);
          CHECK(s.input_rows <= 3000);
          CHECK(std::abs(s.input_rows - 4 * s.llm_tokens) <= 4);  // 100 frames vs 25 tokens / s
        }
      }
      // Sub-items come in sample order (parents non-decreasing).
      for (std::size_t i = 1; i < b.sub_items.size(); ++i)
        CHECK(b.sub_items[i - 1].parent <= b.sub_items[i].parent);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Distributions
// ---------------------------------------------------------------------------------------------

TEST_CASE("vl-sft: text-only / single-image / multi-image shares and the image token range") {
  random_source rng(21);
  const int n = 100'000;
  int text = 0, single = 0, multi = 0;
  std::int64_t multi_images = 0;
  for (int i = 0; i < n; ++i) {
    const auto s = draw_vl_sft_sample(rng);
    for (const auto& it : s.items) {
      CHECK(it.llm_tokens >= 256);
      CHECK(it.llm_tokens <= 1280);
    }
    switch (s.kind) {
      case sample_kind::text_only:
        ++text;
        CHECK(s.items.empty());
        CHECK(s.text_tokens >= 50);
        CHECK(s.text_tokens <= 2048);
        break;
      case sample_kind::single_image:
        ++single;
        CHECK(s.items.size() == 1);
        break;
      case sample_kind::multi_image:
        ++multi;
        multi_images += static_cast<std::int64_t>(s.items.size());
        CHECK(s.items.size() >= 2);
        CHECK(s.items.size() <= 8);
        break;
      default:
        CHECK(false);
    }
  }
  // Binomial standard errors: 0.08 / 0.11 / 0.08 points; tolerance 0.5 points.
  CHECK(std::abs(text / double(n) - 0.06) < 0.005);
  CHECK(std::abs(single / double(n) - 0.87) < 0.005);
  CHECK(std::abs(multi / double(n) - 0.07) < 0.005);
  CHECK(std::abs(double(multi_images) / multi - 5.0) < 0.1);  // U{2..8}
  // §4 mixture: the COCO-like half sits in 256..454 tokens ([D] 214–454 before the 256 floor),
  // the document 15 % at the 1280 cap region.
  const auto tok = draws(22, 100'000, [](random_source& r) {
    return static_cast<double>(draw_mixture_image_tokens(r));
  });
  CHECK(quantile(tok, 0.05) < 300);
  CHECK(quantile(tok, 0.95) >= 1200);
  CHECK(mean(tok) > 400);
  CHECK(mean(tok) < 700);
}

TEST_CASE("omni-pretrain: token shares 67/25/8 % by kind") {
  random_source rng(31);
  double vision = 0, audio = 0, av = 0;
  int captions = 0, docs = 0, speech = 0, wavcaps = 0;
  for (int i = 0; i < 200'000; ++i) {
    const auto s = draw_omni_sample(rng);
    const auto t = static_cast<double>(s.llm_tokens());
    switch (s.kind) {
      case sample_kind::image_caption:
        ++captions;
        vision += t;
        break;
      case sample_kind::interleaved_doc:
        ++docs;
        vision += t;
        CHECK(s.items.size() <= 30);
        break;
      case sample_kind::speech:
        ++speech;
        audio += t;
        break;
      case sample_kind::audio_caption:
        ++wavcaps;
        audio += t;
        CHECK(s.items[0].llm_tokens <= 750);  // truncated to 30 s
        break;
      case sample_kind::audio_video:
        av += t;
        // The video, then one audio sub-item per 30 s window of the same clip.
        REQUIRE(s.items.size() >= 2);
        CHECK(s.items[0].modality == vision_modality);
        for (std::size_t j = 1; j < s.items.size(); ++j) {
          CHECK(s.items[j].modality == audio_modality);
          CHECK(s.items[j].encoder_length == 1500);
        }
        CHECK(s.items.size() <= 3);  // Panda clips are ≤ 60 s: at most 2 windows
        break;
      default:
        CHECK(false);
    }
  }
  const double total = vision + audio + av;
  CHECK(std::abs(vision / total - 0.67) < 0.02);
  CHECK(std::abs(audio / total - 0.25) < 0.02);
  CHECK(std::abs(av / total - 0.08) < 0.02);
  CHECK(std::abs(docs / double(captions + docs) - 0.25) < 0.01);
  CHECK(std::abs(wavcaps / double(speech + wavcaps) - 0.20) < 0.01);
}

TEST_CASE("§6 audio durations: LibriSpeech, WenetSpeech, Common Voice and the audio-asr mix") {
  const auto ls = draws(41, 100'000, draw_librispeech_seconds);
  // §6 fit: mean 12.73, sd 3.83; icefall clean-100 quantiles p10 6.4, p25 11.4, p50 13.8,
  // p75 15.3, p90 16.7, p95 17.3 ("within 0.5 s" of the fit).
  CHECK(std::abs(mean(ls) - 12.73) < 0.1);
  CHECK(std::abs(sd(ls) - 3.83) < 0.1);
  CHECK(std::abs(quantile(ls, 0.10) - 6.4) < 0.5);
  CHECK(std::abs(quantile(ls, 0.25) - 11.4) < 0.5);
  CHECK(std::abs(quantile(ls, 0.50) - 13.8) < 0.5);
  CHECK(std::abs(quantile(ls, 0.75) - 15.3) < 0.5);
  CHECK(std::abs(quantile(ls, 0.90) - 16.7) < 0.5);
  CHECK(std::abs(quantile(ls, 0.95) - 17.3) < 0.5);
  const auto ws = draws(42, 100'000, draw_wenetspeech_seconds);
  // icefall WenetSpeech L: p25 1.4, p50 2.0, p75 3.0 (mean 2.5 with the LN fit's 2.39).
  CHECK(std::abs(quantile(ws, 0.25) - 1.4) < 0.1);
  CHECK(std::abs(quantile(ws, 0.50) - 2.0) < 0.1);
  CHECK(std::abs(quantile(ws, 0.75) - 3.0) < 0.1);
  CHECK(std::abs(mean(ws) - 2.5) < 0.15);
  const auto cv = draws(43, 100'000, draw_common_voice_seconds);
  CHECK(std::abs(mean(cv) - 4.87) < 0.1);  // Common Voice v24 mean 4.87 s
  // The audio-asr mix, through its samples (seconds = mel frames / 100).
  random_source rng(44);
  std::vector<double> secs;
  for (int i = 0; i < 100'000; ++i) {
    const auto s = draw_audio_asr_sample(rng);
    REQUIRE(s.items.size() == 1);
    const double sec = static_cast<double>(s.items[0].input_rows) / 100.0;
    CHECK(std::abs(static_cast<double>(s.text_tokens) - (20 + 2.6 * sec)) <=
          0.53);  // sec from mel frames: ±0.01 s
    secs.push_back(sec);
  }
  const double expect = 0.5 * mean(ls) + 0.3 * mean(ws) + 0.2 * mean(cv);
  CHECK(std::abs(mean(secs) - expect) < 0.1);
  CHECK(std::abs(mean(secs) - 8.05) < 0.2);
}

TEST_CASE("audio-asr long-form stress: 5 % of samples, chunked into 30 s windows") {
  random_source rng(51);
  int long_form = 0;
  const int n = 40'000;
  for (int i = 0; i < n; ++i) {
    const auto s = draw_audio_asr_sample(rng, true);
    if (s.kind != sample_kind::long_form_speech) continue;
    ++long_form;
    REQUIRE(!s.items.empty());
    std::int64_t rows = 0, tokens = 0;
    for (std::size_t k = 0; k < s.items.size(); ++k) {
      CHECK(s.items[k].encoder_length == 1500);
      if (k + 1 < s.items.size()) CHECK(s.items[k].llm_tokens == 750);
      rows += s.items[k].input_rows;
      tokens += s.items[k].llm_tokens;
    }
    const double sec = static_cast<double>(rows) / 100.0;
    CHECK(sec >= 29.99);
    CHECK(sec <= 600.01);
    CHECK(std::abs(static_cast<double>(tokens) - 25 * sec) <= 0.51);
  }
  CHECK(std::abs(long_form / double(n) - 0.05) < 0.005);
  // Off by default.
  random_source off(51);
  for (int i = 0; i < 1000; ++i) CHECK(draw_audio_asr_sample(off).kind == sample_kind::speech);
}

TEST_CASE("video-heavy: 60/30/10 % kinds, LLaVA-Video-178K buckets, tokens under 32K") {
  const auto d = draws(61, 100'000, draw_llava_video_seconds);
  double b[4] = {0, 0, 0, 0};
  for (double s : d) {
    CHECK(s >= 1.0);
    CHECK(s < 180.0);
    b[s < 30 ? 0 : s < 60 ? 1 : s < 120 ? 2 : 3] += 1.0 / static_cast<double>(d.size());
  }
  CHECK(std::abs(b[0] - 0.45) < 0.01);
  CHECK(std::abs(b[1] - 0.20) < 0.01);
  CHECK(std::abs(b[2] - 0.18) < 0.01);
  CHECK(std::abs(b[3] - 0.17) < 0.01);
  random_source rng(62);
  const int n = 50'000;
  int video = 0, image = 0, text = 0;
  std::int64_t max_tokens = 0;
  for (int i = 0; i < n; ++i) {
    const auto s = draw_video_heavy_sample(rng);
    max_tokens = std::max(max_tokens, s.llm_tokens());
    if (s.kind == sample_kind::video) {
      ++video;
      REQUIRE(s.items.size() == 1);
      CHECK(s.items[0].llm_tokens >= 2 * 299);  // at least 4 frames of a 360p clip
      // Qwen2-VL: one segment per 2-frame temporal group, ≥ 2 groups (≥ 4 frames), ≤ 384.
      CHECK(s.items[0].segments >= 2);
      CHECK(s.items[0].segments <= 384);
      CHECK(s.items[0].llm_tokens % s.items[0].segments == 0);
    } else if (s.kind == sample_kind::text_only) {
      ++text;
    } else {
      ++image;
      CHECK(!s.items.empty());
    }
  }
  CHECK(std::abs(video / double(n) - 0.60) < 0.01);
  CHECK(std::abs(image / double(n) - 0.30) < 0.01);
  CHECK(std::abs(text / double(n) - 0.10) < 0.01);
  CHECK(max_tokens <= 32768);
}

// ---------------------------------------------------------------------------------------------
// omni-pretrain packing
// ---------------------------------------------------------------------------------------------

TEST_CASE("omni-pretrain packing: next-fit to 8192, longer only for a single raw sample") {
  const workload_options o{workload_name::omni_pretrain, 16, 20, 77};
  const auto w = make_workload(o);
  std::int64_t over = 0;
  for (std::int64_t r = 0; r < o.ranks; ++r) {
    // Reference: re-draw rank r's raw stream and pack it here.
    random_source rng(o.seed, static_cast<std::uint64_t>(r));
    std::vector<std::vector<raw_sample>> seqs(1);
    std::int64_t len = 0;
    while (true) {
      auto s = draw_omni_sample(rng);
      if (!seqs.back().empty() && len + s.llm_tokens() > omni_sequence_limit) {
        if (static_cast<std::int64_t>(seqs.size()) == o.samples_per_rank) break;
        seqs.emplace_back();
        len = 0;
      }
      len += s.llm_tokens();
      seqs.back().push_back(std::move(s));
    }
    const auto& b = w.ranks[static_cast<std::size_t>(r)];
    const auto lengths = sequence_lengths(b);
    REQUIRE(static_cast<std::int64_t>(lengths.size()) == o.samples_per_rank);
    std::size_t k = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      std::int64_t text = 0, total = 0;
      for (const auto& s : seqs[i]) {
        text += s.text_tokens;
        total += s.llm_tokens();
        for (const auto& it : s.items) {
          REQUIRE(k < b.sub_items.size());
          CHECK(b.sub_items[k].parent == static_cast<std::int64_t>(i));
          CHECK(b.sub_items[k].llm_tokens == it.llm_tokens);
          CHECK(b.sub_items[k].encoder_length == it.encoder_length);
          ++k;
        }
      }
      CHECK(b.text_tokens[i] == text);
      CHECK(lengths[i] == total);
      CHECK(lengths[i] == sequence_length(b, static_cast<std::int64_t>(i)));
      if (total > omni_sequence_limit) {
        CHECK(seqs[i].size() == 1);  // only a single over-long raw sample exceeds the limit
        ++over;
      }
      // Next-fit: the first raw sample of the next sequence did not fit into this one.
      if (i + 1 < seqs.size())
        CHECK(total + seqs[i + 1].front().llm_tokens() > omni_sequence_limit);
    }
    CHECK(k == b.sub_items.size());
  }
  // Packing fills the sequences: the mean is well above half the limit.
  const auto s = summarize(w);
  CHECK(s.mean_sequence > 6000);
  CHECK(over > 0);  // the over-long single raw sample case does occur (and is kept whole)
}

// ---------------------------------------------------------------------------------------------
// Stage layouts, summary, ITEMS.csv and the subcommand
// ---------------------------------------------------------------------------------------------

TEST_CASE("stage layouts agree with the batches and the summary") {
  for (auto n : all_names) {
    CAPTURE(to_string(n));
    const auto w = make_workload({n, 7, 5, 9});
    const auto l = make_stage_layouts(w);
    const auto s = summarize(w);
    CHECK(l.llm.num_ranks() == 7);
    CHECK(l.vision.num_ranks() == 7);
    CHECK(l.audio.num_ranks() == 7);
    CHECK(l.llm.num_items() == s.samples);
    CHECK(s.samples == 35);
    CHECK(l.llm.total_length() == s.llm_tokens);
    CHECK(l.llm.total_bytes() == s.llm_tokens * text_row_bytes);
    CHECK(l.vision.num_items() == s.vision.items);
    CHECK(l.vision.total_length() == s.vision.encoder_length);
    CHECK(l.vision.total_bytes() == s.vision.input_rows * vision_row_bytes);
    CHECK(l.audio.num_items() == s.audio.items);
    CHECK(l.audio.total_length() == s.audio.encoder_length);
    CHECK(l.audio.total_bytes() == s.audio.input_rows * audio_row_bytes);
    CHECK(s.text_tokens + s.vision.llm_tokens + s.audio.llm_tokens == s.llm_tokens);
    CHECK(s.llm_imbalance >= 1.0);
    std::int64_t max_rank = 0;
    for (rank_t r = 0; r < 7; ++r) {
      std::int64_t t = 0;
      for (auto x : l.llm.rank_lengths(r)) t += x;
      max_rank = std::max(max_rank, t);
    }
    CHECK(s.max_rank_llm_tokens == max_rank);
    // Segments: a video's temporal groups, equal, in the vision layout only; workloads with
    // videos have some.
    CHECK(!l.audio.has_segments());
    if (n == workload_name::video_heavy) CHECK(l.vision.has_segments());
    if (n == workload_name::vl_sft || n == workload_name::audio_asr)
      CHECK(!l.vision.has_segments());
    {
      std::int64_t g = 0;
      for (const auto& b : w.ranks)
        for (const auto& sub : b.sub_items) {
          if (sub.modality != vision_modality) continue;
          const auto segs = l.vision.segments(g++);
          CHECK(static_cast<std::int64_t>(segs.size()) == sub.segments);
          for (auto x : segs) CHECK(x * sub.segments == sub.encoder_length);
        }
      CHECK(g == l.vision.num_items());
    }
    // Parents: an encoder item's parent is an LLM item on the same rank.
    for (const auto* e : {&l.vision, &l.audio})
      for (rank_t r = 0; r < 7; ++r)
        for (auto g = e->offset(r); g < e->offset(r + 1); ++g) {
          CHECK(e->parent(g) >= l.llm.offset(r));
          CHECK(e->parent(g) < l.llm.offset(r + 1));
        }
  }
}

TEST_CASE("workload subcommand writes ITEMS.csv files that parse back to the stage layouts") {
  scratch_dir dir;
  for (auto n : all_names) {
    CAPTURE(to_string(n));
    const auto out = dir.path() / std::string(to_string(n));
    std::vector<std::string> argv = {"--name",
                                     std::string(to_string(n)),
                                     "--ranks",
                                     "5",
                                     "--samples-per-rank",
                                     "3",
                                     "--seed",
                                     "4",
                                     "--out-dir",
                                     out.string()};
    std::ostringstream so, se;
    const auto args = tool::parse_flags(tool::workload_command().flags, argv);
    REQUIRE(tool::run_workload(args, so, se) == tool::exit_ok);
    CHECK(se.str().empty());
    CHECK(so.str().find("\"workload\":\"" + std::string(to_string(n)) + "\"") != std::string::npos);
    CHECK(so.str().find("\"samples\":15") != std::string::npos);
    const auto want = make_stage_layouts(make_workload({n, 5, 3, 4}));
    const std::pair<const char*, const batch_layout*> files[] = {
        {"vision.csv", &want.vision}, {"audio.csv", &want.audio}, {"llm.csv", &want.llm}};
    for (const auto& [name, layout] : files) {
      const auto got = tool::read_items_file(out / name, 5);
      CHECK(std::equal(got.offsets().begin(), got.offsets().end(), layout->offsets().begin(),
                       layout->offsets().end()));
      REQUIRE(got.num_items() == layout->num_items());
      CHECK(got.has_segments() == layout->has_segments());
      for (std::int64_t g = 0; g < got.num_items(); ++g) {
        CHECK(got.length(g) == layout->length(g));
        CHECK(got.bytes(g) == layout->bytes(g));
        CHECK(std::ranges::equal(got.segments(g), layout->segments(g)));
      }
    }
    // No temporary files left behind.
    std::int64_t entries = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(out)) ++entries;
    CHECK(entries == 3);
  }
}

TEST_CASE("workload subcommand: usage errors exit 2 and name the flag") {
  scratch_dir dir;
  auto run = [&](std::vector<std::string> argv, std::string& err) {
    std::ostringstream so, se;
    int rc = 0;
    try {
      rc = tool::run_workload(tool::parse_flags(tool::workload_command().flags, argv), so, se);
    } catch (const tool::usage_error& e) {  // parse_flags errors (run() maps them to 2)
      se << e.what();
      rc = tool::exit_error;
    }
    err = se.str();
    if (rc != tool::exit_ok) CHECK(so.str().empty());
    return rc;
  };
  const std::string out = (dir.path() / "w").string();
  std::string err;
  CHECK(run({"--name", "vl", "--ranks", "2", "--out-dir", out}, err) == tool::exit_error);
  CHECK(err.find("--name") != std::string::npos);
  CHECK(err.find("'vl'") != std::string::npos);
  CHECK(run({"--name", "vl-sft", "--ranks", "0", "--out-dir", out}, err) == tool::exit_error);
  CHECK(err.find("--ranks") != std::string::npos);
  CHECK(run({"--name", "vl-sft", "--ranks", "2", "--samples-per-rank", "-1", "--out-dir", out},
            err) == tool::exit_error);
  CHECK(err.find("--samples-per-rank") != std::string::npos);
  CHECK(run({"--name", "vl-sft", "--ranks", "2", "--long-form", "--out-dir", out}, err) ==
        tool::exit_error);
  CHECK(err.find("--long-form") != std::string::npos);
  CHECK(run({"--name", "vl-sft", "--ranks", "2"}, err) == tool::exit_error);
  CHECK(err.find("--out-dir") != std::string::npos);
  CHECK(!fs::exists(out));
  // A file where the directory should be: io error, exit 2.
  { std::ofstream(dir.path() / "f") << "x"; }
  CHECK(run({"--name", "audio-asr", "--ranks", "2", "--out-dir", (dir.path() / "f").string()},
            err) == tool::exit_error);
  CHECK(err.find("cannot create directory") != std::string::npos);
  // --long-form with audio-asr works.
  CHECK(run({"--name", "audio-asr", "--ranks", "2", "--long-form", "--out-dir", out}, err) ==
        tool::exit_ok);
  CHECK(fs::exists(fs::path(out) / "audio.csv"));
}

TEST_CASE("traces: a batch written as a trace reads back as the same batch") {
  scratch_dir dir;
  const auto trace = dir.path() / "t.csv";
  const auto run = [](std::vector<std::string> argv) {
    std::ostringstream so, se;
    const int rc =
        tool::run_workload(tool::parse_flags(tool::workload_command().flags, argv), so, se);
    CHECK_MESSAGE(rc == tool::exit_ok, se.str());
    return so.str();
  };
  run({"--name", "vl-sft", "--ranks", "4", "--samples-per-rank", "6", "--seed", "9", "--trace-out",
       trace.string(), "--out-dir", (dir.path() / "a").string()});
  const auto rows = tool::read_trace_file(trace);
  REQUIRE(rows.size() == 24);
  // Batch 0 of 4 × 6 is the trace in file order: the same samples on the same ranks.
  const auto out = run({"--trace", trace.string(), "--ranks", "4", "--samples-per-rank", "6",
                        "--seed", "0", "--out-dir", (dir.path() / "b").string()});
  CHECK(out.find("\"workload\":\"trace\"") != std::string::npos);
  CHECK(out.find("\"trace\":\"" + trace.string() + "\"") != std::string::npos);
  const auto want = make_stage_layouts(make_workload({workload_name::vl_sft, 4, 6, 9}));
  const auto got = make_stage_layouts(trace_workload(rows, 4, 6, 0));
  for (const auto& [g, w] :
       {std::pair{&got.vision, &want.vision}, std::pair{&got.llm, &want.llm}}) {
    CHECK(std::ranges::equal(g->offsets(), w->offsets()));
    CHECK(std::ranges::equal(g->lengths(), w->lengths()));
    CHECK(std::ranges::equal(g->parents(), w->parents()));
  }
  for (const char* f : {"vision.csv", "llm.csv"})
    CHECK(tool::read_file(dir.path() / "a" / f) == tool::read_file(dir.path() / "b" / f));
  // Batch b takes rows from (b · d + r) · k, wrapping around the trace.
  const auto batch = trace_workload(rows, 2, 5, 3);  // rows 30.. = 6, 7, ... mod 24
  for (std::int64_t r = 0; r < 2; ++r)
    for (std::int64_t i = 0; i < 5; ++i) {
      const auto& s = rows[static_cast<std::size_t>(((3 * 2 + r) * 5 + i) % 24)];
      CHECK(batch.ranks[static_cast<std::size_t>(r)].text_tokens[static_cast<std::size_t>(i)] ==
            s.text_tokens);
    }
}

TEST_CASE("traces: malformed files name the line and the value") {
  const auto error_of = [](std::string_view text) {
    try {
      tool::parse_trace(text, "t.csv");
    } catch (const orchmllm::parse_error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  CHECK(error_of("") ==
        "t.csv: empty file (expected the header 'sample,image_tokens,text_tokens')");
  CHECK(error_of("sample,images,text\n").find("t.csv:1: header") == 0);
  CHECK(error_of("sample,image_tokens,text_tokens\n0,1296\n").find("t.csv:2: 2 fields") == 0);
  CHECK(error_of("sample,image_tokens,text_tokens\n0,1297,4\n").find("t.csv:2: image of 1297") ==
        0);
  CHECK(error_of("sample,image_tokens,text_tokens\n0,8;;4,4\n").find("t.csv:2: image_tokens ''") ==
        0);
  CHECK(error_of("sample,image_tokens,text_tokens\n0,,-3\n").find("t.csv:2: negative") == 0);
  CHECK(error_of("sample,image_tokens,text_tokens\n\n0,,0\n").find("t.csv:3: a sample of no") == 0);
  // Tolerated: spaces, CRLF, blank lines, text-only samples.
  const auto ok =
      tool::parse_trace("sample,image_tokens,text_tokens\r\n 0 , 8 ; 16 , 3 \r\n\n1,,7\n", "t.csv");
  REQUIRE(ok.size() == 2);
  CHECK(ok[0].image_patches == std::vector<std::int64_t>{8, 16});
  CHECK(ok[0].text_tokens == 3);
  CHECK(ok[1].image_patches.empty());
  // Workloads with audio or videos cannot be written as a trace; --name and --trace exclude
  // each other.
  scratch_dir dir;
  std::ostringstream so, se;
  std::vector<std::string> argv = {"--name",      "audio-asr",
                                   "--ranks",     "2",
                                   "--trace-out", (dir.path() / "t.csv").string(),
                                   "--out-dir",   (dir.path() / "w").string()};
  CHECK(tool::run_workload(tool::parse_flags(tool::workload_command().flags, argv), so, se) ==
        tool::exit_error);
  CHECK(se.str().find("a trace holds images only: sample 0 has an audio clip") !=
        std::string::npos);
  CHECK(!fs::exists(dir.path() / "t.csv"));
  argv = {"--ranks", "2", "--out-dir", (dir.path() / "w").string()};
  std::ostringstream so2, se2;
  CHECK(tool::run_workload(tool::parse_flags(tool::workload_command().flags, argv), so2, se2) ==
        tool::exit_error);
  CHECK(se2.str().find("give one of --name NAME and --trace FILE") != std::string::npos);
}
