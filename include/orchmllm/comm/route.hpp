#pragma once
/// @file route.hpp
/// Routes: one rank's precomputed program for moving ragged bytes along a plan, and `execute`.
///
/// A route is the plan/execute split of the data movement. From the global view (the plan,
/// every item's byte size, the topology), identical on every rank, each rank builds its own
/// route without communicating: a sequence of hops, each one pack (a gather of byte segments
/// into a send buffer grouped by peer) and one all-to-all(v), followed by one unpack into
/// destination slot order. `execute` runs it with any `communicator` and any `byte_mover`, so
/// the same route moves host payloads over MPI or the local backend and device payloads over
/// NCCL. Build once per plan and reuse it for every tensor that follows the same plan with the
/// same per-item byte sizes (e.g. activations and gradients of equal width).
///
/// Schedules (see docs/communication.md for the model and the proofs of delivery):
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
///   Hops in which no item changes rank anywhere are dropped (e.g. all of node-wise on one node).
///
/// Order on the wire: in every hop, the bytes for one peer are in increasing destination global
/// id; a receive buffer holds the peers' blocks in increasing rank. Both sides derive this from
/// the same global data, so no offsets travel with the payload.
///
/// Time model (`predicted_seconds`): per hop, each rank's send time and receive time are
/// Σ messages · latency + bytes / bandwidth over intra- and inter-node links (`link_params`;
/// a message is a non-empty block to another rank);
/// a hop takes as long as its slowest rank in either direction, and hops add up. Self copies
/// are free. Deterministic: every rank computes the same value and so the same choice.

#include <algorithm>
#include <cmath>
#include <array>
#include <bit>
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

/// How a route moves data between nodes (see the file comment).
enum class schedule { direct, node_wise, automatic };

/// "direct", "node-wise", "auto" (null-terminated, as every `to_string` of the library's enums).
[[nodiscard]] constexpr std::string_view to_string(schedule s) noexcept {
  switch (s) {
    case schedule::direct: return "direct";
    case schedule::node_wise: return "node-wise";
    case schedule::automatic: return "auto";
  }
  return "?";
}

/// Parses "direct", "node-wise" (or "node_wise"), "auto" (or "automatic"). Throws
/// `invalid_argument_error` listing the accepted names.
[[nodiscard]] inline schedule parse_schedule(std::string_view name) {
  if (name == "direct") return schedule::direct;
  if (name == "node-wise" || name == "node_wise") return schedule::node_wise;
  if (name == "auto" || name == "automatic") return schedule::automatic;
  detail::raise<invalid_argument_error>(detail::concat(
      "unknown schedule '", name, "' (expected one of: direct, node-wise, auto)"));
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
[[nodiscard]] inline std::vector<traffic_stats> plan_traffic(const rearrangement& plan,
                                                             std::span<const std::int64_t> item_bytes,
                                                             const topology& topo) {
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

/// One rank's program for moving ragged bytes along a plan (see the file comment).
class route {
 public:
  /// One pack + all-to-all(v). Counts and displacements are in bytes, one entry per rank.
  struct hop {
    std::vector<std::int64_t> send_counts, send_displs, recv_counts, recv_displs;
    detail::segment_list pack;  ///< previous buffer → send buffer
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
  void compile(const rearrangement& plan, std::span<const std::int64_t> bytes,
               const topology& topo, const detail::item_paths& p);

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

}  // namespace orchmllm

// The out-of-class definitions of `route` (route::build), in their own file.
#include "orchmllm/detail/comm/route_build.hpp"  // IWYU pragma: export

namespace orchmllm {

/// Optional communicator capability: `all_to_allv_gather(in, segments, send_counts,
/// send_displs, recv, recv_counts, recv_displs)` performs the all_to_allv whose send buffer is
/// the gather of `segments` from `in` without materialising it, and returns false (on every
/// rank, before anything moves) when it cannot, in which case `execute` packs and calls
/// `all_to_allv`. `mpi::communicator` has it (MPI derived datatypes).
template <class C>
concept gathering_communicator =
    communicator<C> && requires(C& c, const std::byte* in, std::byte* out,
                                const detail::segment_list& s, std::span<const std::int64_t> v) {
      { c.all_to_allv_gather(in, s, v, v, out, v, v) } -> std::same_as<bool>;
    };

/// Optional capability: `all_to_allv_gather(..., agreed)`, the `gathering_communicator` call
/// for a caller that guarantees what `agreed_exchange` says (see
/// `agreed_exchange_communicator`): it decides whether it can (the return value) from
/// `agreed` alone, identically on every rank, without asking its peers.
template <class C>
concept agreed_gathering_communicator =
    gathering_communicator<C> &&
    requires(C& c, const std::byte* in, std::byte* out, const detail::segment_list& s,
             std::span<const std::int64_t> v, const agreed_exchange& a) {
      { c.all_to_allv_gather(in, s, v, v, out, v, v, a) } -> std::same_as<bool>;
    };

namespace detail {

// Why a rank cannot run its route; agreed before anything moves (see `execute`).
enum class route_fault : std::int64_t {
  none = 0,
  wrong_rank,     // the route was built for another rank or group size
  scratch,        // the mover could not provide the scratch buffers
  receive,        // the caller could not allocate the receive buffer (dispatch)
  build,          // building the route failed on this rank only (out of memory)
  buffers,        // the caller's buffers do not have the route's sizes (dispatch along a route)
  payload,        // the caller's payload is invalid or not the route's input size
  row_width,      // the payload's row width does not divide the items the route delivers
};

// The buffers one hop reads from and writes to: a scratch slot (0 or 1) or -1 for the caller's
// input (send) / output (receive). `gathered`: the communicator sends straight from the
// current buffer (`all_to_allv_gather`); otherwise a pack copy goes into the other slot unless
// the current buffer already is grouped by peer. The receive slot is never the send slot.
struct hop_slots {
  int send;
  int recv;
};
inline hop_slots slots_of_hop(const route& r, std::size_t i, int cur, bool gathered) noexcept {
  const auto other = [](int s) { return s == 0 ? 1 : 0; };
  const bool into_out = i + 1 == r.hops().size() && r.unpack_identity();
  const int send = gathered || r.hops()[i].pack_identity ? cur : other(cur);
  return {send, into_out ? -1 : other(send)};
}

// Bytes each scratch slot needs when every hop takes the same path (`gathered` or not).
inline std::array<std::int64_t, 2> scratch_needs(const route& r, bool gathered) noexcept {
  std::array<std::int64_t, 2> need{0, 0};
  int cur = -1;
  for (std::size_t i = 0; i < r.hops().size(); ++i) {
    const auto& h = r.hops()[i];
    const auto s = slots_of_hop(r, i, cur, gathered);
    if (s.send != cur) need[static_cast<std::size_t>(s.send)] =
        std::max(need[static_cast<std::size_t>(s.send)], h.send_bytes);
    if (s.recv >= 0) need[static_cast<std::size_t>(s.recv)] =
        std::max(need[static_cast<std::size_t>(s.recv)], h.recv_bytes);
    cur = s.recv;
  }
  return need;
}

// What `execute` reserves per slot before its agreement. Without the datatype path: exactly
// the packing path's needs. With it, each hop takes the datatype path or (when its counts do
// not fit MPI's int) packs, so a single hop needs the larger of the two pure paths, and with
// several hops, which may mix paths, either slot may hold any hop's buffer: the largest hop.
inline std::array<std::int64_t, 2> scratch_reservation(const route& r, bool gathering) noexcept {
  auto need = scratch_needs(r, false);
  if (!gathering) return need;
  if (r.hops().size() >= 2) {
    std::int64_t largest = 0;
    for (const auto& h : r.hops()) largest = std::max({largest, h.send_bytes, h.recv_bytes});
    return {largest, largest};
  }
  const auto g = scratch_needs(r, true);
  return {std::max(need[0], g[0]), std::max(need[1], g[1])};
}

inline std::string describe_route_fault(std::int64_t fault, std::int64_t a, std::int64_t b) {
  switch (static_cast<route_fault>(fault)) {
    case route_fault::wrong_rank:
      return concat("its route was built for rank ", a, " of ", b);
    case route_fault::scratch:
      return concat("it could not allocate its scratch buffers (", a, " and ", b, " bytes)");
    case route_fault::receive:
      return concat("it could not allocate its receive buffer (", a, " bytes)");
    case route_fault::build:
      return "it ran out of memory building its route";
    case route_fault::buffers:
      return concat("its buffers hold ", a, " input and ", b,
                    " output bytes, not what its route moves");
    case route_fault::payload:
      return concat("its payload is invalid or holds ", a, " bytes where its route moves ", b);
    case route_fault::row_width:
      return concat("its payload's row width of ", a,
                    " bytes does not divide the items its route delivers (a route built for "
                    "another width?)");
    case route_fault::none: break;
  }
  return "?";
}

// Collective, before any payload moves: every rank learns whether some rank has a fault or
// runs a route of another exchange (fingerprints differ), and then all raise the same
// communication_error, naming the first rank at fault. One `all_max` of three values when all
// is well; one all_gather of 32 bytes per rank more when it is not.
template <communicator Comm>
void agree_on_route(Comm& comm, std::uint64_t fingerprint, route_fault fault, std::int64_t a,
                    std::int64_t b) {
  const auto key = std::bit_cast<std::int64_t>(fingerprint);
  std::array<std::int64_t, 3> v{fault == route_fault::none ? 0 : 1, key, ~key};
  all_max(comm, std::span<std::int64_t>(v));
  if (v[0] == 0 && v[1] == ~v[2]) return;
  std::array<std::int64_t, 4> mine{static_cast<std::int64_t>(fault), a, b, key};
  const auto all = orchmllm::all_gather(comm, mine);
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r][0] != 0)
      raise<communication_error>(concat("rank ", r, " cannot take part in the exchange: ",
                                        describe_route_fault(all[r][0], all[r][1], all[r][2])));
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r][3] != all[0][3])
      raise<communication_error>(concat(
          "ranks run routes of different exchanges: rank 0's route has fingerprint ",
          std::bit_cast<std::uint64_t>(all[0][3]), ", rank ", r, "'s has ",
          std::bit_cast<std::uint64_t>(all[r][3]),
          " (built from another plan, other item sizes, nodes or schedule: a stale route?)"));
}

}  // namespace detail

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

namespace detail {

// `execute` with a fault this rank already has (dispatch's receive allocation), agreed with the
// rest. `agree` false (a route whose agreement was done once for the step, `agree_on_routes`):
// no collective besides the hops' all-to-alls; a fault is raised on this rank alone.
template <communicator Comm, byte_mover Mover>
void execute_route(Comm& comm, const route& r, const std::byte* in, std::byte* out,
                   Mover& mover, route_fault fault = route_fault::none, std::int64_t fault_a = 0,
                   std::int64_t fault_b = 0, bool agree = true) {
  constexpr bool gathering = gathering_communicator<Comm>;
  if (fault == route_fault::none && (comm.rank() != r.rank() || comm.size() != r.num_ranks())) {
    fault = route_fault::wrong_rank;
    fault_a = r.rank();
    fault_b = r.num_ranks();
  }
  if (fault == route_fault::none) {
    // Reserve both slots up front for every path the hops may take, so no allocation can fail
    // on one rank in the middle of the exchange (movers reuse a large enough buffer).
    const auto need = scratch_reservation(r, gathering);
    try {
      for (int slot = 0; slot < 2; ++slot)
        if (need[static_cast<std::size_t>(slot)] > 0)
          (void)mover.scratch(slot, need[static_cast<std::size_t>(slot)]);
    } catch (const std::bad_alloc&) {
      fault = route_fault::scratch;
    } catch (const error&) {
      fault = route_fault::scratch;
    }
    if (fault != route_fault::none) {
      fault_a = need[0];
      fault_b = need[1];
    }
  }
  if (agree) {
    agree_on_route(comm, r.fingerprint(), fault, fault_a, fault_b);
  } else if (fault != route_fault::none) {
    raise<communication_error>(concat("rank ", comm.rank(), " cannot take part in the exchange: ",
                                      describe_route_fault(static_cast<std::int64_t>(fault),
                                                           fault_a, fault_b),
                                      " (unchecked dispatch: its peers were not told)"));
  }

  const std::byte* cur = in;
  int cur_slot = -1;  // -1: the caller's input
  const auto hops = r.hops();
  auto buffer = [&](int slot, std::int64_t bytes) -> std::byte* {
    return slot < 0 ? out : mover.scratch(slot, bytes);
  };
  for (std::size_t i = 0; i < hops.size(); ++i) {
    const auto& h = hops[i];
    if constexpr (gathering) {
      // The communicator sends straight from the current buffer (no pack copy) when it can.
      // Every rank takes this call for every hop (an identity pack is one segment), so all
      // ranks enter the same collective.
      const auto s = slots_of_hop(r, i, cur_slot, true);
      std::byte* recv = buffer(s.recv, h.recv_bytes);
      bool sent = false;
      if constexpr (agreed_gathering_communicator<Comm>) {
        sent = agree ? comm.all_to_allv_gather(cur, h.pack, h.send_counts, h.send_displs, recv,
                                               h.recv_counts, h.recv_displs)
                     : comm.all_to_allv_gather(cur, h.pack, h.send_counts, h.send_displs, recv,
                                               h.recv_counts, h.recv_displs, h.group);
      } else {
        sent = comm.all_to_allv_gather(cur, h.pack, h.send_counts, h.send_displs, recv,
                                       h.recv_counts, h.recv_displs);
      }
      if (sent) {
        cur = recv;
        cur_slot = s.recv;
        continue;
      }
    }
    const auto s = slots_of_hop(r, i, cur_slot, false);
    const std::byte* send = cur;
    if (s.send != cur_slot) {
      std::byte* buf = mover.scratch(s.send, h.send_bytes);
      mover.gather(cur, buf, h.pack);
      send = buf;
    }
    std::byte* recv = buffer(s.recv, h.recv_bytes);
    if constexpr (agreed_exchange_communicator<Comm>) {
      if (!agree) {
        comm.all_to_allv(send, h.send_counts, h.send_displs, recv, h.recv_counts, h.recv_displs,
                         h.group);
      } else {
        comm.all_to_allv(send, h.send_counts, h.send_displs, recv, h.recv_counts, h.recv_displs);
      }
    } else {
      comm.all_to_allv(send, h.send_counts, h.send_displs, recv, h.recv_counts, h.recv_displs);
    }
    cur = recv;
    cur_slot = s.recv;
  }
  if (!r.unpack_identity()) mover.gather(cur, out, r.unpack());
}

}  // namespace detail

template <communicator Comm, byte_mover Mover>
void execute(Comm& comm, const route& r, const std::byte* in, std::byte* out, Mover& mover) {
  detail::execute_route(comm, r, in, out, mover);
}

namespace detail {

// One digest of several routes' fingerprints, in order.
inline std::uint64_t routes_digest(std::span<const route> routes) noexcept {
  fnv digest;
  digest.mix(static_cast<std::uint64_t>(routes.size()));
  for (const auto& r : routes) digest.mix(r.fingerprint());
  return digest.h;
}

// What the two scratch slots need for every one of `routes` (see `scratch_reservation`).
inline std::array<std::int64_t, 2> scratch_reservation(std::span<const route> routes,
                                                       bool gathering) noexcept {
  std::array<std::int64_t, 2> need{0, 0};
  for (const auto& r : routes) {
    const auto n = scratch_reservation(r, gathering);
    need = {std::max(need[0], n[0]), std::max(need[1], n[1])};
  }
  return need;
}

// Asks `mover` for both slots at their `need`; what it throws escapes.
template <byte_mover Mover>
void reserve_scratch(Mover& mover, const std::array<std::int64_t, 2>& need) {
  for (int slot = 0; slot < 2; ++slot)
    if (need[static_cast<std::size_t>(slot)] > 0)
      (void)mover.scratch(slot, need[static_cast<std::size_t>(slot)]);
}

template <communicator Comm, class Mover>
void agree_on_routes(Comm& comm, std::span<const route> routes, Mover* mover) {
  auto fault = route_fault::none;
  std::int64_t a = 0, b = 0;
  for (const auto& r : routes) {
    if (r.rank() != comm.rank() || r.num_ranks() != comm.size()) {
      fault = route_fault::wrong_rank;
      a = r.rank();
      b = r.num_ranks();
      break;
    }
  }
  if constexpr (!std::is_same_v<Mover, void>) {
    if (fault == route_fault::none && mover != nullptr) {
      const auto need = scratch_reservation(routes, gathering_communicator<Comm>);
      try {
        reserve_scratch(*mover, need);
      } catch (const std::bad_alloc&) {
        fault = route_fault::scratch;
      } catch (const error&) {
        fault = route_fault::scratch;
      }
      if (fault == route_fault::scratch) {
        a = need[0];
        b = need[1];
      }
    }
  }
  agree_on_route(comm, routes_digest(routes), fault, a, b);
}

}  // namespace detail

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
void agree_on_routes(Comm& comm, std::span<const route> routes, Mover& mover) {
  detail::agree_on_routes(comm, routes, &mover);
}

/// Optional communicator capability: `mover()` returns the `byte_mover` of the
/// communicator's payload memory (the NCCL communicators: a `cuda::device_mover` on their
/// stream), which `agree_on_routes` and `dispatch` along a route use when given no mover.
template <class C>
concept mover_providing_communicator = communicator<C> && requires(C& c) {
  requires byte_mover<std::remove_reference_t<decltype(c.mover())>>;
};

/// The same with the communicator's own mover (`mover_providing_communicator`), or, for other
/// communicators, without reserving scratch buffers (dispatches along the routes then allocate
/// their scratch on first use; an allocation failure there is raised on that rank only).
template <communicator Comm>
void agree_on_routes(Comm& comm, std::span<const route> routes) {
  if constexpr (mover_providing_communicator<Comm>) {
    detail::agree_on_routes(comm, routes, &comm.mover());
  } else {
    detail::agree_on_routes<Comm, void>(comm, routes, nullptr);
  }
}

}  // namespace orchmllm
