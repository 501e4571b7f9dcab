#pragma once
/// @file route.hpp
/// Routes: `route`, one rank's precomputed program for moving ragged bytes along a plan, built
/// from global data alone (the plan, every item's byte size, the topology) without
/// communicating, and `execute`, which runs it with any `communicator` and any `byte_mover`
/// (host payloads over MPI or the local backend, device payloads over NCCL). A route is a
/// sequence of hops, each one pack and one all-to-all(v), then one unpack into destination slot
/// order, under a `schedule`: `direct`, `node_wise` (rails between nodes) or `automatic` (the
/// one the time model predicts faster). See docs/communication.md, "Routes" and "Schedules".

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/mover.hpp"
#include "orchmllm/config.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/comm/agreement.hpp"
#include "orchmllm/detail/comm/route_paths.hpp"
#include "orchmllm/detail/comm/segments.hpp"
#include "orchmllm/detail/core/csr.hpp"
#include "orchmllm/detail/core/fnv.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// How a route moves data between nodes (docs/communication.md, "Schedules", has the model and
/// the proofs of delivery).
/// - `direct`: one hop, every item straight from its source rank to its destination rank.
/// - `node_wise`: three hops. (1) Inside the source node, items bound for another node are
///   regrouped onto "rails": the bytes each (source node, destination node) pair exchanges are
///   split evenly over min(G_src, G_dst) rails, walking items in (source local rank, destination
///   id) order so items mostly keep their own GPU's rail; items whose destination is in the
///   same node go straight there. (2) Rail l of the source node sends to rail l of the
///   destination node: only GPUs of the same local index talk across nodes, every NIC of a node
///   carries about 1/G of the node's traffic, and a rank exchanges one message per node instead
///   of one per rank. (3) Inside the destination node, rails scatter to the final ranks.
///   Inter-node bytes are the same as `direct`; intra-node bytes grow by the forwarding hops.
/// - `automatic`: keeps the schedule the time model predicts faster (ties: direct). It builds
///   direct, then node-wise unless a lower bound of node-wise's modelled time (its inter-node
///   hop, summed per node pair without building the paths; O(n + d)) already reaches
///   direct's, when node-wise could not win: the same choice as building both, at a fraction
///   of the cost (direct wins at scale when each rank's traffic goes to a few peers).
/// Hops in which no item changes rank anywhere are dropped (e.g. all of node-wise on one node).
enum class schedule { direct, node_wise, automatic };

/// "direct", "node-wise", "auto" (null-terminated, as every `to_string` of the library's enums).
[[nodiscard]] constexpr std::string_view to_string(schedule s) noexcept {
  switch (s) {
    case schedule::direct:
      return "direct";
    case schedule::node_wise:
      return "node-wise";
    case schedule::automatic:
      return "auto";
  }
  return "?";
}

/// Parses "direct", "node-wise" (or "node_wise"), "auto" (or "automatic"). Throws
/// `invalid_argument_error` listing the accepted names.
[[nodiscard]] inline schedule parse_schedule(std::string_view name) {
  if (name == "direct") return schedule::direct;
  if (name == "node-wise" || name == "node_wise") return schedule::node_wise;
  if (name == "auto" || name == "automatic") return schedule::automatic;
  detail::raise<invalid_argument_error>(
      detail::concat("unknown schedule '", name, "' (expected one of: direct, node-wise, auto)"));
}

/// Bytes and messages by link class. For a plan (`plan_traffic`): what a source rank's items
/// need, by where they end up. For a route (`route::sent`): what a rank actually sends over all
/// hops, forwarding included. `local_bytes` never leave the rank (self copies).
struct traffic_stats {
  std::int64_t local_bytes = 0;          ///< stay on their rank
  std::int64_t intra_node_bytes = 0;     ///< cross a link inside a node
  std::int64_t inter_node_bytes = 0;     ///< cross a link between nodes
  std::int64_t intra_node_messages = 0;  ///< non-empty blocks to other ranks of the same node
  std::int64_t inter_node_messages = 0;  ///< non-empty blocks to ranks of other nodes

  /// Bytes that leave their rank.
  [[nodiscard]] std::int64_t moved_bytes() const noexcept {
    return intra_node_bytes + inter_node_bytes;
  }
  /// All bytes, local ones included.
  [[nodiscard]] std::int64_t total_bytes() const noexcept { return local_bytes + moved_bytes(); }

  traffic_stats& operator+=(const traffic_stats& o) noexcept {
    local_bytes += o.local_bytes;
    intra_node_bytes += o.intra_node_bytes;
    inter_node_bytes += o.inter_node_bytes;
    intra_node_messages += o.intra_node_messages;
    inter_node_messages += o.inter_node_messages;
    return *this;
  }
  friend bool operator==(const traffic_stats&, const traffic_stats&) = default;
};

/// Per source rank (d entries): the bytes of its items by where the plan puts them, whatever
/// the schedule: `local_bytes` stay on the rank, `intra_node_bytes` go to another rank of the
/// same node, `inter_node_bytes` to another node; messages count the distinct destination
/// ranks of each class. O(n log n + d). Deterministic. Throws `invalid_argument_error` when
/// sizes disagree, a byte count is negative or their total overflows 2^63 - 1.
[[nodiscard]] inline std::vector<traffic_stats> plan_traffic(
    const rearrangement& plan, std::span<const std::int64_t> item_bytes, const topology& topo) {
  detail::check_route_inputs(plan, item_bytes, topo);
  std::vector<traffic_stats> out(static_cast<std::size_t>(plan.num_src_ranks()));
  const auto off = plan.src_offsets();
  std::vector<rank_t> peers;
  for (std::size_t r = 0; r + 1 < off.size(); ++r) {
    auto& st = out[r];
    peers.clear();
    for (auto g = off[r]; g < off[r + 1]; ++g) {
      const rank_t t = plan.dst_ranks()[static_cast<std::size_t>(g)];
      const std::int64_t b = item_bytes[static_cast<std::size_t>(g)];
      if (t == static_cast<rank_t>(r)) {
        st.local_bytes += b;
        continue;
      }
      (topo.same_node(static_cast<rank_t>(r), t) ? st.intra_node_bytes : st.inter_node_bytes) += b;
      if (b > 0) peers.push_back(t);
    }
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    for (const rank_t t : peers)
      ++(topo.same_node(static_cast<rank_t>(r), t) ? st.intra_node_messages
                                                   : st.inter_node_messages);
  }
  return out;
}

/// One rank's program for moving ragged bytes along a plan: the plan/execute split of the data
/// movement. Each rank builds its own from the same global data; build once per plan and reuse
/// it for every tensor that follows the same plan with the same per-item byte sizes (e.g.
/// activations and gradients of equal width).
///
/// Order on the wire: in every hop, the bytes for one peer are in increasing destination global
/// id; a receive buffer holds the peers' blocks in increasing rank. Both sides derive this from
/// the same global data, so no offsets travel with the payload.
///
/// Time model (`predicted_seconds`): per hop, each rank's send time and receive time are
/// Σ messages · latency + bytes / bandwidth over intra- and inter-node links (`link_params`;
/// a message is a non-empty block to another rank); a hop takes as long as its slowest rank in
/// either direction, and hops add up. Self copies are free. Deterministic: every rank computes
/// the same value and so the same choice.
class route {
 public:
  /// One pack + all-to-all(v). Counts and displacements are in bytes, one entry per rank.
  struct hop {
    std::vector<std::int64_t> send_counts, send_displs, recv_counts, recv_displs;
    detail::segment_list pack;   ///< previous buffer → send buffer
    bool pack_identity = false;  ///< the previous buffer already is the send buffer
    std::int64_t send_bytes = 0;
    std::int64_t recv_bytes = 0;
    /// The whole group's figures of this hop (the same on every rank), for communicators that
    /// choose their path without asking their peers (`agreed_exchange_communicator`).
    agreed_exchange group{};
  };

  /// An empty route (no ranks).
  route() = default;

  /// Builds rank `rank`'s route. `item_bytes` has one entry per source item (global id order):
  /// its payload size in bytes. The plan must map d ranks to the same d ranks and `topo` must
  /// have d ranks. O(hops · n log n + d) time, O(n + d) memory (both schedules with
  /// `automatic` unless node-wise is ruled out by its lower bound). Deterministic: every rank
  /// derives the same schedule, order and offsets.
  /// Throws `invalid_argument_error` for mismatched sizes, negative bytes, bytes whose total
  /// overflows 2^63 - 1 or a rank outside [0, d).
  static route build(const rearrangement& plan, std::span<const std::int64_t> item_bytes,
                     const topology& topo, rank_t rank, schedule s = schedule::automatic);

  /// This route's rank and the group size.
  [[nodiscard]] rank_t rank() const noexcept { return rank_; }
  [[nodiscard]] rank_t num_ranks() const noexcept { return num_ranks_; }
  /// The schedule actually used (never `automatic`).
  [[nodiscard]] schedule used() const noexcept { return used_; }
  /// Bytes this rank contributes (its source items, slot order) and receives (its destination
  /// items, slot order).
  [[nodiscard]] std::int64_t input_bytes() const noexcept { return input_bytes_; }
  [[nodiscard]] std::int64_t output_bytes() const noexcept { return output_bytes_; }
  /// Byte size of every item this rank receives, in destination slot order.
  [[nodiscard]] std::span<const std::int64_t> output_item_bytes() const noexcept {
    return output_item_bytes_;
  }
  /// The hops (0 when no item changes rank; 1 for direct; up to 3 for node-wise).
  [[nodiscard]] std::span<const hop> hops() const noexcept { return hops_; }
  /// Final gather from the last receive buffer (or the input, with no hops) into slot order.
  [[nodiscard]] const detail::segment_list& unpack() const noexcept { return unpack_; }
  /// The last hop receives straight into the output.
  [[nodiscard]] bool unpack_identity() const noexcept { return unpack_identity_; }
  /// What this rank sends over all hops, by link class (forwarding hops included; a self copy
  /// in a hop counts as `local_bytes`; with no hops the whole input is local). For `direct`
  /// this equals `plan_traffic(...)[rank()]`.
  [[nodiscard]] const traffic_stats& sent() const noexcept { return sent_; }
  /// Digest of what every rank's route of one exchange shares: the plan's fingerprint, every
  /// item's byte size, every rank's node and the schedule used. Routes built for the same
  /// exchange have the same fingerprint on every rank; `execute` checks that they do before
  /// anything moves. 0 for an empty route.
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return fingerprint_; }
  /// Modelled time of the whole group's exchange under the used schedule, in seconds.
  [[nodiscard]] double predicted_seconds() const noexcept {
    return predicted_[used_ == schedule::direct ? 0 : 1];
  }
  /// Modelled time under `direct` or `node_wise`; NaN for a schedule that was not built:
  /// `direct` and `node_wise` build only themselves; `automatic` builds both, or only direct
  /// when node-wise's lower bound reached it (then node-wise is not used, and its NaN says
  /// only that it would not be faster; build it with `node_wise` to see its time).
  [[nodiscard]] double predicted_seconds(schedule s) const noexcept {
    if (s == schedule::automatic) return predicted_seconds();
    return predicted_[s == schedule::direct ? 0 : 1];
  }

 private:
  void compile(const rearrangement& plan, std::span<const std::int64_t> bytes, const topology& topo,
               const detail::item_paths& p);

  static std::vector<std::int64_t> exclusive_scan(const std::vector<std::int64_t>& v) {
    std::vector<std::int64_t> out(v.size(), 0);
    for (std::size_t i = 1; i < v.size(); ++i) out[i] = out[i - 1] + v[i - 1];
    return out;
  }

  rank_t rank_ = 0;
  rank_t num_ranks_ = 0;
  schedule used_ = schedule::direct;
  std::int64_t input_bytes_ = 0;
  std::int64_t output_bytes_ = 0;
  std::vector<std::int64_t> output_item_bytes_;
  std::vector<hop> hops_;
  detail::segment_list unpack_;
  bool unpack_identity_ = false;
  traffic_stats sent_;
  double predicted_[2] = {0, 0};
  std::uint64_t fingerprint_ = 0;
};

/// Optional communicator capability: `all_to_allv_gather(in, segments, send_counts,
/// send_displs, recv, recv_counts, recv_displs)` performs the all_to_allv whose send buffer is
/// the gather of `segments` from `in` without materialising it, and returns false (on every
/// rank, before anything moves) when it cannot, in which case `execute` packs and calls
/// `all_to_allv`. `mpi::communicator` has it (MPI derived datatypes).
template <class C>
concept gathering_communicator = communicator<C> &&
    requires(C& c, const std::byte* in, std::byte* out, const detail::segment_list& s,
             std::span<const std::int64_t> v) {
  { c.all_to_allv_gather(in, s, v, v, out, v, v) } -> std::same_as<bool>;
};

/// Optional capability: `all_to_allv_gather(..., agreed)`, the `gathering_communicator` call
/// for a caller that guarantees what `agreed_exchange` says (see
/// `agreed_exchange_communicator`): it decides whether it can (the return value) from
/// `agreed` alone, identically on every rank, without asking its peers.
template <class C>
concept agreed_gathering_communicator = gathering_communicator<C> &&
    requires(C& c, const std::byte* in, std::byte* out, const detail::segment_list& s,
             std::span<const std::int64_t> v, const agreed_exchange& a) {
  { c.all_to_allv_gather(in, s, v, v, out, v, v, a) } -> std::same_as<bool>;
};

/// Optional communicator capability: `mover()` returns the `byte_mover` of the
/// communicator's payload memory (the NCCL communicators: a `cuda::device_mover` on their
/// stream), which `agree_on_routes` and `dispatch` along a route use when given no mover.
template <class C>
concept mover_providing_communicator = communicator<C> && requires(C& c) {
  requires byte_mover<std::remove_reference_t<decltype(c.mover())>>;
};

/// Runs `r` on this rank: `in` holds the rank's source items in slot order (`r.input_bytes()`
/// bytes), `out` receives its destination items in slot order (`r.output_bytes()` bytes); both
/// in the communicator's payload memory, which `mover` must serve. Collective over `comm`: every
/// rank runs its own route of the same exchange.
///
/// Before anything moves, every rank reserves its scratch buffers and the ranks agree, in one
/// small reduction (`detail::all_max`), that none of them failed and that their routes have the
/// same `fingerprint()`. A rank whose route was built for another rank or group, whose mover
/// cannot allocate, or that runs a route of another exchange (e.g. one kept from an earlier
/// plan) makes every rank raise the same `communication_error`, naming it; nothing moves and
/// the communicator stays usable. Then each hop is one pack (skipped when the data is already
/// grouped by peer, or done by the communicator itself when it is a
/// `gathering_communicator`) and one `all_to_allv`; the last hop receives straight into `out`
/// when the arrival order is already slot order. O(bytes moved + segments), plus the
/// agreement. Throws `communication_error` as above (every rank) and whatever the communicator
/// or the mover's `gather` throws (a `gather` failing on one rank only leaves its peers waiting
/// in the next hop: a backend's deadline, e.g. `mpi::communicator_options::timeout`, ends it).
template <communicator Comm, byte_mover Mover>
void execute(Comm& comm, const route& r, const std::byte* in, std::byte* out, Mover& mover);

/// Collective, once per step: the ranks agree that they hold routes of the same exchanges in
/// the same order (one digest of every route's `fingerprint()`: plan, item sizes, nodes and
/// schedule), each built for its own rank of this group, and `mover` reserves scratch buffers
/// large enough for every one of them. After it, moving along these routes without `verify`
/// (`dispatch(comm, route, ...)`, comm/dispatch.hpp) issues no collective besides the hops'
/// all-to-alls and allocates no scratch in `mover`. One small reduction (`detail::all_max` of
/// three values) when all is well, one all-gather of 32 bytes per rank more when not.
/// O(routes + d). Throws `communication_error` on every rank alike, naming the first rank at
/// fault, when a route was built for another rank or group, the mover cannot allocate, or
/// the digests differ (a stale route, another plan, other row widths or schedule); whatever
/// the communicator throws.
template <communicator Comm, byte_mover Mover>
void agree_on_routes(Comm& comm, std::span<const route> routes, Mover& mover);

/// The same with the communicator's own mover (`mover_providing_communicator`), or, for other
/// communicators, without reserving scratch buffers (dispatches along the routes then allocate
/// their scratch on first use; an allocation failure there is raised on that rank only).
template <communicator Comm>
void agree_on_routes(Comm& comm, std::span<const route> routes);

}  // namespace orchmllm

// The definitions: route::build, the scratch slots and their reservation, the agreement, the
// execution engine.
// In this order: each uses what the ones above define.
// clang-format off
#include "orchmllm/detail/comm/route_build.inl"      // IWYU pragma: export
#include "orchmllm/detail/comm/route_scratch.inl"    // IWYU pragma: export
#include "orchmllm/detail/comm/route_agreement.inl"  // IWYU pragma: export
#include "orchmllm/detail/comm/route_execute.inl"    // IWYU pragma: export
// clang-format on
