// Tests for include/orchmllm/core/statistics.hpp: rank loads before and after a plan,
// compute_statistics recomputed independently on random instances, and makespan_lower_bound
// against a brute-force optimum (packed and padded, with min_items) and on known tight cases.

#include "orchmllm/core/statistics.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::batch_layout;
using orchmllm::compute_statistics;
using orchmllm::constraints;
using orchmllm::invalid_argument_error;
using orchmllm::linear_cost;
using orchmllm::makespan_lower_bound;
using orchmllm::padding_policy;
using orchmllm::quadratic_cost;
using orchmllm::rank_loads;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;

constraints with_min(std::int64_t m) {
  constraints c;
  c.min_items = m;
  return c;
}

// Load of one rank holding `items` (lengths, in this order) under a policy, computed without
// the library's rank_load.
template <class C>
auto load_of(const std::vector<std::int64_t>& lengths, const C& cost, padding_policy policy) {
  using Cost = orchmllm::cost_type_t<C>;
  if (policy.is_padded()) {
    if (lengths.empty()) return Cost{};
    const auto longest = *std::max_element(lengths.begin(), lengths.end());
    const auto k = policy.multiple();
    const auto padded_len = (longest + k - 1) / k * k;
    return static_cast<Cost>(static_cast<Cost>(lengths.size()) * cost(padded_len));
  }
  Cost s{};
  for (auto l : lengths) s += cost(l);
  return s;
}

// Brute-force optimal makespan of `lengths` on d ranks, every rank holding at least
// `min_items` items. Enumerates set partitions into at most d blocks (restricted growth strings,
// which removes rank symmetry), pruning partial solutions already no better than the best.
// Returns false when no assignment satisfies min_items.
template <class C>
bool brute_force(const vec& lengths, rank_t d, const C& cost, padding_policy policy,
                 std::int64_t min_items, orchmllm::cost_type_t<C>& best) {
  using Cost = orchmllm::cost_type_t<C>;
  const auto n = static_cast<std::int64_t>(lengths.size());
  std::vector<vec> bins(static_cast<std::size_t>(d));
  bool found = false;
  auto makespan = [&] {
    Cost m{};
    for (const auto& b : bins) m = std::max(m, load_of(b, cost, policy));
    return m;
  };
  auto rec = [&](auto&& self, std::int64_t i, rank_t used) -> void {
    if (found && makespan() >= best) return;  // loads only grow as items are added
    if (i == n) {
      for (const auto& b : bins)
        if (static_cast<std::int64_t>(b.size()) < min_items) return;
      best = makespan();
      found = true;
      return;
    }
    // not enough items left to give every still-empty-ish rank its minimum
    std::int64_t missing = 0;
    for (const auto& b : bins)
      missing += std::max<std::int64_t>(0, min_items - static_cast<std::int64_t>(b.size()));
    if (missing > n - i) return;
    const rank_t limit = std::min<rank_t>(d, static_cast<rank_t>(used + 1));
    for (rank_t r = 0; r < limit; ++r) {
      bins[static_cast<std::size_t>(r)].push_back(lengths[static_cast<std::size_t>(i)]);
      self(self, i + 1, std::max<rank_t>(used, static_cast<rank_t>(r + 1)));
      bins[static_cast<std::size_t>(r)].pop_back();
    }
  };
  rec(rec, 0, 0);
  return found;
}

// A random layout with d ranks, n items, lengths in [0, max_len], optional explicit bytes.
batch_layout random_layout(std::mt19937_64& rng, rank_t d, std::int64_t n, std::int64_t max_len,
                           bool with_bytes) {
  std::vector<vec> per_rank(static_cast<std::size_t>(d));
  std::vector<vec> bytes(with_bytes ? static_cast<std::size_t>(d) : 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(uniform(rng, 0, d - 1));
    // a few zero-length items, otherwise a skewed distribution
    const auto l = uniform(rng, 0, 9) == 0 ? 0 : uniform(rng, 1, uniform(rng, 1, max_len));
    per_rank[r].push_back(l);
    if (with_bytes) bytes[r].push_back(uniform(rng, 0, 10000));
  }
  return batch_layout::from_ranks(per_rank, bytes);
}

}  // namespace

TEST_CASE("statistics: rank_loads before and after, hand example") {
  // rank 0: {5, 1, 1}, rank 1: {}, rank 2: {2, 4}
  const auto layout =
      batch_layout::from_ranks({{5, 1, 1}, {}, {2, 4}}, {{50, 10, 10}, {}, {20, 40}});
  const linear_cost lin;
  CHECK(rank_loads(layout, lin, orchmllm::packed) == vec{7, 0, 6});
  CHECK(rank_loads(layout, lin, orchmllm::padded) == vec{15, 0, 8});
  CHECK(rank_loads(layout, lin, orchmllm::padded_to_multiple(4)) == vec{24, 0, 8});
  const quadratic_cost quad{1.0, 0.0, 1.0};
  CHECK(rank_loads(layout, quad, orchmllm::packed) == std::vector<double>{30.0, 0.0, 22.0});

  // move item 0 (length 5) to rank 1, item 4 (length 4) to rank 0
  const auto plan =
      rearrangement::from_destinations(layout.offsets(), std::vector<rank_t>{1, 0, 0, 2, 0}, 3);
  CHECK(rank_loads(layout, plan, lin, orchmllm::packed) == vec{6, 5, 2});
  CHECK(rank_loads(layout, plan, lin, orchmllm::padded) == vec{12, 5, 2});

  const auto s = compute_statistics(layout, plan, lin, orchmllm::packed);
  CHECK(s.ranks == 3);
  CHECK(s.items == 5);
  CHECK(s.load_before == vec{7, 0, 6});
  CHECK(s.load_after == vec{6, 5, 2});
  CHECK(s.makespan_before == 7);
  CHECK(s.makespan == 6);
  CHECK(s.min_load == 2);
  CHECK(s.mean_before == doctest::Approx(13.0 / 3));
  CHECK(s.mean_after == doctest::Approx(13.0 / 3));
  CHECK(s.imbalance_before == doctest::Approx(7.0 / (13.0 / 3)));
  CHECK(s.imbalance_after == doctest::Approx(6.0 / (13.0 / 3)));
  CHECK(s.lower_bound == 5);  // max(⌈13/3⌉ = 5, p1 = 5, p3 + p4 = 2 + 1)
  CHECK(s.ratio == doctest::Approx(6.0 / 5.0));
  CHECK(s.max_tokens == 6);
  CHECK(s.max_bytes == 60);         // rank 0: 10 + 10 + 40
  CHECK(s.max_tokens_before == 7);  // rank 0 as sampled: 5 + 1 + 1
  CHECK(s.max_bytes_before == 70);  // rank 0 as sampled: 50 + 10 + 10
  CHECK(s.min_items_per_rank == 1);
  CHECK(s.max_items_per_rank == 3);
  CHECK(s.items_moved == 2);
  CHECK(s.bytes_moved == 90);

  const auto sp = compute_statistics(layout, plan, lin, orchmllm::padded);
  CHECK(sp.max_tokens == 12);         // 3 × 4
  CHECK(sp.max_bytes == 120);         // 3 × 40
  CHECK(sp.max_tokens_before == 15);  // rank 0 as sampled: 3 × 5
  CHECK(sp.max_bytes_before == 150);  // 3 × 50
  CHECK(sp.makespan == 12);
}

TEST_CASE("statistics: a plan that does not start from the layout is rejected") {
  const auto layout = batch_layout::from_ranks({{1, 2}, {3}});
  const auto other = rearrangement::identity(batch_layout::from_ranks({{1}, {2, 3}}));
  expect_invalid([&] { (void)rank_loads(layout, other, linear_cost{}, orchmllm::packed); },
                 {"does not start from this layout"});
  CHECK_THROWS_AS((void)compute_statistics(layout, other, linear_cost{}, orchmllm::packed),
                  invalid_argument_error);
}

TEST_CASE("statistics: empty layouts and all-zero loads") {
  const batch_layout none;
  const auto s0 =
      compute_statistics(none, rearrangement::identity(none), linear_cost{}, orchmllm::packed);
  CHECK(s0.ranks == 0);
  CHECK(s0.items == 0);
  CHECK(s0.makespan == 0);
  CHECK(s0.imbalance_after == 1.0);
  CHECK(s0.ratio == 1.0);
  CHECK(s0.min_items_per_rank == 0);
  CHECK(makespan_lower_bound(none, 0, linear_cost{}, orchmllm::packed) == 0);
  CHECK(makespan_lower_bound(none, 4, linear_cost{}, orchmllm::padded) == 0);

  const auto empty3 = batch_layout::from_ranks({{}, {}, {}});
  const auto s1 =
      compute_statistics(empty3, rearrangement::identity(empty3), linear_cost{}, orchmllm::padded);
  CHECK(s1.load_after == vec{0, 0, 0});
  CHECK(s1.makespan == 0);
  CHECK(s1.mean_after == 0.0);
  CHECK(s1.imbalance_before == 1.0);
  CHECK(s1.imbalance_after == 1.0);
  CHECK(s1.lower_bound == 0);
  CHECK(s1.ratio == 1.0);
  CHECK(s1.min_items_per_rank == 0);
  CHECK(s1.max_items_per_rank == 0);

  const auto zeros = batch_layout::from_ranks({{0, 0}, {0}});
  const auto s2 =
      compute_statistics(zeros, rearrangement::identity(zeros), linear_cost{}, orchmllm::packed);
  CHECK(s2.makespan == 0);
  CHECK(s2.imbalance_after == 1.0);
  CHECK(s2.ratio == 1.0);
  CHECK(s2.min_items_per_rank == 1);
  CHECK(s2.max_items_per_rank == 2);

  const auto items = batch_layout::from_ranks({{3, 4}});
  expect_invalid([&] { (void)makespan_lower_bound(items, 0, linear_cost{}, orchmllm::packed); },
                 {"2 items on 0 ranks"});
}

TEST_CASE("statistics: compute_statistics recomputed independently on random instances") {
  std::mt19937_64 rng(31337);
  const linear_cost lin{2};
  const quadratic_cost quad{0.5, 1.0, 1.0 / 64};
  const std::vector<padding_policy> policies{orchmllm::packed, orchmllm::padded,
                                             orchmllm::padded_to_multiple(8)};
  auto check_one = [&](const batch_layout& layout, const rearrangement& plan, const auto& cost,
                       padding_policy policy, const constraints& limits) {
    using Cost = orchmllm::cost_type_t<std::remove_cvref_t<decltype(cost)>>;
    const auto s = compute_statistics(layout, plan, cost, policy, limits);
    const rank_t d_src = layout.num_ranks();
    const rank_t d = plan.num_dst_ranks();
    CHECK(s.ranks == d);
    CHECK(s.items == layout.num_items());
    // loads: source slot order before, destination slot order after
    std::vector<Cost> before, after;
    for (rank_t r = 0; r < d_src; ++r) {
      vec ls;
      for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g) ls.push_back(layout.length(g));
      before.push_back(load_of(ls, cost, policy));
    }
    std::int64_t max_tokens = 0, max_bytes = 0, min_items = d > 0 ? INT64_MAX : 0, max_items = 0;
    for (rank_t r = 0; r < d; ++r) {
      vec ls;
      std::int64_t sum_len = 0, sum_bytes = 0, longest = 0, biggest = 0;
      for (auto h = plan.dst_offsets()[static_cast<std::size_t>(r)];
           h < plan.dst_offsets()[static_cast<std::size_t>(r) + 1]; ++h) {
        const auto g = plan.sources()[static_cast<std::size_t>(h)];
        ls.push_back(layout.length(g));
        sum_len += layout.length(g);
        sum_bytes += layout.bytes(g);
        longest = std::max(longest, layout.length(g));
        biggest = std::max(biggest, layout.bytes(g));
      }
      after.push_back(load_of(ls, cost, policy));
      const auto k = static_cast<std::int64_t>(ls.size());
      const auto m = policy.multiple();
      max_tokens =
          std::max(max_tokens, policy.is_padded() ? k * ((longest + m - 1) / m * m) : sum_len);
      max_bytes = std::max(max_bytes, policy.is_padded() ? k * biggest : sum_bytes);
      min_items = std::min(min_items, k);
      max_items = std::max(max_items, k);
    }
    CHECK(s.load_before == before);
    CHECK(s.load_after == after);
    CHECK(rank_loads(layout, cost, policy) == before);
    CHECK(rank_loads(layout, plan, cost, policy) == after);
    const Cost mk_before =
        before.empty() ? Cost{} : *std::max_element(before.begin(), before.end());
    const Cost mk = after.empty() ? Cost{} : *std::max_element(after.begin(), after.end());
    const Cost mn = after.empty() ? Cost{} : *std::min_element(after.begin(), after.end());
    CHECK(s.makespan_before == mk_before);
    CHECK(s.makespan == mk);
    CHECK(s.min_load == mn);
    double sb = 0, sa = 0;
    for (auto x : before) sb += static_cast<double>(x);
    for (auto x : after) sa += static_cast<double>(x);
    const double mean_b = before.empty() ? 0.0 : sb / static_cast<double>(before.size());
    const double mean_a = after.empty() ? 0.0 : sa / static_cast<double>(after.size());
    CHECK(s.mean_before == mean_b);
    CHECK(s.mean_after == mean_a);
    CHECK(s.imbalance_before == (mean_b > 0 ? static_cast<double>(mk_before) / mean_b : 1.0));
    CHECK(s.imbalance_after == (mean_a > 0 ? static_cast<double>(mk) / mean_a : 1.0));
    CHECK(s.imbalance_after >= 1.0);
    const Cost lb = makespan_lower_bound(layout, d, cost, policy, limits);
    CHECK(s.lower_bound == lb);
    if (lb > Cost{}) {
      CHECK(s.ratio == static_cast<double>(mk) / static_cast<double>(lb));
      // the bound is a bound on this plan too (a few ulps of slack for floating sums)
      CHECK(static_cast<double>(mk) >= static_cast<double>(lb) * (1 - 1e-12));
    } else {
      CHECK(mk == Cost{});
      CHECK(s.ratio == 1.0);
    }
    CHECK(s.max_tokens == max_tokens);
    CHECK(s.max_bytes == max_bytes);
    CHECK(s.min_items_per_rank == min_items);
    CHECK(s.max_items_per_rank == max_items);
    std::int64_t moved = 0, moved_bytes = 0;
    for (rank_t r = 0; r < d_src; ++r)
      for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g)
        if (plan.destination_of(g).rank != r) {
          ++moved;
          moved_bytes += layout.bytes(g);
        }
    CHECK(s.items_moved == moved);
    CHECK(s.bytes_moved == moved_bytes);
  };

  for (int iter = 0; iter < 300; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 8));
    const auto n = uniform(rng, 0, 60);
    const auto layout = random_layout(rng, d, n, 500, iter % 2 == 0);
    // destination rank count usually d (balancing), sometimes different
    const auto d_dst = iter % 5 == 0 ? static_cast<rank_t>(uniform(rng, 1, 8)) : d;
    const auto plan = rearrangement::from_destinations(
        layout.offsets(), orchmllm::test::random_destinations(rng, n, d_dst), d_dst);
    const auto limits = with_min(uniform(rng, 0, 2));
    const auto policy = policies[static_cast<std::size_t>(iter) % policies.size()];
    INFO("iteration ", iter);
    check_one(layout, plan, lin, policy, limits);
    check_one(layout, plan, quad, policy, limits);
    check_one(layout, rearrangement::identity(layout), lin, policy, limits);
  }
}

TEST_CASE("statistics: makespan_lower_bound never exceeds the brute-force optimum") {
  std::mt19937_64 rng(4242);
  const linear_cost lin;
  const quadratic_cost quad{1.0, 1.0, 0.1};
  auto squares = [](std::int64_t l) { return static_cast<int>(l * l + 1); };  // integral, int
  const std::vector<padding_policy> policies{orchmllm::packed, orchmllm::padded,
                                             orchmllm::padded_to_multiple(4)};
  int instances = 0;
  int tight_lin = 0;
  int tight_total = 0;
  auto run = [&](const batch_layout& layout, rank_t d, const auto& cost, padding_policy policy,
                 std::int64_t m, bool count_tight) {
    using Cost = orchmllm::cost_type_t<std::remove_cvref_t<decltype(cost)>>;
    const vec lengths(layout.lengths().begin(), layout.lengths().end());
    Cost opt{};
    if (!brute_force(lengths, d, cost, policy, m, opt)) return;  // min_items infeasible
    const Cost lb = makespan_lower_bound(layout, d, cost, policy, with_min(m));
    INFO("d ", d, " min_items ", m, " padded ", policy.is_padded(), " multiple ", policy.multiple(),
         " lb ", lb, " opt ", opt);
    if constexpr (std::is_floating_point_v<Cost>) {
      CHECK(lb <= opt * (1 + 1e-12));
    } else {
      CHECK(lb <= opt);
    }
    // and it is not trivial: at least the largest single-item load
    Cost largest{};
    for (auto l : lengths) largest = std::max<Cost>(largest, load_of(vec{l}, cost, policy));
    CHECK(lb >= largest);
    ++instances;
    if (count_tight) {
      ++tight_total;
      if (lb == opt) ++tight_lin;
    }
  };
  for (int iter = 0; iter < 1000; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 4));
    const auto n = uniform(rng, 1, 9);
    const auto layout = random_layout(rng, static_cast<rank_t>(uniform(rng, 1, 4)), n, 20, false);
    const auto m = uniform(rng, 0, 2);
    const auto policy = policies[static_cast<std::size_t>(iter) % policies.size()];
    INFO("iteration ", iter, " n ", n);
    run(layout, d, lin, policy, m, !policy.is_padded() && m == 0);
    run(layout, d, quad, policy, m, false);
    if (iter % 2 == 0) run(layout, d, squares, policy, m, false);
  }
  CHECK(instances >= 1800);
  // The bound is strong for packed linear costs on small instances (measured: well over half
  // are tight); a bound that degenerated to max item would fail this.
  MESSAGE("packed linear, min_items 0: bound == optimum on ", tight_lin, " of ", tight_total);
  CHECK(tight_lin * 2 >= tight_total);
}

TEST_CASE("statistics: makespan_lower_bound knows the granularity of integral costs") {
  // Three images of 3, 2 and 2 tiles of 1,025 tokens on 2 ranks, linear cost: total / d is
  // 3.5 tiles, but a rank's load is whole tiles, so the busiest rank holds at least 4.
  const auto tiles = batch_layout::from_ranks({{3 * 1025, 2 * 1025}, {2 * 1025}});
  CHECK(makespan_lower_bound(tiles, 2, linear_cost{}, orchmllm::packed) == 4 * 1025);
  // Padded (units 3,075 and 2,050, gcd 1,025): the optimum {3} {2, 2}, 2 · 2,050.
  CHECK(makespan_lower_bound(tiles, 2, linear_cost{}, orchmllm::padded) == 4100);
  // Costs without a common factor above 1 keep the plain bound.
  const auto mixed = batch_layout::from_ranks({{3, 2}, {2}});
  CHECK(makespan_lower_bound(mixed, 2, linear_cost{}, orchmllm::packed) == 4);
  CHECK(makespan_lower_bound(batch_layout::from_ranks({{7, 7, 7}}), 2, linear_cost{},
                             orchmllm::packed) == 14);

  // Random inputs whose lengths share a factor g: the bound stays below the brute-force
  // optimum, is a multiple of g (packed, linear), and meets the optimum exactly as often as on
  // the same inputs divided by g (the bound scales with the lengths once it knows g).
  std::mt19937_64 rng(1025);
  const linear_cost lin;
  auto squares = [](std::int64_t l) { return l * l + 2 * l; };
  const std::vector<padding_policy> policies{orchmllm::packed, orchmllm::padded,
                                             orchmllm::padded_to_multiple(2)};
  constexpr std::int64_t factors[] = {2, 3, 5, 1025};
  int tight = 0, tight_unscaled = 0, packed_cases = 0;
  for (int iter = 0; iter < 600; ++iter) {
    const std::int64_t g = factors[iter % 4];
    const auto d = static_cast<rank_t>(uniform(rng, 2, 4));
    const auto n = uniform(rng, 1, 9);
    const auto base = random_layout(rng, static_cast<rank_t>(uniform(rng, 1, 4)), n, 12, false);
    vec scaled(base.lengths().begin(), base.lengths().end());
    for (auto& l : scaled) l *= g;
    const auto layout = batch_layout(vec(base.offsets().begin(), base.offsets().end()), scaled);
    const auto policy = policies[static_cast<std::size_t>(iter) % policies.size()];
    const auto m = uniform(rng, 0, 1);
    INFO("iteration ", iter, " g ", g, " d ", d, " padded ", policy.is_padded());
    std::int64_t opt = 0;
    if (!brute_force(scaled, d, lin, policy, m, opt)) continue;
    const auto lb = makespan_lower_bound(layout, d, lin, policy, with_min(m));
    CHECK(lb <= opt);
    std::int64_t opt_sq = 0;
    if (brute_force(scaled, d, squares, policy, m, opt_sq))
      CHECK(makespan_lower_bound(layout, d, squares, policy, with_min(m)) <= opt_sq);
    if (!policy.is_padded() && m == 0) {
      ++packed_cases;
      CHECK(lb % g == 0);
      tight += lb == opt;
      const vec plain(base.lengths().begin(), base.lengths().end());
      std::int64_t opt_plain = 0;
      REQUIRE(brute_force(plain, d, lin, policy, 0, opt_plain));
      tight_unscaled += makespan_lower_bound(base, d, lin, policy) == opt_plain;
    }
  }
  MESSAGE("packed linear, lengths × g: bound == optimum on ", tight, " of ", packed_cases,
          " (the same inputs ÷ g: ", tight_unscaled, ")");
  CHECK(packed_cases >= 90);
  CHECK(tight == tight_unscaled);
}

TEST_CASE("statistics: the brute force itself on hand cases") {
  const linear_cost lin;
  std::int64_t opt = 0;
  REQUIRE(brute_force(vec{12, 6, 4, 3}, 2, lin, orchmllm::padded, 0, opt));
  CHECK(opt == 18);
  REQUIRE(brute_force(vec{12, 6, 4, 3}, 2, lin, orchmllm::packed, 0, opt));
  CHECK(opt == 13);
  REQUIRE(brute_force(vec{10, 1, 1, 1}, 2, lin, orchmllm::packed, 2, opt));
  CHECK(opt == 11);
  REQUIRE(brute_force(vec{10, 1, 1, 1}, 2, lin, orchmllm::padded, 2, opt));
  CHECK(opt == 20);
  REQUIRE(brute_force(vec{3, 2, 1}, 1, lin, orchmllm::padded, 0, opt));
  CHECK(opt == 9);
  REQUIRE(brute_force(vec{5, 5, 5}, 2, lin, orchmllm::packed, 0, opt));
  CHECK(opt == 10);
  CHECK_FALSE(brute_force(vec{1, 2, 3}, 2, lin, orchmllm::packed, 2, opt));  // 2 · 2 > 3 items
  REQUIRE(brute_force(vec{7, 7, 7, 7, 7}, 4, lin, orchmllm::padded_to_multiple(4), 1, opt));
  CHECK(opt == 16);  // one rank holds 2 items padded to 8
}

TEST_CASE("statistics: makespan_lower_bound on known tight cases") {
  const linear_cost lin;
  SUBCASE("d + 1 equal items: L1 = 2 p") {
    for (rank_t d = 1; d <= 6; ++d) {
      const batch_layout layout({0, d + 1}, vec(static_cast<std::size_t>(d) + 1, 10));
      CHECK(makespan_lower_bound(layout, d, lin, orchmllm::packed) == 20);
      const quadratic_cost q{1.0, 2.0, 0.5};
      CHECK(makespan_lower_bound(layout, d, q, orchmllm::packed) == 2 * q(10));
    }
  }
  SUBCASE("k·d equal items: S / d") {
    for (rank_t d = 1; d <= 5; ++d) {
      for (std::int64_t k = 1; k <= 4; ++k) {
        const batch_layout layout({0, k * d}, vec(static_cast<std::size_t>(k * d), 7));
        CHECK(makespan_lower_bound(layout, d, lin, orchmllm::packed) == 7 * k);
        CHECK(makespan_lower_bound(layout, d, lin, orchmllm::padded) == 7 * k);
      }
    }
  }
  SUBCASE("one dominant item: p1") {
    const auto layout = batch_layout::from_ranks({{100, 1, 1}, {2, 3}});
    CHECK(makespan_lower_bound(layout, 2, lin, orchmllm::packed) == 100);
    CHECK(makespan_lower_bound(layout, 8, lin, orchmllm::packed) == 100);  // d > n
  }
  SUBCASE("integral costs use the ceiling of S / d") {
    // {4, 3, 2, 2} on 2 ranks: S / d = 5.5 → 6 (p1 = 4, L1 = 3 + 2 = 5); the optimum is 6.
    const auto layout = batch_layout::from_ranks({{4, 3}, {2, 2}});
    CHECK(makespan_lower_bound(layout, 2, lin, orchmllm::packed) == 6);
    auto as_double = [](std::int64_t l) { return static_cast<double>(l); };
    CHECK(makespan_lower_bound(layout, 2, as_double, orchmllm::packed) == 5.5);
    auto as_int = [](std::int64_t l) { return static_cast<int>(l); };
    CHECK(makespan_lower_bound(layout, 2, as_int, orchmllm::packed) == 6);
    // 3 ranks: ⌈11 / 3⌉ = 4 = p1
    CHECK(makespan_lower_bound(layout, 3, lin, orchmllm::packed) == 4);
    // {5, 5, 5} on 2: ⌈15/2⌉ = 8 < L1 = p2 + p3 = 10
    CHECK(makespan_lower_bound(batch_layout::from_ranks({{5, 5, 5}}), 2, lin, orchmllm::packed) ==
          10);
  }
  SUBCASE("min_items adds the smallest other items") {
    const auto layout = batch_layout::from_ranks({{10, 1, 1, 1}});
    CHECK(makespan_lower_bound(layout, 2, lin, orchmllm::packed) == 10);
    CHECK(makespan_lower_bound(layout, 2, lin, orchmllm::packed, with_min(2)) == 11);
    // min_items above ⌊n/d⌋ is clamped (the instance is infeasible; the bound stays finite)
    CHECK(makespan_lower_bound(layout, 2, lin, orchmllm::packed, with_min(5)) == 11);
    // some rank holds ⌈n/d⌉ = 2 items: the 2 smallest
    CHECK(makespan_lower_bound(batch_layout::from_ranks({{3, 3, 3, 3, 3}}), 4, lin,
                               orchmllm::packed) == 6);
  }
  SUBCASE("padded: the optimum; its structural start (count × longest, the sum term)") {
    // The structural terms the balancers start from (detail::lower_bound_in_order).
    auto structural = [](const batch_layout& layout, rank_t d, const auto& cost,
                         orchmllm::padding_policy policy) {
      using Cost = orchmllm::cost_type_t<std::decay_t<decltype(cost)>>;
      std::vector<Cost> costs;
      for (std::int64_t g = 0; g < layout.num_items(); ++g)
        costs.push_back(static_cast<Cost>(cost(layout.length(g))));
      const auto order = orchmllm::detail::canonical_order<Cost>(layout, costs, policy);
      return orchmllm::detail::lower_bound_in_order<std::decay_t<decltype(cost)>>(
          layout, order, std::span<const Cost>(costs), d, cost, policy, constraints{});
    };
    const auto a = batch_layout::from_ranks({{10, 1, 1, 1}});
    CHECK(makespan_lower_bound(a, 2, lin, orchmllm::padded) == 10);  // optimum {10} {1,1,1}
    CHECK(makespan_lower_bound(a, 2, lin, orchmllm::padded, with_min(2)) == 20);  // {10,1} {1,1}
    // {12, 6, 4, 3} on 2 ranks: count terms give max(12, 6, 2·4, 2·3) = 12 but
    // ⌈(12 + 6 + 4 + 3) / 2⌉ = 13; the reported bound is the optimum 18: {12} {6, 4, 3}.
    const auto b = batch_layout::from_ranks({{12, 6}, {4, 3}});
    CHECK(structural(b, 2, lin, orchmllm::padded) == 13);
    CHECK(makespan_lower_bound(b, 2, lin, orchmllm::padded) == 18);
    auto as_double = [](std::int64_t l) { return static_cast<double>(l); };
    CHECK(structural(b, 2, as_double, orchmllm::padded) == 12.5);
    CHECK(makespan_lower_bound(b, 2, as_double, orchmllm::padded) == 18.0);
    // padded to a multiple of 8: every item costs 16 or 8 → count terms 16, 16, 2·8, 2·8;
    // sum (16 + 8 + 8 + 8) / 2 = 20, a load is a multiple of the units' gcd 8, so 24: the
    // optimum {16} {8, 8, 8}.
    CHECK(structural(b, 2, lin, orchmllm::padded_to_multiple(8)) == 24);
    CHECK(makespan_lower_bound(b, 2, lin, orchmllm::padded_to_multiple(8)) == 24);
    // A cap is not in the bound (it can only raise the optimum).
    orchmllm::constraints capped;
    capped.cap = orchmllm::capacity{orchmllm::capacity::measure::tokens, 30};
    CHECK(makespan_lower_bound(b, 2, lin, orchmllm::padded, capped) == 18);
    // five equal items on 2 ranks: some rank holds 3
    const batch_layout c({0, 5}, vec(5, 4));
    CHECK(makespan_lower_bound(c, 2, lin, orchmllm::padded) == 12);
  }
}

TEST_CASE("statistics: a segmented item costs the sum over its segments") {
  // Rank 0: one item of 2 segments of 3 (9 + 9 under l², not 36); rank 1: one of 6.
  const batch_layout l({0, 1, 2}, {6, 6}, {}, {}, {0, 2, 3}, {3, 3, 6});
  const auto sq = [](std::int64_t x) { return x * x; };
  CHECK(rank_loads(l, sq, orchmllm::packed) == std::vector<std::int64_t>{18, 36});
  const auto swap = rearrangement::from_destinations(l.offsets(), std::vector<rank_t>{1, 0}, 2);
  CHECK(rank_loads(l, swap, sq, orchmllm::packed) == std::vector<std::int64_t>{36, 18});
  CHECK(makespan_lower_bound(l, 2, sq, orchmllm::packed) == 36);
  CHECK(makespan_lower_bound(l, 1, sq, orchmllm::packed) == 54);
  const auto s = compute_statistics(l, swap, sq, orchmllm::packed);
  CHECK(s.makespan == 36);
  CHECK(s.makespan_before == 36);
  // Padded policies: every segment is a padded row of the rank's longest segment: rank 0 holds
  // 2 rows of 3 (2 · 9), rank 1 one row of 6.
  CHECK(rank_loads(l, sq, orchmllm::padded) == std::vector<std::int64_t>{18, 36});
  CHECK(rank_loads(l, sq, orchmllm::bucketed({8, 16})) == std::vector<std::int64_t>{128, 64});
  CHECK(rank_loads(l, swap, sq, orchmllm::padded) == std::vector<std::int64_t>{36, 18});
  CHECK(makespan_lower_bound(l, 2, sq, orchmllm::padded) == 36);
  CHECK(makespan_lower_bound(l, 1, sq, orchmllm::padded) == 108);  // 3 rows of 6
  const auto p = compute_statistics(l, swap, sq, orchmllm::padded);
  CHECK(p.makespan == 36);
  CHECK(p.max_tokens == 6);  // 1 row of 6, or 2 rows of 3
  CHECK(p.max_items_per_rank == 1);
  // A bucket list must hold the longest segment, not the item's length (6 > 4 = 2 · 3 fails).
  CHECK(rank_loads(batch_layout({0, 1}, {6}, {}, {}, {0, 2}, {3, 3}), sq,
                   orchmllm::bucketed({4})) == std::vector<std::int64_t>{32});
  // A negative segment cost is named.
  const auto negative = [](std::int64_t x) { return x == 3 ? std::int64_t{-1} : x; };
  expect_invalid([&] { (void)rank_loads(l, negative, orchmllm::packed); },
                 {"cost of segment 0 of item 0", "must be >= 0"});
}
