#pragma once
// Shared by the tests of the heuristic balancers (tests/balance/heuristics_*_test.cpp): whether
// the build is sanitized (test_support.hpp; smaller large cases), random layouts with deliberate
// ties and zeros (fixed seeds; own distributions so the numbers are the same everywhere), the cost
// model of a TEST_CASE_TEMPLATE instantiation, the heuristics by name, comparisons with a few ulps
// of slack for floating costs, and every invariant of a façade result checked against oracles from
// support/test_support.hpp.

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/statistics.hpp"
#include "support/test_support.hpp"

namespace orchmllm::test::heuristics_fixtures {

using orchmllm::test::sanitized;

// Lengths with deliberate ties and zeros: small alphabets make equal costs common.
inline batch_layout random_layout(std::mt19937_64& rng, rank_t d, std::int64_t n,
                                  std::int64_t max_len, bool with_bytes) {
  auto offsets = random_offsets(rng, d, n);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(n)), bytes;
  const bool tiny_alphabet = uniform(rng, 0, 3) == 0;
  for (auto& l : lengths) {
    l = tiny_alphabet ? uniform(rng, 0, 3) : uniform(rng, 0, max_len);
    if (uniform(rng, 0, 9) == 0) l = 0;
  }
  if (with_bytes) {
    bytes.resize(lengths.size());
    for (auto& b : bytes) b = uniform(rng, 0, 50);
  }
  return batch_layout(std::move(offsets), std::move(lengths), std::move(bytes));
}

// The cost model of one TEST_CASE_TEMPLATE instantiation: linear_cost{weight} or `quadratic`.
template <class C>
C pick_cost(std::int64_t weight, quadratic_cost quadratic) {
  if constexpr (std::is_same_v<C, linear_cost>)
    return linear_cost{weight};
  else
    return quadratic;
}

// The heuristic balancer named `name` (lpt, karmarkar_karp or karmarkar_karp_equal), refined
// or not.
inline any_balancer heuristic(std::string_view name, bool refine) {
  any_balancer b = parse_balancer(name);
  if (auto* x = b.get_if<balancers::lpt>()) x->refine = refine;
  if (auto* x = b.get_if<balancers::karmarkar_karp>()) x->refine = refine;
  if (auto* x = b.get_if<balancers::karmarkar_karp_equal>()) x->refine = refine;
  return b;
}

// The three heuristics.
inline constexpr std::array<std::string_view, 3> heuristics{
    balancers::lpt::name, balancers::karmarkar_karp::name, balancers::karmarkar_karp_equal::name};

// a >= b, up to a few ulps of summation order for floating costs (the brute force, the façade
// and the lower bound add the same costs in different orders).
template <class Cost>
bool cost_at_least(Cost a, Cost b) {
  if constexpr (std::is_integral_v<Cost>) {
    return a >= b;
  } else {
    return a >= b * (1 - 1e-12);
  }
}

template <class Cost>
bool within(Cost value, double factor, Cost reference) {
  if constexpr (std::is_integral_v<Cost>) {
    return static_cast<double>(value) <= factor * static_cast<double>(reference) + 1e-9;
  } else {
    return value <= factor * reference * (1 + 1e-12) + 1e-12;
  }
}

// Asserts every invariant of a façade result; returns its destination ranks.
template <class C>
std::vector<rank_t> check_result(const batch_layout& layout, const C& cost, padding_policy policy,
                                 const constraints& lim,
                                 const balance_result<cost_type_t<C>>& res) {
  const rank_t d = layout.num_ranks();
  res.plan.validate();
  REQUIRE(res.plan.num_items() == layout.num_items());
  REQUIRE(res.plan.num_dst_ranks() == d);
  // Every item exactly once: the destination slots of each rank are a permutation.
  std::vector<std::int64_t> seen(static_cast<std::size_t>(layout.num_items()), 0);
  for (std::int64_t h = 0; h < layout.num_items(); ++h)
    ++seen[static_cast<std::size_t>(res.plan.source_of(h))];
  CHECK(std::all_of(seen.begin(), seen.end(), [](auto c) { return c == 1; }));
  const std::vector<rank_t> dst(res.plan.dst_ranks().begin(), res.plan.dst_ranks().end());
  const auto f = figures(layout, std::span<const rank_t>(dst), d, cost, policy);
  CHECK(honours(f, lim));
  CHECK(max_of(f.load) == res.makespan);
  const auto stats = compute_statistics(layout, res.plan, cost, policy, lim);
  CHECK(stats.makespan == res.makespan);
  CHECK(stats.lower_bound == res.lower_bound);
  CHECK(cost_at_least(res.makespan, res.lower_bound));
  return dst;
}

}  // namespace orchmllm::test::heuristics_fixtures
