#pragma once
// The synthetic data of the mllm_training integration program (mllm_training.cpp, whose file
// comment describes it): every rank's samples drawn from stream `rank` of the seed, the
// orchestrator's view of them and the stage declarations, and the payload helpers (rows of
// doubles <-> bytes).

#include <Eigen/Dense>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/support/workload.hpp"
#include "mllm_training_model.hpp"
#include "orchmllm/orchmllm.hpp"

namespace mllm_training {

using orchmllm::rank_t;

// ---------------------------------------------------------------------------------------------
// Synthetic data
// ---------------------------------------------------------------------------------------------

struct sub_data {
  int modality = 0;
  MatrixXd input;             // input_dim × encoder input rows (patches / frames)
  std::int64_t segments = 0;  // --split videos: temporal groups (0: an image, not segmented)
  [[nodiscard]] std::int64_t rows() const { return input.cols(); }
  [[nodiscard]] std::int64_t tokens() const {
    return input.cols() / (modality == vision ? patches_per_token : frames_per_token);
  }
};

struct sample_data {
  std::vector<text_row> text;
  std::vector<sub_data> subs;  // in the order they appear in the sequence
};

/// Rank `rank`'s samples: stream `rank` of `seed` (independent of the number of ranks).
inline std::vector<sample_data> make_rank_data(std::uint64_t seed, rank_t rank,
                                               bool split = false) {
  orchmllm::bench::random_source rng(seed, static_cast<std::uint64_t>(rank));
  using orchmllm::bench::clip_round;
  std::vector<sample_data> out(static_cast<std::size_t>(rng.uniform_int(2, 5)));
  bool long_video = split && rank % 4 == 0;  // ranks 0, 4, ...: one video of 24 groups
  for (auto& s : out) {
    const auto text = clip_round(rng.lognormal_median(28.0, 0.8), 4, split ? 120 : 160);
    const double ui = rng.uniform01();
    int images = ui < 0.35 ? 0 : ui < 0.70 ? 1 : ui < 0.90 ? 2 : 3;
    if (split && rank % 4 == 0 && &s == &out.front()) images = std::max(images, 1);
    const double ua = rng.uniform01();
    const int clips = ua < 0.70 ? 0 : ua < 0.95 ? 1 : 2;
    std::vector<int> kinds(static_cast<std::size_t>(images), vision);
    kinds.insert(kinds.end(), static_cast<std::size_t>(clips), audio);
    for (std::size_t i = kinds.size(); i > 1; --i)  // Fisher–Yates: modalities interleave
      std::swap(
          kinds[i - 1],
          kinds[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
    for (const int k : kinds) {
      auto tokens = k == vision ? clip_round(rng.lognormal_median(6.0, 0.6), 1, 24)
                                : clip_round(rng.lognormal_median(5.0, 0.6), 1, 16);
      sub_data d;
      d.modality = k;
      if (split && k == vision) {  // a video: S groups of t tokens (2t patches) each
        d.segments = long_video ? 24 : rng.uniform_int(1, 4);
        tokens = d.segments * (long_video ? 2 : rng.uniform_int(1, 3));
        long_video = false;
      }
      d.input.resize(input_dim(k), tokens * (k == vision ? patches_per_token : frames_per_token));
      for (Eigen::Index i = 0; i < d.input.size(); ++i) d.input.data()[i] = rng.uniform(-1.0, 1.0);
      s.subs.push_back(std::move(d));
    }
    std::vector<std::int64_t> after(s.subs.size());  // the text token each sub-item follows
    for (auto& a : after) a = rng.uniform_int(0, text - 1);
    std::sort(after.begin(), after.end());
    s.text.resize(static_cast<std::size_t>(text));
    for (auto& row : s.text) {
      row.token = static_cast<std::int32_t>(rng.uniform_int(0, vocab - 1));
      row.target = static_cast<std::int32_t>(rng.uniform_int(0, vocab - 1));
      row.subs_after = 0;
      row.sub_target = static_cast<std::int32_t>(rng.uniform_int(0, vocab - 1));
    }
    for (auto a : after) ++s.text[static_cast<std::size_t>(a)].subs_after;
  }
  return out;
}

/// The orchestrator's view of a rank's samples.
inline orchmllm::local_batch describe(const std::vector<sample_data>& samples) {
  orchmllm::local_batch b;
  for (std::size_t s = 0; s < samples.size(); ++s) {
    b.text_tokens.push_back(static_cast<std::int64_t>(samples[s].text.size()));
    // Every position of the sequence has a target: text and placeholder positions alike.
    std::int64_t loss_tokens = b.text_tokens.back();
    for (const auto& d : samples[s].subs) {
      b.sub_items.push_back({d.modality, static_cast<std::int64_t>(s), d.rows(), d.rows(),
                             d.tokens(), std::max<std::int64_t>(d.segments, 1)});
      loss_tokens += d.tokens();
    }
    b.loss_tokens.push_back(loss_tokens);
  }
  return b;
}

/// The LLM stage's micro-batch token limit of --micro-batches: a sequence has at most 160 text
/// tokens, 3 images of 24 tokens and 2 clips of 16 (264), so every sample fits.
inline constexpr std::int64_t micro_batch_tokens = 288;

/// The stages; with `micro`: the LLM in at least 3 micro-batches of at most
/// `micro_batch_tokens` tokens (FSDP-style, every micro-batch synchronised), the encoders in two
/// micro-batches each (DDP-style, per step; not the vision stage when it splits).
inline orchmllm::stage_declarations declarations(bool split, bool micro) {
  orchmllm::stage_declarations decl;
  orchmllm::encoder_stage vis;
  vis.name = "vision";
  vis.cost = orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 64.0};  // patches, with attention
  vis.policy = orchmllm::packed;
  vis.input_row_bytes = patch_dim * static_cast<std::int64_t>(sizeof(double));
  vis.output_row_bytes = hidden * static_cast<std::int64_t>(sizeof(double));
  // --split: videos may be cut at temporal-group boundaries and encoded on several ranks.
  if (split) vis.split = orchmllm::split_options{};
  orchmllm::encoder_stage aud;
  aud.name = "audio";
  aud.cost = orchmllm::linear_cost{};  // frames; padded: a rank costs max frames × clips
  aud.policy = orchmllm::padded;
  aud.input_row_bytes = frame_dim * static_cast<std::int64_t>(sizeof(double));
  aud.output_row_bytes = hidden * static_cast<std::int64_t>(sizeof(double));
  decl.encoders = {vis, aud};
  decl.llm.name = "llm";
  decl.llm.cost = orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 256.0};
  decl.llm.policy = orchmllm::packed;
  decl.llm.text_row_bytes = static_cast<std::int64_t>(sizeof(text_row));
  if (micro) {
    orchmllm::micro_batching two;
    two.count = 2;
    two.allow_empty = true;
    two.sync = orchmllm::sync_model::step;
    for (auto& e : decl.encoders)
      if (!e.split) e.micro_batches = two;
    orchmllm::micro_batching fsdp;
    fsdp.limits.tokens = micro_batch_tokens;
    fsdp.min_count = 3;
    fsdp.allow_empty = true;
    fsdp.sync = orchmllm::sync_model::micro_batch;
    decl.llm.micro_batches = fsdp;
  }
  return decl;
}

// ---------------------------------------------------------------------------------------------
// Payload helpers (rows of doubles / text rows <-> bytes)
// ---------------------------------------------------------------------------------------------

inline void append_matrix(orchmllm::ragged_payload& p, const MatrixXd& m) {
  const auto at = p.data.size();
  p.rows.push_back(m.cols());
  p.data.resize(at + static_cast<std::size_t>(m.size()) * sizeof(double));
  std::memcpy(p.data.data() + at, m.data(), static_cast<std::size_t>(m.size()) * sizeof(double));
}

inline MatrixXd read_matrix(const orchmllm::ragged_payload& p, std::int64_t first_row,
                            std::int64_t rows, int dim) {
  MatrixXd m(dim, rows);
  std::memcpy(m.data(), p.data.data() + first_row * p.row_bytes,
              static_cast<std::size_t>(rows * p.row_bytes));
  return m;
}

inline void write_matrix(orchmllm::ragged_payload& p, std::int64_t first_row, const MatrixXd& m) {
  std::memcpy(p.data.data() + first_row * p.row_bytes, m.data(),
              static_cast<std::size_t>(m.size()) * sizeof(double));
}

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

}  // namespace mllm_training
