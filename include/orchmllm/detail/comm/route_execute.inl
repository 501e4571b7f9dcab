#pragma once
// Running a route, included by comm/route.hpp at its end: the scratch reserved and the faults
// agreed before anything moves, then per hop one pack (or the communicator's own gather) and one
// all_to_allv, then the unpack into slot order. `execute` and every `dispatch` along a route end
// here.

#include <cstddef>
#include <cstdint>

#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/mover.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm::detail {

// `execute` with a fault this rank already has (a dispatch's receive allocation), agreed with
// the rest (`agree_on_route`: one small reduction). `agree` false (a route whose agreement was
// done once for the step, `agree_on_routes`): no collective besides the hops' all-to-alls; a
// fault is raised on this rank alone. Either way every rank runs a route of the same exchange
// once the hops start (agreed here or for the step: the fingerprint covers the plan, the item
// sizes, the node map and the schedule), so each hop passes the group's figures (`hop::group`)
// to a communicator that takes them, and the transfer needs no agreement of its own.
template <communicator Comm, byte_mover Mover>
void execute_route(Comm& comm, const route& r, const std::byte* in, std::byte* out, Mover& mover,
                   route_fault_info fault = {}, bool agree = true) {
  constexpr bool gathering = gathering_communicator<Comm>;
  if (fault.ok() && (comm.rank() != r.rank() || comm.size() != r.num_ranks()))
    fault = {route_fault::wrong_rank, r.rank(), r.num_ranks()};
  // Both slots reserved up front for every path the hops may take, so no allocation can fail
  // on one rank in the middle of the exchange (movers reuse a large enough buffer).
  if (fault.ok()) fault = reserve_scratch_or_fault(mover, scratch_reservation(r, gathering));
  if (agree) {
    agree_on_route(comm, r.fingerprint(), fault);
  } else if (!fault.ok()) {
    raise<communication_error>(
        concat("rank ", comm.rank(), " cannot take part in the exchange: ",
               describe_route_fault(static_cast<std::int64_t>(fault.fault), fault.a, fault.b),
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
        sent = comm.all_to_allv_gather(cur, h.pack, h.send_counts, h.send_displs, recv,
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
      comm.all_to_allv(send, h.send_counts, h.send_displs, recv, h.recv_counts, h.recv_displs,
                       h.group);
    } else {
      comm.all_to_allv(send, h.send_counts, h.send_displs, recv, h.recv_counts, h.recv_displs);
    }
    cur = recv;
    cur_slot = s.recv;
  }
  if (!r.unpack_identity()) mover.gather(cur, out, r.unpack());
}

}  // namespace orchmllm::detail

namespace orchmllm {

template <communicator Comm, byte_mover Mover>
void execute(Comm& comm, const route& r, const std::byte* in, std::byte* out, Mover& mover) {
  detail::execute_route(comm, r, in, out, mover);
}

}  // namespace orchmllm
