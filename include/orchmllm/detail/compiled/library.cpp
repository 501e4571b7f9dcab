// The one translation unit of the compiled library, orchmllm::compiled (see orchmllm/config.hpp
// and docs/design.md, "Header-only or compiled"), built by cmake/orchmllm_compiled.cmake with
// ORCHMLLM_COMPILED_BUILD defined; `map_bins` and `plan_step` are defined here by their own
// headers. Every entry point runs the header-only algorithm on a type-erased model
// (`detail::cost_ref`), one instantiation per computation type. Not installed.

#if !defined(ORCHMLLM_COMPILED_BUILD)
#error \
    "orchmllm/detail/compiled/library.cpp is the compiled library's own source; link orchmllm::compiled"
#endif

#include "orchmllm/orchmllm.hpp"

namespace orchmllm::detail {

#define ORCHMLLM_DETAIL_DEFINE_ENTRY_POINTS(T)                                                   \
  balance_result<T> balance_compiled(const batch_layout& layout, cost_ref<T> cost,               \
                                     padding_policy policy, const any_balancer& b,               \
                                     const constraints& limits) {                                \
    return balance_with(layout, cost, policy, b, limits);                                        \
  }                                                                                              \
  balance_result<T> balance_custom_compiled(const batch_layout& layout, cost_ref<T> cost,        \
                                            padding_policy policy, const constraints& limits,    \
                                            const erased_balancer<T>& b) {                       \
    return balance_with(layout, cost, policy, b, limits);                                        \
  }                                                                                              \
  balancer_plan builtin_compiled(const balance_problem<cost_ref<T>>& p, const any_balancer& b) { \
    return b.visit([&](const auto& x) { return search(x, p).plan; });                            \
  }                                                                                              \
  std::vector<T> rank_loads_compiled(const batch_layout& layout, cost_ref<T> cost,               \
                                     padding_policy policy) {                                    \
    return rank_loads_impl(layout, cost, policy);                                                \
  }                                                                                              \
  std::vector<T> rank_loads_compiled(const batch_layout& layout, const rearrangement& plan,      \
                                     cost_ref<T> cost, padding_policy policy) {                  \
    return rank_loads_impl(layout, plan, cost, policy);                                          \
  }                                                                                              \
  T makespan_lower_bound_compiled(const batch_layout& layout, rank_t d, cost_ref<T> cost,        \
                                  padding_policy policy, const constraints& limits) {            \
    return makespan_lower_bound_impl(layout, d, cost, policy, limits);                           \
  }                                                                                              \
  plan_statistics<T> compute_statistics_compiled(                                                \
      const batch_layout& layout, const rearrangement& plan, cost_ref<T> cost,                   \
      padding_policy policy, const constraints& limits) {                                        \
    return compute_statistics_impl(layout, plan, cost, policy, limits);                          \
  }
ORCHMLLM_DETAIL_FOR_COST_TYPES(ORCHMLLM_DETAIL_DEFINE_ENTRY_POINTS)
#undef ORCHMLLM_DETAIL_DEFINE_ENTRY_POINTS

}  // namespace orchmllm::detail
