#pragma once
// The checks of a local batch and the assembly of the global metadata, included by
// orchestrator/step_metadata.hpp at its end; `gather_step_metadata`
// (detail/orchestrator/gather_metadata.hpp) runs the same checks on every rank's batch.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace orchmllm::detail {

// Why a local batch is malformed (0 = fine); `where` is the first offending index.
enum class batch_fault : std::int64_t {
  none = 0,
  negative_text,
  bad_modality,
  bad_parent,
  negative_value,
  bad_segments,
  loss_tokens_size,
  negative_loss_tokens,
};

inline std::string describe(batch_fault f, std::int64_t where, std::int64_t detail_value,
                            int encoders) {
  switch (f) {
    case batch_fault::none:
      return "no fault";
    case batch_fault::negative_text:
      return concat("sample ", where, " has ", detail_value, " text tokens");
    case batch_fault::bad_modality:
      return concat("sub-item ", where, " has modality ", detail_value, " but ", encoders,
                    " encoder stages are declared");
    case batch_fault::bad_parent:
      return concat("sub-item ", where, " names parent sample ", detail_value,
                    ", which does not exist");
    case batch_fault::negative_value:
      return concat("sub-item ", where, " has a negative length, row count or token count");
    case batch_fault::bad_segments:
      return concat("sub-item ", where, " has ", detail_value,
                    " segments: must be in [1, 2^31] and divide its encoder length, input rows "
                    "and LLM tokens");
    case batch_fault::loss_tokens_size:
      return concat("loss_tokens has ", detail_value, " entries for ", where,
                    " samples (one per sample, or none)");
    case batch_fault::negative_loss_tokens:
      return concat("sample ", where, " has ", detail_value, " loss tokens");
  }
  return "?";
}

struct fault_report {
  batch_fault fault = batch_fault::none;
  std::int64_t where = 0;
  std::int64_t value = 0;
};

// The most segments a sub-item may declare: S − 1 travels in the high 32 bits of the modality
// word of the metadata exchange (gather_metadata.hpp).
inline constexpr std::int64_t max_segments = std::int64_t{1} << 31;

inline fault_report check_local_batch(const local_batch& b, int encoders) {
  for (std::size_t i = 0; i < b.text_tokens.size(); ++i)
    if (b.text_tokens[i] < 0)
      return {batch_fault::negative_text, static_cast<std::int64_t>(i), b.text_tokens[i]};
  const auto samples = static_cast<std::int64_t>(b.text_tokens.size());
  if (!b.loss_tokens.empty() && static_cast<std::int64_t>(b.loss_tokens.size()) != samples)
    return {batch_fault::loss_tokens_size, samples,
            static_cast<std::int64_t>(b.loss_tokens.size())};
  for (std::size_t i = 0; i < b.loss_tokens.size(); ++i)
    if (b.loss_tokens[i] < 0)
      return {batch_fault::negative_loss_tokens, static_cast<std::int64_t>(i), b.loss_tokens[i]};
  for (std::size_t i = 0; i < b.sub_items.size(); ++i) {
    const auto& s = b.sub_items[i];
    if (s.modality < 0 || s.modality >= encoders)
      return {batch_fault::bad_modality, static_cast<std::int64_t>(i), s.modality};
    if (s.parent < 0 || s.parent >= samples)
      return {batch_fault::bad_parent, static_cast<std::int64_t>(i), s.parent};
    if (s.encoder_length < 0 || s.input_rows < 0 || s.llm_tokens < 0)
      return {batch_fault::negative_value, static_cast<std::int64_t>(i), 0};
    if (s.segments != 1 &&
        (s.segments < 1 || s.segments > max_segments || s.encoder_length % s.segments != 0 ||
         s.input_rows % s.segments != 0 || s.llm_tokens % s.segments != 0))
      return {batch_fault::bad_segments, static_cast<std::int64_t>(i), s.segments};
  }
  return {};
}

// Appends rank r's batch (already checked) to the global metadata under construction.
inline void append_rank(step_metadata& m, const local_batch& b) {
  const auto first_sample = static_cast<std::int64_t>(m.text_tokens.size());
  m.text_tokens.insert(m.text_tokens.end(), b.text_tokens.begin(), b.text_tokens.end());
  const auto& loss = b.loss_tokens.empty() ? b.text_tokens : b.loss_tokens;
  m.loss_tokens.insert(m.loss_tokens.end(), loss.begin(), loss.end());
  m.sample_offsets.push_back(static_cast<std::int64_t>(m.text_tokens.size()));
  // Per sample, its sub-items in order.
  std::vector<std::vector<std::pair<std::int32_t, std::int64_t>>> per_sample(b.text_tokens.size());
  for (const auto& s : b.sub_items) {
    auto& mod = m.modalities[static_cast<std::size_t>(s.modality)];
    per_sample[static_cast<std::size_t>(s.parent)].emplace_back(s.modality, mod.size());
    mod.parent.push_back(first_sample + s.parent);
    mod.encoder_length.push_back(s.encoder_length);
    mod.input_rows.push_back(s.input_rows);
    mod.llm_tokens.push_back(s.llm_tokens);
    mod.segments.push_back(s.segments);
  }
  for (auto& mod : m.modalities) mod.offsets.push_back(mod.size());
  for (const auto& list : per_sample) {
    m.sample_sub_items.insert(m.sample_sub_items.end(), list.begin(), list.end());
    m.sample_sub_offsets.push_back(static_cast<std::int64_t>(m.sample_sub_items.size()));
  }
  ++m.ranks;
}

}  // namespace orchmllm::detail

namespace orchmllm {

inline step_metadata make_step_metadata(const std::vector<local_batch>& batches, int encoders) {
  ORCHMLLM_REQUIRE(!batches.empty(), invalid_argument_error, "a step needs at least one rank");
  ORCHMLLM_REQUIRE(encoders >= 0, invalid_argument_error, encoders, " encoder stages");
  step_metadata m;
  m.modalities.resize(static_cast<std::size_t>(encoders));
  for (std::size_t r = 0; r < batches.size(); ++r) {
    const auto f = detail::check_local_batch(batches[r], encoders);
    ORCHMLLM_REQUIRE(f.fault == detail::batch_fault::none, invalid_argument_error, "rank ", r, ": ",
                     detail::describe(f.fault, f.where, f.value, encoders));
    detail::append_rank(m, batches[r]);
  }
  return m;
}

}  // namespace orchmllm
