// Tests of the exact and fallback detail algorithms behind orchmllm::balance: exact_search
// (upper bound, budget, completeness, symmetry breaking), padded_optimal with a bytes cap, and
// constrained_first_fit, against brute force on small instances and on large tight inputs.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/detail/balance/exact.hpp"
#include "orchmllm/detail/balance/first_fit.hpp"
#include "orchmllm/detail/balance/padded.hpp"
#include "support/balancer_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using namespace orchmllm::test;                     // support/test_support.hpp
using namespace orchmllm::test::balancer_fixtures;  // support/balancer_fixtures.hpp

}  // namespace

// -------------------------------------------------------------------------------------------------
// Detail functions: exact_search contract, padded with a bytes cap, constrained first fit.
// -------------------------------------------------------------------------------------------------

TEST_CASE("exact_search: upper bound, budget and completeness") {
  const auto layout = batch_layout::from_ranks({{9, 7, 6}, {5, 5, 4}, {3, 2, 2, 1}});
  const linear_cost lin{1};
  const prepared<linear_cost> p(layout, lin, packed, {});
  const auto full = detail::exact_search(p.in, lin, 1'000'000);
  REQUIRE(full.assignment);
  CHECK(full.complete);
  const auto opt = detail::assignment_makespan(p.in, lin, *full.assignment);
  CHECK(opt == brute_force(layout, layout.num_ranks(), lin, packed));
  // Only strictly better than the bound is returned.
  const auto same = detail::exact_search(p.in, lin, 1'000'000, std::optional<std::int64_t>(opt));
  CHECK_FALSE(same.assignment);
  CHECK(same.complete);
  const auto looser =
      detail::exact_search(p.in, lin, 1'000'000, std::optional<std::int64_t>(opt + 1));
  REQUIRE(looser.assignment);
  CHECK(detail::assignment_makespan(p.in, lin, *looser.assignment) == opt);
  // A budget too small to finish: incomplete, deterministic.
  const auto cut = detail::exact_search(p.in, lin, 5);
  CHECK_FALSE(cut.complete);
  const auto cut2 = detail::exact_search(p.in, lin, 5);
  CHECK(cut.assignment == cut2.assignment);
  // Infeasible constraints are proven infeasible.
  constraints tight;
  tight.cap =
      capacity{capacity::measure::tokens, 15};  // total 44 on 3 ranks: 15+15+14, but 9+7 > 15
  tight.max_items = 4;
  const prepared<linear_cost> pt(layout, lin, packed, tight);
  const auto inf = detail::exact_search(pt.in, lin, 1'000'000);
  CHECK(inf.complete);
  CHECK(inf.assignment.has_value() ==
        brute_force(layout, layout.num_ranks(), lin, packed, tight).has_value());
  // Empty input.
  const batch_layout empty = batch_layout::from_ranks({{}, {}});
  const prepared<linear_cost> pe(empty, lin, packed, {});
  const auto none = detail::exact_search(pe.in, lin, 0);
  CHECK(none.complete);
  REQUIRE(none.assignment);
  CHECK(none.assignment->empty());
}

TEST_CASE("exact: symmetry breaking never merges ranks that differ (padded, small lengths)") {
  // Lengths 1..4 under linear padded costs make many ranks reach equal loads from different
  // (count, longest) states; only truly equal states may be merged.
  std::mt19937_64 rng(0x5eed0008);
  const linear_cost lin{1};
  for (int inst = 0; inst < 400; ++inst) {
    CAPTURE(inst);
    const auto d = static_cast<rank_t>(uniform(rng, 2, 4));
    const batch_layout layout = random_layout(rng, d, uniform(rng, 4, 10), 1, 4);
    constraints lim;
    if (inst % 2 == 1) lim.max_items = (layout.num_items() + d - 1) / d + uniform(rng, 0, 1);
    if (inst % 4 == 3) lim.cap = capacity{capacity::measure::tokens, uniform(rng, 6, 12)};
    const auto bf = brute_force(layout, d, lin, padded, lim);
    if (!bf) continue;
    const prepared<linear_cost> p(layout, lin, padded, lim);
    const auto r = detail::exact_search(p.in, lin, 1'000'000);
    REQUIRE(r.assignment);
    CHECK(r.complete);
    CHECK(detail::satisfies(p.in, *r.assignment));
    CHECK(detail::assignment_makespan(p.in, lin, *r.assignment) == *bf);
  }
}

TEST_CASE("padded_optimal: bytes caps are exact when bytes follow lengths, else a heuristic") {
  std::mt19937_64 rng(0x5eed0005);
  int unsorted_feasible = 0, unsorted_found = 0;
  for (int inst = 0; inst < 200; ++inst) {
    CAPTURE(inst);
    const auto d = static_cast<rank_t>(uniform(rng, 1, 4));
    const std::int64_t n = uniform(rng, 1, 9);
    const bool sorted_bytes = inst % 2 == 0;
    batch_layout layout = random_layout(rng, d, n, 1, 20, !sorted_bytes);
    if (sorted_bytes) {  // bytes = 3 · length + 1: non-increasing along the padded order
      std::vector<std::int64_t> b(static_cast<std::size_t>(n));
      for (std::int64_t g = 0; g < n; ++g)
        b[static_cast<std::size_t>(g)] = 3 * layout.length(g) + 1;
      layout = batch_layout(
          std::vector<std::int64_t>(layout.offsets().begin(), layout.offsets().end()),
          std::vector<std::int64_t>(layout.lengths().begin(), layout.lengths().end()), b);
    }
    std::int64_t largest = 0;
    for (std::int64_t g = 0; g < n; ++g) largest = std::max(largest, layout.bytes(g));
    constraints lim;
    lim.cap = capacity{capacity::measure::bytes, largest * uniform(rng, 1, 4)};
    const linear_cost lin{1};
    const prepared<linear_cost> p(layout, lin, padded, lim);
    const auto r = detail::padded_optimal(p.in, lin);
    const auto bf = brute_force(layout, d, lin, padded, lim);
    if (r.assignment) {
      CHECK(detail::satisfies(p.in, *r.assignment));
      if (r.optimal) CHECK(detail::assignment_makespan(p.in, lin, *r.assignment) == bf);
    }
    if (sorted_bytes) {
      CHECK(r.optimal);
      CHECK(r.assignment.has_value() == bf.has_value());
    } else if (bf) {
      ++unsorted_feasible;
      if (r.assignment) ++unsorted_found;
    }
  }
  MESSAGE("unsorted bytes: padded found ", unsorted_found, " of ", unsorted_feasible,
          " feasible instances");
  CHECK(unsorted_feasible > 0);
}

TEST_CASE("constrained_first_fit: feasible whenever it answers, and usually answers") {
  std::mt19937_64 rng(0x5eed0006);
  int feasible_instances = 0, found = 0;
  for (int inst = 0; inst < 300; ++inst) {
    CAPTURE(inst);
    const auto d = static_cast<rank_t>(uniform(rng, 1, 4));
    const batch_layout layout = random_layout(rng, d, uniform(rng, 1, 10), 1, 30, inst % 2 == 1);
    const padding_policy policy = inst % 3 == 0 ? padded : packed;
    constraints lim = random_limits(rng, layout, policy);
    if (inst % 2 == 1 && lim.cap) lim.cap->what = capacity::measure::bytes;
    const quadratic_cost q{0.0, 1.0, 0.05};
    const prepared<quadratic_cost> p(layout, q, policy, lim);
    const auto r = detail::constrained_first_fit(p.in, q);
    if (r) CHECK(detail::satisfies(p.in, *r));
    const auto bf = brute_force(layout, d, q, policy, lim);
    if (r) CHECK(bf.has_value());
    if (bf) {
      ++feasible_instances;
      if (r) ++found;
    }
  }
  MESSAGE("first fit found a plan for ", found, " of ", feasible_instances, " feasible instances");
  CHECK(found >= 0.9 * feasible_instances);
}

TEST_CASE("constrained_first_fit: large inputs with a tight cap and max_items stay feasible") {
  // 256 ranks × 32 items, cap 10% above the average tokens, at most 64 items per rank: plain
  // first fit fills the first ranks with small items up to max_items and strands the slack
  // there; the fallback must still find a plan.
  std::mt19937_64 rng(0x5eed0007);
  const rank_t d = 256;
  std::vector<std::vector<std::int64_t>> lengths(static_cast<std::size_t>(d));
  for (auto& v : lengths)
    for (int i = 0; i < 32; ++i) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      v.push_back(1 + static_cast<std::int64_t>(std::exp(3.0 + 4.0 * u)));
    }
  const batch_layout layout = batch_layout::from_ranks(lengths);
  const quadratic_cost q{0.0, 1.0, 1.0 / 1024};
  for (const auto policy : {packed, padded}) {
    CAPTURE(policy.is_padded());
    std::int64_t total = 0, largest = 0;
    for (std::int64_t g = 0; g < layout.num_items(); ++g) {
      total += layout.length(g);
      largest = std::max(largest, layout.length(g));
    }
    constraints lim;
    lim.cap =
        capacity{capacity::measure::tokens,
                 policy.is_padded() ? largest * 40 : std::max(largest, total / d + total / d / 10)};
    lim.min_items = 1;
    lim.max_items = 64;
    const prepared<quadratic_cost> p(layout, q, policy, lim);
    const auto r = detail::constrained_first_fit(p.in, q);
    REQUIRE(r);
    CHECK(detail::satisfies(p.in, *r));
    const auto lb = makespan_lower_bound(layout, d, q, policy, lim);
    MESSAGE("first fit ", (policy.is_padded() ? "padded" : "packed"), " ratio to bound ",
            detail::assignment_makespan(p.in, q, *r) / lb);
    // Through the façade (lpt or padded first, then this fallback if needed).
    const auto b = balance(layout, q, policy, balancers::automatic{}, lim);
    CHECK(honours(figures(layout, b.plan.dst_ranks(), d, q, policy), lim));
  }
}
