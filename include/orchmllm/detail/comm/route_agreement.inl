#pragma once
// The agreement that precedes a route's exchange, included by comm/route.hpp at its end: every rank
// learns, in one small reduction, whether some rank has a fault or runs a route of another
// exchange, and then all raise the same `communication_error`, naming the first rank at fault. Also
// the digest of a step's routes and the once-per-step agreement on them (`agree_on_routes`).

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/agreement.hpp"
#include "orchmllm/detail/core/fnv.hpp"

namespace orchmllm::detail {

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
    case route_fault::none:
      break;
  }
  return "?";
}

// Collective, before any payload moves: every rank learns whether some rank has a fault or
// runs a route of another exchange (fingerprints differ), and then all raise the same
// communication_error, naming the first rank at fault. One `all_max` of three values when all
// is well; one all_gather of 32 bytes per rank more when it is not.
template <communicator Comm>
void agree_on_route(Comm& comm, std::uint64_t fingerprint, const route_fault_info& mine) {
  const auto key = std::bit_cast<std::int64_t>(fingerprint);
  std::array<std::int64_t, 3> v{mine.ok() ? 0 : 1, key, ~key};
  all_max(comm, std::span<std::int64_t>(v));
  if (v[0] == 0 && v[1] == ~v[2]) return;
  const std::array<std::int64_t, 4> record{static_cast<std::int64_t>(mine.fault), mine.a, mine.b,
                                           key};
  const auto all = orchmllm::all_gather(comm, record);
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

// One digest of several routes' fingerprints, in order.
inline std::uint64_t routes_digest(std::span<const route> routes) noexcept {
  fnv digest;
  digest.mix(static_cast<std::uint64_t>(routes.size()));
  for (const auto& r : routes) digest.mix(r.fingerprint());
  return digest.h;
}

// `agree_on_routes`, with the scratch reserved in `*mover` first unless Mover is void.
template <communicator Comm, class Mover>
void agree_on_routes(Comm& comm, std::span<const route> routes, Mover* mover) {
  route_fault_info fault;
  for (const auto& r : routes) {
    if (r.rank() != comm.rank() || r.num_ranks() != comm.size()) {
      fault = {route_fault::wrong_rank, r.rank(), r.num_ranks()};
      break;
    }
  }
  if constexpr (!std::is_same_v<Mover, void>) {
    if (fault.ok() && mover != nullptr)
      fault = reserve_scratch_or_fault(*mover,
                                       scratch_reservation(routes, gathering_communicator<Comm>));
  }
  agree_on_route(comm, routes_digest(routes), fault);
}

}  // namespace orchmllm::detail

namespace orchmllm {

template <communicator Comm, byte_mover Mover>
void agree_on_routes(Comm& comm, std::span<const route> routes, Mover& mover) {
  detail::agree_on_routes(comm, routes, &mover);
}

template <communicator Comm>
void agree_on_routes(Comm& comm, std::span<const route> routes) {
  if constexpr (mover_providing_communicator<Comm>) {
    detail::agree_on_routes(comm, routes, &comm.mover());
  } else {
    detail::agree_on_routes<Comm, void>(comm, routes, nullptr);
  }
}

}  // namespace orchmllm
