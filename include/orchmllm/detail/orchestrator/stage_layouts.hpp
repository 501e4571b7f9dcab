#pragma once
// plan_step's layouts (orchestrator/orchestrator.hpp): the LLM stage's over samples and an
// encoder stage's over its sub-items, from the step's metadata and the declared row widths.
// Not compiled in units that use the compiled library (ORCHMLLM_USE_COMPILED): plan_step's
// body is there.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/detail/core/checked.hpp"
#include "orchmllm/orchestrator/stages.hpp"

namespace orchmllm {

#if !ORCHMLLM_USE_COMPILED
namespace detail {

// The LLM stage's layout: one item per sample, of its sequence length, carrying its text bytes
// plus its sub-items' encoder-output bytes (all attributed to its origin rank). Checked: token
// and row counts come from the trainer (a wrapped size would move 0 bytes).
inline batch_layout llm_stage_layout(const stage_declarations& decl, const step_metadata& meta) {
  const auto n = static_cast<std::size_t>(meta.num_samples());
  std::vector<std::int64_t> lengths(n), bytes(n);
  for (std::size_t g = 0; g < n; ++g) {
    lengths[g] = meta.sequence_length(static_cast<std::int64_t>(g));
    std::int64_t b =
        checked_mul(meta.text_tokens[g], decl.llm.text_row_bytes, "text bytes of sample ", g);
    for (auto k = meta.sample_sub_offsets[g]; k < meta.sample_sub_offsets[g + 1]; ++k) {
      const auto& [m, id] = meta.sample_sub_items[static_cast<std::size_t>(k)];
      b = checked_add(
          b,
          checked_mul(
              meta.modalities[static_cast<std::size_t>(m)].llm_tokens[static_cast<std::size_t>(id)],
              decl.encoders[static_cast<std::size_t>(m)].output_row_bytes,
              "encoder output bytes of sample ", g),
          "bytes of sample ", g);
    }
    bytes[g] = b;
  }
  return batch_layout(meta.sample_offsets, std::move(lengths), std::move(bytes));
}

// Encoder stage k's layout: its sub-items with their encoder lengths, input bytes and parent
// samples. Segmented sub-items have S equal segments each (checked when the metadata was
// built), so their costs are per segment (packed) or every segment is a padded row (padded
// policies): the layout's with_equal_segments, built in one go. Without any, no segments.
inline batch_layout encoder_stage_layout(const stage_declarations& decl, const step_metadata& meta,
                                         std::size_t k) {
  const auto& mod = meta.modalities[k];
  std::vector<std::int64_t> bytes(mod.input_rows.size());
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = checked_mul(mod.input_rows[i], decl.encoders[k].input_row_bytes, "stage '",
                           decl.encoders[k].name, "': input bytes of item ", i);
  if (std::any_of(mod.segments.begin(), mod.segments.end(), [](auto s) { return s != 1; })) {
    auto [seg_offsets, seg_lengths] = equal_segments(mod.encoder_length, mod.segments);
    return batch_layout(mod.offsets, mod.encoder_length, std::move(bytes), mod.parent,
                        std::move(seg_offsets), std::move(seg_lengths));
  }
  return batch_layout(mod.offsets, mod.encoder_length, std::move(bytes), mod.parent);
}

}  // namespace detail
#endif

}  // namespace orchmllm
