#pragma once
// The definition of the collective `plan_step(comm, ...)`, included by
// orchestrator/orchestrator.hpp at its end: plans the step with this rank's routes, reserves a
// providing communicator's scratch, and makes the step's one agreement; on a difference, an
// all-gather learns which rank failed or planned another step.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>

#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/agreement.hpp"

namespace orchmllm {

template <communicator Comm>
step_plan plan_step(Comm& comm, const stage_declarations& decl, const step_metadata& meta,
                    const topology& topo, plan_options options) {
  options.routes_for = comm.rank();
  step_plan plan;
  std::exception_ptr failed;
  try {
    plan = plan_step(decl, meta, topo, options);
    // A communicator with its own mover (NCCL's device mover): its scratch for every route of
    // the step, reserved before the agreement, so a failure here is agreed on too.
    if constexpr (mover_providing_communicator<Comm>)
      detail::reserve_scratch(
          comm.mover(), detail::scratch_reservation(plan.routes.all, gathering_communicator<Comm>));
  } catch (...) {
    failed = std::current_exception();
  }
  const auto key = failed ? std::int64_t{0}
                          : std::bit_cast<std::int64_t>(detail::routes_digest(plan.routes.all));
  std::array<std::int64_t, 3> v{failed ? 1 : 0, key, ~key};
  detail::all_max(comm, std::span<std::int64_t>(v));
  if (v[0] == 0 && v[1] == ~v[2]) return plan;
  // Something is wrong somewhere: learn what (error path only).
  const std::array<std::int64_t, 2> mine{failed ? 1 : 0, key};
  const auto all = orchmllm::all_gather(comm, mine);
  if (failed) std::rethrow_exception(failed);
  for (std::size_t r = 0; r < all.size(); ++r)
    ORCHMLLM_REQUIRE(all[r][0] == 0, communication_error, "rank ", r,
                     " could not plan the step (it raised the error; this rank planned it)");
  for (std::size_t r = 1; r < all.size(); ++r)
    ORCHMLLM_REQUIRE(all[r][1] == all[0][1], communication_error,
                     "ranks planned different steps: rank 0's routes have digest ",
                     std::bit_cast<std::uint64_t>(all[0][1]), ", rank ", r, "'s have ",
                     std::bit_cast<std::uint64_t>(all[r][1]),
                     " (other declarations, metadata, topology or schedule)");
  return plan;  // unreachable: the reduction saw a difference that the gather must show
}

}  // namespace orchmllm
