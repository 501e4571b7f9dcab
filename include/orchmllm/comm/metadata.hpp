#pragma once
/// @file metadata.hpp
/// Metadata exchange: every rank's local item list → the global batch layout, on every rank;
/// and the communicator's cluster shape → the `topology` the planner reads.
///
/// Step 1 of batch post-balancing: each rank publishes the lengths (and optionally payload
/// bytes) of the items it sampled; afterwards every rank holds the same `batch_layout` and can
/// compute the same plan without further communication. See docs/communication.md, "Metadata
/// and payloads".

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
                           std::span<const std::int64_t> bytes = {});

/// Collective: `gather_layout` of this rank's own items through a projection
/// (core/projection.hpp): `std::invoke(proj, item)` gives an item's length, or an `item_size`
/// with its length and payload bytes (then every rank's projection must give bytes). The same
/// collectives and errors as above, plus n projection calls.
template <communicator Comm, std::ranges::input_range R, class P>
requires item_projection<P, std::ranges::range_value_t<R>> batch_layout gather_layout(Comm& comm,
                                                                                      R&& items,
                                                                                      P proj) {
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

// The definitions of the templates declared only above.
#include "orchmllm/detail/comm/metadata.inl"  // IWYU pragma: export
