#pragma once
/// @file communicator.hpp
/// The `communicator` concept: what the data-movement layer needs from a transport (rank,
/// size, node shape, barrier, all-gather(v) of host metadata, all-to-all(v) of bytes in the
/// backend's payload memory), and the refinements the dispatch uses when a backend offers more.
/// Models: `local::communicator` (comm/local.hpp), `mpi::communicator` and
/// `mpi::communicator_ref` (backend/mpi/communicator.hpp), `nccl::communicator` and
/// `nccl::communicator_ref` (backend/nccl/). See docs/communication.md, "Communicator concept".

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "orchmllm/core/batch_layout.hpp"

namespace orchmllm {

/// Where a communicator's `all_to_allv` buffers live.
enum class memory_kind { host, device };

/// A communicator is one rank's handle on a group of `size()` ranks. Ranks are grouped into
/// nodes (`node()`, `num_nodes()`, `local_rank()`, `local_size()`); node indices run over
/// 0..num_nodes-1 in order of each node's lowest rank, and local ranks in increasing rank order
/// inside a node. Nodes need not be consecutive blocks of ranks nor all of one size.
///
/// Operations (all collective: every rank of the group calls them in the same order):
/// - `barrier()`.
/// - `all_gather(send, bytes, recv)`: every rank contributes `bytes` bytes (the same value on
///   every rank); `recv` receives size()·bytes bytes, rank r's at r·bytes. Host memory.
/// - `all_gatherv(send, bytes, recv, counts, displs)`: rank r contributes counts[r] bytes,
///   written at recv + displs[r]; `bytes` must equal counts[rank()]. Host memory. Meant for
///   metadata (lengths, fingerprints): small.
/// - `all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs)`: rank r
///   sends send_counts[p] bytes from send + send_displs[p] to every rank p, and receives
///   recv_counts[p] bytes from p at recv + recv_displs[p]. Counts must match pairwise
///   (send_counts[p] on r == recv_counts[r] on p). Buffers live in the communicator's
///   `payload_memory` (host, or device memory for GPU backends). Zero counts are ordinary:
///   nothing is posted for that peer, on both sides. Counts and displacements are 64-bit;
///   backends whose engine counts in 32 bits split transfers into chunks.
///
/// Errors: a backend failure, a peer that failed or aborted, or a timeout raises
/// `communication_error` on every rank that observes it; backends document which. Arguments
/// of the wrong size raise `invalid_argument_error` before anything is sent.
template <class C>
concept communicator = requires(C& c, const C& cc, const std::byte* in, std::byte* out,
                                std::int64_t bytes, std::span<const std::int64_t> v) {
  { cc.rank() } -> std::same_as<rank_t>;
  { cc.size() } -> std::same_as<rank_t>;
  { cc.node() } -> std::same_as<rank_t>;
  { cc.num_nodes() } -> std::same_as<rank_t>;
  { cc.local_rank() } -> std::same_as<rank_t>;
  { cc.local_size() } -> std::same_as<rank_t>;
  { C::payload_memory } -> std::convertible_to<memory_kind>;
  c.barrier();
  c.all_gather(in, bytes, out);
  c.all_gatherv(in, bytes, out, v, v);
  c.all_to_allv(in, v, v, out, v, v);
};

/// What every rank knows in advance about one all-to-all(v) of a hop of an agreed route (routes
/// whose fingerprints the ranks compared once per step, `agree_on_routes`): counts match
/// pairwise by construction, and these figures are the whole group's, identical on every rank.
struct agreed_exchange {
  std::int64_t max_block = 0;   ///< largest count between two ranks (self blocks included)
  std::int64_t max_buffer = 0;  ///< largest send or receive buffer of any rank, in bytes
  std::int64_t max_items = 0;   ///< most items in any rank's send buffer (bounds its segments)
};

/// Optional capability: `all_to_allv(send, send_counts, send_displs, recv, recv_counts,
/// recv_displs, agreed)` is `all_to_allv` for a caller that guarantees what `agreed_exchange`
/// says, so the communicator may skip whatever it would ask its peers before the transfer (an
/// argument agreement, the choice of a path) and decide from `agreed` alone, identically on
/// every rank. A rank whose own arguments are bad then raises alone (its peers wait in the
/// transfer until the backend's deadline). `execute` and every `dispatch` run a route's hops
/// through it once the route is agreed (by the call itself, or once per step by
/// `agree_on_routes`); `mpi::communicator` and the NCCL communicators have it (then one
/// MPI_Alltoallv or NCCL group per hop).
template <class C>
concept agreed_exchange_communicator = communicator<C> &&
    requires(C& c, const std::byte* in, std::byte* out, std::span<const std::int64_t> v,
             const agreed_exchange& a) {
  c.all_to_allv(in, v, v, out, v, v, a);
};

/// Tag of an all-gather(v) whose sizes every rank knows to be the same by construction (one
/// record of a fixed type per rank; counts derived from records the ranks gathered): see
/// `agreed_gather_communicator`.
struct agreed_gather {};

/// Optional capability: `all_gather(send, bytes, recv, agreed_gather{})` and
/// `all_gatherv(send, bytes, recv, counts, displs, agreed_gather{})` are `all_gather` and
/// `all_gatherv` for a caller that guarantees every rank passes the same `bytes` (the size of
/// one fixed type) or the same `counts` (derived from data every rank gathered), so the
/// communicator may skip the argument agreement it would run first and choose its path from
/// those sizes alone, identically on every rank. A rank whose own arguments are bad then raises
/// alone (its peers wait in the transfer until the backend's deadline).
/// `orchmllm::all_gather(comm, value)` and the all-gatherv of counts gathered first use it, so
/// the library's metadata and agreement records (a dispatch's, `plan_step`'s) cost one
/// collective each; `mpi::communicator` and the NCCL communicators have it (one MPI_Allgather(v),
/// one ncclAllGather).
template <class C>
concept agreed_gather_communicator = communicator<C> &&
    requires(C& c, const std::byte* in, std::byte* out, std::int64_t bytes,
             std::span<const std::int64_t> v) {
  c.all_gather(in, bytes, out, agreed_gather{});
  c.all_gatherv(in, bytes, out, v, v, agreed_gather{});
};

/// Optional capability: `all_max(values)` replaces each of at most 8 host `std::int64_t`
/// values by its maximum over all ranks (every rank passes the same count), as one small
/// reduction. The library's agreements (e.g. `execute` checking that every rank runs a route
/// of the same plan) use it where a communicator offers it and fall back to an `all_gather`
/// (O(size()) bytes per value) where it does not. `mpi::communicator` and
/// `nccl::communicator` have it (one MPI_Allreduce).
template <class C>
concept max_reducing_communicator = communicator<C> &&
    requires(C& c, std::span<std::int64_t> values) {
  c.all_max(values);
};

}  // namespace orchmllm
