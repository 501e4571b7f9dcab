#pragma once
// The built-in balancers' names and knob checks (balance/balancers.hpp, which includes this file
// at its end): `parse_balancer` and `detail::check_balancer`.

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/detail/core/text.hpp"

namespace orchmllm {

inline any_balancer parse_balancer(std::string_view name) {
#define ORCHMLLM_DETAIL_PARSE(B) \
  if (name == balancers::B::name) return balancers::B{};
  ORCHMLLM_DETAIL_FOR_BUILTIN_BALANCERS(ORCHMLLM_DETAIL_PARSE)
#undef ORCHMLLM_DETAIL_PARSE
  std::string names;
  for (const auto n : balancer_names()) names += (names.empty() ? "" : ", ") + std::string(n);
  // The short names of the command-line tool before the names were the types' own.
  constexpr std::string_view former[][2] = {{"none", "identity"},
                                            {"kk", "karmarkar_karp"},
                                            {"kk-equal", "karmarkar_karp_equal"},
                                            {"padded", "padded_exact"},
                                            {"auto", "automatic"}};
  std::string hint;
  for (const auto& f : former)
    if (name == f[0]) hint = detail::concat(" (did you mean '", f[1], "'?)");
  detail::raise<invalid_argument_error>(detail::concat(
      "unknown balancer ", detail::quote_text(name), hint, "; expected one of: ", names));
}

namespace detail {

/// `check_balancer` on one built-in's knobs.
template <class B>
void check_knobs(const B& x, padding_policy policy, rank_t d, std::string_view what = {}) {
  {
    const auto budget = [&](std::int64_t refine_budget) {
      ORCHMLLM_REQUIRE(refine_budget >= -1, invalid_argument_error, what, B::name,
                       ": refine_budget is ", refine_budget, ", must be >= -1");
    };
    const auto tolerance = [&](double t, std::string_view knob) {
      ORCHMLLM_REQUIRE(std::isfinite(t) && t >= 0, invalid_argument_error, what, B::name, ": ",
                       knob, " is ", t, ", must be finite and >= 0");
    };
    const auto automatic = [&](const balancers::automatic& a) {
      budget(a.refine_budget);
      ORCHMLLM_REQUIRE(a.exact_node_budget >= 0 && a.exact_max_items >= 0, invalid_argument_error,
                       what, B::name, ": exact_node_budget ", a.exact_node_budget,
                       " and exact_max_items ", a.exact_max_items, " must be >= 0");
      tolerance(a.gap_tolerance, "gap_tolerance");
    };
    if constexpr (std::is_same_v<B, balancers::lpt> || std::is_same_v<B, balancers::padded_exact>) {
      budget(x.refine_budget);
    } else if constexpr (std::is_same_v<B, balancers::karmarkar_karp> ||
                         std::is_same_v<B, balancers::karmarkar_karp_equal>) {
      budget(x.refine_budget);
      ORCHMLLM_REQUIRE(!policy.is_padded(), invalid_argument_error, what, B::name,
                       " balances the packed policy only; use padded_exact or automatic for "
                       "padded batches");
    } else if constexpr (std::is_same_v<B, balancers::exact>) {
      ORCHMLLM_REQUIRE(x.node_budget >= 0, invalid_argument_error, what, B::name,
                       ": node_budget is ", x.node_budget, ", must be >= 0");
    } else if constexpr (std::is_same_v<B, balancers::automatic>) {
      automatic(x);
    } else if constexpr (std::is_same_v<B, balancers::locality>) {
      automatic(x.base);
      tolerance(x.tolerance, "tolerance");
      if (d < 0) {
        for (const auto r : x.node_of_rank)
          ORCHMLLM_REQUIRE(r >= 0, invalid_argument_error, what, B::name, ": node_of_rank holds ",
                           r);
        return;
      }
      ORCHMLLM_REQUIRE(
          x.node_of_rank.empty() || x.node_of_rank.size() == static_cast<std::size_t>(d),
          invalid_argument_error, what, B::name, ": node_of_rank has ", x.node_of_rank.size(),
          " entries, expected ", d, " (one per rank) or none");
      for (std::size_t r = 0; r < x.node_of_rank.size(); ++r)
        ORCHMLLM_REQUIRE(x.node_of_rank[r] >= 0 && x.node_of_rank[r] < d, invalid_argument_error,
                         what, B::name, ": node_of_rank[", r, "] is ", x.node_of_rank[r],
                         ", must be a node id in [0, ", d,
                         ") (node ids are dense: 0, 1, … per distinct node)");
    }
    if constexpr (std::is_same_v<B, balancers::padded_exact>) {
      ORCHMLLM_REQUIRE(policy.is_padded(), invalid_argument_error, what, B::name,
                       " needs a padded policy; use lpt, karmarkar_karp or automatic for packed "
                       "batches");
    }
  }
}

/// Sets the gap tolerance of a parsed balancer that has one (`automatic`, and `locality`'s
/// base): the knob the command-line tool and the Python package take by name. O(1).
inline void set_gap_tolerance(any_balancer& b, double gap) {
  if (auto* a = b.get_if<balancers::automatic>()) a->gap_tolerance = gap;
  if (auto* l = b.get_if<balancers::locality>()) l->base.gap_tolerance = gap;
}

inline void check_balancer(const any_balancer& b, padding_policy policy, rank_t d,
                           std::string_view what) {
  b.visit([&](const auto& x) { check_knobs(x, policy, d, what); });
}

}  // namespace detail
}  // namespace orchmllm
