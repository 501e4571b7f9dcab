#pragma once
// The collective behind gather_step_metadata (orchestrator/orchestrator.hpp): one all-gather of
// a fixed record per rank, then the sizes, checked alike on every rank.

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/metadata.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/agreement.hpp"
#include "orchmllm/detail/core/checked.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

namespace detail {

template <communicator Comm>
step_metadata gather_step_metadata(Comm& comm, const stage_declarations& decl,
                                   const local_batch& local, const topology* topo) {
  const auto d = static_cast<std::size_t>(comm.size());
  const int kc = decl.num_encoders();
  struct record {
    std::uint64_t fingerprint;
    std::int64_t samples;
    std::int64_t sub_items;
    std::int64_t loss_tokens;  // entries of local_batch::loss_tokens (0 or samples)
    std::int64_t fault;
    std::int64_t where;
    std::int64_t value;
    std::uint64_t topology_fp;    // 0: no topology given
    std::int64_t topology_ranks;  // -1: no topology given
    std::int64_t topology_node;   // this rank's node in the topology (-1: none or out of range)
    std::int64_t comm_node;       // this rank's node as the communicator sees it
  };
  const auto f = detail::check_local_batch(local, kc);
  const rank_t me = comm.rank();
  const record mine{fingerprint(decl),
                    static_cast<std::int64_t>(local.text_tokens.size()),
                    static_cast<std::int64_t>(local.sub_items.size()),
                    static_cast<std::int64_t>(local.loss_tokens.size()),
                    static_cast<std::int64_t>(f.fault),
                    f.where,
                    f.value,
                    topo ? fingerprint(*topo) : 0,
                    topo ? topo->num_ranks() : -1,
                    topo && me >= 0 && me < topo->num_ranks() ? topo->node_of(me) : -1,
                    comm.node()};
  const std::vector<record> all = orchmllm::all_gather(comm, mine);
  // Rank 0 is the odd one out when every other rank agrees on another value: name it then.
  const auto rank0_alone = [&](std::uint64_t record::*field) {
    return d > 2 && std::all_of(all.begin() + 1, all.end(),
                                [&](const record& x) { return x.*field == all[1].*field; });
  };
  for (std::size_t r = 0; r < d; ++r) {
    if (all[r].fingerprint != all[0].fingerprint && rank0_alone(&record::fingerprint))
      detail::raise<invalid_argument_error>(
          detail::concat("rank 0 declared other stages than the other ", d - 1,
                         " ranks, which agree (declaration fingerprints ", all[0].fingerprint,
                         " and ", all[1].fingerprint, ")"));
    ORCHMLLM_REQUIRE(all[r].fingerprint == all[0].fingerprint, invalid_argument_error, "rank ", r,
                     " declared other stages than rank 0 (declaration fingerprints ",
                     all[r].fingerprint, " and ", all[0].fingerprint, ")");
    if (all[r].topology_fp != all[0].topology_fp && rank0_alone(&record::topology_fp))
      detail::raise<invalid_argument_error>(detail::concat(
          "rank 0 passed another topology than the other ", d - 1,
          " ranks, which agree (or passed one where they did not, or none where they did)"));
    ORCHMLLM_REQUIRE(all[r].topology_fp == all[0].topology_fp, invalid_argument_error, "rank ", r,
                     " passed another topology than rank 0 (or passed one where rank 0 did not)");
    if (all[r].topology_ranks >= 0) {
      ORCHMLLM_REQUIRE(all[r].topology_ranks == static_cast<std::int64_t>(d),
                       invalid_argument_error, "the topology has ", all[r].topology_ranks,
                       " ranks but the communicator ", d,
                       " (build it with gather_topology(comm, links))");
      ORCHMLLM_REQUIRE(all[r].topology_node == all[r].comm_node, invalid_argument_error, "rank ", r,
                       " is on node ", all[r].comm_node, " of the communicator but on node ",
                       all[r].topology_node,
                       " of the topology (build it with gather_topology(comm, links))");
    }
    ORCHMLLM_REQUIRE(all[r].fault == 0, invalid_argument_error, "rank ", r, ": ",
                     detail::describe(static_cast<detail::batch_fault>(all[r].fault), all[r].where,
                                      all[r].value, kc));
  }
  // Pack: text tokens, the loss tokens when given, then (modality, parent, length, input rows,
  // llm tokens) per sub-item.
  // The segment count S rides in the modality word as (S − 1) · 2^32 (both were checked on
  // every rank above: 0 ≤ modality < K < 2^31, 1 ≤ S ≤ 2^31), so S = 1 sends the words of a
  // batch without segments, bit for bit.
  std::vector<std::int64_t> words;
  words.reserve(local.text_tokens.size() + local.loss_tokens.size() + 5 * local.sub_items.size());
  words.insert(words.end(), local.text_tokens.begin(), local.text_tokens.end());
  words.insert(words.end(), local.loss_tokens.begin(), local.loss_tokens.end());
  for (const auto& s : local.sub_items)
    words.insert(words.end(), {static_cast<std::int64_t>(s.modality) + ((s.segments - 1) << 32),
                               s.parent, s.encoder_length, s.input_rows, s.llm_tokens});
  std::vector<std::int64_t> counts(d);
  for (std::size_t r = 0; r < d; ++r)
    counts[r] = all[r].samples + all[r].loss_tokens + 5 * all[r].sub_items;
  const std::vector<std::int64_t> global =
      orchmllm::all_gatherv(comm, std::span<const std::int64_t>(words), counts, agreed_gather{})
          .values;

  step_metadata m;
  m.modalities.resize(static_cast<std::size_t>(kc));
  local_batch b;
  std::size_t at = 0;
  for (std::size_t r = 0; r < d; ++r) {
    b.text_tokens.assign(global.begin() + static_cast<std::ptrdiff_t>(at),
                         global.begin() + static_cast<std::ptrdiff_t>(
                                              at + static_cast<std::size_t>(all[r].samples)));
    at += static_cast<std::size_t>(all[r].samples);
    b.loss_tokens.assign(global.begin() + static_cast<std::ptrdiff_t>(at),
                         global.begin() + static_cast<std::ptrdiff_t>(
                                              at + static_cast<std::size_t>(all[r].loss_tokens)));
    at += static_cast<std::size_t>(all[r].loss_tokens);
    b.sub_items.resize(static_cast<std::size_t>(all[r].sub_items));
    for (auto& s : b.sub_items) {
      s = {static_cast<std::int32_t>(global[at] & 0xffffffff),
           global[at + 1],
           global[at + 2],
           global[at + 3],
           global[at + 4],
           (global[at] >> 32) + 1};
      at += 5;
    }
    detail::append_rank(m, b);
  }
  return m;
}

}  // namespace detail

}  // namespace orchmllm
