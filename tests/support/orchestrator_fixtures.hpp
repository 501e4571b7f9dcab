#pragma once
// Shared by the tests of include/orchmllm/orchestrator/orchestrator.hpp
// (tests/orchestrator/orchestrator_*_test.cpp): random multimodal steps (fixed seeds; 1..16 ranks,
// 0..6 samples per rank, 0..4 sub-items per sample over K = 0..3 modalities, sub-items of
// different samples interleaved, zero-row items, random stage declarations and topologies), a
// reference view of a step built straight from the raw batches (independent of
// make_step_metadata and of the plans under test), and payloads whose bytes say what they are.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/payload.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/test_support.hpp"

namespace orchmllm::test::orchestrator_fixtures {

using vec = std::vector<std::int64_t>;

// ---------------------------------------------------------------------------------------------
// Random inputs.

inline std::vector<local_batch> random_batches(std::mt19937_64& rng, rank_t d, int k_count) {
  std::vector<local_batch> out(static_cast<std::size_t>(d));
  for (auto& b : out) {
    const auto samples = uniform(rng, 0, 6);
    std::vector<std::vector<sub_item>> per_sample(static_cast<std::size_t>(samples));
    for (std::int64_t i = 0; i < samples; ++i) {
      b.text_tokens.push_back(uniform(rng, 0, 7) == 0 ? 0 : uniform(rng, 1, 40));
      if (k_count == 0 || uniform(rng, 0, 2) == 0) continue;  // a sample with no sub-items
      const auto subs = uniform(rng, 0, 4);
      for (std::int64_t s = 0; s < subs; ++s)
        per_sample[static_cast<std::size_t>(i)].push_back(
            sub_item{.modality = static_cast<std::int32_t>(uniform(rng, 0, k_count - 1)),
                     .parent = i,
                     .encoder_length = uniform(rng, 0, 64),
                     .input_rows = uniform(rng, 0, 5),
                     .llm_tokens = uniform(rng, 0, 4)});
    }
    // Interleave the samples' lists, keeping each sample's own order.
    std::vector<std::size_t> next(per_sample.size(), 0);
    std::vector<std::size_t> open;
    for (std::size_t i = 0; i < per_sample.size(); ++i)
      if (!per_sample[i].empty()) open.push_back(i);
    while (!open.empty()) {
      const auto pick =
          static_cast<std::size_t>(uniform(rng, 0, static_cast<std::int64_t>(open.size()) - 1));
      const auto i = open[pick];
      b.sub_items.push_back(per_sample[i][next[i]++]);
      if (next[i] == per_sample[i].size())
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(pick));
    }
  }
  // Odd ranks name their loss tokens (half the text, rounded up), even ranks leave them to the
  // default (the text tokens): the metadata must carry both kinds. No draw, so the stream of
  // `rng` is that of batches without them.
  for (std::size_t r = 1; r < out.size(); r += 2)
    for (const auto t : out[r].text_tokens) out[r].loss_tokens.push_back((t + 1) / 2);
  return out;
}

template <class Stage>
void randomize_stage(std::mt19937_64& rng, Stage& st) {
  switch (uniform(rng, 0, 2)) {
    case 0:
      st.cost = orchmllm::stage_cost{};
      break;
    case 1:
      st.cost = linear_cost{uniform(rng, 1, 3)};
      break;
    default:
      st.cost = quadratic_cost{0.5, 1.0, 0.01 * static_cast<double>(uniform(rng, 0, 3))};
      break;
  }
  const auto p = uniform(rng, 0, 5);
  st.policy = p == 0   ? orchmllm::padded
              : p == 1 ? orchmllm::padded_to_multiple(4)
                       : orchmllm::packed;
  // A small exact search budget keeps automatic's exact step cheap under ASan.
  const balancers::automatic automatic{.exact_node_budget = 20'000};
  const orchmllm::any_balancer packed_balancers[] = {automatic,
                                                     automatic,
                                                     balancers::lpt{},
                                                     balancers::karmarkar_karp{},
                                                     balancers::locality{.base = automatic},
                                                     balancers::identity{}};
  const orchmllm::any_balancer padded_balancers[] = {automatic, balancers::padded_exact{},
                                                     balancers::lpt{},
                                                     balancers::locality{.base = automatic}};
  st.balancer = st.policy.is_padded() ? padded_balancers[uniform(rng, 0, 3)]
                                      : packed_balancers[uniform(rng, 0, 5)];
  const orchmllm::any_mapper mappings[] = {mappers::transport{}, mappers::transport{},
                                           mappers::identity{}, mappers::bottleneck{}};
  st.mapper = mappings[uniform(rng, 0, 3)];
}

inline stage_declarations random_decl(std::mt19937_64& rng, int k_count) {
  static const char* const names[] = {"vision", "audio", "video"};
  stage_declarations decl;
  for (int k = 0; k < k_count; ++k) {
    encoder_stage e;
    e.name = names[k];
    randomize_stage(rng, e);
    e.input_row_bytes = 24 + 8 * uniform(rng, 0, 2);
    e.output_row_bytes = 24 + 8 * uniform(rng, 0, 2);
    decl.encoders.push_back(std::move(e));
  }
  randomize_stage(rng, decl.llm);
  decl.llm.name = uniform(rng, 0, 1) == 0 ? "llm" : "llm-backbone";
  decl.llm.text_row_bytes = 24 + 8 * uniform(rng, 0, 1);
  return decl;
}

inline topology random_topology(std::mt19937_64& rng, rank_t d) {
  if (uniform(rng, 0, 1) == 0) return topology::uniform(d, static_cast<rank_t>(uniform(rng, 0, 5)));
  // Uneven: nodes of random sizes, ranks of one node not necessarily consecutive.
  std::vector<rank_t> node{0};
  rank_t next = 1;
  for (rank_t r = 1; r < d; ++r) {
    if (uniform(rng, 0, 2) == 0) {
      node.push_back(next++);
    } else {
      node.push_back(static_cast<rank_t>(uniform(rng, 0, next - 1)));
    }
  }
  return topology(std::move(node));
}

// ---------------------------------------------------------------------------------------------
// Reference view of a step, built straight from the raw batches (independent of
// make_step_metadata and of the plans under test).

struct reference {
  rank_t d = 0;
  int k_count = 0;
  vec sample_offsets{0};
  vec text;                                                              // per global sample
  std::vector<vec> mod_offsets;                                          // [k] CSR per rank
  std::vector<vec> input_rows, llm_tokens, encoder_length;               // [k][id]
  std::vector<vec> parent;                                               // [k][id] global sample
  std::vector<std::vector<std::pair<std::int32_t, std::int64_t>>> subs;  // per sample, in order

  std::int64_t sequence_length(std::int64_t g) const {
    auto len = text[static_cast<std::size_t>(g)];
    for (const auto& [m, id] : subs[static_cast<std::size_t>(g)])
      len += llm_tokens[static_cast<std::size_t>(m)][static_cast<std::size_t>(id)];
    return len;
  }
};

inline reference make_reference(const std::vector<local_batch>& batches, int k_count) {
  reference ref;
  ref.d = static_cast<rank_t>(batches.size());
  ref.k_count = k_count;
  const auto kc = static_cast<std::size_t>(k_count);
  ref.mod_offsets.assign(kc, vec{0});
  ref.input_rows.resize(kc);
  ref.llm_tokens.resize(kc);
  ref.encoder_length.resize(kc);
  ref.parent.resize(kc);
  for (const auto& b : batches) {
    const auto first = static_cast<std::int64_t>(ref.text.size());
    for (auto t : b.text_tokens) ref.text.push_back(t);
    ref.sample_offsets.push_back(static_cast<std::int64_t>(ref.text.size()));
    ref.subs.resize(ref.text.size());
    for (const auto& s : b.sub_items) {
      const auto m = static_cast<std::size_t>(s.modality);
      const auto id = static_cast<std::int64_t>(ref.parent[m].size());
      ref.parent[m].push_back(first + s.parent);
      ref.input_rows[m].push_back(s.input_rows);
      ref.llm_tokens[m].push_back(s.llm_tokens);
      ref.encoder_length[m].push_back(s.encoder_length);
      ref.subs[static_cast<std::size_t>(first + s.parent)].emplace_back(s.modality, id);
    }
    for (std::size_t m = 0; m < kc; ++m)
      ref.mod_offsets[m].push_back(static_cast<std::int64_t>(ref.parent[m].size()));
  }
  return ref;
}

inline bool same_metadata(const step_metadata& a, const step_metadata& b) {
  if (a.ranks != b.ranks || a.sample_offsets != b.sample_offsets ||
      a.text_tokens != b.text_tokens || a.loss_tokens != b.loss_tokens ||
      a.sample_sub_offsets != b.sample_sub_offsets || a.sample_sub_items != b.sample_sub_items ||
      a.modalities.size() != b.modalities.size())
    return false;
  for (std::size_t k = 0; k < a.modalities.size(); ++k) {
    const auto& x = a.modalities[k];
    const auto& y = b.modalities[k];
    if (x.offsets != y.offsets || x.parent != y.parent || x.encoder_length != y.encoder_length ||
        x.input_rows != y.input_rows || x.llm_tokens != y.llm_tokens)
      return false;
  }
  return true;
}

// The metadata must describe the raw batches exactly as the reference does.
inline bool matches_reference(const step_metadata& m, const reference& ref) {
  if (m.ranks != ref.d || m.sample_offsets != ref.sample_offsets || m.text_tokens != ref.text ||
      static_cast<int>(m.modalities.size()) != ref.k_count)
    return false;
  for (std::size_t k = 0; k < m.modalities.size(); ++k) {
    const auto& x = m.modalities[k];
    if (x.offsets != ref.mod_offsets[k] || x.parent != ref.parent[k] ||
        x.encoder_length != ref.encoder_length[k] || x.input_rows != ref.input_rows[k] ||
        x.llm_tokens != ref.llm_tokens[k])
      return false;
  }
  for (std::int64_t g = 0; g < m.num_samples(); ++g) {
    const auto b = m.sample_sub_offsets[static_cast<std::size_t>(g)];
    const auto e = m.sample_sub_offsets[static_cast<std::size_t>(g) + 1];
    const auto& want = ref.subs[static_cast<std::size_t>(g)];
    if (e - b != static_cast<std::int64_t>(want.size())) return false;
    for (auto i = b; i < e; ++i)
      if (m.sample_sub_items[static_cast<std::size_t>(i)] != want[static_cast<std::size_t>(i - b)])
        return false;
    if (m.sequence_length(g) != ref.sequence_length(g)) return false;
  }
  return true;
}

// For LLM rank r: its samples in slot order (the LLM plan is trusted for *where* samples go —
// its balance is checked separately — but everything else is derived from the reference).
inline vec llm_samples(const step_plan& plan, rank_t r) {
  vec out;
  const auto off = plan.llm.dst_offsets();
  for (auto h = off[static_cast<std::size_t>(r)]; h < off[static_cast<std::size_t>(r) + 1]; ++h)
    out.push_back(plan.llm.source_of(h));
  return out;
}

// Modality-k sub-items an LLM rank receives, in the documented order: per LLM slot, that
// sample's modality-k sub-items in original order.
inline vec expected_llm_items(const reference& ref, const vec& samples, std::int32_t k) {
  vec ids;
  for (auto g : samples)
    for (const auto& [m, id] : ref.subs[static_cast<std::size_t>(g)])
      if (m == k) ids.push_back(id);
  return ids;
}

// ---------------------------------------------------------------------------------------------
// Payloads whose bytes say what they are: row j of item `id` starts with the words
// (tag·100 + modality, id, j), then filler bytes derived from the same three values.

constexpr std::int64_t tag_input = 1, tag_output = 2, tag_gradient = 3, tag_text = 4;

struct item_ref {
  std::int64_t head;  // tag·100 + modality
  std::int64_t id;
  std::int64_t rows;
};

inline ragged_payload build_payload(const std::vector<item_ref>& items, std::int64_t width) {
  ragged_payload p;
  p.row_bytes = width;
  for (const auto& it : items) {
    p.rows.push_back(it.rows);
    for (std::int64_t j = 0; j < it.rows; ++j) {
      const std::int64_t words[3] = {it.head, it.id, j};
      const auto at = p.data.size();
      p.data.resize(at + static_cast<std::size_t>(width));
      std::memcpy(p.data.data() + at, words, sizeof words);
      for (std::int64_t b = static_cast<std::int64_t>(sizeof words); b < width; ++b)
        p.data[at + static_cast<std::size_t>(b)] =
            orchmllm::test::content_byte(it.head, it.id, j * width + b);
    }
  }
  return p;
}

// Encoder payload of modality k for items `ids` (row counts from `rows_of`).
inline ragged_payload modality_payload(std::int64_t tag, std::int32_t k, const vec& ids,
                                       const vec& rows_of, std::int64_t width) {
  std::vector<item_ref> items;
  for (auto id : ids) items.push_back({tag * 100 + k, id, rows_of[static_cast<std::size_t>(id)]});
  return build_payload(items, width);
}

inline std::string compare(const char* what, rank_t r, std::int32_t k, const ragged_payload& got,
                           const ragged_payload& want) {
  if (got.row_bytes == want.row_bytes && got.rows == want.rows && got.data == want.data) return {};
  std::ostringstream s;
  s << what << " on rank " << r << " (modality " << k << "): got " << got.rows.size() << " items / "
    << got.data.size() << " bytes, expected " << want.rows.size() << " items / " << want.data.size()
    << " bytes";
  if (got.rows != want.rows) s << " (row counts differ)";
  return s.str();
}

// Slot-ordered items of a plan's destination rank r (source global ids).
inline vec received_ids(const rearrangement& p, rank_t r) {
  vec ids;
  const auto off = p.dst_offsets();
  for (auto h = off[static_cast<std::size_t>(r)]; h < off[static_cast<std::size_t>(r) + 1]; ++h)
    ids.push_back(p.source_of(h));
  return ids;
}

inline vec range(std::int64_t b, std::int64_t e) {
  vec v;
  for (auto i = b; i < e; ++i) v.push_back(i);
  return v;
}

}  // namespace orchmllm::test::orchestrator_fixtures
