#pragma once
// The scratch buffers a route runs in, included by comm/route.hpp at its end: which of the mover's
// two slots each hop sends from and receives into, what each slot must hold, and reserving both
// before anything moves so that no allocation can fail on one rank in the middle of an exchange.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>

#include "orchmllm/comm/mover.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm::detail {

// Why a rank cannot run its route; agreed before anything moves (see `execute`).
enum class route_fault : std::int64_t {
  none = 0,
  wrong_rank,  // the route was built for another rank or group size
  scratch,     // the mover could not provide the scratch buffers
  receive,     // the caller could not allocate the receive buffer (dispatch)
  build,       // building the route failed on this rank only (out of memory)
  buffers,     // the caller's buffers do not have the route's sizes (dispatch along a route)
  payload,     // the caller's payload is invalid or not the route's input size
  row_width,   // the payload's row width does not divide the items the route delivers
};

// A rank's fault with the two figures its message names (sizes, ranks).
struct route_fault_info {
  route_fault fault = route_fault::none;
  std::int64_t a = 0;
  std::int64_t b = 0;
  [[nodiscard]] bool ok() const noexcept { return fault == route_fault::none; }
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
    if (s.send != cur)
      need[static_cast<std::size_t>(s.send)] =
          std::max(need[static_cast<std::size_t>(s.send)], h.send_bytes);
    if (s.recv >= 0)
      need[static_cast<std::size_t>(s.recv)] =
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

// What the two scratch slots need for every one of `routes`.
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

// The same, for a caller that agrees on faults before anything moves: a failed allocation
// (`std::bad_alloc`, or a library `error` such as a device allocation's) is returned as
// `route_fault::scratch` with both sizes instead of thrown.
template <byte_mover Mover>
route_fault_info reserve_scratch_or_fault(Mover& mover, const std::array<std::int64_t, 2>& need) {
  try {
    reserve_scratch(mover, need);
  } catch (const std::bad_alloc&) {
    return {route_fault::scratch, need[0], need[1]};
  } catch (const error&) {
    return {route_fault::scratch, need[0], need[1]};
  }
  return {};
}

}  // namespace orchmllm::detail
