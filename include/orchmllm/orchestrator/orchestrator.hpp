#pragma once
/// @file orchestrator.hpp
/// The MLLM Global Orchestrator: one balanced plan per stage and the routes that move every
/// tensor of a multimodal training step.
///
/// Per step, on every rank:
/// @code
///   auto meta = orchmllm::gather_step_metadata(comm, decl, my_batch, topo);  // 1 all-gather(v)
///   auto step = orchmllm::plan_step(comm, decl, meta, topo);  // plans + this rank's routes,
///                                                             // agreed in 1 small reduction
///   const auto& routes = step.routes;
///   // forward
///   auto pixels = orchmllm::dispatch(comm, routes.encoder_input(0), my_pixels);  // origin → Π_E
///   auto text   = orchmllm::dispatch(comm, routes.text(), my_text);              // origin → Π_M
///   ... encoder k forward on pixels ...
///   auto emb    = orchmllm::dispatch(comm, routes.encoder_output(0), enc_out);   // Π_E → Π_M
///   ... place emb at the placeholders (step.llm_view(rank)), LLM forward/backward ...
///   // backward
///   auto grads  = orchmllm::dispatch(comm, routes.encoder_gradient(0), d_emb);   // Π_M → Π_E
///   ... encoder k backward; all-reduce parameter gradients as usual ...
/// @endcode
/// The pure `plan_step(decl, meta, topo)` (no communicator; e.g. on `async_planner`'s thread)
/// gives the same plans; with `plan_options::routes_for` it builds the routes too, and
/// `agree_on_routes(comm, step.routes.all)` makes the agreement. Moving along the plans
/// instead (`dispatch(comm, step.llm, my_text)`) also works and agrees on every transfer.
///
/// Plans (see stages.hpp for the data model):
///  * Π_E_k (`encoders[k].input`): the sub-items of modality k, balanced with stage k's cost
///    model, policy, balancer and constraints, then mapped to ranks (`map_bins`, the stage's
///    mapper or mapping) so pixels cross as few node boundaries as possible.
///  * Π_M (`llm`): whole samples, length = text tokens + the LLM tokens of their sub-items.
///    Its mapping counts, per sample, its text bytes plus its sub-items' output bytes (all
///    attributed to the sample's origin rank: an approximation, since the outputs start from
///    the encoder ranks, which Π_E_k keeps close to the origin).
///  * The composed route (`encoders[k].output`) = L_k ∘ Π_E_k⁻¹, where L_k (`encoders[k].lifted`)
///    lifts Π_M from samples to sub-items: a sub-item goes to the rank of its parent sample. Its
///    source layout is Π_E_k's destination layout (what the encoder ranks hold), so encoder
///    outputs move once, straight from encoder ranks to LLM ranks.
///  * The gradient route (`encoders[k].gradient`) is the composed route's inverse.
///  * Segmented sub-items (`sub_item::segments` = S > 1) cost the sum of their S segment costs;
///    a stage with `encoder_stage::split` is balanced by `balance_split`, and then Π_E_k, L_k
///    and both routes move *pieces* (`encoders[k].pieces`; runs of segments, with their share
///    of the input rows and LLM tokens). L_k hands a split sub-item's pieces consecutive slots
///    in segment order, so its outputs arrive as one run of rows, in order, where the whole
///    sub-item's would; `step_plan::encoder_view` tells an encoder rank what it runs.
///
/// Receive order on an LLM rank (what the trainer relies on to place encoder outputs):
///  * text payload along Π_M: the rank's samples in LLM slot order (increasing origin sample
///    id, the canonical order of `rearrangement::from_destinations`);
///  * modality k payload along `encoders[k].output`: for LLM slot s = 0, 1, ... in order, the
///    sub-items of modality k of that slot's sample in their original order (the order in the
///    origin rank's `local_batch::sub_items`). `llm_view(rank)` returns these offsets and, per
///    sample, its sub-items across modalities in original order: sample j's sequence is its
///    text with each sub-item's placeholder run replaced by that sub-item's rows, taken in
///    this order.
///
/// Communication per step: one metadata all-gather (a fixed record plus one all-gatherv), one
/// small reduction agreeing on the step's routes, then 3K + 1 transfers: K encoder inputs,
/// 1 text, K encoder outputs (forward) and K output gradients (backward). Each is one
/// `dispatch` along a prebuilt route: one all-to-all(v) hop with the direct schedule, two or
/// three with the node-wise one (comm/route.hpp), and nothing else. (A dispatch along a plan
/// instead adds its own agreement and size all-gathers per transfer, comm/dispatch.hpp.)
///
/// Determinism: `plan_step` is a pure function of (declarations, metadata, topology) with
/// deterministic balancers and mappers (the built-ins are; a stage's own balancer or mapper,
/// `glpk::bottleneck_ilp` included, must be too: it runs on every rank), so every rank computes
/// the same plans without further communication. Thread-safety: pure functions.

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/metadata.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/comm/agreement.hpp"
#include "orchmllm/detail/core/checked.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/orchestrator/step_plan.hpp"
#include "orchmllm/detail/orchestrator/gather_metadata.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"

#include <chrono>  // the phase timers of plan_stage and plan_step

#if !ORCHMLLM_USE_COMPILED
#include <future>  // plan_step's body (compiled mode: in the library)

#include "orchmllm/detail/core/parallel.hpp"
#include "orchmllm/detail/orchestrator/plan_stage.hpp"
#include "orchmllm/detail/orchestrator/step_route_builder.hpp"
#endif

namespace orchmllm {


/// Plans one step: Π_E_k and its routes for every encoder stage, Π_M, and the reports.
///
/// Complexity: the balancers and mappings of K + 1 stages (O(n log n) each for `automatic` +
/// `transport`, n = items of the stage), plus O(samples + sub-items + d) for the layouts and
/// routes; with `parallel_stages` the stage planning takes about the time of the slowest stage
/// on K + 1 cores. Deterministic (see the file comment), whatever the thread timing.
///
/// Throws `invalid_argument_error` when the declarations are invalid, the metadata's rank
/// count differs from the topology's, or its modality count differs from K;
/// `infeasible_error` when a stage's constraints (capacity, item counts) cannot be met — the
/// message names the stage. Identical inputs throw identically on every rank: when several
/// stages fail, the error is the LLM's, else the first encoder's by index. `std::system_error`
/// when a thread cannot be started.
ORCHMLLM_FUNC step_plan plan_step(const stage_declarations& decl, const step_metadata& meta,
                                  const topology& topo, const plan_options& options = {})
#if ORCHMLLM_USE_COMPILED
    ;  // defined in the compiled library (orchmllm/config.hpp)
#else
{
  const auto start = std::chrono::steady_clock::now();
  decl.validate();
  ORCHMLLM_REQUIRE(meta.ranks == topo.num_ranks(), invalid_argument_error, "metadata of ",
                   meta.ranks, " ranks for a topology of ", topo.num_ranks());
  ORCHMLLM_REQUIRE(static_cast<int>(meta.modalities.size()) == decl.num_encoders(),
                   invalid_argument_error, "metadata has ", meta.modalities.size(),
                   " modalities, the declarations ", decl.num_encoders(), " encoder stages");
  ORCHMLLM_REQUIRE(options.routes_for >= -1 && options.routes_for < topo.num_ranks(),
                   invalid_argument_error, "plan_options::routes_for is ", options.routes_for,
                   ", outside [-1, ", topo.num_ranks(), ")");
  const rank_t d = topo.num_ranks();
  const auto kc = static_cast<std::size_t>(decl.num_encoders());
  step_plan out;
  out.stages.resize(kc + 1);
  auto in_stage = [](const std::string& name, auto&& f) {
    try {
      return f();
    } catch (const infeasible_error& e) {
      detail::raise<infeasible_error>(detail::concat("stage '", name, "': ", e.message()));
    }
  };

  auto phase = start;
  const auto lap = [&phase] {
    const auto now = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(now - std::exchange(phase, now)).count();
  };
  // The LLM stage's layout over samples (sequence lengths, text and encoder-output bytes);
  // each encoder stage's is built on its own thread (`encoder_layout`).
  {
    const auto n = static_cast<std::size_t>(meta.num_samples());
    std::vector<std::int64_t> lengths(n), bytes(n);
    for (std::size_t g = 0; g < n; ++g) {
      lengths[g] = meta.sequence_length(static_cast<std::int64_t>(g));
      // Checked: token and row counts come from the trainer (a wrapped size would move 0 bytes).
      std::int64_t b = detail::checked_mul(meta.text_tokens[g], decl.llm.text_row_bytes,
                                           "text bytes of sample ", g);
      for (auto k = meta.sample_sub_offsets[g]; k < meta.sample_sub_offsets[g + 1]; ++k) {
        const auto& [m, id] = meta.sample_sub_items[static_cast<std::size_t>(k)];
        b = detail::checked_add(
            b,
            detail::checked_mul(
                meta.modalities[static_cast<std::size_t>(m)].llm_tokens[static_cast<std::size_t>(id)],
                decl.encoders[static_cast<std::size_t>(m)].output_row_bytes,
                "encoder output bytes of sample ", g),
            "bytes of sample ", g);
      }
      bytes[g] = b;
    }
    out.llm_layout = batch_layout(meta.sample_offsets, std::move(lengths), std::move(bytes));
  }
  out.encoders.resize(kc);
  // Encoder k's layout: built on its stage's thread, beside the others and the LLM stage.
  const auto encoder_layout = [&](std::size_t k) {
    const auto& mod = meta.modalities[k];
    std::vector<std::int64_t> bytes(mod.input_rows.size());
    for (std::size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = detail::checked_mul(mod.input_rows[i], decl.encoders[k].input_row_bytes,
                                     "stage '", decl.encoders[k].name, "': input bytes of item ",
                                     i);
    // Segmented sub-items: S equal segments each (checked when the metadata was built), so
    // their costs are per segment (packed) or every segment is a padded row (padded policies):
    // the layout's with_equal_segments, built in one go. Without any, no segments at all.
    if (std::any_of(mod.segments.begin(), mod.segments.end(), [](auto s) { return s != 1; })) {
      auto [seg_offsets, seg_lengths] = detail::equal_segments(mod.encoder_length, mod.segments);
      out.encoders[k].layout =
          batch_layout(mod.offsets, mod.encoder_length, std::move(bytes), mod.parent,
                       std::move(seg_offsets), std::move(seg_lengths));
    } else {
      out.encoders[k].layout =
          batch_layout(mod.offsets, mod.encoder_length, std::move(bytes), mod.parent);
    }
  };

  out.layout_seconds = lap();

  // Encoder k's plans after its stage, once Π_M exists: L_k, the composed route and the
  // gradient route (each encoder writes only its own).
  const auto compose = [&](std::size_t k) {
    const auto moff = out.llm.dst_offsets();
    const auto& mod = meta.modalities[k];
    auto& er = out.encoders[k];

    // L_k and the composed route: walk the LLM ranks' slots in order; each slot's sample hands
    // out the next slots of its modality-k sub-items (in increasing id = original order), and
    // each sub-item those of its units (itself, or its pieces in segment order), so a split
    // sub-item's outputs arrive as one run of rows, in order. Position h of that walk is
    // destination id h of L_k and of the composed route (rank r, slot) and source id h of the
    // gradient; a unit's encoder-destination id e is the composed route's source id and the
    // gradient's destination. The walk is not taken in its own order, which would chase ids
    // from slot to sample to sub-item to encoder slot (a chain of cache misses per unit): each
    // sample's first position is found first (its unit count, summed in LLM slot order), then
    // the samples are visited in id order, reading the sub-items and Π_E_k in order and writing
    // each unit's entries where they belong. The three plans come out whole, each in the
    // canonical form its factory would give (from_placements for L_k and the composed route,
    // inverse() for the gradient).
    const batch_layout& units = er.units();
    const auto n_units = static_cast<std::size_t>(units.num_items());
    const auto eoff = er.input.dst_offsets();
    const auto first_unit = [&](std::int64_t i) {
      return er.pieces ? er.pieces->first_piece(i) : i;
    };
    detail::rearrangement_parts lifted, output, gradient;
    const std::span<const std::int64_t> origin =
        er.pieces ? units.offsets() : std::span<const std::int64_t>(mod.offsets);
    lifted.src_offsets.assign(origin.begin(), origin.end());
    output.src_offsets.assign(eoff.begin(), eoff.end());
    lifted.dst_offsets.assign(static_cast<std::size_t>(d) + 1, 0);
    // A modality without units (none in this batch): three empty plans, all offsets but the
    // sources' zero; the walk below would give exactly these after O(n + d) work.
    if (n_units > 0) {
      const auto n_samples = static_cast<std::size_t>(meta.num_samples());
      std::vector<std::int64_t> sub_off(n_samples + 1, 0);
      for (auto p : mod.parent) ++sub_off[static_cast<std::size_t>(p) + 1];
      for (std::size_t g = 0; g < n_samples; ++g) sub_off[g + 1] += sub_off[g];
      std::vector<std::int64_t> subs(mod.parent.size());
      {
        std::vector<std::int64_t> fill(sub_off.begin(), sub_off.end() - 1);
        for (std::size_t i = 0; i < mod.parent.size(); ++i)
          subs[static_cast<std::size_t>(fill[static_cast<std::size_t>(mod.parent[i])]++)] =
              static_cast<std::int64_t>(i);
      }
      // walk_start[g]: the walk position of sample g's first unit (its unit count first).
      std::vector<std::int64_t> walk_start(n_samples, 0);
      for (std::size_t g = 0; g < n_samples; ++g)
        for (auto q = sub_off[g]; q < sub_off[g + 1]; ++q) {
          const auto i = subs[static_cast<std::size_t>(q)];
          walk_start[g] += first_unit(i + 1) - first_unit(i);
        }
      {
        std::int64_t h = 0;
        for (rank_t r = 0; r < d; ++r) {
          const auto R = static_cast<std::size_t>(r);
          for (auto j = moff[R]; j < moff[R + 1]; ++j) {
            auto& s = walk_start[static_cast<std::size_t>(out.llm.source_of(j))];
            h += std::exchange(s, h);
          }
          lifted.dst_offsets[R + 1] = h;
        }
      }
      lifted.dst_rank.resize(n_units);
      lifted.dst_slot.resize(n_units);
      lifted.src_of_dst.resize(n_units);
      output.dst_rank.resize(n_units);
      output.dst_slot.resize(n_units);
      output.src_of_dst.resize(n_units);
      gradient.dst_rank.resize(n_units);
      gradient.dst_slot.resize(n_units);
      gradient.src_of_dst.resize(n_units);
      const auto llm_rank = out.llm.dst_ranks();
      // Every unit's entries sit at its own ids (u, h, e), so samples can be written in any order:
      // with parallel stages and many units, the second half on a thread of its own.
      const auto write_samples = [&](std::size_t first, std::size_t last) {
        for (std::size_t g = first; g < last; ++g) {
          if (sub_off[g] == sub_off[g + 1]) continue;
          const rank_t r = llm_rank[g];
          const std::int64_t rank_start = lifted.dst_offsets[static_cast<std::size_t>(r)];
          std::int64_t h = walk_start[g];
          for (auto q = sub_off[g]; q < sub_off[g + 1]; ++q) {
            const auto i = subs[static_cast<std::size_t>(q)];
            for (auto u = first_unit(i); u < first_unit(i + 1); ++u, ++h) {
              const auto uu = static_cast<std::size_t>(u);
              const auto hh = static_cast<std::size_t>(h);
              const auto pe = er.input.destination_of(u);
              const auto e =
                  static_cast<std::size_t>(eoff[static_cast<std::size_t>(pe.rank)] + pe.slot);
              const std::int64_t slot = h - rank_start;
              lifted.dst_rank[uu] = r;
              lifted.dst_slot[uu] = slot;
              lifted.src_of_dst[hh] = u;
              output.dst_rank[e] = r;
              output.dst_slot[e] = slot;
              output.src_of_dst[hh] = static_cast<std::int64_t>(e);
              gradient.dst_rank[hh] = pe.rank;
              gradient.dst_slot[hh] = pe.slot;
              gradient.src_of_dst[e] = h;
            }
          }
        }
      };
      if (options.parallel_stages && n_units >= detail::parallel_min_items) {
        auto second = std::async(std::launch::async, write_samples, n_samples / 2, n_samples);
        write_samples(0, n_samples / 2);
        second.get();
      } else {
        write_samples(0, n_samples);
      }
    }
    // Every unit was written once (lifted.dst_offsets[d] == n_units): its sub-item has one
    // parent sample, on exactly one LLM slot.
    output.dst_offsets = lifted.dst_offsets;
    gradient.src_offsets = lifted.dst_offsets;
    gradient.dst_offsets = output.src_offsets;
    er.lifted = std::move(lifted).assemble();
    er.output = std::move(output).assemble();
    er.gradient = std::move(gradient).assemble();
  };

  // Balance and map the K + 1 stages: independent, so the encoders run on their own threads
  // while this one plans the LLM (each writes only its own plan and report). Each encoder's
  // thread then goes on as far as its plans allow: its input route (on a thread of its own),
  // then, once Π_M exists, its composition and its output and gradient routes; the text route
  // gets its own thread once Π_M exists. So the threads whose stages finish early take the
  // later work, and nothing waits for the slowest stage but that stage's own encoder. Errors
  // are raised in the serial order (LLM, then encoders by index), so every rank and every
  // machine reports the same one whatever the thread timing; the routes' errors after them,
  // from `finish`. Without `parallel_stages` the same steps run on this thread, in order.
  using clock = std::chrono::steady_clock;
  std::optional<detail::step_route_builder> routes;
  if (options.routes_for >= 0)
    routes.emplace(decl, meta, topo, options.routes_for, options.sched, options.parallel_stages);
  std::vector<clock::time_point> stage_end(kc + 1, phase), composed(kc, phase);
  bool llm_ok = false;  // written before llm_ready is released, read after
  std::promise<void> llm_promise;
  const std::shared_future<void> llm_ready = llm_promise.get_future().share();
  std::vector<std::future<void>> encoder_tasks;
  encoder_tasks.reserve(kc);
  // Declared after the tasks, so destroyed before them: whatever unwinds this scope releases
  // the encoders waiting for Π_M before their futures wait for them.
  struct release_on_exit {
    std::promise<void>& p;
    bool done = false;
    void release() {
      if (!std::exchange(done, true)) p.set_value();
    }
    ~release_on_exit() { release(); }
  } llm_release{llm_promise};
  for (std::size_t k = 0; k < kc; ++k)
    encoder_tasks.push_back(std::async(
        options.parallel_stages ? std::launch::async : std::launch::deferred, [&, k] {
          auto& er = out.encoders[k];
          encoder_layout(k);
          er.input = in_stage(decl.encoders[k].name, [&] {
            const auto& split = decl.encoders[k].split;
            return detail::plan_stage(decl.encoders[k], er.layout, topo, out.stages[k],
                                      options.parallel_stages, split ? &*split : nullptr,
                                      &er.pieces);
          });
          stage_end[k] = clock::now();
          std::future<void> input_route;
          if (routes)
            input_route = std::async(
                options.parallel_stages ? std::launch::async : std::launch::deferred,
                [&, k] { routes->input(k, er.input, er.units()); });
          llm_ready.wait();
          if (llm_ok) {
            compose(k);
            composed[k] = clock::now();
            if (routes) routes->outputs(k, er);
          }
          if (input_route.valid()) input_route.get();
        }));
  std::exception_ptr first_error;
  try {
    out.llm = in_stage(decl.llm.name, [&] {
      return detail::plan_stage(decl.llm, out.llm_layout, topo, out.stages[kc],
                                options.parallel_stages);
    });
    stage_end[kc] = clock::now();
    llm_ok = true;
  } catch (...) {
    first_error = std::current_exception();
  }
  llm_release.release();
  // The text route needs Π_M only: on its own thread, beside the rest.
  if (llm_ok && routes) {
    try {
      routes->text(out.llm);
    } catch (...) {
      first_error = std::current_exception();
    }
  }
  for (std::size_t k = 0; k < kc; ++k) {
    try {
      encoder_tasks[k].get();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  // The phases overlap: each runs from the end of the one before to the end of its last task.
  const auto stages_done = *std::max_element(stage_end.begin(), stage_end.end());
  const auto composed_done =
      std::max(stages_done, kc ? *std::max_element(composed.begin(), composed.end()) : phase);
  const auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  out.stages_seconds = seconds(phase, stages_done);
  out.compose_seconds = seconds(stages_done, composed_done);
  if (routes) out.routes = routes->finish(out);
  out.routes_seconds = seconds(composed_done, clock::now());
  out.plan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}
#endif


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
                    const topology& topo, plan_options options = {}) {
  options.routes_for = comm.rank();
  step_plan plan;
  std::exception_ptr failed;
  try {
    plan = plan_step(decl, meta, topo, options);
    // A communicator with its own mover (NCCL's device mover): its scratch for every route of
    // the step, reserved before the agreement, so a failure here is agreed on too.
    if constexpr (mover_providing_communicator<Comm>)
      detail::reserve_scratch(comm.mover(), detail::scratch_reservation(
                                                plan.routes.all, gathering_communicator<Comm>));
  } catch (...) {
    failed = std::current_exception();
  }
  const auto key =
      failed ? std::int64_t{0} : std::bit_cast<std::int64_t>(detail::routes_digest(plan.routes.all));
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
