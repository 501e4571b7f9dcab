#pragma once
// `stage_declarations::validate`, included by orchestrator/stages.hpp at its end: every stage's
// name, row widths, limits, built-in balancer knobs, split and micro-batch options checked, the
// first fault raised naming its stage.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "orchmllm/core/error.hpp"

namespace orchmllm {

inline void stage_declarations::validate() const {
  auto check_stage = [](const std::string& name, const auto& stage) {
    const std::string what = detail::concat("stage '", name, "': ");
    // d is not known here: node ids are checked for sign, their count by plan_step.
    if (const auto* b = stage.balancer.builtin())
      detail::check_balancer(*b, stage.policy, -1, what);
    const constraints& l = stage.limits;
    ORCHMLLM_REQUIRE(!l.cap || l.cap->limit >= 0, invalid_argument_error, what, "per-rank cap ",
                     l.cap ? l.cap->limit : 0, " is negative");
    ORCHMLLM_REQUIRE(l.min_items >= 0 && l.max_items >= l.min_items, invalid_argument_error, what,
                     "items per rank ", l.min_items, "..", l.max_items, " is not a valid range");
    if (stage.micro_batches) {
      try {
        detail::check_micro_batching(*stage.micro_batches);
      } catch (const invalid_argument_error& err) {
        detail::raise<invalid_argument_error>(detail::concat(what, err.message()));
      }
      ORCHMLLM_REQUIRE(!stage.balancer.custom(), invalid_argument_error, what,
                       "micro-batches need a built-in balancer, not the application's '",
                       stage.balancer.name(), "'");
    }
  };
  std::vector<std::string_view> names;
  for (const auto& e : encoders) {
    ORCHMLLM_REQUIRE(!e.name.empty(), invalid_argument_error, "an encoder stage has no name");
    ORCHMLLM_REQUIRE(e.input_row_bytes >= 0 && e.output_row_bytes >= 0, invalid_argument_error,
                     "stage '", e.name, "': row widths ", e.input_row_bytes, " and ",
                     e.output_row_bytes, " must be >= 0");
    check_stage(e.name, e);
    ORCHMLLM_REQUIRE(!(e.split && e.micro_batches), invalid_argument_error, "stage '", e.name,
                     "': split and micro_batches cannot be combined");
    if (e.split) {
      try {
        detail::check_split_options<double>(*e.split);
      } catch (const invalid_argument_error& err) {
        detail::raise<invalid_argument_error>(
            detail::concat("stage '", e.name, "': ", err.message()));
      }
      ORCHMLLM_REQUIRE(!e.balancer.custom(), invalid_argument_error, "stage '", e.name,
                       "': splitting needs a built-in balancer, not the application's '",
                       e.balancer.name(), "'");
    }
    names.push_back(e.name);
  }
  ORCHMLLM_REQUIRE(!llm.name.empty(), invalid_argument_error, "the LLM stage has no name");
  ORCHMLLM_REQUIRE(llm.text_row_bytes >= 0, invalid_argument_error, "stage '", llm.name,
                   "': text row width ", llm.text_row_bytes, " must be >= 0");
  check_stage(llm.name, llm);
  names.push_back(llm.name);
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t j = i + 1; j < names.size(); ++j)
      ORCHMLLM_REQUIRE(names[i] != names[j], invalid_argument_error, "two stages are named '",
                       names[i], "'");
}

}  // namespace orchmllm
