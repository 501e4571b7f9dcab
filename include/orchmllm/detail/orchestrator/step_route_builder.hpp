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
// route on its own thread as soon as Π_M exists (`text`), each input route as soon as its
// stage is planned (`input`, called on a thread of its own by plan_step), and each encoder's
// output and gradient routes as soon as its plans are composed (`outputs`, the two side by
// side); `finish` builds the outputs of the encoders not done yet and waits for the text route.
// Without `parallel` everything runs on the calling thread, in order. The routes are the same
// either way (each call writes only its own slots); an error is rethrown from `finish`, the
// first in step_routes' order.
class step_route_builder {
 public:
  step_route_builder(const stage_declarations& decl, const step_metadata& meta,
                     const topology& topo, rank_t me, schedule sched, bool parallel)
      : decl_(decl),
        meta_(meta),
        topo_(topo),
        me_(me),
        sched_(sched),
        parallel_(parallel),
        kc_(meta.modalities.size()),
        routes_(3 * kc_ + 1),
        errors_(3 * kc_ + 1),
        outputs_done_(kc_, 0) {}

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

  // Builds the input route of encoder k (Π_E_k over its units) here: plan_step calls it on a
  // thread of its own as soon as the stage is planned, beside the composition and the other
  // stages.
  void input(std::size_t k, const rearrangement& plan, const batch_layout& units) {
    run(k, [&] { return route::build(plan, units.explicit_bytes(), topo_, me_, sched_); });
  }

  // Builds encoder k's output and gradient routes from its composed plans (`er`: output,
  // gradient, and the input and lift that carry the bytes), side by side with `parallel` (one
  // on this thread, one on a second). Encoder output bytes by sub-item; with splitting, by
  // piece (the LLM tokens of its segments: piece_sums). The products cannot overflow:
  // plan_step's LLM layout checked each of them ("encoder output bytes of sample").
  void outputs(std::size_t k, const encoder_routes& er) {
    const auto& mod = meta_.modalities[k];
    std::vector<std::int64_t> tokens;
    if (const auto& pieces = er.pieces) {
      std::vector<std::int64_t> per_segment;
      per_segment.reserve(static_cast<std::size_t>(pieces->items().total_segments()));
      for (std::size_t i = 0; i < mod.llm_tokens.size(); ++i) {
        const std::int64_t s = mod.segments_of(static_cast<std::int64_t>(i));
        per_segment.insert(per_segment.end(), static_cast<std::size_t>(s), mod.llm_tokens[i] / s);
      }
      tokens = pieces->piece_sums(per_segment);
    }
    const auto& t = er.pieces ? tokens : mod.llm_tokens;
    std::vector<std::int64_t> origin(t.size());
    for (std::size_t i = 0; i < t.size(); ++i)
      origin[i] = t[i] * decl_.encoders[k].output_row_bytes;
    // The bytes carried along a plan (an item keeps its bytes): into Π_E_k's destination order
    // for the output route, into Π_M's (the lift L_k) for the gradient route.
    detail::run_indexed(2, parallel_ ? 2 : 1, [&](std::size_t which) {
      if (which == 0) {
        run(kc_ + 1 + k, [&] {
          return route::build(er.output, orchmllm::apply(er.input, origin), topo_, me_, sched_);
        });
      } else {
        run(2 * kc_ + 1 + k, [&] {
          return route::build(er.gradient, orchmllm::apply(er.lifted, origin), topo_, me_, sched_);
        });
      }
    });
    outputs_done_[k] = 1;
  }

  // Builds the output and gradient routes of the encoders `outputs` has not done, waits for the
  // text route, returns all.
  step_routes finish(const step_plan& plan) {
    std::vector<std::size_t> pending;
    for (std::size_t k = 0; k < kc_; ++k)
      if (!outputs_done_[k]) pending.push_back(k);
    detail::run_indexed(pending.size(), parallel_ ? detail::planning_threads() : 1,
                        [&](std::size_t i) { outputs(pending[i], plan.encoders[pending[i]]); });
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
  std::vector<char> outputs_done_;  // per encoder: `outputs` ran (each written by its caller)
  std::future<void> text_;  // the text route's task (`run` keeps its errors: get() never throws)
};

}  // namespace detail
#endif

}  // namespace orchmllm
