#pragma once
// The definitions of `step_plan::encoder_view` and `step_plan::llm_view`, included by
// orchestrator/step_plan.hpp at its end: what an encoder rank runs and
// where an LLM rank finds each received item.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "orchmllm/core/error.hpp"

namespace orchmllm {

inline std::vector<encoder_unit> step_plan::encoder_view(const step_metadata& meta, int k,
                                                         rank_t r) const {
  ORCHMLLM_REQUIRE(k >= 0 && static_cast<std::size_t>(k) < encoders.size(), invalid_argument_error,
                   "encoder stage ", k, " outside [0, ", encoders.size(), ")");
  const auto& er = encoders[static_cast<std::size_t>(k)];
  const auto& mod = meta.modalities[static_cast<std::size_t>(k)];
  ORCHMLLM_REQUIRE(r >= 0 && r < er.input.num_dst_ranks(), invalid_argument_error, "rank ", r,
                   " outside [0, ", er.input.num_dst_ranks(), ")");
  const auto doff = er.input.dst_offsets();
  std::vector<encoder_unit> out;
  out.reserve(static_cast<std::size_t>(doff[static_cast<std::size_t>(r) + 1] -
                                       doff[static_cast<std::size_t>(r)]));
  for (auto h = doff[static_cast<std::size_t>(r)]; h < doff[static_cast<std::size_t>(r) + 1]; ++h) {
    const std::int64_t u = er.input.source_of(h);
    encoder_unit e;
    e.sub_item = er.pieces ? er.pieces->item_of(u) : u;
    const auto g = static_cast<std::size_t>(e.sub_item);
    e.segments = mod.segments_of(e.sub_item);
    e.first_segment = er.pieces ? er.pieces->first_segment(u) : 0;
    e.last_segment = er.pieces ? er.pieces->last_segment(u) : e.segments;
    const std::int64_t n = e.last_segment - e.first_segment;
    e.input_rows = mod.input_rows[g] / e.segments * n;
    e.llm_tokens = mod.llm_tokens[g] / e.segments * n;
    out.push_back(e);
  }
  return out;
}

inline llm_rank_view step_plan::llm_view(const step_metadata& meta, rank_t r) const {
  ORCHMLLM_REQUIRE(r >= 0 && r < llm.num_dst_ranks(), invalid_argument_error, "rank ", r,
                   " outside [0, ", llm.num_dst_ranks(), ")");
  llm_rank_view v;
  const auto k_count = encoders.size();
  v.item_offsets.assign(k_count, std::vector<std::int64_t>{0});
  v.row_offsets.assign(k_count, std::vector<std::int64_t>{0});
  std::vector<std::int64_t> received(k_count, 0);
  const auto doff = llm.dst_offsets();
  for (auto h = doff[static_cast<std::size_t>(r)]; h < doff[static_cast<std::size_t>(r) + 1]; ++h) {
    const std::int64_t g = llm.source_of(h);
    v.samples.push_back(g);
    // Sub-items of this sample in original order; per modality they are also in increasing
    // modality id, which is the order the composed route delivers them in.
    std::vector<std::int64_t> seen(k_count, 0);
    for (auto k = meta.sample_sub_offsets[static_cast<std::size_t>(g)];
         k < meta.sample_sub_offsets[static_cast<std::size_t>(g) + 1]; ++k) {
      const auto& [m, id] = meta.sample_sub_items[static_cast<std::size_t>(k)];
      const auto um = static_cast<std::size_t>(m);
      v.sub_items.emplace_back(m, received[um] + seen[um]);
      ++seen[um];
      v.row_offsets[um].push_back(v.row_offsets[um].back() +
                                  meta.modalities[um].llm_tokens[static_cast<std::size_t>(id)]);
    }
    v.sub_item_offsets.push_back(static_cast<std::int64_t>(v.sub_items.size()));
    for (std::size_t m = 0; m < k_count; ++m) {
      received[m] += seen[m];
      v.item_offsets[m].push_back(received[m]);
    }
  }
  return v;
}

}  // namespace orchmllm
