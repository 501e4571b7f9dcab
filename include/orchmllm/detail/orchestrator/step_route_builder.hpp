#pragma once
// plan_step's route building (orchestrator/orchestrator.hpp): this rank's routes of every
// transfer of a step, built as soon as their plans exist. Not compiled in units that use the
// compiled library (ORCHMLLM_USE_COMPILED): plan_step's body is there.

#include <algorithm>
#include <array>
#include <cstdint>
#include <exception>
#include <future>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/comm/route.hpp"
#include "orchmllm/config.hpp"
#include "orchmllm/detail/core/parallel.hpp"
#include "orchmllm/orchestrator/step_plan.hpp"

namespace orchmllm {

#if !ORCHMLLM_USE_COMPILED
namespace detail {

// This rank's 3K + 1 routes (step_routes' order: K inputs, text, K outputs, K gradients),
// built as soon as their plans exist so that they overlap the rest of the planning: the text
// route on its own thread as soon as Π_M exists (`text`), each input route on its stage's
// thread right after the stage (`input`), the output and gradient routes on up to
// planning_threads() threads at the end (`finish`). Without `parallel` everything runs on the
// calling thread, in order. The routes are the same either way; an error is rethrown from
// `finish`, the first in step_routes' order.
class step_route_builder {
 public:
  step_route_builder(const stage_declarations& decl, const step_metadata& meta,
                     const topology& topo, rank_t me, schedule sched, bool parallel)
      : decl_(decl), meta_(meta), topo_(topo), me_(me), sched_(sched), parallel_(parallel),
        kc_(meta.modalities.size()), routes_(3 * kc_ + 1), errors_(3 * kc_ + 1) {}

  // Starts the text route (Π_M) on its own thread (here without `parallel`); `llm` must stay
  // put until `finish`. The byte products cannot overflow: plan_step's LLM layout checked each
  // of them ("text bytes of sample").
  void text(const rearrangement& llm) {
    const auto build = [this, &llm] {
      run(kc_, [&] {
        std::vector<std::int64_t> bytes(meta_.text_tokens.size());
        for (std::size_t g = 0; g < bytes.size(); ++g)
          bytes[g] = meta_.text_tokens[g] * decl_.llm.text_row_bytes;
        return route::build(llm, bytes, topo_, me_, sched_);
      });
    };
    if (parallel_) {
      text_ = std::async(std::launch::async, build);
    } else {
      build();
    }
  }

  // Builds the input route of encoder k (Π_E_k over its units) here: plan_step calls it on the
  // stage's own thread as soon as the stage is planned, while the other stages still are.
  void input(std::size_t k, const rearrangement& plan, const batch_layout& units) {
    run(k, [&] { return route::build(plan, units.explicit_bytes(), topo_, me_, sched_); });
  }

  // Builds the output and gradient routes, waits for the text route, returns all.
  step_routes finish(const step_plan& plan) {
    // Encoder output bytes by sub-item, once per encoder. The products cannot overflow:
    // plan_step's LLM layout checked each of them ("encoder output bytes of sample").
    // With splitting, by piece: the LLM tokens of its segments (piece_sums).
    std::vector<std::vector<std::int64_t>> origin(kc_);
    for (std::size_t k = 0; k < kc_; ++k) {
      const auto& mod = meta_.modalities[k];
      std::vector<std::int64_t> tokens;
      if (const auto& pieces = plan.encoders[k].pieces) {
        std::vector<std::int64_t> per_segment;
        per_segment.reserve(static_cast<std::size_t>(pieces->items().total_segments()));
        for (std::size_t i = 0; i < mod.llm_tokens.size(); ++i) {
          const std::int64_t s = mod.segments_of(static_cast<std::int64_t>(i));
          per_segment.insert(per_segment.end(), static_cast<std::size_t>(s),
                             mod.llm_tokens[i] / s);
        }
        tokens = pieces->piece_sums(per_segment);
      }
      const auto& t = plan.encoders[k].pieces ? tokens : mod.llm_tokens;
      origin[k].resize(t.size());
      for (std::size_t i = 0; i < t.size(); ++i)
        origin[k][i] = t[i] * decl_.encoders[k].output_row_bytes;
    }
    detail::run_indexed(2 * kc_, parallel_ ? detail::planning_threads() : 1, [&](std::size_t t) {
      const std::size_t k = t % kc_;
      const bool output = t < kc_;
      run(output ? kc_ + 1 + k : 2 * kc_ + 1 + k, [&] {
        // The bytes carried along a plan (an item keeps its bytes): into Π_E_k's destination
        // order for the output route, into Π_M's (the lift L_k) for the gradient route.
        const auto& er = plan.encoders[k];
        return output ? route::build(er.output, orchmllm::apply(er.input, origin[k]), topo_,
                                     me_, sched_)
                      : route::build(er.gradient, orchmllm::apply(er.lifted, origin[k]), topo_,
                                     me_, sched_);
      });
    });
    if (text_.valid()) text_.get();
    for (auto& e : errors_)
      if (e) std::rethrow_exception(e);
    step_routes out;
    out.rank = me_;
    out.all = std::move(routes_);
    return out;
  }

 private:
  template <class F>
  void run(std::size_t slot, F&& build) {
    try {
      routes_[slot] = build();
    } catch (...) {
      errors_[slot] = std::current_exception();
    }
  }

  const stage_declarations& decl_;
  const step_metadata& meta_;
  const topology& topo_;
  rank_t me_;
  schedule sched_;
  bool parallel_;
  std::size_t kc_;
  std::vector<route> routes_;
  std::vector<std::exception_ptr> errors_;
  std::future<void> text_;  // the text route's task (`run` keeps its errors: get() never throws)
};

}  // namespace detail
#endif

}  // namespace orchmllm
