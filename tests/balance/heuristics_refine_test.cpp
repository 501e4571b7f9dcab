// Tests of the refinement pass of the heuristic balancers (detail/balance/refine.hpp): its rank
// order (the heaviest and its partners as a sorted set would give them), and that it keeps every
// constraint and never raises the makespan, deterministically.

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <random>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/balance/kk.hpp"
#include "orchmllm/detail/balance/lpt.hpp"
#include "orchmllm/detail/balance/refine.hpp"
#include "support/heuristics_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using namespace orchmllm::test;                       // support/test_support.hpp
using namespace orchmllm::test::heuristics_fixtures;  // support/heuristics_fixtures.hpp

}  // namespace

TEST_CASE("refine's rank order: the heaviest and its partners as a sorted set would give them") {
  // refine_state keeps the ranks in two heaps with stale entries; the specification is a set
  // ordered by (load, then higher index first) as the file comment states: the heaviest is the
  // last entry, the partners the first ones (skipping the heaviest, stopping at its load, at
  // most refine_partners). Random loads with many ties; some steps apply (new loads, some tied).
  std::mt19937_64 rng(0x0bde);
  using pair_t = std::pair<double, rank_t>;
  struct by_load {
    bool operator()(const pair_t& a, const pair_t& b) const {
      return a.first < b.first || (a.first == b.first && a.second > b.second);
    }
  };
  int applied_total = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 2, 40));
    const std::int64_t n = uniform(rng, 0, 3 * d);
    const auto layout = random_layout(rng, d, n, 50, false);
    std::vector<double> costs(static_cast<std::size_t>(n), 1.0);
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    const constraints lim;
    const detail::balance_input<double> in{layout, d, costs, order, packed, lim};
    std::vector<rank_t> assignment(static_cast<std::size_t>(n));
    for (auto& a : assignment) a = static_cast<rank_t>(uniform(rng, 0, d - 1));
    detail::refine_state<double> s(in, assignment);
    std::vector<double> load(static_cast<std::size_t>(d));
    for (auto& x : load) x = static_cast<double>(uniform(rng, 0, 6));
    s.load = load;
    s.index_ranks();
    // Decisions and new loads fixed in advance, read by call number by both sides.
    std::vector<int> apply(400);
    std::vector<double> new_loads(800);
    for (auto& a : apply) a = uniform(rng, 0, 3) == 0 ? 1 : 0;
    for (auto& x : new_loads) x = static_cast<double>(uniform(rng, 0, 6));
    const std::int64_t budget = uniform(rng, 1, 30);
    const double target = static_cast<double>(uniform(rng, -1, 3));

    std::vector<std::pair<rank_t, rank_t>> got, want;
    std::size_t call = 0, applied = 0;
    s.run(budget, target, [&](rank_t h, rank_t l) {
      got.emplace_back(h, l);
      if (!apply[call++ % apply.size()]) return false;
      s.set_loads(h, new_loads[2 * applied % 800], l, new_loads[(2 * applied + 1) % 800]);
      ++applied;
      return true;
    });
    // The reference, with the same decisions.
    std::set<pair_t, by_load> ranks;
    for (rank_t r = 0; r < d; ++r) ranks.insert({load[static_cast<std::size_t>(r)], r});
    call = 0;
    std::size_t ref_applied = 0;
    for (std::int64_t steps = 0; steps < budget; ++steps) {
      const rank_t h = std::prev(ranks.end())->second;
      const double m = load[static_cast<std::size_t>(h)];
      if (m <= target) break;
      bool done = false;
      int tried = 0;
      for (auto it = ranks.begin(); it != ranks.end() && tried < detail::refine_partners; ++it) {
        const rank_t l = it->second;
        if (l == h) continue;
        if (!(it->first < m)) break;
        ++tried;
        want.emplace_back(h, l);
        if (apply[call++ % apply.size()]) {
          const double nh = new_loads[2 * ref_applied % 800];
          const double nl = new_loads[(2 * ref_applied + 1) % 800];
          ranks.erase({load[static_cast<std::size_t>(h)], h});
          ranks.erase({load[static_cast<std::size_t>(l)], l});
          load[static_cast<std::size_t>(h)] = nh;
          load[static_cast<std::size_t>(l)] = nl;
          ranks.insert({nh, h});
          ranks.insert({nl, l});
          ++ref_applied;
          done = true;
          break;
        }
      }
      if (!done) break;
    }
    INFO("iteration ", iter, ", d = ", d);
    CHECK(got == want);
    CHECK(applied == ref_applied);
    applied_total += static_cast<int>(applied);
  }
  CHECK(applied_total > 300);
}

TEST_CASE_TEMPLATE("refine keeps constraints and never raises the makespan (direct)", C,
                   linear_cost, quadratic_cost) {
  const C cost = pick_cost<C>(2, {0.5, 1.0, 0.03});
  using Cost = cost_type_t<C>;
  std::mt19937_64 rng(0x5eed0005);
  int improved = 0, runs = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 6));
    const std::int64_t n = uniform(rng, 0, 40);
    const auto layout = random_layout(rng, d, n, 50, uniform(rng, 0, 1) == 1);
    const padding_policy policy = uniform(rng, 0, 3) == 0 ? padded : packed;
    constraints lim;
    if (uniform(rng, 0, 1) == 1) {
      lim.min_items = uniform(rng, 0, n / d);
      lim.max_items = std::max<std::int64_t>(lim.min_items, (n + d - 1) / d + uniform(rng, 0, 1));
    }
    if (uniform(rng, 0, 2) == 0)
      lim.cap = capacity{uniform(rng, 0, 1) ? capacity::measure::tokens : capacity::measure::bytes,
                         uniform(rng, 60, 400)};
    // Start from any assignment that satisfies the constraints: lpt's, else kk's, else skip.
    const prepared<C> p(layout, cost, policy, lim);
    const auto& in = p.in;
    auto start = detail::lpt(in, cost);
    if (!policy.is_padded() && (!start || uniform(rng, 0, 1) == 1)) {
      auto k = detail::karmarkar_karp(in);
      if (k) start = std::move(k);
    }
    if (!start) continue;
    REQUIRE(detail::satisfies(in, std::span<const rank_t>(*start)));
    const Cost before = detail::assignment_makespan(in, cost, std::span<const rank_t>(*start));
    const Cost lb = makespan_lower_bound(layout, d, cost, policy, lim);
    auto a = *start;
    detail::refine(in, cost, a, 2 * n + 64, lb);
    ++runs;
    CHECK(detail::satisfies(in, std::span<const rank_t>(a)));
    const auto f = figures(layout, std::span<const rank_t>(a), d, cost, policy);
    CHECK(honours(f, lim));
    const Cost after = detail::assignment_makespan(in, cost, std::span<const rank_t>(a));
    CHECK(after <= before);
    improved += after < before;
    // Deterministic.
    auto b = *start;
    detail::refine(in, cost, b, 2 * n + 64, lb);
    CHECK(a == b);
    // A zero budget or a target already met changes nothing.
    auto c = *start;
    detail::refine(in, cost, c, 0, lb);
    CHECK(c == *start);
    detail::refine(in, cost, c, 2 * n + 64, before);
    CHECK(c == *start);
  }
  MESSAGE("refine improved " << improved << " of " << runs << " runs");
  CHECK(runs > 1000);
  CHECK(improved > 50);
}
