#pragma once
/// @file orchestrator.hpp
/// The MLLM Global Orchestrator: one balanced plan per stage and the routes that move every
/// tensor of a multimodal training step. Per step, on every rank:
/// @code
///   auto meta = orchmllm::gather_step_metadata(comm, decl, my_batch, topo);  // 1 all-gather(v)
///   auto step = orchmllm::plan_step(comm, decl, meta, topo);  // plans + routes, 1 reduction
///   auto pixels = orchmllm::dispatch(comm, step.routes.encoder_input(0), my_pixels);  // → Π_E
///   auto text   = orchmllm::dispatch(comm, step.routes.text(), my_text);               // → Π_M
///   auto emb    = orchmllm::dispatch(comm, step.routes.encoder_output(0), enc_out);   // Π_E → Π_M
///   auto grads  = orchmllm::dispatch(comm, step.routes.encoder_gradient(0), d_emb);   // Π_M → Π_E
/// @endcode
/// Π_E_k balances encoder k's sub-items (or their pieces, with `encoder_stage::split`), Π_M the
/// whole samples; encoder outputs move once, along the composed route L_k ∘ Π_E_k⁻¹, and their
/// gradients back along its inverse: 3K + 1 transfers per step. The pure `plan_step(decl, meta,
/// topo)` gives the same plans without communicating (e.g. on `async_planner`'s thread).
/// Determinism: every rank computes the same plans from the same inputs. See
/// docs/orchestrator.md (data model, receive order on an LLM rank, per-step communication).
///
/// The step's one header: it also brings the declarations (orchestrator/stages.hpp), the local
/// batch from the trainer's own samples (orchestrator/samples.hpp: `make_local_batch`,
/// `sub_item_size`), the payloads (comm/payload.hpp: `ragged_payload`) and `dispatch`
/// (comm/dispatch.hpp). A communicator backend comes from its own header (backend/mpi/…,
/// backend/nccl/…, comm/local.hpp).

#include <cstdint>
#include <string>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/dispatch.hpp"  // IWYU pragma: export
#include "orchmllm/comm/metadata.hpp"
#include "orchmllm/comm/payload.hpp"  // IWYU pragma: export
#include "orchmllm/comm/route.hpp"
#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/orchestrator/gather_metadata.hpp"
#include "orchmllm/orchestrator/samples.hpp"  // IWYU pragma: export
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/orchestrator/step_plan.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// Plans one step: Π_E_k and its routes for every encoder stage, Π_M, and the reports.
///
/// Complexity: the balancers and mappings of K + 1 stages (O(n log n) each for `automatic` +
/// `transport`, n = items of the stage), plus O(samples + sub-items + d) for the layouts and
/// routes; with `parallel_stages` the stage planning takes about the time of the slowest stage
/// on K + 1 cores. Deterministic: a pure function of (declarations, metadata, topology) with
/// deterministic balancers and mappers (a stage's own balancer or mapper must be too: it runs on
/// every rank), whatever the thread timing.
///
/// Throws `invalid_argument_error` when the declarations are invalid, the metadata's rank
/// count differs from the topology's, or its modality count differs from K;
/// `infeasible_error` when a stage's constraints (capacity, item counts) cannot be met — the
/// message names the stage. Identical inputs throw identically on every rank: when several
/// stages fail, the error is the LLM's, else the first encoder's by index. `std::system_error`
/// when a thread cannot be started.
ORCHMLLM_FUNC step_plan plan_step(const stage_declarations& decl, const step_metadata& meta,
                                  const topology& topo, const plan_options& options = {});

/// One rank's routes of a planned step: the same `step_routes` that `plan_step` builds with
/// `plan_options{.routes_for = rank, .sched = sched}`, from the step's plans (for a process that
/// plans for the others, or a tool that inspects another rank's traffic). `step` must be
/// `plan_step(decl, meta, topo, ...)`'s result.
///
/// Complexity: O(n log n) over the step's items and sub-items, on the calling thread.
/// Deterministic. Throws `invalid_argument_error` when `rank` is outside [0, d) or the step,
/// metadata and topology disagree on the rank or encoder count.
ORCHMLLM_FUNC step_routes build_routes(const step_plan& step, const stage_declarations& decl,
                                       const step_metadata& meta, const topology& topo, rank_t rank,
                                       schedule sched = schedule::automatic);

/// Collective: gathers every rank's `local_batch` into the step's global metadata, identical on
/// every rank, and checks that every rank declared the same stages.
///
/// One all-gather of an 80-byte record per rank (declaration fingerprint, counts, local fault,
/// topology check) and one all-gatherv of 1 + 5 int64 per sample and sub-item. Deterministic.
///
/// Throws, on every rank alike (all decide from the same gathered records, so no rank is left
/// waiting): `invalid_argument_error` naming the first rank whose declarations differ from
/// rank 0's, or whose batch is malformed (negative counts, a modality outside [0, K), a
/// parent sample that does not exist); what the communicator throws.
template <communicator Comm>
step_metadata gather_step_metadata(Comm& comm, const stage_declarations& decl,
                                   const local_batch& local) {
  return detail::gather_step_metadata(comm, decl, local, nullptr);
}

/// The same, and checks in the same all-gather that `topo` (what `plan_step` will map onto)
/// matches the communicator: every rank passes the same topology (fingerprint), with
/// `comm.size()` ranks, and every rank sits on the topology's node that the communicator puts
/// it on (both number nodes in order of their lowest rank). A topology built by hand for
/// another cluster shape would otherwise be accepted and route bytes over the wrong links.
/// Throws, on every rank alike, `invalid_argument_error` naming the rank and both node numbers
/// (or both sizes), and what the overload above throws.
template <communicator Comm>
step_metadata gather_step_metadata(Comm& comm, const stage_declarations& decl,
                                   const local_batch& local, const topology& topo) {
  return detail::gather_step_metadata(comm, decl, local, &topo);
}

/// Collective: `plan_step` that also builds this rank's routes (`options.routes_for` =
/// `comm.rank()`) and makes the step's one agreement on them: every rank checks, in one small
/// reduction (`detail::all_max` of three values), that every rank planned the same step (one
/// digest of all its routes: plans, item sizes, nodes, schedules) and that none failed. A
/// communicator with its own mover (`mover_providing_communicator`) has the scratch of every
/// route reserved in it first, as `agree_on_routes` does. After
/// it, every `dispatch(comm, step.routes..., ...)` of the step issues only its hops'
/// all-to-alls. Call it where `plan_step` would be called, on every rank (not from a planning
/// thread: it communicates; with `async_planner`, plan with `routes_for` there and call
/// `agree_on_routes(comm, step.routes.all)` on the training thread).
///
/// Throws what `plan_step` throws on the ranks where it threw (identical inputs throw
/// identically everywhere); `communication_error` on the other ranks naming the first rank
/// that failed, and on every rank when the digests differ (the ranks passed other
/// declarations, metadata, topologies or schedules); whatever the communicator throws.
template <communicator Comm>
step_plan plan_step(Comm& comm, const stage_declarations& decl, const step_metadata& meta,
                    const topology& topo, plan_options options = {});

}  // namespace orchmllm

// The definitions: the pure plan_step (in the compiled library when ORCHMLLM_USE_COMPILED) and
// the collective one.
#if !ORCHMLLM_USE_COMPILED
#include "orchmllm/detail/orchestrator/plan_step.inl"  // IWYU pragma: export
#endif
#include "orchmllm/detail/orchestrator/agreed_step.inl"  // IWYU pragma: export
