// Tests of the differencing balancers karmarkar_karp and karmarkar_karp_equal, through the façade
// `orchmllm::balance` and detail::karmarkar_karp: the textbook complete and the chunked
// equal-count differencing (against a reference written here), equal counts by construction,
// karmarkar_karp_equal within p1 + S/d <= 2 OPT, the radix order of joined subsets (d >= 4096)
// equal to the comparison order, hand-checked instances, and how often each reaches the
// brute-force optimum.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/detail/balance/builtin.hpp"
#include "orchmllm/detail/balance/kk.hpp"
#include "orchmllm/detail/core/order.hpp"
#include "support/heuristics_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using namespace orchmllm::test;                       // support/test_support.hpp
using namespace orchmllm::test::heuristics_fixtures;  // support/heuristics_fixtures.hpp

}  // namespace

TEST_CASE_TEMPLATE(
    "karmarkar_karp_equal within p1 + S/d <= 2 OPT, equal counts, refinement only helps", C,
    linear_cost, quadratic_cost) {
  const C cost = pick_cost<C>(1, {0.0, 1.0, 0.1});
  using Cost = cost_type_t<C>;
  std::mt19937_64 rng(0x5eed0003);
  int optimal = 0, refined_optimal = 0;
  double worst = 1.0;
  const int instances = 400;
  for (int iter = 0; iter < instances; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 4));
    const std::int64_t n = uniform(rng, 1, 10);
    const auto layout = random_layout(rng, d, n, 60, false);
    const auto opt = brute_force(layout, d, cost, packed);
    REQUIRE(opt.has_value());
    const auto res = balance(layout, cost, packed, balancers::karmarkar_karp_equal{});
    const auto dst = check_result(layout, cost, packed, {}, res);
    CHECK(res.used == "karmarkar_karp_equal");
    CHECK(cost_at_least(res.makespan, *opt));
    CHECK(within(res.makespan, 2.0, *opt));
    Cost p1{}, total{};
    for (std::int64_t g = 0; g < n; ++g) {
      p1 = std::max(p1, cost(layout.length(g)));
      total += cost(layout.length(g));
    }
    if constexpr (std::is_integral_v<Cost>) {
      CHECK(d * res.makespan <= d * p1 + total);
    } else {
      CHECK(res.makespan <= (p1 + total / d) * (1 + 1e-12));
    }
    // One item per chunk of d: every rank holds floor(n/d) or ceil(n/d) items.
    std::vector<std::int64_t> count(static_cast<std::size_t>(d), 0);
    for (auto r : dst) ++count[static_cast<std::size_t>(r)];
    for (auto c : count) CHECK((c == n / d || c == (n + d - 1) / d));
    const auto refined =
        balance(layout, cost, packed, balancers::karmarkar_karp_equal{.refine = true});
    check_result(layout, cost, packed, {}, refined);
    CHECK(refined.makespan <= res.makespan);
    CHECK(cost_at_least(refined.makespan, *opt));
    optimal += cost_at_least(*opt, res.makespan);
    refined_optimal += cost_at_least(*opt, refined.makespan);
    worst = std::max(worst, static_cast<double>(res.makespan) / static_cast<double>(*opt));
  }
  MESSAGE("karmarkar_karp_equal optimal on " << optimal << ", karmarkar_karp_equal+refine on "
                                             << refined_optimal << " of " << instances
                                             << "; worst karmarkar_karp_equal/OPT " << worst);
  CHECK(refined_optimal >= optimal);
}

TEST_CASE("karmarkar_karp_equal on a hand-checked instance") {
  // d = 2, costs 8 7 6 5 4: chunks (8,7) (6,5) (4,·). Differences 1, 1, 4: (4,·) merges with
  // (8,7) (earlier creation wins the tie) into (4+7, 8) = (11, 8); then with (6,5): (16, 14).
  const auto layout = batch_layout::from_ranks({{8, 7, 6}, {5, 4}});
  const auto res = balance(layout, linear_cost{}, packed, balancers::karmarkar_karp_equal{});
  CHECK(res.makespan == 16);
  const std::vector<rank_t> dst(res.plan.dst_ranks().begin(), res.plan.dst_ranks().end());
  CHECK(dst == std::vector<rank_t>{1, 0, 1, 0, 0});  // {7, 5, 4} -> rank 0, {8, 6} -> rank 1
  const auto refined =
      balance(layout, linear_cost{}, packed, balancers::karmarkar_karp_equal{.refine = true});
  CHECK(refined.makespan == 15);  // the optimum {8,7} {6,5,4}, reached by one swap
  CHECK(refined.proven_optimal);
}

// The same step cost computed in three types: kk's merges order joined subsets by a radix sort
// for int64 and double sums from 4096 ranks on, by comparison for long double.
struct step_cost_i64 {
  std::int64_t operator()(std::int64_t l) const { return l / 3; }
};
struct step_cost_double {
  double operator()(std::int64_t l) const { return static_cast<double>(l / 3); }
};
struct step_cost_long_double {
  long double operator()(std::int64_t l) const { return static_cast<long double>(l / 3); }
};

TEST_CASE("kk: the radix order of joined subsets (d >= 4096) equals the comparison order") {
  std::mt19937_64 rng(0x5eed00a1);
  const int reps = sanitized ? 2 : 6;
  for (int rep = 0; rep < reps; ++rep) {
    const auto d = static_cast<rank_t>(uniform(rng, 4096, 5200));
    const std::int64_t n = uniform(rng, 1, 4) * d + uniform(rng, 0, d - 1);
    const auto layout = random_layout(rng, d, n, 60, false);  // small lengths: many equal sums
    const bool complete = false;
    INFO("rep = ", rep, ", d = ", d, ", n = ", n);
    const prepared<step_cost_i64> pi(layout, step_cost_i64{}, packed, {});
    const prepared<step_cost_double> pd(layout, step_cost_double{}, packed, {});
    const prepared<step_cost_long_double> pl(layout, step_cost_long_double{}, packed, {});
    const auto by_comparison = detail::karmarkar_karp(pl.in, complete);
    REQUIRE(by_comparison);
    CHECK(detail::karmarkar_karp(pi.in, complete) == by_comparison);
    CHECK(detail::karmarkar_karp(pd.in, complete) == by_comparison);
  }
}

TEST_CASE("karmarkar_karp_equal satisfies the equal-count constraint by construction") {
  std::mt19937_64 rng(0x5eed0004);
  for (int iter = 0; iter < 300; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 9));
    const std::int64_t n = uniform(rng, 0, 60);
    const auto layout = random_layout(rng, d, n, 100, false);
    constraints lim;
    lim.min_items = n / d;
    lim.max_items = (n + d - 1) / d;
    const auto res = balance(layout, quadratic_cost{0, 1, 0.01}, packed,
                             heuristic("karmarkar_karp_equal", uniform(rng, 0, 1) == 1), lim);
    CHECK(res.used == "karmarkar_karp_equal");
    check_result(layout, quadratic_cost{0, 1, 0.01}, packed, lim, res);
  }
}

namespace {

// Textbook d-way largest differencing, written independently of detail/balance/kk.hpp: every
// item a tuple (cost, 0, …, 0) of d subsets (`chunk` = 1, the complete method), or every `chunk`
// = d consecutive items of the canonical order one tuple, one item per subset, the last padded
// with empty subsets (the equal-count method); merge the two tuples of largest spread (ties:
// the earlier created), joining the first's i-th heaviest subset with the second's i-th
// lightest, re-sorted by sum descending (ties: position in the join). Subsets are lists of
// items here, joined by copying.
template <class Cost>
std::vector<rank_t> reference_ldm(const batch_layout& layout, rank_t d,
                                  const std::vector<Cost>& costs, std::size_t chunk = 1) {
  struct subset {
    Cost sum{};
    std::vector<std::int64_t> items;
  };
  struct tuple {
    std::vector<subset> parts;
    std::int64_t creation;
  };
  const auto order = detail::canonical_order<Cost>(layout, costs, packed);
  std::vector<tuple> live;
  std::int64_t created = 0;
  for (std::size_t k = 0; k < order.size(); k += chunk) {
    tuple t{std::vector<subset>(static_cast<std::size_t>(d)), created++};
    for (std::size_t i = 0; i < chunk && k + i < order.size(); ++i)
      t.parts[i] = subset{costs[static_cast<std::size_t>(order[k + i])], {order[k + i]}};
    live.push_back(std::move(t));
  }
  auto take = [&] {
    std::size_t best = 0;
    auto spread = [&](std::size_t i) {
      return live[i].parts.front().sum - live[i].parts.back().sum;
    };
    for (std::size_t i = 1; i < live.size(); ++i)
      if (spread(i) > spread(best) ||
          (spread(i) == spread(best) && live[i].creation < live[best].creation))
        best = i;
    tuple t = std::move(live[best]);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(best));
    return t;
  };
  while (live.size() > 1) {
    const tuple a = take();
    const tuple b = take();
    std::vector<subset> joined;
    for (std::size_t i = 0; i < static_cast<std::size_t>(d); ++i) {
      const auto& x = a.parts[i];
      const auto& y = b.parts[static_cast<std::size_t>(d) - 1 - i];
      subset j{x.sum + y.sum, x.items};
      j.items.insert(j.items.end(), y.items.begin(), y.items.end());
      joined.push_back(std::move(j));
    }
    std::stable_sort(joined.begin(), joined.end(),
                     [](const subset& p, const subset& q) { return p.sum > q.sum; });
    live.push_back(tuple{std::move(joined), created++});
  }
  std::vector<rank_t> dst(static_cast<std::size_t>(layout.num_items()), 0);
  if (!live.empty())
    for (std::size_t i = 0; i < static_cast<std::size_t>(d); ++i)
      for (const auto g : live[0].parts[i].items)
        dst[static_cast<std::size_t>(g)] = static_cast<rank_t>(i);
  return dst;
}

}  // namespace

TEST_CASE_TEMPLATE("karmarkar_karp is the textbook complete differencing (against a reference)", C,
                   linear_cost, quadratic_cost) {
  const C cost = pick_cost<C>(1, {0.5, 1.0, 0.03});
  using Cost = cost_type_t<C>;
  std::mt19937_64 rng(0x5eed000a);
  for (int iter = 0; iter < 300; ++iter) {
    // Up to 40 ranks every third round: tuples mostly zeros (only their positive sums are
    // sorted), zero-cost items among them.
    const auto d = static_cast<rank_t>(uniform(rng, 1, iter % 3 == 0 ? 40 : 7));
    const std::int64_t n = uniform(rng, 0, 45);
    const auto layout = random_layout(rng, d, n, uniform(rng, 0, 1) ? 8 : 200, false);
    std::vector<Cost> costs;
    for (std::int64_t g = 0; g < n; ++g) costs.push_back(cost(layout.length(g)));
    const auto res = balance(layout, cost, packed, balancers::karmarkar_karp{});
    CHECK(res.used == "karmarkar_karp");
    const auto dst = check_result(layout, cost, packed, {}, res);
    CHECK(dst == reference_ldm(layout, d, costs));
  }
}

TEST_CASE("automatic tries the complete differencing where it can pay") {
  using orchmllm::detail::kk_complete_pays;
  // Small inputs (n · d <= 2^16) always.
  CHECK(kk_complete_pays(256, 32));
  CHECK(kk_complete_pays(1, 1));
  CHECK(kk_complete_pays(0, 5));
  CHECK(kk_complete_pays(256, 256));
  // Above that, from 12 items per rank on average, within the memory guard.
  CHECK_FALSE(kk_complete_pays(2048, 256));   // 8 per rank, 2^19 sums
  CHECK_FALSE(kk_complete_pays(4096, 512));   // 8 per rank
  CHECK_FALSE(kk_complete_pays(3071, 256));   // just under 12 per rank
  CHECK(kk_complete_pays(3072, 256));         // 12 per rank
  CHECK(kk_complete_pays(4096, 256));         // 16 per rank, 2^20 sums
  CHECK(kk_complete_pays(8192, 256));         // 32 per rank, 2^21 sums: the guard itself
  CHECK_FALSE(kk_complete_pays(16384, 256));  // above kk_complete_max_entries
  for (std::int64_t n = 0; n < 5000; n += 37)
    for (std::int64_t d = 1; d < 700; d += 13)
      CHECK(kk_complete_pays(n, d) ==
            (kk_complete_fits(n, d) && (n * d <= (std::int64_t{1} << 16) || n >= 12 * d)));
}

TEST_CASE_TEMPLATE("karmarkar_karp_equal is the chunked differencing (against a reference)", C,
                   linear_cost, quadratic_cost) {
  const C cost = pick_cost<C>(1, {0.5, 1.0, 0.03});
  using Cost = cost_type_t<C>;
  std::mt19937_64 rng(0x5eed000b);
  const int big = sanitized ? 1 : 3;  // cases with d >= 4096 (the radix order of the joins)
  for (int iter = 0; iter < 300 + big; ++iter) {
    const auto d = static_cast<rank_t>(iter < 300 ? uniform(rng, 1, 9) : uniform(rng, 4096, 4500));
    const std::int64_t n = iter < 300 ? uniform(rng, 0, 60) : uniform(rng, 2 * d, 4 * d);
    const auto layout = random_layout(rng, d, n, uniform(rng, 0, 1) ? 8 : 200, false);
    INFO("iter = ", iter, ", d = ", d, ", n = ", n);
    std::vector<Cost> costs;
    for (std::int64_t g = 0; g < n; ++g) costs.push_back(cost(layout.length(g)));
    const auto res = balance(layout, cost, packed, balancers::karmarkar_karp_equal{});
    CHECK(res.used == "karmarkar_karp_equal");
    const auto dst = check_result(layout, cost, packed, {}, res);
    CHECK(dst == reference_ldm(layout, d, costs, static_cast<std::size_t>(d)));
  }
}

TEST_CASE(
    "karmarkar_karp: the complete method, better than the equal-count one where counts must "
    "differ") {
  // d = 2, costs 10 4 3 3: the optimum {10} | {4, 3, 3} needs unequal counts. Complete:
  // (10)+(4) → (10, 4); with (3) → (10, 7); (3) [earlier created, same spread 3] with it →
  // (10, 10). Equal counts: chunks (10, 4) and (3, 3) → (13, 7).
  const auto layout = batch_layout::from_ranks({{10, 3}, {4, 3}});
  const auto complete = balance(layout, linear_cost{}, packed, balancers::karmarkar_karp{});
  const auto equal = balance(layout, linear_cost{}, packed, balancers::karmarkar_karp_equal{});
  CHECK(complete.used == "karmarkar_karp");
  CHECK(complete.makespan == 10);
  CHECK(complete.proven_optimal);
  CHECK(equal.makespan == 13);
  // More ranks than items: every item alone.
  const auto spread = batch_layout::from_ranks({{7, 3}, {}, {}, {}});
  CHECK(balance(spread, linear_cost{}, packed, balancers::karmarkar_karp{}).makespan == 7);
  // Above the memory guard karmarkar_karp runs the equal-count method and says so.
  const rank_t d = 64;
  const std::int64_t n = kk_complete_max_entries / d + 1;
  std::vector<std::vector<std::int64_t>> ranks(static_cast<std::size_t>(d));
  for (std::int64_t g = 0; g < n; ++g) ranks[static_cast<std::size_t>(g % d)].push_back(1 + g % 97);
  const auto big = batch_layout::from_ranks(ranks);
  CHECK(balance(big, linear_cost{}, packed, balancers::karmarkar_karp{}).used ==
        "karmarkar_karp_equal");
}

TEST_CASE_TEMPLATE("karmarkar_karp reaches the brute-force optimum at least as often as lpt", C,
                   linear_cost, quadratic_cost) {
  const C cost = pick_cost<C>(1, {0.0, 1.0, 0.1});
  std::mt19937_64 rng(0x5eed000b);
  int kk_optimal = 0, lpt_optimal = 0, equal_optimal = 0;
  const int instances = 400;
  for (int iter = 0; iter < instances; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 2, 4));
    const std::int64_t n = uniform(rng, 2, 10);
    const auto layout = random_layout(rng, d, n, 60, false);
    const auto opt = brute_force(layout, d, cost, packed);
    REQUIRE(opt.has_value());
    const auto kk = balance(layout, cost, packed, balancers::karmarkar_karp{});
    CHECK(cost_at_least(kk.makespan, *opt));
    kk_optimal += cost_at_least(*opt, kk.makespan);
    lpt_optimal += cost_at_least(*opt, balance(layout, cost, packed, balancers::lpt{}).makespan);
    equal_optimal += cost_at_least(
        *opt, balance(layout, cost, packed, balancers::karmarkar_karp_equal{}).makespan);
    // auto is never worse than any of them.
    const auto a = balance(layout, cost, packed, balancers::automatic{});
    CHECK(a.makespan <= kk.makespan);
  }
  MESSAGE("optimal: karmarkar_karp " << kk_optimal << ", lpt " << lpt_optimal
                                     << ", karmarkar_karp_equal " << equal_optimal << " of "
                                     << instances);
  CHECK(kk_optimal >= lpt_optimal);
}
