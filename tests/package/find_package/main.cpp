// Consumer of an installed orchmllm (package.find_package test), built twice: header-only and
// linked to orchmllm::compiled (where balance<quadratic_cost>, compute_statistics and map_bins
// come from the library).
#include <cstdio>
#include <cstring>
#include <orchmllm/orchmllm.hpp>

static_assert(ORCHMLLM_VERSION_MAJOR == 0, "unexpected major version");

int main() {
  const char* v = orchmllm::version_string();
#if defined(ORCHMLLM_COMPILED)
  const char* mode = "compiled";
#else
  const char* mode = "header-only";
#endif
  const auto layout = orchmllm::batch_layout::from_ranks({{900, 20, 30}, {10}, {}, {700}});
  const orchmllm::quadratic_cost cost{0.0, 1.0, 1.0 / 512};
  const auto r = orchmllm::balance(layout, cost);
  const auto s = orchmllm::compute_statistics(layout, r.plan, cost, orchmllm::packed);
  std::printf("orchmllm %s (find_package, %s): makespan %.1f -> %.1f\n", v, mode,
              s.makespan_before, s.makespan);
  return (v != nullptr && std::strlen(v) > 0 && s.makespan < s.makespan_before) ? 0 : 1;
}
