#pragma once
// The definitions of `build_route` and `dispatch`, included by comm/dispatch.hpp at its end.
// Along a plan: the per-call agreement (detail/comm/plan_agreement.hpp), the route built
// locally, the receive buffer sized, then `execute`'s engine, which agrees on what can still fail
// on one rank alone before anything moves. Along a route: the sizes checked, the receive buffer
// sized, then the engine, agreeing only with `dispatch_options::verify`.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/detail/comm/agreement.hpp"
#include "orchmllm/detail/comm/plan_agreement.hpp"

namespace orchmllm::detail {

// Sizes `out` for the `count` items a route delivers, `rows_of(i)` rows of `row_bytes` bytes
// each, `bytes` in all, reusing its storage. A failed allocation is returned as
// `route_fault::receive` (with the size) instead of thrown, for `execute_route` to agree on.
template <class RowsOf>
route_fault_info allocate_received(ragged_payload& out, std::int64_t row_bytes, std::size_t count,
                                   RowsOf rows_of, std::int64_t bytes) {
  try {
    out.row_bytes = row_bytes;
    out.rows.clear();
    out.rows.reserve(count);
    for (std::size_t i = 0; i < count; ++i) out.rows.push_back(rows_of(i));
    out.data.resize(static_cast<std::size_t>(bytes));
  } catch (const std::bad_alloc&) {
    return {route_fault::receive, bytes, 0};
  }
  return {};
}

inline void fill_report(const route& r, dispatch_report* report) noexcept {
  if (report == nullptr) return;
  report->used = r.used();
  report->sent = r.sent();
  report->predicted_seconds = r.predicted_seconds();
  report->input_bytes = r.input_bytes();
  report->output_bytes = r.output_bytes();
}

}  // namespace orchmllm::detail

namespace orchmllm {

template <communicator Comm>
route build_route(Comm& comm, const rearrangement& plan,
                  std::span<const std::int64_t> local_item_bytes, const dispatch_options& options) {
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
  ORCHMLLM_REQUIRE(
      failed == 0, communication_error, "rank ", failed - 1, " cannot take part in the exchange: ",
      detail::describe_route_fault(static_cast<std::int64_t>(detail::route_fault::build), 0, 0));
  return r;
}

template <communicator Comm>
void dispatch(Comm& comm, const rearrangement& plan, const ragged_payload& in, ragged_payload& out,
              const dispatch_options& options, dispatch_report* report) {
  static_assert(Comm::payload_memory == memory_kind::host,
                "dispatch moves host payloads; for device memory use build_route + execute with "
                "a device mover");
  if (&in == &out) {  // in place: move through a temporary
    ragged_payload moved;
    dispatch(comm, plan, in, moved, options, report);
    out = std::move(moved);
    return;
  }
  topology topo;
  const auto rows =
      detail::exchange_item_counts(comm, plan, in.rows, in.row_bytes, detail::check_payload(in),
                                   options.sched, topo, options.links);
  // From here on every rank works on the same data, so only an allocation can fail on one
  // rank alone; such a failure is agreed on in `execute`'s check, before anything moves.
  route r;
  detail::route_fault_info fault;
  try {
    std::vector<std::int64_t> bytes(rows.size());
    for (std::size_t g = 0; g < rows.size(); ++g) bytes[g] = rows[g] * in.row_bytes;
    r = route::build(plan, bytes, topo, comm.rank(), options.sched);
  } catch (const std::bad_alloc&) {
    fault = {detail::route_fault::build, 0, 0};
  }
  if (fault.ok()) {
    const auto first = plan.dst_offsets()[static_cast<std::size_t>(comm.rank())];
    fault = detail::allocate_received(
        out, in.row_bytes, r.output_item_bytes().size(),
        [&](std::size_t i) {
          return rows[static_cast<std::size_t>(
              plan.source_of(first + static_cast<std::int64_t>(i)))];
        },
        r.output_bytes());
  }
  host_mover own;
  detail::execute_route(comm, r, in.data.data(), out.data.data(),
                        options.scratch != nullptr ? *options.scratch : own, fault);
  detail::fill_report(r, report);
}

template <communicator Comm, byte_mover Mover>
void dispatch(Comm& comm, const route& r, std::span<const std::byte> in, std::span<std::byte> out,
              Mover& mover, const dispatch_options& options, dispatch_report* report) {
  detail::route_fault_info fault;
  if (static_cast<std::int64_t>(in.size()) != r.input_bytes() ||
      static_cast<std::int64_t>(out.size()) != r.output_bytes())
    fault = {detail::route_fault::buffers, static_cast<std::int64_t>(in.size()),
             static_cast<std::int64_t>(out.size())};
  detail::execute_route(comm, r, in.data(), out.data(), mover, fault, options.verify);
  detail::fill_report(r, report);
}

template <communicator Comm>
void dispatch(Comm& comm, const route& r, const ragged_payload& in, ragged_payload& out,
              const dispatch_options& options, dispatch_report* report) {
  static_assert(Comm::payload_memory == memory_kind::host,
                "ragged_payload is host memory; move device buffers with the span overload and "
                "a device mover");
  if (&in == &out) {  // in place: move through a temporary
    ragged_payload moved;
    dispatch(comm, r, in, moved, options, report);
    out = std::move(moved);
    return;
  }
  detail::route_fault_info fault;
  if (detail::check_payload(in) != detail::local_fault::none ||
      static_cast<std::int64_t>(in.data.size()) != r.input_bytes()) {
    fault = {detail::route_fault::payload, static_cast<std::int64_t>(in.data.size()),
             r.input_bytes()};
  } else if (in.row_bytes <= 0 ||
             std::any_of(r.output_item_bytes().begin(), r.output_item_bytes().end(),
                         [&](std::int64_t ib) { return ib % in.row_bytes != 0; })) {
    fault = {detail::route_fault::row_width, in.row_bytes, 0};
  }
  if (fault.ok())
    fault = detail::allocate_received(
        out, in.row_bytes, r.output_item_bytes().size(),
        [&](std::size_t i) { return r.output_item_bytes()[i] / in.row_bytes; }, r.output_bytes());
  host_mover own;
  detail::execute_route(comm, r, in.data.data(), out.data.data(),
                        options.scratch != nullptr ? *options.scratch : own, fault, options.verify);
  detail::fill_report(r, report);
}

}  // namespace orchmllm
