#pragma once
// Shared by the tests of orchmllm::balance (tests/balance/balancer_*_test.cpp): random inputs
// (fixed seeds; own distributions so the numbers are the same everywhere) — layouts with uniform
// or lognormal-ish lengths, limits around the per-rank average, bucketed policies, the trainer's
// own padding rules — and the balancer of the random runs by name.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/padding.hpp"
#include "support/padding_rules.hpp"
#include "support/test_support.hpp"

namespace orchmllm::test::balancer_fixtures {

// n items spread at random over d source ranks, lengths in [min_len, max_len], optional bytes.
inline batch_layout random_layout(std::mt19937_64& rng, rank_t d, std::int64_t n,
                                  std::int64_t min_len, std::int64_t max_len,
                                  bool with_bytes = false) {
  std::vector<std::vector<std::int64_t>> lengths(static_cast<std::size_t>(d));
  std::vector<std::vector<std::int64_t>> bytes(static_cast<std::size_t>(d));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(uniform(rng, 0, d - 1));
    lengths[r].push_back(uniform(rng, min_len, max_len));
    bytes[r].push_back(uniform(rng, 0, 3 * max_len));
  }
  return with_bytes ? batch_layout::from_ranks(lengths, bytes) : batch_layout::from_ranks(lengths);
}

// Lognormal-ish lengths (exp of a uniform), many ranks, some of them empty.
inline batch_layout skewed_layout(std::mt19937_64& rng, rank_t d, std::int64_t max_per_rank,
                                  bool with_bytes) {
  std::vector<std::vector<std::int64_t>> lengths(static_cast<std::size_t>(d));
  std::vector<std::vector<std::int64_t>> bytes(static_cast<std::size_t>(d));
  for (auto& v : lengths) {
    const auto k = uniform(rng, 0, max_per_rank);
    for (std::int64_t i = 0; i < k; ++i) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      v.push_back(static_cast<std::int64_t>(std::exp(1.0 + 5.0 * u)) - 2);  // 0 .. ~400
      if (v.back() < 0) v.back() = 0;
    }
  }
  for (std::size_t r = 0; r < lengths.size(); ++r)
    for (auto l : lengths[r]) bytes[r].push_back(2 * l + uniform(rng, 0, 16));
  return with_bytes ? batch_layout::from_ranks(lengths, bytes) : batch_layout::from_ranks(lengths);
}

// The balancer of this suite's random runs named `name`: lpt and karmarkar_karp refined when
// `refine`, a small exact search budget (keeps the debug build fast; optimality is tested in
// balancer_optimality_test.cpp).
inline any_balancer suite_balancer(std::string_view name, bool refine) {
  any_balancer b = parse_balancer(name);
  if (auto* x = b.get_if<balancers::lpt>()) x->refine = refine;
  if (auto* x = b.get_if<balancers::karmarkar_karp>()) x->refine = refine;
  if (auto* x = b.get_if<balancers::exact>()) x->node_budget = 20'000;
  if (auto* x = b.get_if<balancers::automatic>()) x->exact_node_budget = 20'000;
  return b;
}

// Random limits for a small instance: caps in tokens around the per-rank average (sometimes
// impossible), min/max item counts (sometimes crossing the obvious bounds).
inline constraints random_limits(std::mt19937_64& rng, const batch_layout& layout,
                                 padding_policy policy) {
  constraints lim;
  const std::int64_t n = layout.num_items();
  const std::int64_t d = layout.num_ranks();
  const auto kind = uniform(rng, 0, 3);
  if (kind == 0 || kind == 3) {
    std::int64_t total = 0, largest = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      total += policy.padded_length(layout.length(g));
      largest = std::max(largest, policy.padded_length(layout.length(g)));
    }
    const std::int64_t avg = (total + d - 1) / d;
    lim.cap = capacity{capacity::measure::tokens,
                       std::max<std::int64_t>(
                           0, std::max(largest, avg) +
                                  uniform(rng, -2, 2) * std::max<std::int64_t>(1, largest / 2))};
  }
  if (kind == 1 || kind == 3) {
    lim.min_items = uniform(rng, 0, 2);
    if (uniform(rng, 0, 1) == 0) {
      const std::int64_t even = d > 0 ? (n + d - 1) / d : 0;
      lim.max_items = std::max<std::int64_t>(lim.min_items, even + uniform(rng, -1, 1));
    }
  }
  if (kind == 2) lim.max_items = std::max<std::int64_t>(1, uniform(rng, 1, 4));
  return lim;
}

// A bucketed policy of 1..4 random strictly increasing bucket lengths whose largest covers
// every item of `layout` (so balancing it is legal), the smallest possibly below most lengths.
inline padding_policy random_buckets(std::mt19937_64& rng, const batch_layout& layout) {
  std::int64_t longest = 1;
  for (const auto l : layout.lengths()) longest = std::max(longest, l);
  std::vector<std::int64_t> b{longest + uniform(rng, 0, 3)};
  for (auto m = uniform(rng, 0, 3); m > 0 && b.front() > 1; --m)
    b.insert(b.begin(), uniform(rng, 1, b.front() - 1));
  return bucketed(b);
}

// The trainer's own padding rules (support/padding_rules.hpp).
inline std::vector<padding_policy> user_policies(std::mt19937_64& rng) {
  return {next_pow2{}, at_least{uniform(rng, 0, 12)}, steps{}};
}

}  // namespace orchmllm::test::balancer_fixtures
