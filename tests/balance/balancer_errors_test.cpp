// Tests of orchmllm::balance (balance/balancer.hpp): bad options raise invalid_argument_error,
// infeasible constraints raise infeasible_error naming the numbers, edge cases (zero lengths,
// empty ranks, one rank), sizes near 2^63 are exact or a clear error, locality's node ids.

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/balance/exact.hpp"
#include "orchmllm/detail/balance/padded.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using namespace orchmllm::test;  // support/test_support.hpp

}  // namespace

// -------------------------------------------------------------------------------------------------
// (c) Bad input.
// -------------------------------------------------------------------------------------------------

TEST_CASE("balance: bad options raise invalid_argument_error") {
  const auto layout = batch_layout::from_ranks({{5, 3}, {8}, {1, 1, 1}});
  const linear_cost lin{1};
  CHECK_THROWS_AS(balance(layout, lin, padded, balancers::karmarkar_karp{}),
                  invalid_argument_error);
  CHECK_THROWS_AS(balance(layout, lin, packed, balancers::padded_exact{}), invalid_argument_error);
  // An item longer than the largest bucket, whatever the algorithm.
  for (const any_balancer& method :
       {any_balancer(balancers::automatic{}), any_balancer(balancers::lpt{}),
        any_balancer(balancers::exact{}), any_balancer(balancers::padded_exact{}),
        any_balancer(balancers::identity{})})
    expect_invalid(
        [&] {
          (void)balance(layout, lin, bucketed({2, 6}), method);
        },
        {"length 8", "largest bucket 6"});
  CHECK_THROWS_AS(balance(layout, lin, packed, balancers::automatic{.refine_budget = -2}),
                  invalid_argument_error);
  CHECK_THROWS_AS(balance(layout, lin, packed, balancers::automatic{.exact_node_budget = -1}),
                  invalid_argument_error);
  CHECK_THROWS_AS(balance(layout, lin, packed, balancers::automatic{.exact_max_items = -1}),
                  invalid_argument_error);
  CHECK_THROWS_AS(
      balance(layout, lin, packed, balancers::automatic{}, constraints{.min_items = -1}),
      invalid_argument_error);
  CHECK_THROWS_AS(balance(layout, lin, packed, balancers::automatic{},
                          constraints{.min_items = 2, .max_items = 1}),
                  invalid_argument_error);
  CHECK_THROWS_AS(balance(layout, lin, packed, balancers::automatic{},
                          constraints{.cap = capacity{capacity::measure::tokens, -1}}),
                  invalid_argument_error);
  // A cost model that returns a negative cost.
  auto negative = [](std::int64_t l) { return 1 - l; };
  CHECK_THROWS_AS(balance(layout, negative, packed), invalid_argument_error);
  CHECK_THROWS_AS(parse_balancer("fastest"), invalid_argument_error);
  CHECK_THROWS_AS(detail::exact_search(prepared<linear_cost>(layout, lin, packed, {}).in, lin, -1),
                  invalid_argument_error);
  CHECK_THROWS_AS(detail::padded_optimal(prepared<linear_cost>(layout, lin, packed, {}).in, lin),
                  invalid_argument_error);
}

TEST_CASE("balance: infeasible constraints raise infeasible_error naming the numbers") {
  const linear_cost lin{1};
  const auto small = batch_layout::from_ranks({{4, 3}, {4}, {1, 1, 1, 2}});  // 16 tokens
  for (const any_balancer& method :
       {any_balancer(balancers::lpt{}), any_balancer(balancers::karmarkar_karp{}),
        any_balancer(balancers::exact{}), any_balancer(balancers::automatic{})}) {
    CAPTURE(method.name());
    const constraints limits{.cap = capacity{capacity::measure::tokens, 5}};  // 3 × 5 = 15 < 16
    expect_error<infeasible_error>([&] { (void)balance(small, lin, packed, method, limits); },
                                   {"total of 16", "cap 5", "3 ranks"});
  }
  const auto layout = batch_layout::from_ranks({{5, 3}, {8}, {1, 1, 1}});  // 6 items, 19 tokens
  // A single item above the cap.
  constraints limits;
  limits.cap = capacity{capacity::measure::tokens, 7};
  expect_error<infeasible_error>(
      [&] { (void)balance(layout, lin, packed, balancers::automatic{}, limits); },
      {"8", "cap of 7"});
  limits.cap = capacity{capacity::measure::bytes, 4};
  CHECK_THROWS_AS(balance(layout, lin, padded, balancers::padded_exact{}, limits),
                  infeasible_error);
  // Item counts.
  limits = {};
  limits.min_items = 3;  // 6 items cannot give 3 ranks 3 each
  CHECK_THROWS_AS(balance(layout, lin, packed, balancers::automatic{}, limits), infeasible_error);
  CHECK_THROWS_AS(balance(layout, lin, padded, balancers::automatic{}, limits), infeasible_error);
  limits.min_items = 0;
  limits.max_items = 1;  // 6 items do not fit 3 ranks of 1
  CHECK_THROWS_AS(balance(layout, lin, packed, balancers::automatic{}, limits), infeasible_error);
  CHECK_THROWS_AS(balance(layout, lin, padded, balancers::automatic{}, limits), infeasible_error);
  // Totals fit but no packing does: 6 + 6 + 6 on two ranks of 10.
  const auto three = batch_layout::from_ranks({{6, 6}, {6}});
  for (const any_balancer& method :
       {any_balancer(balancers::lpt{}), any_balancer(balancers::exact{}),
        any_balancer(balancers::automatic{})}) {
    CAPTURE(method.name());
    const constraints cap10{.cap = capacity{capacity::measure::tokens, 10}};
    expect_error<infeasible_error>([&] { (void)balance(three, lin, packed, method, cap10); },
                                   {"total 18", "cap of 10", "2 ranks"});
  }
  // Padded: each rank holds at most one item of 5 under a cap of 9, three items, two ranks.
  const auto padded3 = batch_layout::from_ranks({{5, 5}, {5}});
  CHECK_THROWS_AS(balance(padded3, lin, padded, balancers::padded_exact{},
                          constraints{.cap = capacity{capacity::measure::tokens, 9}}),
                  infeasible_error);
  // Items but no ranks cannot be built; zero ranks with zero items is fine.
  const batch_layout nothing;
  CHECK(balance(nothing, lin).plan.num_items() == 0);
}

TEST_CASE("balance: edge cases") {
  const linear_cost lin{1};
  // Empty ranks, zero lengths, one rank.
  const auto zeros = batch_layout::from_ranks({{0, 0}, {}, {0}});
  for (const any_balancer& method :
       {any_balancer(balancers::lpt{}), any_balancer(balancers::exact{}),
        any_balancer(balancers::automatic{})}) {
    const auto r = balance(zeros, lin, packed, method);
    CHECK(r.makespan == 0);
    CHECK(r.proven_optimal);
  }
  const auto pz = balance(zeros, lin, padded, balancers::padded_exact{});
  CHECK(pz.makespan == 0);
  constraints one_each;
  one_each.min_items = 1;
  const auto spread = balance(zeros, lin, padded, balancers::padded_exact{}, one_each);
  for (rank_t r = 0; r < 3; ++r)
    CHECK(spread.plan.dst_offsets()[static_cast<std::size_t>(r) + 1] -
              spread.plan.dst_offsets()[static_cast<std::size_t>(r)] ==
          1);
  const auto single = batch_layout::from_ranks({{4, 9, 2}});
  CHECK(balance(single, lin, padded, balancers::padded_exact{}).makespan == 27);
  CHECK(balance(single, lin, packed, balancers::exact{}).makespan == 15);
}

TEST_CASE("balance: sizes near 2^63 are exact or a clear error, never a wrapped figure") {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  const batch_layout one({0, 1, 1, 1}, {max});
  const balancers::lpt lpt;
  // One item of length 2^63 - 1: its cost and every bound equal it (⌈S/d⌉ formed without
  // S + d - 1).
  for (const any_balancer& a :
       {any_balancer(balancers::lpt{}), any_balancer(balancers::karmarkar_karp{}),
        any_balancer(balancers::automatic{})}) {
    const auto res = balance(one, linear_cost{}, packed, a);
    CHECK(res.makespan == max);
    CHECK(res.lower_bound == max);
    CHECK(res.proven_optimal);
  }
  CHECK(makespan_lower_bound(one, 3, linear_cost{}, packed) == max);
  // Padded to a multiple of 2^63 - 1 (or of 2^62), two items' tokens do not fit; a length
  // padded past 2^63 - 1 does not either.
  const batch_layout small({0, 1, 2}, {1, 1});
  expect_invalid([&] { (void)balance(small, linear_cost{}, padded_to_multiple(max), lpt); },
                 {"2 items padded to 9223372036854775807 tokens exceed 2^63 - 1 tokens"});
  const batch_layout long_one({0, 1}, {max - 6});
  expect_invalid([&] { (void)balance(long_one, linear_cost{}, padded_to_multiple(8), lpt); },
                 {"length 9223372036854775801 padded to a multiple of 8 exceeds 2^63 - 1"});
  const std::int64_t p62 = std::int64_t{1} << 62;
  expect_invalid([&] { (void)balance(small, linear_cost{}, padded_to_multiple(p62), lpt); },
                 {"2 items padded to 4611686018427387904 tokens exceed 2^63 - 1 tokens"});
  // Costs whose total passes 2^63 - 1, packed and padded.
  const auto quarter = [p62](std::int64_t) { return p62; };  // two of them make 2^63
  expect_invalid([&] { (void)balance(small, quarter, packed, lpt); },
                 {"total cost overflows at item 1 (cost 4611686018427387904"});
  expect_invalid([&] { (void)rank_loads(small, quarter, packed); },
                 {"total cost overflows at item 1"});
  expect_invalid([&] { (void)makespan_lower_bound(small, 2, quarter, packed); },
                 {"total cost overflows at item 1"});
  const batch_layout three({0, 3}, {1, 1, 1});
  const auto huge = [](std::int64_t) { return std::int64_t{1} << 61; };
  expect_invalid([&] { (void)balance(three, huge, padded, lpt); },
                 {"4 × the padded cost 2305843009213693952", "exceeds the largest load"});
  CHECK(balance(three, huge, packed, lpt).makespan == std::int64_t{3} << 61);
  // Floating costs must be finite.
  const auto inf_cost = quadratic_cost{1, 1, 1e308};  // --cost quadratic:1,1e308: inf from l = 2
  const batch_layout growing({0, 3}, {1, 2, 3});
  expect_invalid([&] { (void)balance(growing, inf_cost, packed, lpt); },
                 {"cost of item 1 (length 2) is inf", "must be finite"});
  expect_invalid(
      [&] {
        (void)compute_statistics(growing, rearrangement::identity(growing), inf_cost, packed);
      },
      {"must be finite"});
  const auto big_double = [](std::int64_t) { return 1e308; };
  expect_invalid([&] { (void)balance(three, big_double, packed, lpt); },
                 {"total cost of 3 items is not finite"});
}

TEST_CASE("balance(locality): node ids must be dense, below the rank count") {
  const batch_layout layout({0, 2, 4, 6, 8}, {5, 1, 4, 2, 3, 3, 6, 1});
  balancers::locality o;
  for (rank_t bad : {rank_t{4}, std::numeric_limits<rank_t>::max(), rank_t{1'000'000'000}}) {
    o.node_of_rank = {0, 0, 1, bad};
    expect_invalid(
        [&] { (void)balance(layout, linear_cost{}, packed, o); },
        {"locality: node_of_rank[3] is " + std::to_string(bad), "must be a node id in [0, 4)"});
  }
  o.node_of_rank = {0, 0, 1, 3};  // sparse but below d: accepted
  CHECK(balance(layout, linear_cost{}, packed, o).makespan >= 7);
}
