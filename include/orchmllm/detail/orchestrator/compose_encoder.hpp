#pragma once
// plan_step's composition of one encoder stage (orchestrator/orchestrator.hpp): once Π_E_k and
// Π_M exist, the lift L_k (origin units → the LLM rank of their parent sample), the composed
// route L_k ∘ Π_E_k⁻¹ and its inverse, the gradient route. Not compiled in units that use the
// compiled library (ORCHMLLM_USE_COMPILED): plan_step's body is there.

#include <cstddef>
#include <cstdint>
#include <future>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/core/parallel.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/orchestrator/step_plan.hpp"

namespace orchmllm {

#if !ORCHMLLM_USE_COMPILED
namespace detail {

// Fills `er.lifted`, `er.output` and `er.gradient` of encoder stage k from `er.input` (Π_E_k)
// and `llm` (Π_M) over d ranks.
//
// The walk: the LLM ranks' slots in order; each slot's sample hands out the next slots of its
// modality-k sub-items (in increasing id = original order), and each sub-item those of its units
// (itself, or its pieces in segment order), so a split sub-item's outputs arrive as one run of
// rows, in order. Position h of that walk is destination id h of L_k and of the composed route
// (rank r, slot) and source id h of the gradient; a unit's encoder-destination id e is the
// composed route's source id and the gradient's destination. The walk is not taken in its own
// order, which would chase ids from slot to sample to sub-item to encoder slot (a chain of cache
// misses per unit): each sample's first position is found first (its unit count, summed in LLM
// slot order), then the samples are visited in id order, reading the sub-items and Π_E_k in
// order and writing each unit's entries where they belong. The three plans come out whole, each
// in the canonical form its factory would give (from_placements for L_k and the composed route,
// inverse() for the gradient). With `parallel` and many units, the second half of the samples
// is written on a thread of its own (every unit's entries sit at its own ids).
inline void compose_encoder_plans(const step_metadata& meta, std::size_t k,
                                  const rearrangement& llm, rank_t d, bool parallel,
                                  encoder_routes& er) {
  const auto moff = llm.dst_offsets();
  const auto& mod = meta.modalities[k];
  const batch_layout& units = er.units();
  const auto n_units = static_cast<std::size_t>(units.num_items());
  const auto eoff = er.input.dst_offsets();
  const auto first_unit = [&](std::int64_t i) { return er.pieces ? er.pieces->first_piece(i) : i; };
  rearrangement_parts lifted, output, gradient;
  const std::span<const std::int64_t> origin =
      er.pieces ? units.offsets() : std::span<const std::int64_t>(mod.offsets);
  lifted.src_offsets.assign(origin.begin(), origin.end());
  output.src_offsets.assign(eoff.begin(), eoff.end());
  lifted.dst_offsets.assign(static_cast<std::size_t>(d) + 1, 0);
  // A modality without units (none in this batch): three empty plans, all offsets but the
  // sources' zero; the walk below would give exactly these after O(n + d) work.
  if (n_units > 0) {
    const auto n_samples = static_cast<std::size_t>(meta.num_samples());
    std::vector<std::int64_t> sub_off(n_samples + 1, 0);
    for (auto p : mod.parent) ++sub_off[static_cast<std::size_t>(p) + 1];
    for (std::size_t g = 0; g < n_samples; ++g) sub_off[g + 1] += sub_off[g];
    std::vector<std::int64_t> subs(mod.parent.size());
    {
      std::vector<std::int64_t> fill(sub_off.begin(), sub_off.end() - 1);
      for (std::size_t i = 0; i < mod.parent.size(); ++i)
        subs[static_cast<std::size_t>(fill[static_cast<std::size_t>(mod.parent[i])]++)] =
            static_cast<std::int64_t>(i);
    }
    // walk_start[g]: the walk position of sample g's first unit (its unit count first).
    std::vector<std::int64_t> walk_start(n_samples, 0);
    for (std::size_t g = 0; g < n_samples; ++g)
      for (auto q = sub_off[g]; q < sub_off[g + 1]; ++q) {
        const auto i = subs[static_cast<std::size_t>(q)];
        walk_start[g] += first_unit(i + 1) - first_unit(i);
      }
    {
      std::int64_t h = 0;
      for (rank_t r = 0; r < d; ++r) {
        const auto R = static_cast<std::size_t>(r);
        for (auto j = moff[R]; j < moff[R + 1]; ++j) {
          auto& s = walk_start[static_cast<std::size_t>(llm.source_of(j))];
          h += std::exchange(s, h);
        }
        lifted.dst_offsets[R + 1] = h;
      }
    }
    for (auto* parts : {&lifted, &output, &gradient}) {
      parts->dst_rank.resize(n_units);
      parts->dst_slot.resize(n_units);
      parts->src_of_dst.resize(n_units);
    }
    const auto llm_rank = llm.dst_ranks();
    const auto write_samples = [&](std::size_t first, std::size_t last) {
      for (std::size_t g = first; g < last; ++g) {
        if (sub_off[g] == sub_off[g + 1]) continue;
        const rank_t r = llm_rank[g];
        const std::int64_t rank_start = lifted.dst_offsets[static_cast<std::size_t>(r)];
        std::int64_t h = walk_start[g];
        for (auto q = sub_off[g]; q < sub_off[g + 1]; ++q) {
          const auto i = subs[static_cast<std::size_t>(q)];
          for (auto u = first_unit(i); u < first_unit(i + 1); ++u, ++h) {
            const auto uu = static_cast<std::size_t>(u);
            const auto hh = static_cast<std::size_t>(h);
            const auto pe = er.input.destination_of(u);
            const auto e =
                static_cast<std::size_t>(eoff[static_cast<std::size_t>(pe.rank)] + pe.slot);
            const std::int64_t slot = h - rank_start;
            lifted.dst_rank[uu] = r;
            lifted.dst_slot[uu] = slot;
            lifted.src_of_dst[hh] = u;
            output.dst_rank[e] = r;
            output.dst_slot[e] = slot;
            output.src_of_dst[hh] = static_cast<std::int64_t>(e);
            gradient.dst_rank[hh] = pe.rank;
            gradient.dst_slot[hh] = pe.slot;
            gradient.src_of_dst[e] = h;
          }
        }
      }
    };
    if (parallel && n_units >= parallel_min_items) {
      auto second = std::async(std::launch::async, write_samples, n_samples / 2, n_samples);
      write_samples(0, n_samples / 2);
      second.get();
    } else {
      write_samples(0, n_samples);
    }
  }
  // Every unit was written once (lifted.dst_offsets[d] == n_units): its sub-item has one
  // parent sample, on exactly one LLM slot.
  output.dst_offsets = lifted.dst_offsets;
  gradient.src_offsets = lifted.dst_offsets;
  gradient.dst_offsets = output.src_offsets;
  er.lifted = std::move(lifted).assemble();
  er.output = std::move(output).assemble();
  er.gradient = std::move(gradient).assemble();
}

}  // namespace detail
#endif

}  // namespace orchmllm
