#pragma once
/// @file dispatch.hpp
/// Moving payloads: `dispatch` along a prebuilt route (host or device memory; the hot path of
/// a training step), `dispatch` along a plan (source → destination order) and `combine`
/// (back), and `build_route`, the collective that checks the ranks agree and builds a route.
///
/// Along prebuilt routes (routes built from shared data with `route::build`, or
/// `step_plan::routes`), once agreed on (`agree_on_routes`, or the collective `plan_step`):
/// @code
///   orchmllm::agree_on_routes(comm, routes, scratch);                  // once per step
///   orchmllm::dispatch(comm, routes[0], in_bytes, out_bytes, scratch);  // its hops' all-to-alls
///   auto moved = orchmllm::dispatch(comm, routes[1], my_rows);         // host ragged payload
/// @endcode
/// Safety of the route overloads: the step's one agreement checks that every rank holds routes
/// of the same exchanges and reserves the scratch; see `route_dispatch_options::verify` for
/// what a dispatch along a route checks by itself.
///
/// Along a plan, on every rank of the group (no route to keep; each call agrees by itself):
/// @code
///   auto plan = orchmllm::balance(layout, cost, orchmllm::packed).plan;     // same everywhere
///   auto moved = orchmllm::dispatch(comm, plan, my_pixels);                  // to the balanced ranks
///   ... forward/backward on moved ...
///   auto grads = orchmllm::combine(comm, plan, grads_at_destination);        // back where they came from
/// @endcode
///
/// Safety of the plan overloads. Before any payload byte moves, every call gathers one small
/// record per rank (plan fingerprint, row width, item count, node, schedule, link figures,
/// local validity) and every rank checks all records. Ranks that built different plans, use
/// different row widths, schedules or link figures, hold a number of items the plan does not
/// expect, or hold an invalid payload all raise the same `communication_error` on every rank,
/// naming the first rank at fault. What can still fail on one rank alone after that (allocating the route, the
/// receive buffer or the scratch buffers) is agreed on in `execute`'s check, again before
/// anything moves: nothing hangs and nothing is corrupted silently.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/mover.hpp"
#include "orchmllm/comm/payload.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/comm/agreement.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// Options of `build_route`, `dispatch` and `combine`. Every rank must pass the same values
/// (checked: `links` steer the `automatic` choice, so ranks with different figures could pick
/// different schedules).
struct dispatch_options {
  schedule sched = schedule::automatic;  ///< direct, node-wise or chosen by the time model
  link_params links{};                   ///< figures of the time model
  /// Scratch buffers to reuse across calls (per rank, not shared between threads); null: each
  /// call allocates its own. Steady-state steps that pass one allocate only their outputs.
  host_mover* scratch = nullptr;
};

/// Options of a dispatch along a prebuilt route (`dispatch(comm, route, ...)`).
struct route_dispatch_options {
  /// Agree before anything moves, as `execute` does: one small reduction in which every rank
  /// checks that all run routes of the same exchange and that none has a local fault (wrong
  /// rank, buffers of the wrong size, a failed allocation), then all raise the same error.
  /// Off (the default), the step's single agreement (`agree_on_routes`, or the collective
  /// `plan_step`) is the protection and a dispatch issues only its hops' all-to-alls; a local
  /// fault then raises on its rank alone and its peers wait in their next collective (until a
  /// backend deadline such as `mpi::communicator_options::timeout`). Turn it on to debug.
  bool verify = false;
  /// Host payload overloads: scratch buffers to reuse across calls (null: the call allocates
  /// its own). Pass the mover given to `agree_on_routes` and nothing is allocated but outputs.
  host_mover* scratch = nullptr;
};

/// What one `dispatch`/`combine` did on this rank.
struct dispatch_report {
  schedule used = schedule::direct;  ///< the schedule the route used
  traffic_stats sent{};              ///< bytes/messages this rank sent, by link class
  double predicted_seconds = 0;      ///< time model of the whole exchange
  std::int64_t input_bytes = 0;      ///< bytes this rank contributed
  std::int64_t output_bytes = 0;     ///< bytes this rank received
};

namespace detail {

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
    case local_fault::none: return "none";
    case local_fault::ranks_mismatch: return "its plan has another rank count than the group";
    case local_fault::not_square: return "its plan does not map the group onto itself";
    case local_fault::bad_payload: return "its payload is invalid (negative or overflowing "
                                          "sizes, or data of the wrong size)";
    case local_fault::bad_links: return "its link figures (dispatch_options::links) are invalid";
  }
  return "?";
}

struct rank_record {
  std::uint64_t fingerprint;
  std::int64_t unit_bytes;
  std::int64_t items;
  std::int32_t node;
  std::int32_t fault;
  std::int32_t sched;
  std::int32_t plan_ranks;
  double links[4];  // intra bandwidth, intra latency, inter bandwidth, inter latency
};
static_assert(sizeof(rank_record) == 72 && std::is_trivially_copyable_v<rank_record>);

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
  rank_record mine{fingerprint(plan), unit_bytes, static_cast<std::int64_t>(local_counts.size()),
                   comm.node(), static_cast<std::int32_t>(fault),
                   static_cast<std::int32_t>(sched), plan.num_src_ranks(),
                   {links.intra_bandwidth, links.intra_latency, links.inter_bandwidth,
                    links.inter_latency}};
  const std::vector<rank_record> all = orchmllm::all_gather(comm, mine);
  for (rank_t r = 0; r < d; ++r) {
    const auto& rec = all[static_cast<std::size_t>(r)];
    if (rec.fault != 0)
      detail::raise<communication_error>(detail::concat(
          "rank ", r, " cannot take part in the exchange: ",
          to_string(static_cast<local_fault>(rec.fault)),
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
  for (rank_t r = 0; r < d; ++r) nodes[static_cast<std::size_t>(r)] = all[static_cast<std::size_t>(r)].node;
  topo_out = topology(std::move(nodes), links);

  // Every rank's item count is the plan's (checked above), so rank r's sizes land at off[r].
  std::vector<std::int64_t> counts(static_cast<std::size_t>(d));
  for (rank_t r = 0; r < d; ++r)
    counts[static_cast<std::size_t>(r)] = all[static_cast<std::size_t>(r)].items;
  const std::vector<std::int64_t> global =
      orchmllm::all_gatherv(comm, std::span<const std::int64_t>(local_counts), counts).values;
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

}  // namespace detail

/// Collective: builds this rank's route for moving items of the given byte sizes along `plan`.
/// `local_item_bytes` has one entry per item this rank holds (slot order). Exchanges one
/// record per rank and every item's size (an all-gather and an all-gatherv: O(n) bytes), checks
/// agreement (see the file comment), takes the node structure from `comm`, then builds the
/// route locally (`route::build`). Use it to move device payloads (`execute` with a device
/// mover) or to reuse one route for several tensors. Throws `communication_error` on every
/// rank when the ranks disagree or one of them has bad input; what `route::build` throws.
template <communicator Comm>
route build_route(Comm& comm, const rearrangement& plan,
                  std::span<const std::int64_t> local_item_bytes,
                  const dispatch_options& options = {}) {
  detail::local_fault fault = detail::local_fault::none;
  for (const auto b : local_item_bytes)
    if (b < 0) fault = detail::local_fault::bad_payload;
  topology topo;
  const auto bytes = detail::exchange_item_counts(comm, plan, local_item_bytes, 1, fault,
                                                  options.sched, topo, options.links);
  // Every rank builds from the same data, so only running out of memory can fail on one rank
  // alone: agree on that, or the others would wait for this rank in their first exchange.
  route r;
  std::int64_t failed = 0;
  try {
    r = route::build(plan, bytes, topo, comm.rank(), options.sched);
  } catch (const std::bad_alloc&) {
    failed = comm.rank() + 1;
  }
  detail::all_max(comm, std::span<std::int64_t>(&failed, 1));
  ORCHMLLM_REQUIRE(failed == 0, communication_error, "rank ", failed - 1,
                   " cannot take part in the exchange: ",
                   detail::describe_route_fault(
                       static_cast<std::int64_t>(detail::route_fault::build), 0, 0));
  return r;
}

/// Collective: moves every rank's ragged payload along `plan` into `out`, reusing `out`'s
/// storage (a trainer that keeps `out` between steps allocates nothing once it is large
/// enough; `out` may be `local` itself, at the cost of a temporary). On return, `out` holds the items the
/// plan sends this rank, in destination slot order, with their row counts; the row width is
/// unchanged. Every item arrives exactly once and byte-identical. One metadata all-gather and
/// all-gatherv, then one all-to-all(v) per hop of the schedule. O(bytes + n log n) per rank.
/// Deterministic. Throws `communication_error` on every rank when ranks disagree (plan, row
/// width, schedule, link figures, item counts) or one holds an invalid payload; whatever the
/// communicator throws. `out` is unspecified after a throw.
template <communicator Comm>
void dispatch(Comm& comm, const rearrangement& plan, const ragged_payload& local,
              ragged_payload& out, const dispatch_options& options = {},
              dispatch_report* report = nullptr) {
  static_assert(Comm::payload_memory == memory_kind::host,
                "dispatch moves host payloads; for device memory use build_route + execute with "
                "a device mover");
  if (&local == &out) {  // in place: move through a temporary
    ragged_payload moved;
    dispatch(comm, plan, local, moved, options, report);
    out = std::move(moved);
    return;
  }
  topology topo;
  const auto rows = detail::exchange_item_counts(comm, plan, local.rows, local.row_bytes,
                                                 detail::check_payload(local), options.sched,
                                                 topo, options.links);
  // From here on every rank works on the same data, so only an allocation can fail on one
  // rank alone; such a failure is agreed on in `execute`'s check, before anything moves.
  route r;
  auto fault = detail::route_fault::none;
  std::int64_t wanted = 0;
  try {
    std::vector<std::int64_t> bytes(rows.size());
    for (std::size_t g = 0; g < rows.size(); ++g) bytes[g] = rows[g] * local.row_bytes;
    r = route::build(plan, bytes, topo, comm.rank(), options.sched);
  } catch (const std::bad_alloc&) {
    fault = detail::route_fault::build;
  }
  if (fault == detail::route_fault::none) {
    wanted = r.output_bytes();
    try {
      out.row_bytes = local.row_bytes;
      const auto doff = plan.dst_offsets();
      const auto me = static_cast<std::size_t>(comm.rank());
      out.rows.clear();
      out.rows.reserve(static_cast<std::size_t>(doff[me + 1] - doff[me]));
      for (auto h = doff[me]; h < doff[me + 1]; ++h)
        out.rows.push_back(rows[static_cast<std::size_t>(plan.source_of(h))]);
      out.data.resize(static_cast<std::size_t>(wanted));
    } catch (const std::bad_alloc&) {
      fault = detail::route_fault::receive;
    }
  }
  host_mover own;
  detail::execute_route(comm, r, local.data.data(), out.data.data(),
                        options.scratch != nullptr ? *options.scratch : own, fault, wanted);
  if (report != nullptr) {
    report->used = r.used();
    report->sent = r.sent();
    report->predicted_seconds = r.predicted_seconds();
    report->input_bytes = r.input_bytes();
    report->output_bytes = r.output_bytes();
  }
}

/// Collective: as above, returning a new payload.
template <communicator Comm>
ragged_payload dispatch(Comm& comm, const rearrangement& plan, const ragged_payload& local,
                        const dispatch_options& options = {}, dispatch_report* report = nullptr) {
  ragged_payload out;
  dispatch(comm, plan, local, out, options, report);
  return out;
}

/// Collective: the reverse of `dispatch` (used for gradients). `at_destination` holds this
/// rank's items of the plan's destination layout in slot order; on return this rank holds its
/// original source items in slot order. Same cost, guarantees and errors as `dispatch` along
/// `plan.inverse()` (plus O(n) to invert the plan).
template <communicator Comm>
ragged_payload combine(Comm& comm, const rearrangement& plan,
                       const ragged_payload& at_destination, const dispatch_options& options = {},
                       dispatch_report* report = nullptr) {
  return dispatch(comm, plan.inverse(), at_destination, options, report);
}

/// Collective: `combine` into a caller-owned payload whose storage is reused (see the
/// reusing `dispatch`).
template <communicator Comm>
void combine(Comm& comm, const rearrangement& plan, const ragged_payload& at_destination,
             ragged_payload& out, const dispatch_options& options = {},
             dispatch_report* report = nullptr) {
  dispatch(comm, plan.inverse(), at_destination, out, options, report);
}

/// Collective: moves this rank's bytes along a prebuilt route (`route::build`, or
/// `step_plan::routes` from `plan_step`), host or device memory alike: `in` holds the rank's
/// source items in slot order (exactly `r.input_bytes()` bytes), `out` receives its
/// destination items in slot order (exactly `r.output_bytes()` bytes); both live in the
/// communicator's payload memory, which `mover` serves (`host_mover`, `thrust_mover`,
/// `cuda::device_mover`). Every rank calls it with its own route of the same exchange.
/// Communication: one all-to-all(v) per hop of the route and nothing else, unless
/// `options.verify` adds the agreement of `execute` (see `route_dispatch_options`).
/// O(bytes moved + segments). Deterministic. Throws `communication_error`: with `verify`, on
/// every rank alike when one of them has a fault or runs another exchange; without it, on this
/// rank alone when its route was built for another rank or group, its buffers have the wrong
/// sizes or the mover cannot allocate. Whatever the communicator and the mover throw.
template <communicator Comm, byte_mover Mover>
void dispatch(Comm& comm, const route& r, std::span<const std::byte> in, std::span<std::byte> out,
              Mover& mover, const route_dispatch_options& options = {}) {
  auto fault = detail::route_fault::none;
  std::int64_t a = 0, b = 0;
  if (static_cast<std::int64_t>(in.size()) != r.input_bytes() ||
      static_cast<std::int64_t>(out.size()) != r.output_bytes()) {
    fault = detail::route_fault::buffers;
    a = static_cast<std::int64_t>(in.size());
    b = static_cast<std::int64_t>(out.size());
  }
  detail::execute_route(comm, r, in.data(), out.data(), mover, fault, a, b, options.verify);
}

/// Collective: the same with the mover chosen by the payload memory: the communicator's own
/// (`mover_providing_communicator`: the NCCL communicators' device mover on their stream), else,
/// for host memory, `options.scratch` or a `host_mover` of the call's own.
template <communicator Comm>
void dispatch(Comm& comm, const route& r, std::span<const std::byte> in, std::span<std::byte> out,
              const route_dispatch_options& options = {}) {
  if constexpr (mover_providing_communicator<Comm>) {
    dispatch(comm, r, in, out, comm.mover(), options);
  } else {
    static_assert(Comm::payload_memory == memory_kind::host,
                  "this communicator's payload memory is not host memory and it provides no "
                  "mover(): pass the byte mover of its memory");
    host_mover own;
    dispatch(comm, r, in, out, options.scratch != nullptr ? *options.scratch : own, options);
  }
}

/// Collective: the same for host payloads, with the route's sizes checked against the
/// payload's rows. `local` holds this rank's source items (slot order, `r.input_bytes()`
/// bytes); on return `out` holds its destination items in slot order, with their row counts
/// (each item's bytes ÷ `local.row_bytes`, which must be positive) and storage reused. Scratch
/// from `options.scratch` or a mover of its own. Communication and errors as above; also
/// `communication_error` (this rank, or every rank with `verify`) when a received item is not
/// a whole number of rows (the route was built for another row width).
template <communicator Comm>
void dispatch(Comm& comm, const route& r, const ragged_payload& local, ragged_payload& out,
              const route_dispatch_options& options = {}) {
  static_assert(Comm::payload_memory == memory_kind::host,
                "ragged_payload is host memory; move device buffers with the span overload and "
                "a device mover");
  if (&local == &out) {  // in place: move through a temporary
    ragged_payload moved;
    dispatch(comm, r, local, moved, options);
    out = std::move(moved);
    return;
  }
  auto fault = detail::route_fault::none;
  std::int64_t a = 0, b = 0;
  if (detail::check_payload(local) != detail::local_fault::none ||
      static_cast<std::int64_t>(local.data.size()) != r.input_bytes()) {
    fault = detail::route_fault::payload;
    a = static_cast<std::int64_t>(local.data.size());
    b = r.input_bytes();
  } else if (local.row_bytes <= 0 ||
             std::any_of(r.output_item_bytes().begin(), r.output_item_bytes().end(),
                         [&](std::int64_t ib) { return ib % local.row_bytes != 0; })) {
    fault = detail::route_fault::row_width;
    a = local.row_bytes;
  }
  if (fault == detail::route_fault::none) {
    try {
      out.row_bytes = local.row_bytes;
      out.rows.clear();
      out.rows.reserve(r.output_item_bytes().size());
      for (const auto ib : r.output_item_bytes()) out.rows.push_back(ib / local.row_bytes);
      out.data.resize(static_cast<std::size_t>(r.output_bytes()));
    } catch (const std::bad_alloc&) {
      fault = detail::route_fault::receive;
      a = r.output_bytes();
    }
  }
  host_mover own;
  detail::execute_route(comm, r, local.data.data(), out.data.data(),
                        options.scratch != nullptr ? *options.scratch : own, fault, a, b,
                        options.verify);
}

/// Collective: as above, returning a new payload.
template <communicator Comm>
ragged_payload dispatch(Comm& comm, const route& r, const ragged_payload& local,
                        const route_dispatch_options& options = {}) {
  ragged_payload out;
  dispatch(comm, r, local, out, options);
  return out;
}

}  // namespace orchmllm
