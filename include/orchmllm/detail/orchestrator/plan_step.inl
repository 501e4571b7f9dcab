#pragma once
// The definition of the pure `plan_step`, included by orchestrator/orchestrator.hpp at its end: the
// K + 1 stages balanced and mapped side by side, each encoder then composed with Π_M and, with
// `plan_options::routes_for`, this rank's routes built as soon as their plans exist. A unit that
// uses the compiled library (ORCHMLLM_USE_COMPILED) does not compile it: it is defined there once.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <future>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/core/checked.hpp"
#include "orchmllm/detail/orchestrator/compose_encoder.hpp"
#include "orchmllm/detail/orchestrator/plan_stage.hpp"
#include "orchmllm/detail/orchestrator/stage_layouts.hpp"
#include "orchmllm/detail/orchestrator/step_route_builder.hpp"

namespace orchmllm {

#if !ORCHMLLM_USE_COMPILED
namespace detail {

// The step's loss tokens and those of every LLM cell (rank, micro-batch), from Π_M and the LLM
// stage's micro-batches. O(samples + d·M).
inline void count_loss_tokens(const step_metadata& meta, step_plan& out) {
  const stage_micro_batches& cells = out.micro_batches.back();
  const std::span<const std::int64_t> offsets =
      cells.count > 0 ? std::span<const std::int64_t>(cells.offsets) : out.llm.dst_offsets();
  const auto sources = out.llm.sources();
  out.micro_batch_loss_tokens.assign(offsets.size() - 1, 0);
  out.loss_tokens = 0;
  for (std::size_t c = 0; c + 1 < offsets.size(); ++c) {
    std::int64_t sum = 0;
    for (auto h = offsets[c]; h < offsets[c + 1]; ++h)
      sum = checked_add(sum, meta.loss_tokens_of(sources[static_cast<std::size_t>(h)]),
                        "the loss tokens of the step");
    out.micro_batch_loss_tokens[c] = sum;
    out.loss_tokens = checked_add(out.loss_tokens, sum, "the loss tokens of the step");
  }
}

}  // namespace detail

// The K + 1 stages are independent, so the encoders run on their own threads while this one
// plans the LLM (each writes only its own plan and report). Each encoder's thread then goes on
// as far as its plans allow: its input route (on a thread of its own), then, once Π_M exists,
// its composition and its output and gradient routes; the text route gets its own thread once
// Π_M exists. So the threads whose stages finish early take the later work, and nothing waits
// for the slowest stage but that stage's own encoder. Errors are raised in the serial order
// (LLM, then encoders by index), so every rank and every machine reports the same one whatever
// the thread timing; the routes' errors after them, from `finish`. Without `parallel_stages`
// the same steps run on this thread, in order.
ORCHMLLM_FUNC step_plan plan_step(const stage_declarations& decl, const step_metadata& meta,
                                  const topology& topo, const plan_options& options) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
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
  out.micro_batches.resize(kc + 1);
  auto in_stage = [](const std::string& name, auto&& f) {
    try {
      return f();
    } catch (const infeasible_error& e) {
      detail::raise<infeasible_error>(detail::concat("stage '", name, "': ", e.message()));
    } catch (const invalid_argument_error& e) {  // e.g. a cost model's negative cost
      detail::raise<invalid_argument_error>(detail::concat("stage '", name, "': ", e.message()));
    }
  };
  const auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };

  // The LLM stage's layout here; each encoder stage's on its own thread.
  out.llm_layout = detail::llm_stage_layout(decl, meta);
  out.encoders.resize(kc);
  const auto phase = clock::now();
  out.layout_seconds = seconds(start, phase);

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
  const auto launch = options.parallel_stages ? std::launch::async : std::launch::deferred;
  for (std::size_t k = 0; k < kc; ++k)
    encoder_tasks.push_back(std::async(launch, [&, k] {
      auto& er = out.encoders[k];
      er.layout = detail::encoder_stage_layout(decl, meta, k);
      er.input = in_stage(decl.encoders[k].name, [&] {
        const auto& split = decl.encoders[k].split;
        return detail::plan_stage(decl.encoders[k], er.layout, topo, out.stages[k],
                                  out.micro_batches[k], options.parallel_stages,
                                  split ? &*split : nullptr, &er.pieces);
      });
      stage_end[k] = clock::now();
      std::future<void> input_route;
      if (routes)
        input_route = std::async(launch, [&, k] { routes->input(k, er.input, er.units()); });
      llm_ready.wait();
      if (llm_ok) {
        detail::compose_encoder_plans(meta, k, out.llm, d, options.parallel_stages, er);
        composed[k] = clock::now();
        if (routes) routes->outputs(k, er);
      }
      if (input_route.valid()) input_route.get();
    }));
  std::exception_ptr first_error;
  try {
    out.llm = in_stage(decl.llm.name, [&] {
      return detail::plan_stage(decl.llm, out.llm_layout, topo, out.stages[kc],
                                out.micro_batches[kc], options.parallel_stages);
    });
    stage_end[kc] = clock::now();
    detail::count_loss_tokens(meta, out);
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
  out.stages_seconds = seconds(phase, stages_done);
  out.compose_seconds = seconds(stages_done, composed_done);
  if (routes) out.routes = routes->finish(out);
  out.routes_seconds = seconds(composed_done, clock::now());
  out.plan_seconds = seconds(start, clock::now());
  return out;
}

ORCHMLLM_FUNC step_routes build_routes(const step_plan& step, const stage_declarations& decl,
                                       const step_metadata& meta, const topology& topo, rank_t rank,
                                       schedule sched) {
  ORCHMLLM_REQUIRE(rank >= 0 && rank < topo.num_ranks(), invalid_argument_error,
                   "build_routes: rank ", rank, " outside [0, ", topo.num_ranks(), ")");
  ORCHMLLM_REQUIRE(meta.ranks == topo.num_ranks() && step.llm.num_dst_ranks() == topo.num_ranks(),
                   invalid_argument_error, "build_routes: a step of ", step.llm.num_dst_ranks(),
                   " ranks and metadata of ", meta.ranks, " for a topology of ", topo.num_ranks());
  ORCHMLLM_REQUIRE(step.encoders.size() == decl.encoders.size() &&
                       meta.modalities.size() == decl.encoders.size(),
                   invalid_argument_error, "build_routes: a step of ", step.encoders.size(),
                   " encoder stages and metadata of ", meta.modalities.size(),
                   " modalities for declarations of ", decl.encoders.size());
  detail::step_route_builder b(decl, meta, topo, rank, sched, false);
  b.text(step.llm);
  for (std::size_t k = 0; k < step.encoders.size(); ++k)
    b.input(k, step.encoders[k].input, step.encoders[k].units());
  return b.finish(step);
}
#endif

}  // namespace orchmllm
