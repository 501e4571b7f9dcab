// orchmllm-bench plan --mapping bottleneck with GLPK: the exact integer program
// (orchmllm/backend/glpk/mapping.hpp) as plan's `glpk_bottleneck_solver`. Compiled into
// orchmllm-bench only where the tool links orchmllm::glpk (ORCHMLLM_ENABLE_GLPK); elsewhere,
// and in the tests' in-process tool, `bottleneck` is the header-only local search.
#include <cstdint>
#include <orchmllm/backend/glpk/mapping.hpp>
#include <span>
#include <utility>

#include "bench/cli/plan.hpp"

namespace orchmllm::tool {
namespace {

void solve_bottleneck_with_glpk(const rearrangement& binned, std::span<const std::int64_t> bytes,
                                const topology& topo, double time_limit, mapped_plan& out) {
  glpk::bottleneck_options opt;
  opt.time_limit_seconds = time_limit;
  auto r = glpk::map_bins_bottleneck(binned, bytes, topo, opt);
  out.result = std::move(r.mapping);
  out.proven_optimal = r.proven_optimal;
}

// Registered before main runs (this unit is part of the executable, so it is always linked).
[[maybe_unused]] const bool registered =
    (glpk_bottleneck_solver() = &solve_bottleneck_with_glpk, true);

}  // namespace
}  // namespace orchmllm::tool
