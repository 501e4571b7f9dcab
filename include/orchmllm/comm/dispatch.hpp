#pragma once
/// @file dispatch.hpp
/// Moving payloads: `dispatch` along a prebuilt route (host or device memory; the hot path of a
/// training step) or along a plan (it builds and agrees on its route itself), `combine` (back
/// along a plan), and `build_route`, the collective that checks the ranks agree and builds a
/// route. Every `dispatch` has one argument shape, (comm, source, input, [output], [mover],
/// options, report): the source is a `route` or a `rearrangement`; the payload a host
/// `ragged_payload` (into a reused output or returned) or, along a route, byte spans.
/// @code
///   orchmllm::agree_on_routes(comm, routes, scratch);                   // once per step
///   orchmllm::dispatch(comm, routes[0], in_bytes, out_bytes, scratch);  // its hops' all-to-alls
///   auto moved = orchmllm::dispatch(comm, routes[1], my_rows);          // host ragged payload
///   auto balanced = orchmllm::dispatch(comm, plan, my_pixels);          // agrees by itself
///   auto grads = orchmllm::combine(comm, plan, grads_at_destination);   // back where they came
/// @endcode
/// Along a plan every call agrees before any byte moves; along a route the step's one agreement
/// (`agree_on_routes`, or the collective `plan_step`) protects the transfers. See
/// docs/communication.md, "The agreement check".

#include <cstddef>
#include <cstdint>
#include <span>

#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/mover.hpp"
#include "orchmllm/comm/payload.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// Options of `build_route`, `dispatch` and `combine`: one struct for every overload.
struct dispatch_options {
  /// Where a route is built (along a plan, `build_route`): direct, node-wise or chosen by the
  /// time model. Every rank passes the same value (checked). A prebuilt route has its own.
  schedule sched = schedule::automatic;
  /// Where a route is built: the figures of the time model. Every rank passes the same values
  /// (checked: they steer the `automatic` choice).
  link_params links{};
  /// Host payloads: scratch buffers to reuse across calls (per rank, not shared between
  /// threads); null: each call allocates its own. Pass the mover given to `agree_on_routes` and
  /// a steady-state step allocates nothing but its outputs.
  host_mover* scratch = nullptr;
  /// Along a route: agree before anything moves, as `execute` does (one small reduction in
  /// which every rank checks that all run routes of the same exchange and that none has a local
  /// fault: wrong rank, buffers of the wrong size, a failed allocation; then all raise the same
  /// error). Off (the default), the step's single agreement is the protection and a dispatch
  /// issues only its hops' all-to-alls; a local fault then raises on its rank alone and its
  /// peers wait in their next collective (until a backend deadline such as
  /// `mpi::communicator_options::timeout`). Along a plan every call agrees, whatever this says.
  bool verify = false;
};

/// What one `dispatch`/`combine` did on this rank.
struct dispatch_report {
  schedule used = schedule::direct;  ///< the schedule the route used
  traffic_stats sent{};              ///< bytes/messages this rank sent, by link class
  double predicted_seconds = 0;      ///< time model of the whole exchange
  std::int64_t input_bytes = 0;      ///< bytes this rank contributed
  std::int64_t output_bytes = 0;     ///< bytes this rank received
};

/// Collective: builds this rank's route for moving items of the given byte sizes along `plan`.
/// `local_item_bytes` has one entry per item this rank holds (slot order). Exchanges one
/// record per rank and every item's size (an all-gather, plus an all-gatherv when some rank
/// holds more than 16 items: O(n) bytes), checks
/// agreement (docs/communication.md, "The agreement check"), takes the node structure from
/// `comm`, then builds the route locally (`route::build`). Use it to move device payloads
/// (`dispatch` with a device mover) or to reuse one route for several tensors. Deterministic.
/// Throws `communication_error` on every rank when the ranks disagree or one of them has bad
/// input or runs out of memory building; what `route::build` throws.
template <communicator Comm>
route build_route(Comm& comm, const rearrangement& plan,
                  std::span<const std::int64_t> local_item_bytes,
                  const dispatch_options& options = {});

/// Collective: moves every rank's ragged payload along `plan` into `out`, reusing `out`'s
/// storage (a trainer that keeps `out` between steps allocates nothing once it is large
/// enough; `out` may be `in` itself, at the cost of a temporary). On return, `out` holds the
/// items the plan sends this rank, in destination slot order, with their row counts; the row
/// width is unchanged. Every item arrives exactly once and byte-identical. One all-gather of
/// fixed-size records (plus an all-gatherv of the row counts when some rank holds more than 16
/// items), one small reduction agreeing that every rank could allocate, then one all-to-all(v)
/// per hop of the schedule. O(bytes + n log n) per rank. Deterministic. Throws
/// `communication_error` on every rank when ranks disagree (plan, row width, schedule, link
/// figures, item counts), one holds an invalid payload or one cannot allocate; whatever the
/// communicator throws. `out` is unspecified after a throw.
template <communicator Comm>
void dispatch(Comm& comm, const rearrangement& plan, const ragged_payload& in, ragged_payload& out,
              const dispatch_options& options = {}, dispatch_report* report = nullptr);

/// Collective: as above, returning a new payload.
template <communicator Comm>
ragged_payload dispatch(Comm& comm, const rearrangement& plan, const ragged_payload& in,
                        const dispatch_options& options = {}, dispatch_report* report = nullptr) {
  ragged_payload out;
  dispatch(comm, plan, in, out, options, report);
  return out;
}

/// Collective: the reverse of `dispatch` (used for gradients). `at_destination` holds this
/// rank's items of the plan's destination layout in slot order; on return this rank holds its
/// original source items in slot order. Same cost, guarantees and errors as `dispatch` along
/// `plan.inverse()` (plus O(n) to invert the plan).
template <communicator Comm>
ragged_payload combine(Comm& comm, const rearrangement& plan, const ragged_payload& at_destination,
                       const dispatch_options& options = {}, dispatch_report* report = nullptr) {
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
/// `options.verify` adds the agreement of `execute`. O(bytes moved + segments).
/// Deterministic. Throws `communication_error`: with `verify`, on every rank alike when one of
/// them has a fault or runs another exchange; without it, on this rank alone when its route
/// was built for another rank or group, its buffers have the wrong sizes or the mover cannot
/// allocate. Whatever the communicator and the mover throw.
template <communicator Comm, byte_mover Mover>
void dispatch(Comm& comm, const route& r, std::span<const std::byte> in, std::span<std::byte> out,
              Mover& mover, const dispatch_options& options = {},
              dispatch_report* report = nullptr);

/// Collective: the same with the mover chosen by the payload memory: the communicator's own
/// (`mover_providing_communicator`: the NCCL communicators' device mover on their stream),
/// else, for host memory, `options.scratch` or a `host_mover` of the call's own.
template <communicator Comm>
void dispatch(Comm& comm, const route& r, std::span<const std::byte> in, std::span<std::byte> out,
              const dispatch_options& options = {}, dispatch_report* report = nullptr) {
  if constexpr (mover_providing_communicator<Comm>) {
    dispatch(comm, r, in, out, comm.mover(), options, report);
  } else {
    static_assert(Comm::payload_memory == memory_kind::host,
                  "this communicator's payload memory is not host memory and it provides no "
                  "mover(): pass the byte mover of its memory");
    host_mover own;
    dispatch(comm, r, in, out, options.scratch != nullptr ? *options.scratch : own, options,
             report);
  }
}

/// Collective: the same for host payloads, with the route's sizes checked against the
/// payload's rows. `in` holds this rank's source items (slot order, `r.input_bytes()` bytes);
/// on return `out` holds its destination items in slot order, with their row counts (each
/// item's bytes ÷ `in.row_bytes`, which must be positive) and storage reused (`out` may be
/// `in`). Scratch from `options.scratch` or a mover of its own. Communication and errors as
/// above; also `communication_error` (this rank, or every rank with `verify`) when `in` is
/// invalid or not the route's input size, or a received item is not a whole number of rows (a
/// route built for another row width).
template <communicator Comm>
void dispatch(Comm& comm, const route& r, const ragged_payload& in, ragged_payload& out,
              const dispatch_options& options = {}, dispatch_report* report = nullptr);

/// Collective: as above, returning a new payload.
template <communicator Comm>
ragged_payload dispatch(Comm& comm, const route& r, const ragged_payload& in,
                        const dispatch_options& options = {}, dispatch_report* report = nullptr) {
  ragged_payload out;
  dispatch(comm, r, in, out, options, report);
  return out;
}

}  // namespace orchmllm

// The definitions of build_route and the dispatches that are declared only above.
#include "orchmllm/detail/comm/dispatch.inl"  // IWYU pragma: export
