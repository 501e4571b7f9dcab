#pragma once
/// @file workload.hpp
/// Deterministic synthetic workloads for the benchmarks and the demo (not part of the library).
///
/// Two generators:
///  * `lognormal_layout`: d ranks × k items, lengths LN(mu, sigma) clipped to [lo, hi] — the
///    classic balancer benchmark input (mu 7, sigma 1, clip [16, 32768]).
///  * `make_multimodal_batch`: a small tri-modal global batch (text, images, audio) with the
///    shapes of the benchmark workloads (bench/support/workloads.hpp, whose file comment gives
///    the published sources: `vl-sft`-like images, LibriSpeech-like audio), exposed as one
///    `batch_layout` per training stage.
///
/// Determinism: every number comes from std::mt19937_64 (whose output sequence the C++ standard
/// fixes) through our own conversions — 53-bit uniforms and Box–Muller normals — never through
/// the unspecified std:: distributions. Each rank draws from its own engine seeded with
/// splitmix64(seed, rank), so rank r's samples do not depend on the number of ranks. The only
/// platform dependence left is the last ulp of std::log / std::exp / std::cos in the C library,
/// which vanishes in the rounding to integer lengths except in astronomically rare ties.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm::bench {

/// splitmix64 finaliser: decorrelates (seed, stream) pairs into engine seeds.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A portable random source: mt19937_64 plus hand-written distributions.
class random_source {
 public:
  /// Engine for stream `stream` of `seed` (e.g. one stream per rank).
  explicit random_source(std::uint64_t seed, std::uint64_t stream = 0)
      : engine_(splitmix64(splitmix64(seed) ^ stream)) {}

  /// Uniform in [0, 1) with 53 random bits.
  double uniform01() noexcept { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform01(); }
  /// Uniform integer in [lo, hi] (hi - lo < 2^32; the modulo bias of a 64-bit draw is < 2^-32).
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) noexcept {
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    return lo + static_cast<std::int64_t>(engine_() % span);
  }
  /// Whether an event of probability p happens.
  bool bernoulli(double p) noexcept { return uniform01() < p; }
  /// Standard normal by Box–Muller; the second value of each pair is kept for the next call.
  double normal() noexcept {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform01();  // (0, 1]: log is finite
    const double u2 = uniform01();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }
  /// Normal with mean and standard deviation.
  double normal(double mean, double sd) noexcept { return mean + sd * normal(); }
  /// Lognormal exp(mu + sigma·z).
  double lognormal_mu(double mu, double sigma) noexcept { return std::exp(mu + sigma * normal()); }
  /// Lognormal with the given median (LN(median, sigma), as workloads.hpp writes its shapes).
  double lognormal_median(double median, double sigma) noexcept {
    return median * std::exp(sigma * normal());
  }

 private:
  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

/// Rounds to the nearest integer (half away from zero) and clips to [lo, hi].
inline std::int64_t clip_round(double x, std::int64_t lo, std::int64_t hi) noexcept {
  const double c = std::clamp(x, static_cast<double>(lo), static_cast<double>(hi));
  return std::clamp<std::int64_t>(std::llround(c), lo, hi);
}

/// Parameters of `lognormal_layout`.
struct lognormal_spec {
  double mu = 7.0;          ///< log-mean (median e^mu ≈ 1097)
  double sigma = 1.0;       ///< log-sd
  std::int64_t lo = 16;     ///< clip low
  std::int64_t hi = 32768;  ///< clip high
};

/// d ranks with `items_per_rank` items each, lengths clip(round(exp(mu + sigma·z)), lo, hi);
/// rank r uses stream r of `seed`. O(d·k). Bytes default to the lengths.
inline batch_layout lognormal_layout(std::int64_t d, std::int64_t items_per_rank,
                                     const lognormal_spec& spec = {}, std::uint64_t seed = 1) {
  ORCHMLLM_REQUIRE(d >= 0 && items_per_rank >= 0, invalid_argument_error, "lognormal_layout: d ", d,
                   " and items_per_rank ", items_per_rank, " must be >= 0");
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(d) + 1);
  std::vector<std::int64_t> lengths;
  lengths.reserve(static_cast<std::size_t>(d * items_per_rank));
  for (std::int64_t r = 0; r < d; ++r) {
    random_source rng(seed, static_cast<std::uint64_t>(r));
    for (std::int64_t i = 0; i < items_per_rank; ++i)
      lengths.push_back(clip_round(rng.lognormal_mu(spec.mu, spec.sigma), spec.lo, spec.hi));
    offsets[static_cast<std::size_t>(r) + 1] = static_cast<std::int64_t>(lengths.size());
  }
  return batch_layout(std::move(offsets), std::move(lengths));
}

// ---------------------------------------------------------------------------------------------
// Multimodal batch
// ---------------------------------------------------------------------------------------------

/// One image after the Qwen2-VL resize.
struct image_item {
  std::int64_t height = 0;       ///< resized height in pixels (multiple of 28)
  std::int64_t width = 0;        ///< resized width in pixels (multiple of 28)
  std::int64_t llm_tokens = 0;   ///< (height/28)·(width/28)
  std::int64_t vit_patches = 0;  ///< 4 · llm_tokens (14 px patches, 2×2 merge)
};

/// One audio clip for a Whisper-style encoder (padded to 30 s windows).
struct audio_item {
  double seconds = 0;                  ///< clip duration
  std::int64_t windows = 0;            ///< ⌈seconds / 30⌉ (at least 1)
  std::int64_t encoder_positions = 0;  ///< 1500 · windows
  std::int64_t llm_tokens = 0;         ///< round(25 · seconds)
  std::int64_t mel_frames = 0;         ///< ⌈100 · seconds⌉ (unpadded mel features shipped)
};

/// One training sample.
struct sample {
  std::int64_t text_tokens = 0;
  std::vector<image_item> images;
  std::vector<audio_item> audio;  ///< 0 or 1 clip
  [[nodiscard]] std::int64_t llm_tokens() const noexcept {
    std::int64_t t = text_tokens;
    for (const auto& im : images) t += im.llm_tokens;
    for (const auto& a : audio) t += a.llm_tokens;
    return t;
  }
};

/// Knobs of `make_multimodal_batch` (defaults: the shapes of workloads.hpp).
struct multimodal_spec {
  std::int64_t ranks = 2560;             ///< DP ranks d
  std::int64_t samples_per_rank = 8;     ///< samples each rank draws
  double audio_fraction = 0.25;          ///< share of audio (ASR-style) samples
  std::int64_t min_image_tokens = 256;   ///< Qwen2-VL min_pixels = 256·28² (README override)
  std::int64_t max_image_tokens = 1280;  ///< Qwen2-VL max_pixels = 1280·28²
  std::uint64_t seed = 1;
};

/// Byte sizes used for the layouts' payloads (simple, documented, not measured):
inline constexpr std::int64_t bytes_per_vit_patch = 3 * 14 * 14 * 2;  ///< RGB 14×14 bf16 = 1176
inline constexpr std::int64_t bytes_per_mel_frame = 128 * 2;          ///< 128 mel bins, bf16
inline constexpr std::int64_t bytes_per_llm_token = 4;                ///< int32 token id / slot

/// A global batch and its three stage layouts.
///  * vision: one item per image, length = ViT patches, bytes = patches · 1176, parent = the
///    global id of its sample (= its LLM item);
///  * audio:  one item per clip, length = encoder positions (1500 per 30 s window), bytes =
///    mel frames · 256, parent = the sample's global id;
///  * llm:    one item per sample, length = text + image + audio tokens, bytes = 4 per token.
/// Items of a rank appear in sample order, images of a sample in draw order.
struct multimodal_batch {
  std::vector<std::int64_t> sample_offsets;  ///< CSR offsets of samples per rank (d + 1)
  std::vector<sample> samples;               ///< rank-major
  batch_layout vision;
  batch_layout audio;
  batch_layout llm;
};

/// Qwen2-VL `smart_resize` (qwen-vl-utils/vision_process.py) with factor 28 and real-valued
/// pixel limits (the video budget is not an integer): round H, W to multiples of 28 (half to
/// even, as Python's round); if the area exceeds max_pixels, scale by β = sqrt(H·W/max) and
/// floor to 28 (at least 28); if below min_pixels, scale up and ceil to 28. Returns {H, W}.
/// O(1), never throws.
inline std::pair<std::int64_t, std::int64_t> qwen2vl_smart_resize(double height, double width,
                                                                  double min_pixels,
                                                                  double max_pixels) noexcept {
  constexpr double f = 28.0;
  double h = std::max(f, std::nearbyint(height / f) * f);  // FE_TONEAREST: ties to even
  double w = std::max(f, std::nearbyint(width / f) * f);
  if (h * w > max_pixels) {
    const double beta = std::sqrt(height * width / max_pixels);
    h = std::max(f, std::floor(height / beta / f) * f);
    w = std::max(f, std::floor(width / beta / f) * f);
  } else if (h * w < min_pixels) {
    const double beta = std::sqrt(min_pixels / (height * width));
    h = std::ceil(height * beta / f) * f;
    w = std::ceil(width * beta / f) * f;
  }
  return {static_cast<std::int64_t>(h), static_cast<std::int64_t>(w)};
}

/// One COCO-like image (workloads.hpp, image resolutions): pixels LN(244K, 0.23)[40K, 640K]; h/w
/// ratio 72 % LN(0.71, 0.06), 25 % LN(1.40, 0.06), 3 % U(0.3, 3); then the Qwen2-VL resize.
inline image_item draw_image(random_source& rng, const multimodal_spec& spec) {
  const double px = std::clamp(rng.lognormal_median(244'000.0, 0.23), 40'000.0, 640'000.0);
  const double u = rng.uniform01();
  const double aspect = u < 0.72   ? rng.lognormal_median(0.71, 0.06)
                        : u < 0.97 ? rng.lognormal_median(1.40, 0.06)
                                   : rng.uniform(0.3, 3.0);
  const double width = std::round(std::sqrt(px / aspect));
  const double height = std::round(aspect * width);
  const auto [h, w] =
      qwen2vl_smart_resize(height, width, static_cast<double>(spec.min_image_tokens * 28 * 28),
                           static_cast<double>(spec.max_image_tokens * 28 * 28));
  image_item im;
  im.height = h;
  im.width = w;
  im.llm_tokens = (h / 28) * (w / 28);
  im.vit_patches = 4 * im.llm_tokens;
  return im;
}

/// One LibriSpeech-like clip (workloads.hpp, audio): 20 % U(1, 12) s + 80 % N(14.3, 1.9) s, clipped
/// to [1, 35] s; Whisper windows of 30 s (1500 positions each); 25 LLM tokens per second.
inline audio_item draw_audio(random_source& rng) {
  const double s = rng.bernoulli(0.2) ? rng.uniform(1.0, 12.0) : rng.normal(14.3, 1.9);
  audio_item a;
  a.seconds = std::clamp(s, 1.0, 35.0);
  a.windows = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(a.seconds / 30.0)));
  a.encoder_positions = 1500 * a.windows;
  a.llm_tokens = std::llround(25.0 * a.seconds);
  a.mel_frames = static_cast<std::int64_t>(std::ceil(100.0 * a.seconds));
  return a;
}

/// One sample. With probability `audio_fraction` an ASR-style audio sample (one clip, text =
/// 2.6 tokens per second of speech + a 20-token prompt, no image); otherwise a `vl-sft` sample
/// (workloads.hpp, `vl-sft`): 6 % text-only LN(700, 0.9)[50, 2048]; 63 % one image + LN(90, 0.6)
/// [20, 1500]; 24 % one image + LN(250, 0.5)[40, 1500]; 7 % 2–8 images (uniform) + LN(150, 0.6)
/// [20, 1500].
inline sample draw_sample(random_source& rng, const multimodal_spec& spec) {
  sample s;
  if (rng.bernoulli(spec.audio_fraction)) {
    s.audio.push_back(draw_audio(rng));
    s.text_tokens = 20 + std::llround(2.6 * s.audio.front().seconds);
    return s;
  }
  const double u = rng.uniform01();
  std::int64_t images = 1;
  if (u < 0.06) {
    images = 0;
    s.text_tokens = clip_round(rng.lognormal_median(700, 0.9), 50, 2048);
  } else if (u < 0.69) {
    s.text_tokens = clip_round(rng.lognormal_median(90, 0.6), 20, 1500);
  } else if (u < 0.93) {
    s.text_tokens = clip_round(rng.lognormal_median(250, 0.5), 40, 1500);
  } else {
    images = rng.uniform_int(2, 8);
    s.text_tokens = clip_round(rng.lognormal_median(150, 0.6), 20, 1500);
  }
  for (std::int64_t i = 0; i < images; ++i) s.images.push_back(draw_image(rng, spec));
  return s;
}

/// Builds the global batch: rank r draws `samples_per_rank` samples from stream r of the seed.
/// O(d·k). Throws invalid_argument_error for negative sizes or an audio_fraction outside [0, 1].
inline multimodal_batch make_multimodal_batch(const multimodal_spec& spec) {
  ORCHMLLM_REQUIRE(spec.ranks >= 0 && spec.samples_per_rank >= 0, invalid_argument_error, "ranks ",
                   spec.ranks, " and samples_per_rank ", spec.samples_per_rank, " must be >= 0");
  ORCHMLLM_REQUIRE(spec.audio_fraction >= 0 && spec.audio_fraction <= 1, invalid_argument_error,
                   "audio_fraction ", spec.audio_fraction, " outside [0, 1]");
  ORCHMLLM_REQUIRE(spec.min_image_tokens >= 1 && spec.min_image_tokens <= spec.max_image_tokens,
                   invalid_argument_error, "image token range [", spec.min_image_tokens, ", ",
                   spec.max_image_tokens, "] is empty or starts below 1");
  multimodal_batch b;
  b.sample_offsets.assign(static_cast<std::size_t>(spec.ranks) + 1, 0);
  b.samples.reserve(static_cast<std::size_t>(spec.ranks * spec.samples_per_rank));
  for (std::int64_t r = 0; r < spec.ranks; ++r) {
    random_source rng(spec.seed, static_cast<std::uint64_t>(r));
    for (std::int64_t i = 0; i < spec.samples_per_rank; ++i)
      b.samples.push_back(draw_sample(rng, spec));
    b.sample_offsets[static_cast<std::size_t>(r) + 1] = static_cast<std::int64_t>(b.samples.size());
  }
  struct flat {
    std::vector<std::int64_t> offsets{0}, lengths, bytes, parents;
    void item(std::int64_t length, std::int64_t bytes_, std::int64_t parent) {
      lengths.push_back(length);
      bytes.push_back(bytes_);
      parents.push_back(parent);
    }
    void end_rank() { offsets.push_back(static_cast<std::int64_t>(lengths.size())); }
  } vision, audio, llm;
  for (std::int64_t r = 0; r < spec.ranks; ++r) {
    for (auto g = b.sample_offsets[static_cast<std::size_t>(r)];
         g < b.sample_offsets[static_cast<std::size_t>(r) + 1]; ++g) {
      const sample& s = b.samples[static_cast<std::size_t>(g)];
      for (const auto& im : s.images)
        vision.item(im.vit_patches, im.vit_patches * bytes_per_vit_patch, g);
      for (const auto& a : s.audio)
        audio.item(a.encoder_positions, a.mel_frames * bytes_per_mel_frame, g);
      llm.item(s.llm_tokens(), s.llm_tokens() * bytes_per_llm_token, batch_layout::no_parent);
    }
    vision.end_rank();
    audio.end_rank();
    llm.end_rank();
  }
  auto make = [](flat& f, bool with_parents) {
    return batch_layout(std::move(f.offsets), std::move(f.lengths), std::move(f.bytes),
                        with_parents ? std::move(f.parents) : std::vector<std::int64_t>{});
  };
  b.vision = make(vision, true);
  b.audio = make(audio, true);
  b.llm = make(llm, false);
  return b;
}

}  // namespace orchmllm::bench
