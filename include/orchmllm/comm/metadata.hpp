#pragma once
/// @file metadata.hpp
/// Metadata exchange: every rank's local item list → the global batch layout, on every rank;
/// and the communicator's cluster shape → the `topology` the planner reads.
///
/// Step 1 of batch post-balancing: each rank publishes the lengths (and optionally payload
/// bytes) of the items it sampled; afterwards every rank holds the same `batch_layout` and can
/// compute the same plan without further communication.

#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <vector>

#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/projection.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// Collective: gathers every rank's item lengths (and bytes, when `bytes` is non-empty on every
/// rank that holds items; it must then have one entry per local item, and ranks without items
/// follow the others) into the global layout, identical on every rank; item `slot` of rank `r`
/// gets global id offset(r) + slot. One all-gather of a 24-byte record per rank and one
/// all-gatherv per array: O(n) bytes. Deterministic.
/// Throws `communication_error` on every rank when ranks disagree on whether bytes are given,
/// or one rank's input is malformed (bytes of another size than lengths, negative values);
/// what the communicator throws.
template <communicator Comm>
batch_layout gather_layout(Comm& comm, std::span<const std::int64_t> lengths,
                           std::span<const std::int64_t> bytes = {}) {
  const auto d = static_cast<std::size_t>(comm.size());
  struct record {
    std::int64_t items;
    std::int64_t has_bytes;
    std::int64_t bad;  // 0 ok, 1 sizes disagree, 2 negative value
  };
  // has_bytes: 0 no, 1 yes, 2 either. A rank without items passes empty spans either way (it
  // cannot give bytes for no items), so it follows the ranks that have items.
  record mine{static_cast<std::int64_t>(lengths.size()),
              lengths.empty() && bytes.empty() ? 2 : (bytes.empty() ? 0 : 1), 0};
  if (!bytes.empty() && bytes.size() != lengths.size()) mine.bad = 1;
  for (const auto v : lengths)
    if (v < 0) mine.bad = 2;
  for (const auto v : bytes)
    if (v < 0) mine.bad = 2;
  const std::vector<record> all = orchmllm::all_gather(comm, mine);
  std::size_t decides = 0;  // the first rank with items (its choice is the group's)
  while (decides + 1 < d && all[decides].has_bytes == 2) ++decides;
  const bool has_bytes = all[decides].has_bytes == 1;
  for (std::size_t r = 0; r < d; ++r) {
    ORCHMLLM_REQUIRE(all[r].bad != 1, communication_error, "rank ", r,
                     " gave payload bytes for another number of items than lengths");
    ORCHMLLM_REQUIRE(all[r].bad != 2, communication_error, "rank ", r,
                     " gave a negative length or byte count");
    ORCHMLLM_REQUIRE(all[r].has_bytes == 2 || (all[r].has_bytes == 1) == has_bytes,
                     communication_error,
                     "ranks disagree on whether payload bytes are given: rank ", decides,
                     has_bytes ? " gives" : " does not give", " them, rank ", r,
                     all[r].has_bytes == 1 ? " does" : " does not");
  }
  std::vector<std::int64_t> counts(d);
  for (std::size_t r = 0; r < d; ++r) counts[r] = all[r].items;
  auto global_lengths = orchmllm::all_gatherv(comm, lengths, counts);
  std::vector<std::int64_t> global_bytes;
  if (has_bytes) global_bytes = orchmllm::all_gatherv(comm, bytes, counts).values;
  return batch_layout(std::move(global_lengths.offsets), std::move(global_lengths.values),
                      std::move(global_bytes));
}

/// Collective: `gather_layout` of this rank's own items through a projection
/// (core/projection.hpp): `std::invoke(proj, item)` gives an item's length, or an `item_size`
/// with its length and payload bytes (then every rank's projection must give bytes). The same
/// collectives and errors as above, plus n projection calls.
template <communicator Comm, std::ranges::input_range R, class P>
  requires item_projection<P, std::ranges::range_value_t<R>>
batch_layout gather_layout(Comm& comm, R&& items, P proj) {
  const auto sizes = detail::project_sizes(items, proj);
  return gather_layout(comm, std::span<const std::int64_t>(sizes.first),
                       std::span<const std::int64_t>(sizes.second));
}

/// Collective: the communicator's cluster shape as a `topology` (every rank's `node()`, one
/// all-gather of 4 bytes per rank), with the given link figures. Every rank gets the same
/// topology; it matches the communicator by construction, which `gather_step_metadata` checks.
/// O(d). Throws `invalid_argument_error` (on every rank alike) when the communicator numbers
/// its nodes otherwise than in order of their lowest rank, or for invalid link figures; what
/// the communicator throws.
template <communicator Comm>
topology gather_topology(Comm& comm, const link_params& links = {}) {
  return topology(orchmllm::all_gather(comm, comm.node()), links);
}

}  // namespace orchmllm
