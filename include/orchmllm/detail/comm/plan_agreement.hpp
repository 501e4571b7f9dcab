#pragma once
// The per-call agreement of a dispatch along a plan (comm/dispatch.hpp): every rank gathers one
// record per rank (plan fingerprint, row width, item count, node, schedule, link figures, local
// fault) and checks all of them, so ranks that disagree or hold bad input all raise the same
// `communication_error` before any payload byte moves; every item's count travels in the records
// when each rank holds at most `inline_item_counts` items, else in an all-gatherv after them.
// docs/communication.md, "The agreement check", has the protocol.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/payload.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm::detail {

// Why a rank cannot take part; shared in the record so every rank raises the same error.
enum class local_fault : std::int32_t {
  none = 0,
  ranks_mismatch,
  not_square,
  bad_payload,
  bad_links
};

inline const char* to_string(local_fault f) noexcept {
  switch (f) {
    case local_fault::none:
      return "none";
    case local_fault::ranks_mismatch:
      return "its plan has another rank count than the group";
    case local_fault::not_square:
      return "its plan does not map the group onto itself";
    case local_fault::bad_payload:
      return "its payload is invalid (negative or overflowing "
             "sizes, or data of the wrong size)";
    case local_fault::bad_links:
      return "its link figures (dispatch_options::links) are invalid";
  }
  return "?";
}

// Item counts a record carries itself: when no rank holds more items, the records are the whole
// metadata exchange (one all-gather); otherwise an all-gatherv of every item's count follows.
inline constexpr std::size_t inline_item_counts = 16;

struct rank_record {
  std::uint64_t fingerprint;
  std::int64_t unit_bytes;
  std::int64_t items;
  std::int32_t node;
  std::int32_t fault;
  std::int32_t sched;
  std::int32_t plan_ranks;
  double links[4];  // intra bandwidth, intra latency, inter bandwidth, inter latency
  std::int64_t counts[inline_item_counts];  // the first items' counts (all of them when few)
};
static_assert(sizeof(rank_record) == 72 + 8 * inline_item_counts &&
              std::is_trivially_copyable_v<rank_record>);

inline std::string describe_links(const rank_record& r) {
  return concat("intra ", r.links[0], " B/s + ", r.links[1], " s, inter ", r.links[2], " B/s + ",
                r.links[3], " s");
}

// The collective part of build_route: exchanges records and per-item counts, checks them on
// every rank (identical data, identical verdicts), returns every item's count (rows or bytes)
// in source global-id order and the topology from the communicator's nodes.
template <communicator Comm>
std::vector<std::int64_t> exchange_item_counts(Comm& comm, const rearrangement& plan,
                                               std::span<const std::int64_t> local_counts,
                                               std::int64_t unit_bytes, local_fault fault,
                                               schedule sched, topology& topo_out,
                                               const link_params& links) {
  const rank_t d = comm.size();
  if (fault == local_fault::none && plan.num_src_ranks() != d) fault = local_fault::ranks_mismatch;
  if (fault == local_fault::none && plan.num_dst_ranks() != plan.num_src_ranks())
    fault = local_fault::not_square;
  // Checked here, not in the topology constructor below: one rank throwing there would leave
  // the others waiting in the all-gatherv.
  if (fault == local_fault::none) {
    try {
      links.validate();
    } catch (const error&) {
      fault = local_fault::bad_links;
    }
  }
  rank_record mine{
      fingerprint(plan),
      unit_bytes,
      static_cast<std::int64_t>(local_counts.size()),
      comm.node(),
      static_cast<std::int32_t>(fault),
      static_cast<std::int32_t>(sched),
      plan.num_src_ranks(),
      {links.intra_bandwidth, links.intra_latency, links.inter_bandwidth, links.inter_latency},
      {}};
  std::copy_n(local_counts.begin(), std::min(local_counts.size(), inline_item_counts), mine.counts);
  const std::vector<rank_record> all = orchmllm::all_gather(comm, mine);
  for (rank_t r = 0; r < d; ++r) {
    const auto& rec = all[static_cast<std::size_t>(r)];
    if (rec.fault != 0)
      detail::raise<communication_error>(detail::concat(
          "rank ", r,
          " cannot take part in the exchange: ", to_string(static_cast<local_fault>(rec.fault)),
          rec.fault == static_cast<std::int32_t>(local_fault::ranks_mismatch)
              ? detail::concat(" (plan for ", rec.plan_ranks, " ranks, group of ", d, ")")
              : std::string()));
  }
  const auto& r0 = all[0];
  for (rank_t r = 1; r < d; ++r) {
    const auto& rec = all[static_cast<std::size_t>(r)];
    ORCHMLLM_REQUIRE(rec.fingerprint == r0.fingerprint, communication_error,
                     "ranks disagree on the plan: rank 0 has fingerprint ", r0.fingerprint,
                     ", rank ", r, " has ", rec.fingerprint,
                     " (plans built from different inputs?)");
    ORCHMLLM_REQUIRE(rec.unit_bytes == r0.unit_bytes, communication_error,
                     "ranks disagree on the row width: rank 0 uses ", r0.unit_bytes,
                     " bytes, rank ", r, " uses ", rec.unit_bytes);
    ORCHMLLM_REQUIRE(rec.sched == r0.sched, communication_error,
                     "ranks disagree on the schedule: rank 0 asks for ",
                     to_string(static_cast<schedule>(r0.sched)), ", rank ", r, " for ",
                     to_string(static_cast<schedule>(rec.sched)));
    // Valid figures (no NaN: faults are checked above), so == is exact agreement.
    ORCHMLLM_REQUIRE(rec.links[0] == r0.links[0] && rec.links[1] == r0.links[1] &&
                         rec.links[2] == r0.links[2] && rec.links[3] == r0.links[3],
                     communication_error, "ranks disagree on the link figures: rank 0 has ",
                     describe_links(r0), ", rank ", r, " has ", describe_links(rec));
  }
  const auto off = plan.src_offsets();
  for (rank_t r = 0; r < d; ++r) {
    const auto expected = off[static_cast<std::size_t>(r) + 1] - off[static_cast<std::size_t>(r)];
    ORCHMLLM_REQUIRE(all[static_cast<std::size_t>(r)].items == expected, communication_error,
                     "rank ", r, " holds ", all[static_cast<std::size_t>(r)].items,
                     " items but the plan expects ", expected);
  }
  std::vector<rank_t> nodes(static_cast<std::size_t>(d));
  for (rank_t r = 0; r < d; ++r)
    nodes[static_cast<std::size_t>(r)] = all[static_cast<std::size_t>(r)].node;
  topo_out = topology(std::move(nodes), links);

  // Every rank's item count is the plan's (checked above), so rank r's sizes land at off[r]:
  // from the records when every rank's fit in one, else from an all-gatherv (the same decision
  // on every rank: it reads the gathered records only).
  std::vector<std::int64_t> global;
  const bool all_inline = std::all_of(all.begin(), all.end(), [](const rank_record& rec) {
    return rec.items <= static_cast<std::int64_t>(inline_item_counts);
  });
  if (all_inline) {
    global.reserve(static_cast<std::size_t>(off[static_cast<std::size_t>(d)]));
    for (const auto& rec : all) global.insert(global.end(), rec.counts, rec.counts + rec.items);
  } else {
    std::vector<std::int64_t> counts(static_cast<std::size_t>(d));
    for (rank_t r = 0; r < d; ++r)
      counts[static_cast<std::size_t>(r)] = all[static_cast<std::size_t>(r)].items;
    global = orchmllm::all_gatherv(comm, std::span<const std::int64_t>(local_counts), counts,
                                   agreed_gather{})
                 .values;
  }
  for (std::size_t g = 0; g < global.size(); ++g)
    ORCHMLLM_REQUIRE(global[g] >= 0, communication_error, "item ", g, " has size ", global[g]);
  return global;
}

inline local_fault check_payload(const ragged_payload& p) noexcept {
  try {
    p.validate();
  } catch (const error&) {
    return local_fault::bad_payload;
  }
  return local_fault::none;
}

}  // namespace orchmllm::detail
