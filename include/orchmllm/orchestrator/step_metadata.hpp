#pragma once
/// @file step_metadata.hpp
/// What a trainer hands in every step (its local batch) and the global view of one step that
/// every rank rebuilds identically (`gather_step_metadata`, or `make_step_metadata` in one
/// process).
///
/// Model: a *sample* is one training sequence for the LLM. It has text tokens of its own (no
/// placeholders) and any number of *sub-items* (images, video clips, audio clips), each of one
/// *modality* k (0..K-1, the index of its encoder stage). A sub-item has an encoder length (what
/// its encoder's cost model reads), encoder input rows (what travels to the encoder) and LLM
/// tokens (the encoder output rows that replace its placeholder run in the sample's sequence),
/// and may consist of S equal segments its encoder processes independently. The LLM stage sees
/// whole samples: length = text tokens + the LLM tokens of all its sub-items.
///
/// Thread-safety: plain values. Deterministic. See docs/orchestrator.md, "Data model".

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/core/checked.hpp"

namespace orchmllm {

/// One sub-item of a local sample.
struct sub_item {
  std::int32_t modality = 0;        ///< encoder stage index k, 0 ≤ k < K
  std::int64_t parent = 0;          ///< index of its sample in the local batch
  std::int64_t encoder_length = 0;  ///< what the encoder's cost model reads
  std::int64_t input_rows = 0;      ///< encoder input rows that travel to the encoder
  std::int64_t llm_tokens = 0;      ///< encoder output rows (LLM tokens) it becomes
  /// S ≥ 1 equal segments that its encoder processes independently (the temporal patch groups
  /// of a video, the 30 s windows of a recording): encoder_length, input_rows and llm_tokens
  /// must each be divisible by S, and segment i is rows [i·input_rows/S, (i+1)·input_rows/S)
  /// of its input and tokens [i·llm_tokens/S, (i+1)·llm_tokens/S) of its output. Its cost is
  /// the sum of S segment costs of length encoder_length/S (packed; under a padded policy it
  /// is S padded rows of length encoder_length/S), and a stage with `encoder_stage::split` may
  /// cut it at segment boundaries. 1 (the default) costs nothing:
  /// the metadata, plans and routes are those of a sub-item without segments.
  std::int64_t segments = 1;
  friend bool operator==(const sub_item&, const sub_item&) = default;
};

/// What one rank sampled for this step: its samples' text token counts, and its sub-items in
/// the order they appear in their samples (sub-items of one sample keep this order everywhere;
/// sub-items of different samples may interleave).
struct local_batch {
  std::vector<std::int64_t> text_tokens;  ///< one entry per local sample
  std::vector<sub_item> sub_items;
  /// The tokens of every local sample that carry a label (what a per-token-mean loss divides
  /// by: `step_plan::loss_tokens`), ≥ 0; empty (the default): its text tokens.
  std::vector<std::int64_t> loss_tokens{};
  friend bool operator==(const local_batch&, const local_batch&) = default;
};

/// The global view of one step, identical on every rank after `gather_step_metadata` (or built
/// in one process by `make_step_metadata`).
///
/// Ids: global sample g = sample_offsets[r] + local index; sub-items of modality k get global
/// ids per modality, rank-major, in local order: modalities[k].offsets[r] + (index among rank
/// r's sub-items of modality k).
struct step_metadata {
  /// Sub-items of one modality (encoder stage k), by global id within the modality.
  struct modality_items {
    /// d + 1 entries: rank r sampled the sub-items [offsets[r], offsets[r + 1]), so rank r's
    /// first global id is offsets[r].
    std::vector<std::int64_t> offsets{0};
    std::vector<std::int64_t> parent;          ///< the global sample id it belongs to
    std::vector<std::int64_t> encoder_length;  ///< `sub_item::encoder_length`: what it costs
    std::vector<std::int64_t> input_rows;      ///< `sub_item::input_rows`: what travels in
    std::vector<std::int64_t> llm_tokens;      ///< `sub_item::llm_tokens`: the LLM rows it becomes
    /// S of every sub-item (`sub_item::segments`); may be left empty in metadata built by
    /// hand, which means S = 1 for all.
    std::vector<std::int64_t> segments;
    [[nodiscard]] std::int64_t size() const noexcept {
      return static_cast<std::int64_t>(parent.size());
    }
    /// S of sub-item i (1 when `segments` is empty). O(1).
    [[nodiscard]] std::int64_t segments_of(std::int64_t i) const noexcept {
      return segments.empty() ? 1 : segments[static_cast<std::size_t>(i)];
    }
  };
  rank_t ranks = 0;  ///< d, the data-parallel ranks
  /// d + 1 entries: rank r sampled the global samples [sample_offsets[r], sample_offsets[r + 1]).
  std::vector<std::int64_t> sample_offsets{0};
  std::vector<std::int64_t> text_tokens;  ///< per global sample, its own (text) tokens
  /// Per global sample, its loss tokens (`local_batch::loss_tokens`, or its text tokens); may
  /// be left empty in metadata built by hand, which means the text tokens (`loss_tokens_of`).
  std::vector<std::int64_t> loss_tokens{};
  std::vector<modality_items> modalities;  ///< K entries, one per encoder stage, in stage order
  /// Every sample's sub-items in their original order, as (modality, id within the modality):
  /// entries [sample_sub_offsets[g], sample_sub_offsets[g + 1]).
  std::vector<std::int64_t> sample_sub_offsets{0};
  std::vector<std::pair<std::int32_t, std::int64_t>> sample_sub_items;

  [[nodiscard]] std::int64_t num_samples() const noexcept {
    return static_cast<std::int64_t>(text_tokens.size());
  }
  /// The loss tokens of sample g. O(1).
  [[nodiscard]] std::int64_t loss_tokens_of(std::int64_t g) const noexcept {
    return (loss_tokens.empty() ? text_tokens : loss_tokens)[static_cast<std::size_t>(g)];
  }
  /// LLM sequence length of sample g: text + the LLM tokens of its sub-items. O(its sub-items).
  /// Throws `invalid_argument_error` when the sum passes 2^63 − 1.
  [[nodiscard]] std::int64_t sequence_length(std::int64_t g) const {
    std::int64_t len = text_tokens[static_cast<std::size_t>(g)];
    for (auto k = sample_sub_offsets[static_cast<std::size_t>(g)];
         k < sample_sub_offsets[static_cast<std::size_t>(g) + 1]; ++k) {
      const auto& [m, id] = sample_sub_items[static_cast<std::size_t>(k)];
      len = detail::checked_add(
          len, modalities[static_cast<std::size_t>(m)].llm_tokens[static_cast<std::size_t>(id)],
          "sequence length of sample ", g);
    }
    return len;
  }
};

/// Builds the global metadata in one process from every rank's local batch (for simulators,
/// tests and single-process trainers). O(total samples + sub-items). Throws
/// `invalid_argument_error` naming the rank and the fault for a malformed batch (negative
/// values, a modality outside [0, encoders), a parent sample that does not exist) or when
/// `batches` is empty.
inline step_metadata make_step_metadata(const std::vector<local_batch>& batches, int encoders);

}  // namespace orchmllm

// The checks of a local batch and the assembly of the global metadata.
#include "orchmllm/detail/orchestrator/step_metadata.inl"  // IWYU pragma: export
