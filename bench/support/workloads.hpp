#pragma once
/// @file workloads.hpp
/// (Above 600 lines on purpose: the four workloads are one model of the reference, read side by
/// side with its sources; its first hundred lines are that provenance.)
/// The four benchmark workloads of the project's workload reference, §8 (`vl-sft`,
/// `omni-pretrain`, `video-heavy`, `audio-asr`) as seeded generators of per-rank
/// `orchmllm::local_batch`es (samples with their image / video / audio sub-items), plus the
/// per-stage layouts for ITEMS.csv and summary statistics. Not part of the library.
///
/// Tags follow the reference: [P] published rule or figure, [D] arithmetic on published totals,
/// [E] our assumption (a fitted shape, or a choice where §8 leaves something open).
///
/// ## Encoder token rules (§1, implemented exactly)
///  * Qwen2-VL image: `smart_resize` with factor 28, here with the README override
///    min_pixels = 256·28², max_pixels = 1280·28² (256–1280 LLM tokens) [P]; tokens =
///    (H/28)(W/28); ViT patches (14 px) = 4 × tokens (2×2 merge) [P].
///  * Qwen2-VL video (`fetch_video` / `smart_nframes` of qwen-vl-utils): 2 fps, frame count even,
///    in [4, min(768, total frames)]; per-2-frame-group pixel budget
///    max(min(768·28², 24576·28²·2/nframes), int(1.05·128·28²)), min 128·28²; tokens =
///    nframes/2 × (H/28)(W/28) [P]; patches = 4 × tokens (the 2-frame temporal patch is in the
///    token rule already). The decoder's source frame rate is taken as 30 fps [E] (it only
///    matters through the total frame count, which caps nframes). A video is one sub-item of
///    `segments` = nframes/2 temporal patch groups (`video_sub_item`) [P: the Qwen2-VL vision
///    tower attends within one group], so it costs nframes/2 group costs, and a stage with
///    `encoder_stage::split` may cut it at group boundaries.
///  * Whisper-style audio: 100 mel frames/s, input padded to 30 s windows of 1500 encoder
///    positions each: encoder_length = 1500·⌈s/30⌉ (at least one window), input_rows =
///    ⌈100·s⌉ unpadded mel frames (what travels), llm_tokens = round(25·s) (Qwen2-Audio pooling,
///    25 tokens/s) [P]. A clip longer than 30 s becomes one sub-item per
///    window (`append_audio_windows`; Whisper encodes windows independently) [P].
///
/// ## Modalities and rows
///  Modality 0 (`vision_modality`) is one ViT for images and video frames; modality 1
///  (`audio_modality`) one Whisper-style encoder. An encoder input row is one ViT patch row
///  (3 × 2 temporal × 14 × 14 bf16 = 2352 bytes; images are duplicated to two frames as in
///  Qwen2-VL) or one mel frame (128 bins bf16 = 256 bytes); an LLM text row is a token id and a
///  label (int32 each, 8 bytes).
///
/// ## The workloads (§8; the default variants)
///  * `vl-sft` (LLaVA-1.5 / OV-SI style, encoder qwen2vl(256..1280)) [P mix, E shapes]:
///    6 % text-only LN(700, 0.9)[50, 2048]; 63 % one image + LN(90, 0.6)[20, 1500]; 24 % one
///    image + LN(250, 0.5)[40, 1500]; 7 % 2–8 images (uniform) + LN(150, 0.6)[20, 1500]. Images
///    from the §4 mixture (`draw_mixture_image_tokens`). One sample = one conversation (no
///    packing: LLaVA trains unpacked samples).
///  * `omni-pretrain` (Qwen2.5-Omni stage 2; token shares image/video 67 %, audio 25 %, A/V 8 %
///    [P]). Raw sample kinds:
///      - image-text: 75 % one image + caption LN(60, 0.6)[5, 400]; 25 % OBELICS-like document
///        with 1 + Geom(mean 1.5) ≤ 30 images and text LN(620, 0.75)[15, 2700] [E];
///      - audio: 40 % LibriSpeech mix, 25 % GigaSpeech LN(3.7, 0.55)[1, 20] s, 15 % WenetSpeech
///        LN(2.0, 0.6)[0.2, 20] s with text round(2.6·s) (≥ 1) (ASR transcript), 20 % WavCaps
///        LN(37, 1.3)[1, 1800] s truncated to 30 s with a caption LN(20, 0.5)[3, 200];
///      - A/V: a Panda-70M clip LN(6.5, 0.7)[2, 60] s at 640×360, one video sub-item (Qwen2-VL
///        video rule) followed by one audio sub-item of the same duration, text = caption
///        LN(60, 0.6)[5, 400] [E: §8 gives no A/V text length; we reuse the caption shape].
///    Images use the §4 mixture as in vl-sft [E]. §8 lists no video-only kind, so the 67 %
///    "image/video" share is all image-text [E]. The kind of a raw sample is drawn with
///    probabilities ∝ share / E[LLM tokens of that kind] (constants `omni_kind_probability`,
///    from a 10^6-sample draw of each kind; the test checks the realised token shares), so the
///    *expected token* shares are 67/25/8 % [P target].
///    Packing [E]: each rank packs its stream of raw samples greedily in draw order (next-fit)
///    into sequences of ≤ 8192 LLM tokens (Qwen2.5-Omni stage-2 length [P]): a raw sample that
///    does not fit closes the current sequence and starts the next one. A raw sample longer than
///    8192 on its own (a document with many images, a long A/V clip) is kept whole as a sequence
///    of its own — never truncated or split — so sequences exceed 8192 only in that case.
///    One packed sequence is one sample (`local_batch` entry) whose text is the sum of its raw
///    samples' texts and whose sub-items are theirs, in order. `samples_per_rank` counts packed
///    sequences; the raw sample that overflows the last one is dropped.
///  * `video-heavy` (LLaVA-Video-178K, variant `qwen2vl_video`): 60 % video, 30 % image, 10 %
///    text (§8.3). Video: duration bucket 0–30 / 30–60 / 60–120 / 120–180 s with
///    probabilities 45/20/18/17 % [D], uniform within the bucket (the first bucket starts at
///    1 s [E], so every clip has frames); resolution 640×360 (60 %) or 1280×720 (40 %); the
///    exact Qwen2-VL video rule; text: 13 % caption LN(300, 0.4)[50, 2000], 87 % QA
///    LN(60, 0.6)[10, 1000] [E: 178K captions vs 1.16M QA pairs in LLaVA-Video-178K]. Image:
///    a vl-sft image sample (the 63/24/7 % image kinds, renormalised) [E]. Text: vl-sft
///    text-only. One sample = one conversation, kept whole (§8.3 allows the Qwen variant to
///    exceed the 32K context; with clips ≤ 3 min the rule gives ≤ 24,518 video tokens, so it
///    does not here).
///  * `audio-asr` (Qwen2-Audio style): 50 % LibriSpeech mix (20 % U(1, 12) + 80 % N(14.3, 1.9),
///    clip [1, 35] s), 30 % WenetSpeech LN(2.0, 0.6)[0.2, 20] s, 20 % Common Voice
///    LN(4.6, 0.35)[1, 10] s [E fits of §6]; Whisper-padded encoder (variant `whisper_padded`);
///    text = 20 (prompt) + round(2.6·s). Optional stress case (`long_form_audio`, OFF by
///    default so the base workload matches §8.4): 5 % of samples are long-form LN(120, 0.6)
///    [30, 600] s, chunked into 30 s windows, each window its own audio sub-item of the same
///    sample (encoder_length 1500; Whisper encodes windows independently, so a chunk is the
///    natural unit of encoder work), the last chunk holding the remainder.
///
/// ## Determinism
///  Rank r draws from `random_source(seed, r)` (workload.hpp: mt19937_64 through our own
///  uniform / Box–Muller transforms), so rank r's samples depend only on (name, seed, r,
///  samples_per_rank, long_form_audio), never on the number of ranks. The only platform
///  dependence left is the last ulp of the C library's exp/log/sin/cos/sqrt, absorbed by the
///  rounding to integers except at exact ties.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/support/workload.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/orchestrator/stages.hpp"

namespace orchmllm::bench {

// ---------------------------------------------------------------------------------------------
// Names, modalities, row widths, options
// ---------------------------------------------------------------------------------------------

/// The four benchmark workloads (see the file comment).
enum class workload_name : std::uint8_t { vl_sft, omni_pretrain, video_heavy, audio_asr };

/// "vl-sft", "omni-pretrain", "video-heavy", "audio-asr". O(1), never throws.
constexpr std::string_view to_string(workload_name n) noexcept {
  switch (n) {
    case workload_name::vl_sft:
      return "vl-sft";
    case workload_name::omni_pretrain:
      return "omni-pretrain";
    case workload_name::video_heavy:
      return "video-heavy";
    case workload_name::audio_asr:
      return "audio-asr";
  }
  return "?";
}

/// The workload named `text` (exactly as `to_string` spells it). Throws invalid_argument_error
/// naming the text and listing the four names.
inline workload_name parse_workload(std::string_view text) {
  for (auto n : {workload_name::vl_sft, workload_name::omni_pretrain, workload_name::video_heavy,
                 workload_name::audio_asr})
    if (to_string(n) == text) return n;
  ::orchmllm::detail::raise<invalid_argument_error>(::orchmllm::detail::concat(
      "unknown workload '", text,
      "' (expected one of vl-sft, omni-pretrain, video-heavy, audio-asr)"));
}

/// Images and video frames: one ViT (Qwen2-VL).
inline constexpr std::int32_t vision_modality = 0;
/// Whisper-style audio encoder.
inline constexpr std::int32_t audio_modality = 1;
/// One ViT input patch row: 3 x 2 (temporal) x 14 x 14 bf16.
inline constexpr std::int64_t vision_row_bytes = 2352;
/// One mel frame: 128 bins bf16.
inline constexpr std::int64_t audio_row_bytes = 256;
/// One LLM text row: token id + label, int32 each.
inline constexpr std::int64_t text_row_bytes = 8;

/// Qwen2.5-Omni stage-2 sequence length: the packing limit of `omni-pretrain` [P].
inline constexpr std::int64_t omni_sequence_limit = 8192;

/// What to generate.
struct workload_options {
  workload_name name = workload_name::vl_sft;
  std::int64_t ranks = 8;             ///< data-parallel ranks d ≥ 1
  std::int64_t samples_per_rank = 8;  ///< samples (omni-pretrain: packed sequences) per rank, ≥ 0
  std::uint64_t seed = 1;
  /// audio-asr only: the §8.4 stress case (5 % long-form clips). Off by default.
  bool long_form_audio = false;
};

/// A generated global batch: one `local_batch` per rank (index = rank).
struct workload_batch {
  workload_options options;
  std::vector<orchmllm::local_batch> ranks;  ///< one per rank
};

// ---------------------------------------------------------------------------------------------
// Token rules (§1)
// ---------------------------------------------------------------------------------------------

/// Qwen2-VL LLM tokens of an H×W image with the token limits [min_tokens, max_tokens]
/// (pixels = tokens·28²; defaults 4..16384, README override 256..1280). O(1).
inline std::int64_t qwen2vl_image_tokens(double height, double width, std::int64_t min_tokens,
                                         std::int64_t max_tokens) noexcept {
  const auto [h, w] = qwen2vl_smart_resize(height, width, static_cast<double>(min_tokens * 784),
                                           static_cast<double>(max_tokens * 784));
  return (h / 28) * (w / 28);
}

/// One video clip after the Qwen2-VL video rule.
struct video_item {
  std::int64_t frames = 0;       ///< sampled frames (even, 4..768 unless the clip is shorter)
  std::int64_t height = 0;       ///< resized frame height (multiple of 28)
  std::int64_t width = 0;        ///< resized frame width (multiple of 28)
  std::int64_t llm_tokens = 0;   ///< frames/2 · (height/28)(width/28)
  std::int64_t vit_patches = 0;  ///< 4 · llm_tokens
};

/// Qwen2-VL video rule (qwen-vl-utils `smart_nframes` + `fetch_video`, defaults: fps 2,
/// FPS_MIN_FRAMES 4, FPS_MAX_FRAMES 768, VIDEO_MIN_PIXELS 128·28², VIDEO_MAX_PIXELS 768·28²,
/// VIDEO_TOTAL_PIXELS 24576·28²) for a clip of `seconds` decoded at `source_fps` (total frames =
/// round(seconds·source_fps)). O(1). Throws invalid_argument_error when the clip has fewer than
/// 2 frames (the reference implementation rejects it too) or a non-positive size.
inline video_item qwen2vl_video(double height, double width, double seconds,
                                double source_fps = 30.0) {
  ORCHMLLM_REQUIRE(height > 0 && width > 0 && source_fps > 0 && std::isfinite(seconds),
                   invalid_argument_error, "qwen2vl_video: size ", height, "x", width, ", ",
                   seconds, " s at ", source_fps, " fps");
  const auto total = static_cast<double>(std::llround(seconds * source_fps));
  ORCHMLLM_REQUIRE(total >= 2, invalid_argument_error, "qwen2vl_video: a ", seconds, " s clip at ",
                   source_fps, " fps has ", total, " frames, fewer than 2");
  constexpr double factor = 2.0;
  const double min_frames = std::ceil(4.0 / factor) * factor;
  const double max_frames = std::floor(std::min(768.0, total) / factor) * factor;
  double n = total / source_fps * 2.0;  // 2 fps
  n = std::min(std::min(std::max(n, min_frames), max_frames), total);
  n = std::floor(n / factor) * factor;
  constexpr double px = 28.0 * 28.0;
  const double min_pixels = 128.0 * px;
  const double max_pixels = std::max(std::min(768.0 * px, 24576.0 * px / n * factor),
                                     std::floor(min_pixels * 1.05));  // Python int(): truncation
  const auto [h, w] = qwen2vl_smart_resize(height, width, min_pixels, max_pixels);
  video_item v;
  v.frames = static_cast<std::int64_t>(n);
  v.height = h;
  v.width = w;
  v.llm_tokens = v.frames / 2 * (h / 28) * (w / 28);
  v.vit_patches = 4 * v.llm_tokens;
  return v;
}

/// A Whisper-style clip of `seconds` (> 0): windows ⌈s/30⌉ (≥ 1), 1500 encoder positions per
/// window, ⌈100·s⌉ mel frames, round(25·s) LLM tokens. O(1), never throws.
inline audio_item whisper_audio(double seconds) noexcept {
  audio_item a;
  a.seconds = seconds;
  a.windows = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(seconds / 30.0)));
  a.encoder_positions = 1500 * a.windows;
  a.llm_tokens = std::llround(25.0 * seconds);
  a.mel_frames = static_cast<std::int64_t>(std::ceil(100.0 * seconds));
  return a;
}

/// A vision sub-item (image or video) with `llm_tokens` LLM tokens: encoder_length = input_rows
/// = 4·llm_tokens ViT patches, in `segments` equal segments (an image: 1; a video: its temporal
/// patch groups, see `video_sub_item`). Parent 0 (set by the caller). O(1). Precondition:
/// `segments` ≥ 1 divides `llm_tokens` (then it divides 4·llm_tokens too).
inline sub_item vision_sub_item(std::int64_t llm_tokens, std::int64_t segments = 1) noexcept {
  return sub_item{vision_modality, 0, 4 * llm_tokens, 4 * llm_tokens, llm_tokens, segments};
}

/// A video's vision sub-item: T = frames/2 temporal patch groups of (H/28)(W/28) LLM tokens
/// (4× as many ViT patches) each, so `segments` = T. The Qwen2-VL vision tower attends within
/// one temporal group only (its `cu_seqlens` repeats h·w once per group), so the encoder cost
/// is T · cost((H/14)(W/14)), T segment costs, not the cost of one sequence of all
/// T·(H/14)(W/14) patches. O(1).
inline sub_item video_sub_item(const video_item& v) noexcept {
  return vision_sub_item(v.llm_tokens, std::max<std::int64_t>(1, v.frames / 2));
}

/// An audio sub-item from a Whisper clip. Parent 0 (set by the caller). O(1).
inline sub_item audio_sub_item(const audio_item& a) noexcept {
  return sub_item{audio_modality, 0, a.encoder_positions, a.mel_frames, a.llm_tokens};
}

/// Appends the audio sub-items of a clip of `seconds` (> 0): one per 30 s Whisper window
/// (`whisper_audio` of 30 s, the last one of the remainder), in order. Whisper encodes every
/// window independently as a padded row of 1500 positions, so a window is the unit of encoder
/// work; the windows are separate sub-items rather than segments of one because the last
/// window is shorter in input rows and LLM tokens (a sub-item's segments share them equally). A
/// clip of ≤ 30 s is one sub-item, as before. O(windows).
inline void append_audio_windows(std::vector<sub_item>& out, double seconds) {
  const auto windows =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(seconds / 30.0)));
  for (std::int64_t c = 0; c < windows; ++c)
    out.push_back(audio_sub_item(whisper_audio(
        windows == 1 ? seconds : std::min(30.0, seconds - 30.0 * static_cast<double>(c)))));
}

// ---------------------------------------------------------------------------------------------
// Length and duration distributions (§4, §5, §6)
// ---------------------------------------------------------------------------------------------

/// LN(median, sigma) clipped to [lo, hi] and rounded (text lengths in tokens).
inline std::int64_t draw_text_tokens(random_source& rng, double median, double sigma,
                                     std::int64_t lo, std::int64_t hi) noexcept {
  return clip_round(rng.lognormal_median(median, sigma), lo, hi);
}

/// LN(median, sigma) clipped to [lo, hi] (seconds, not rounded).
inline double draw_seconds(random_source& rng, double median, double sigma, double lo,
                           double hi) noexcept {
  return std::clamp(rng.lognormal_median(median, sigma), lo, hi);
}

/// LibriSpeech utterance (§6 fit): 20 % U(1, 12) + 80 % N(14.3, 1.9), clipped to [1, 35] s.
inline double draw_librispeech_seconds(random_source& rng) noexcept {
  return draw_audio(rng).seconds;  // workload.hpp's clip: the same draws, the same numbers
}
/// WenetSpeech L cut (§6 fit): LN(2.0, 0.6)[0.2, 20] s.
inline double draw_wenetspeech_seconds(random_source& rng) noexcept {
  return draw_seconds(rng, 2.0, 0.60, 0.2, 20.0);
}
/// Common Voice clip (§6 fit): LN(4.6, 0.35)[1, 10] s.
inline double draw_common_voice_seconds(random_source& rng) noexcept {
  return draw_seconds(rng, 4.6, 0.35, 1.0, 10.0);
}
/// GigaSpeech segment (§6 fit): LN(3.7, 0.55)[1, 20] s.
inline double draw_gigaspeech_seconds(random_source& rng) noexcept {
  return draw_seconds(rng, 3.7, 0.55, 1.0, 20.0);
}
/// WavCaps FreeSound-like clip (§6 fit LN(37, 1.3)[1, 1800] s), truncated to 30 s (§8.2).
inline double draw_wavcaps_seconds(random_source& rng) noexcept {
  return std::min(30.0, draw_seconds(rng, 37.0, 1.3, 1.0, 1800.0));
}
/// Long-form speech of the audio-asr stress case (§8.4): LN(120, 0.6)[30, 600] s.
inline double draw_long_form_seconds(random_source& rng) noexcept {
  return draw_seconds(rng, 120.0, 0.6, 30.0, 600.0);
}
/// Panda-70M clip (§5 fit): LN(6.5, 0.7)[2, 60] s.
inline double draw_panda_seconds(random_source& rng) noexcept {
  return draw_seconds(rng, 6.5, 0.7, 2.0, 60.0);
}
/// LLaVA-Video-178K clip (§5): bucket 0–30 / 30–60 / 60–120 / 120–180 s with probabilities
/// 45/20/18/17 % [D], uniform within the bucket; the first bucket starts at 1 s [E].
inline double draw_llava_video_seconds(random_source& rng) noexcept {
  const double u = rng.uniform01();
  if (u < 0.45) return rng.uniform(1.0, 30.0);
  if (u < 0.65) return rng.uniform(30.0, 60.0);
  if (u < 0.83) return rng.uniform(60.0, 120.0);
  return rng.uniform(120.0, 180.0);
}

/// h/w aspect ratio of COCO-like images (§4): 72 % LN(0.71, 0.06), 25 % LN(1.40, 0.06),
/// 3 % U(0.3, 3).
inline double draw_coco_aspect(random_source& rng) noexcept {
  const double u = rng.uniform01();
  return u < 0.72   ? rng.lognormal_median(0.71, 0.06)
         : u < 0.97 ? rng.lognormal_median(1.40, 0.06)
                    : rng.uniform(0.3, 3.0);
}

/// Qwen2-VL tokens (256..1280) of one image of the §4 rule-of-thumb mixture [E]:
///  * 55 % natural: COCO-like (`draw_image`: LN(244K px, 0.23)[40K, 640K], COCO aspects);
///  * 15 % small web: LN(0.15 MP, 0.6)[10K px, 2 MP], COCO aspects [E: aspect not given];
///  * 15 % chart / screenshot: LN(0.6 MP, 0.5)[50K px, 8 MP], h/w U(0.5, 1);
///  * 15 % document: LN(3.5 MP, 0.35)[0.5 MP, 20 MP], h/w LN(1.3, 0.05) [E: "≈1.3"].
/// O(1).
inline std::int64_t draw_mixture_image_tokens(random_source& rng) {
  const double u = rng.uniform01();
  if (u < 0.55) return draw_image(rng, multimodal_spec{}).llm_tokens;  // 256..1280 by default
  double px = 0, aspect = 1;
  if (u < 0.70) {
    px = std::clamp(rng.lognormal_median(150'000.0, 0.6), 10'000.0, 2'000'000.0);
    aspect = draw_coco_aspect(rng);
  } else if (u < 0.85) {
    px = std::clamp(rng.lognormal_median(600'000.0, 0.5), 50'000.0, 8'000'000.0);
    aspect = rng.uniform(0.5, 1.0);
  } else {
    px = std::clamp(rng.lognormal_median(3'500'000.0, 0.35), 500'000.0, 20'000'000.0);
    aspect = rng.lognormal_median(1.3, 0.05);
  }
  const double width = std::max(1.0, std::round(std::sqrt(px / aspect)));
  const double height = std::max(1.0, std::round(aspect * width));
  return qwen2vl_image_tokens(height, width, 256, 1280);
}

// ---------------------------------------------------------------------------------------------
// Raw samples
// ---------------------------------------------------------------------------------------------

/// What a raw sample is (for statistics and tests).
enum class sample_kind : std::uint8_t {
  text_only,         ///< vl-sft / video-heavy: no sub-item
  single_image,      ///< vl-sft: one image (short VQA or conversation)
  multi_image,       ///< vl-sft: 2–8 images
  image_caption,     ///< omni: one image + caption
  interleaved_doc,   ///< omni: OBELICS-like document
  video,             ///< video-heavy: one clip
  speech,            ///< omni / audio-asr: one speech clip with its transcript
  audio_caption,     ///< omni: WavCaps clip + caption
  audio_video,       ///< omni: one video + one audio sub-item
  long_form_speech,  ///< audio-asr stress: chunked long-form clip
};

/// One raw (unpacked) sample: text tokens and sub-items (parents not set yet).
struct raw_sample {
  sample_kind kind = sample_kind::text_only;
  std::int64_t text_tokens = 0;
  std::vector<sub_item> items;
  /// Its LLM sequence length: text + Σ llm_tokens. O(items).
  [[nodiscard]] std::int64_t llm_tokens() const noexcept {
    std::int64_t t = text_tokens;
    for (const auto& s : items) t += s.llm_tokens;
    return t;
  }
};

/// A vl-sft sample (§8.1, see the file comment). `images_only` redraws the kind among the three
/// image kinds (63/24/7 renormalised), as video-heavy's image samples do. O(images).
inline raw_sample draw_vl_sft_sample(random_source& rng, bool images_only = false) {
  raw_sample s;
  const double u = images_only ? 0.06 + 0.94 * rng.uniform01() : rng.uniform01();
  std::int64_t images = 1;
  if (u < 0.06) {
    s.kind = sample_kind::text_only;
    images = 0;
    s.text_tokens = draw_text_tokens(rng, 700, 0.9, 50, 2048);
  } else if (u < 0.69) {
    s.kind = sample_kind::single_image;
    s.text_tokens = draw_text_tokens(rng, 90, 0.6, 20, 1500);
  } else if (u < 0.93) {
    s.kind = sample_kind::single_image;
    s.text_tokens = draw_text_tokens(rng, 250, 0.5, 40, 1500);
  } else {
    s.kind = sample_kind::multi_image;
    images = rng.uniform_int(2, 8);
    s.text_tokens = draw_text_tokens(rng, 150, 0.6, 20, 1500);
  }
  for (std::int64_t i = 0; i < images; ++i)
    s.items.push_back(vision_sub_item(draw_mixture_image_tokens(rng)));
  return s;
}

/// omni-pretrain kind probabilities {image-text, audio, A/V}: share / E[LLM tokens of the kind]
/// normalised, with E from 10^6 draws of each kind (image-text ≈ 987.6, audio ≈ 300.6,
/// A/V ≈ 2629.4 tokens), so the expected token shares are 67/25/8 %. Recompute them when a
/// distribution of a kind changes (tests/bench/workloads_test.cpp checks the shares).
inline constexpr std::array<double, 3> omni_kind_probability = {0.4404, 0.5398, 0.0198};

/// Speech transcript of an ASR sample: round(2.6·s) tokens, at least 1 (§6: ≈ 2 words/s).
inline std::int64_t transcript_tokens(double seconds) noexcept {
  return std::max<std::int64_t>(1, std::llround(2.6 * seconds));
}

/// omni-pretrain image-text raw sample: 75 % one image + caption, 25 % OBELICS-like document.
inline raw_sample draw_omni_image_text(random_source& rng) {
  raw_sample s;
  std::int64_t images = 1;
  if (rng.bernoulli(0.75)) {
    s.kind = sample_kind::image_caption;
    s.text_tokens = draw_text_tokens(rng, 60, 0.6, 5, 400);
  } else {
    s.kind = sample_kind::interleaved_doc;
    // 1 + Geom(p = 0.4) on {0, 1, ...}: mean 1 + 0.6/0.4 = 2.5 images (OBELICS: 2.50) [D].
    while (images < 30 && !rng.bernoulli(0.4)) ++images;
    s.text_tokens = draw_text_tokens(rng, 620, 0.75, 15, 2700);
  }
  for (std::int64_t i = 0; i < images; ++i)
    s.items.push_back(vision_sub_item(draw_mixture_image_tokens(rng)));
  return s;
}

/// omni-pretrain audio raw sample: 40 % LibriSpeech, 25 % GigaSpeech, 15 % WenetSpeech (speech
/// with transcript), 20 % WavCaps (≤ 30 s, caption).
inline raw_sample draw_omni_audio(random_source& rng) {
  raw_sample s;
  const double u = rng.uniform01();
  double seconds = 0;
  if (u < 0.80) {
    s.kind = sample_kind::speech;
    seconds = u < 0.40   ? draw_librispeech_seconds(rng)
              : u < 0.65 ? draw_gigaspeech_seconds(rng)
                         : draw_wenetspeech_seconds(rng);
    s.text_tokens = transcript_tokens(seconds);
  } else {
    s.kind = sample_kind::audio_caption;
    seconds = draw_wavcaps_seconds(rng);
    s.text_tokens = draw_text_tokens(rng, 20, 0.5, 3, 200);
  }
  append_audio_windows(s.items, seconds);
  return s;
}

/// omni-pretrain A/V raw sample: Panda-70M duration, 640×360 video at 2 fps (Qwen2-VL rule),
/// then its audio track, caption text.
inline raw_sample draw_omni_audio_video(random_source& rng) {
  raw_sample s;
  s.kind = sample_kind::audio_video;
  const double seconds = draw_panda_seconds(rng);
  s.items.push_back(video_sub_item(qwen2vl_video(360, 640, seconds)));
  append_audio_windows(s.items, seconds);
  s.text_tokens = draw_text_tokens(rng, 60, 0.6, 5, 400);
  return s;
}

/// One omni-pretrain raw sample (kind by `omni_kind_probability`).
inline raw_sample draw_omni_sample(random_source& rng) {
  const double u = rng.uniform01();
  if (u < omni_kind_probability[0]) return draw_omni_image_text(rng);
  if (u < omni_kind_probability[0] + omni_kind_probability[1]) return draw_omni_audio(rng);
  return draw_omni_audio_video(rng);
}

/// One video-heavy sample: 60 % video, 30 % vl-sft image sample, 10 % vl-sft text-only.
inline raw_sample draw_video_heavy_sample(random_source& rng) {
  const double u = rng.uniform01();
  if (u < 0.60) {
    raw_sample s;
    s.kind = sample_kind::video;
    const double seconds = draw_llava_video_seconds(rng);
    const bool hd = !rng.bernoulli(0.6);  // 60 % 360p, 40 % 720p
    const auto v = hd ? qwen2vl_video(720, 1280, seconds) : qwen2vl_video(360, 640, seconds);
    s.items.push_back(video_sub_item(v));
    s.text_tokens = rng.bernoulli(0.13) ? draw_text_tokens(rng, 300, 0.4, 50, 2000)
                                        : draw_text_tokens(rng, 60, 0.6, 10, 1000);
    return s;
  }
  if (u < 0.90) return draw_vl_sft_sample(rng, /*images_only=*/true);
  raw_sample s;
  s.kind = sample_kind::text_only;
  s.text_tokens = draw_text_tokens(rng, 700, 0.9, 50, 2048);
  return s;
}

/// One audio-asr sample (see the file comment); `long_form` enables the 5 % stress case.
inline raw_sample draw_audio_asr_sample(random_source& rng, bool long_form = false) {
  raw_sample s;
  if (long_form && rng.bernoulli(0.05)) {
    s.kind = sample_kind::long_form_speech;
    const double seconds = draw_long_form_seconds(rng);
    append_audio_windows(s.items, seconds);  // 30 s chunks, the last the remainder (> 0)
    s.text_tokens = 20 + std::llround(2.6 * seconds);
    return s;
  }
  s.kind = sample_kind::speech;
  const double u = rng.uniform01();
  const double seconds = u < 0.5   ? draw_librispeech_seconds(rng)
                         : u < 0.8 ? draw_wenetspeech_seconds(rng)
                                   : draw_common_voice_seconds(rng);
  append_audio_windows(s.items, seconds);
  s.text_tokens = 20 + std::llround(2.6 * seconds);
  return s;
}

/// One raw sample of workload `name` (omni-pretrain: before packing). O(its sub-items).
inline raw_sample draw_raw_sample(workload_name name, random_source& rng, bool long_form = false) {
  switch (name) {
    case workload_name::vl_sft:
      return draw_vl_sft_sample(rng);
    case workload_name::omni_pretrain:
      return draw_omni_sample(rng);
    case workload_name::video_heavy:
      return draw_video_heavy_sample(rng);
    case workload_name::audio_asr:
      return draw_audio_asr_sample(rng, long_form);
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// The global batch
// ---------------------------------------------------------------------------------------------

namespace workload_detail {

// Appends a (possibly packed) sample to a local batch, setting its sub-items' parent.
inline void append_sample(local_batch& b, std::int64_t text, const std::vector<sub_item>& items) {
  const auto parent = static_cast<std::int64_t>(b.text_tokens.size());
  b.text_tokens.push_back(text);
  for (auto s : items) {
    s.parent = parent;
    b.sub_items.push_back(s);
  }
}

// Rank r's batch: `k` samples from stream r (omni-pretrain: k next-fit packed sequences).
inline local_batch make_rank(const workload_options& o, std::int64_t r) {
  random_source rng(o.seed, static_cast<std::uint64_t>(r));
  local_batch b;
  b.text_tokens.reserve(static_cast<std::size_t>(o.samples_per_rank));
  if (o.name != workload_name::omni_pretrain) {
    for (std::int64_t i = 0; i < o.samples_per_rank; ++i) {
      const auto s = draw_raw_sample(o.name, rng, o.long_form_audio);
      append_sample(b, s.text_tokens, s.items);
    }
    return b;
  }
  std::int64_t text = 0, length = 0;
  std::vector<sub_item> items;
  bool open = false;
  while (static_cast<std::int64_t>(b.text_tokens.size()) < o.samples_per_rank) {
    const auto s = draw_omni_sample(rng);
    const auto l = s.llm_tokens();
    if (open && length + l > omni_sequence_limit) {
      append_sample(b, text, items);
      if (static_cast<std::int64_t>(b.text_tokens.size()) == o.samples_per_rank) break;
      text = length = 0;
      items.clear();
    }
    open = true;
    text += s.text_tokens;
    length += l;
    items.insert(items.end(), s.items.begin(), s.items.end());
  }
  return b;
}

}  // namespace workload_detail

/// Generates the workload: rank r gets `samples_per_rank` samples drawn from stream r of the
/// seed (see the file comment for every distribution and for the omni-pretrain packing).
/// O(d·k·(sub-items per sample)); deterministic. Throws invalid_argument_error for ranks < 1 or
/// samples_per_rank < 0, and for long_form_audio with a workload other than audio-asr.
inline workload_batch make_workload(const workload_options& o) {
  ORCHMLLM_REQUIRE(o.ranks >= 1, invalid_argument_error, "make_workload: ranks ", o.ranks,
                   " must be >= 1");
  ORCHMLLM_REQUIRE(o.samples_per_rank >= 0, invalid_argument_error,
                   "make_workload: samples_per_rank ", o.samples_per_rank, " must be >= 0");
  ORCHMLLM_REQUIRE(!o.long_form_audio || o.name == workload_name::audio_asr, invalid_argument_error,
                   "make_workload: long_form_audio applies to audio-asr, "
                   "not ",
                   to_string(o.name));
  workload_batch w;
  w.options = o;
  w.ranks.reserve(static_cast<std::size_t>(o.ranks));
  for (std::int64_t r = 0; r < o.ranks; ++r) w.ranks.push_back(workload_detail::make_rank(o, r));
  return w;
}

/// One sample of a length trace (bench/cli/trace_csv.hpp, docs/tool.md "Traces"): its own text
/// tokens and the vision-encoder patch counts of its images (Qwen2-VL: 4 patches per LLM token).
struct trace_sample {
  std::int64_t text_tokens = 0;
  std::vector<std::int64_t> image_patches;  ///< each a positive multiple of 4
};

/// The global batch number `batch` of a trace for `ranks` × `samples_per_rank` samples: slot i of
/// rank r holds trace row ((batch · ranks + r) · samples_per_rank + i) mod rows (rows in file
/// order, wrapping around), every image a vision sub-item of patches/4 LLM tokens. The batch's
/// options carry `ranks`, `samples_per_rank` and `batch` as the seed. O(d·k·images);
/// deterministic. Throws invalid_argument_error for ranks < 1, samples_per_rank < 0, an empty
/// trace (with samples to draw) or an image whose patch count is not a positive multiple of 4.
inline workload_batch trace_workload(std::span<const trace_sample> trace, std::int64_t ranks,
                                     std::int64_t samples_per_rank, std::uint64_t batch) {
  ORCHMLLM_REQUIRE(ranks >= 1, invalid_argument_error, "trace_workload: ranks ", ranks,
                   " must be >= 1");
  ORCHMLLM_REQUIRE(samples_per_rank >= 0, invalid_argument_error,
                   "trace_workload: samples_per_rank ", samples_per_rank, " must be >= 0");
  ORCHMLLM_REQUIRE(!trace.empty() || samples_per_rank == 0, invalid_argument_error,
                   "trace_workload: the trace has no samples");
  workload_batch w;
  w.options.ranks = ranks;
  w.options.samples_per_rank = samples_per_rank;
  w.options.seed = batch;
  w.ranks.resize(static_cast<std::size_t>(ranks));
  const auto rows = static_cast<std::uint64_t>(trace.size());
  for (std::int64_t r = 0; r < ranks; ++r) {
    auto& b = w.ranks[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < samples_per_rank; ++i) {
      // (batch · d + r) · k + i mod rows, reduced at every step (no overflow below 2^32 rows).
      const auto mod = [rows](std::uint64_t x) { return x % rows; };
      const std::uint64_t at = mod(mod(mod(mod(batch) * mod(static_cast<std::uint64_t>(ranks)) +
                                           static_cast<std::uint64_t>(r)) *
                                       mod(static_cast<std::uint64_t>(samples_per_rank))) +
                                   static_cast<std::uint64_t>(i));
      const auto& t = trace[static_cast<std::size_t>(at)];
      std::vector<sub_item> items;
      for (const auto p : t.image_patches) {
        ORCHMLLM_REQUIRE(p > 0 && p % 4 == 0, invalid_argument_error, "trace_workload: row ", at,
                         " has an image of ", p, " patches (must be a positive multiple of 4)");
        items.push_back(vision_sub_item(p / 4));
      }
      workload_detail::append_sample(b, t.text_tokens, items);
    }
  }
  return w;
}

/// LLM sequence length of local sample `i` of `b`: text + the LLM tokens of its sub-items.
/// O(sub-items of b). Throws invalid_argument_error for i out of range.
inline std::int64_t sequence_length(const local_batch& b, std::int64_t i) {
  ORCHMLLM_REQUIRE(i >= 0 && i < static_cast<std::int64_t>(b.text_tokens.size()),
                   invalid_argument_error, "sample ", i, " outside [0, ", b.text_tokens.size(),
                   ")");
  std::int64_t t = b.text_tokens[static_cast<std::size_t>(i)];
  for (const auto& s : b.sub_items)
    if (s.parent == i) t += s.llm_tokens;
  return t;
}

/// The LLM sequence lengths of all samples of `b`, in order. O(samples + sub-items). Assumes
/// parents in range (as make_workload produces).
inline std::vector<std::int64_t> sequence_lengths(const local_batch& b) {
  std::vector<std::int64_t> out(b.text_tokens);
  for (const auto& s : b.sub_items) out[static_cast<std::size_t>(s.parent)] += s.llm_tokens;
  return out;
}

/// The three stage layouts of a workload (one item per sub-item or sample, rank-major, local
/// order):
///  * vision: length = encoder_length (ViT patches), bytes = input_rows · vision_row_bytes,
///    parent = the global id of its sample (an item of `llm`), and the sub-item's equal
///    `segments` (a video's temporal groups; a layout without videos stores none);
///  * audio: the same with audio_row_bytes;
///  * llm: one item per sample, length = text + Σ llm_tokens of its sub-items, bytes = length ·
///    text_row_bytes, no parent.
struct stage_layouts {
  batch_layout vision;
  batch_layout audio;
  batch_layout llm;
};

/// Builds the stage layouts. O(total items). Throws invalid_argument_error for a sub-item with a
/// modality other than 0/1 (not produced by make_workload).
inline stage_layouts make_stage_layouts(const workload_batch& w) {
  struct flat {
    std::vector<std::int64_t> offsets{0}, lengths, bytes, parents, segments;
  } vision, audio, llm;
  std::int64_t first_sample = 0;
  for (const auto& b : w.ranks) {
    for (const auto& s : b.sub_items) {
      ORCHMLLM_REQUIRE(s.modality == vision_modality || s.modality == audio_modality,
                       invalid_argument_error, "sub-item of modality ", s.modality,
                       " (expected 0 or 1)");
      auto& f = s.modality == vision_modality ? vision : audio;
      f.lengths.push_back(s.encoder_length);
      f.bytes.push_back(s.input_rows *
                        (s.modality == vision_modality ? vision_row_bytes : audio_row_bytes));
      f.parents.push_back(first_sample + s.parent);
      f.segments.push_back(s.segments);
    }
    for (auto l : sequence_lengths(b)) {
      llm.lengths.push_back(l);
      llm.bytes.push_back(l * text_row_bytes);
    }
    first_sample += static_cast<std::int64_t>(b.text_tokens.size());
    for (auto* f : {&vision, &audio, &llm})
      f->offsets.push_back(static_cast<std::int64_t>(f->lengths.size()));
  }
  auto make = [](flat& f) {
    batch_layout l(std::move(f.offsets), std::move(f.lengths), std::move(f.bytes),
                   std::move(f.parents));
    // Equal segments (a sub-item's encoder length is a multiple of them, workloads.hpp's
    // invariant); all-single segments store none, so image-only layouts are unchanged.
    if (std::any_of(f.segments.begin(), f.segments.end(), [](auto c) { return c > 1; }))
      l = l.with_equal_segments(f.segments);
    return l;
  };
  return {make(vision), make(audio), make(llm)};
}

/// Totals of one encoder modality.
struct modality_totals {
  std::int64_t items = 0;            ///< sub-items
  std::int64_t encoder_length = 0;   ///< Σ encoder_length
  std::int64_t input_rows = 0;       ///< Σ input_rows
  std::int64_t input_bytes = 0;      ///< Σ input_rows · row bytes
  std::int64_t llm_tokens = 0;       ///< Σ llm_tokens
  std::int64_t max_rank_length = 0;  ///< max over ranks of Σ encoder_length
  double imbalance = 1.0;            ///< max / mean of the per-rank Σ encoder_length (1 if 0)
};

/// Summary statistics of a workload batch (before any balancing).
struct workload_summary {
  std::int64_t ranks = 0;
  std::int64_t samples = 0;
  std::int64_t text_tokens = 0;  ///< Σ text tokens
  std::int64_t llm_tokens = 0;   ///< Σ sequence lengths (text + sub-item tokens)
  std::int64_t llm_bytes = 0;    ///< llm_tokens · text_row_bytes
  double mean_sequence = 0;      ///< llm_tokens / samples (0 without samples)
  std::int64_t max_sequence = 0;
  std::int64_t max_rank_llm_tokens = 0;
  double llm_imbalance = 1.0;  ///< max / mean of the per-rank LLM tokens (1 if 0)
  modality_totals vision;
  modality_totals audio;
};

/// Computes the summary. O(total items), deterministic, never throws for make_workload output.
inline workload_summary summarize(const workload_batch& w) {
  workload_summary s;
  s.ranks = static_cast<std::int64_t>(w.ranks.size());
  std::vector<std::int64_t> rank_llm, rank_vision, rank_audio;
  for (const auto& b : w.ranks) {
    std::int64_t llm = 0, vis = 0, aud = 0;
    for (auto l : sequence_lengths(b)) {
      llm += l;
      s.max_sequence = std::max(s.max_sequence, l);
    }
    for (auto t : b.text_tokens) s.text_tokens += t;
    for (const auto& it : b.sub_items) {
      const bool v = it.modality == vision_modality;
      auto& m = v ? s.vision : s.audio;
      ++m.items;
      m.encoder_length += it.encoder_length;
      m.input_rows += it.input_rows;
      m.input_bytes += it.input_rows * (v ? vision_row_bytes : audio_row_bytes);
      m.llm_tokens += it.llm_tokens;
      (v ? vis : aud) += it.encoder_length;
    }
    s.samples += static_cast<std::int64_t>(b.text_tokens.size());
    s.llm_tokens += llm;
    rank_llm.push_back(llm);
    rank_vision.push_back(vis);
    rank_audio.push_back(aud);
  }
  s.llm_bytes = s.llm_tokens * text_row_bytes;
  s.mean_sequence =
      s.samples ? static_cast<double>(s.llm_tokens) / static_cast<double>(s.samples) : 0.0;
  auto imbalance = [&](const std::vector<std::int64_t>& v, std::int64_t total,
                       std::int64_t& max_out) {
    max_out = v.empty() ? 0 : *std::max_element(v.begin(), v.end());
    if (total == 0) return 1.0;
    return static_cast<double>(max_out) * static_cast<double>(v.size()) /
           static_cast<double>(total);
  };
  s.llm_imbalance = imbalance(rank_llm, s.llm_tokens, s.max_rank_llm_tokens);
  s.vision.imbalance = imbalance(rank_vision, s.vision.encoder_length, s.vision.max_rank_length);
  s.audio.imbalance = imbalance(rank_audio, s.audio.encoder_length, s.audio.max_rank_length);
  return s;
}

}  // namespace orchmllm::bench
