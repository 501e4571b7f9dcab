#pragma once
/// @file orchmllm.hpp
/// Umbrella header: everything that needs no optional dependency.
///   core/      batch layout, cost models, padding policies, constraints, rearrangement algebra,
///              statistics and lower bounds, errors
///   balance/   the Batch Post-Balancing Dispatcher (`balance`), cells of micro-batches
///              (`balance_micro_batches`)
///   topology/  cluster shape and link figures, mapping balanced bins to ranks (`map_bins`)
///   comm/      the communicator concept, the in-process backend (`local::run`), metadata
///              exchange (`gather_layout`), routes and `dispatch`/`combine` of ragged payloads
///   orchestrator/  stage declarations, per-step plans and composed routes (`plan_step`,
///              `gather_step_metadata`), background planning (`async_planner`)
/// Backends (MPI, NCCL, CUDA, Thrust, GLPK) live under orchmllm/backend/ and are never included
/// from here. A unit that needs one capability compiles faster with its façade alone
/// (orchmllm/balance/balancer.hpp, orchmllm/orchestrator/orchestrator.hpp, ...): this header
/// also brings the in-process backend and the asynchronous planner with <thread> and <future>.
/// See docs/design.md, "Layers".

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/balance/context_parallel.hpp"
#include "orchmllm/balance/micro_batches.hpp"
#include "orchmllm/balance/problem.hpp"
#include "orchmllm/balance/split.hpp"
#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/local.hpp"
#include "orchmllm/comm/metadata.hpp"
#include "orchmllm/comm/mover.hpp"
#include "orchmllm/comm/payload.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_fit.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/pieces.hpp"
#include "orchmllm/core/projection.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/core/text_forms.hpp"
#include "orchmllm/orchestrator/async_planner.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/samples.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/mapper.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"
#include "orchmllm/version.hpp"
