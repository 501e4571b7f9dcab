// Tests for include/orchmllm/balance/micro_batches.hpp: the cells (rank, micro-batch) of
// balance_micro_batches keep every limit, cover every item once and group each rank's slots by
// micro-batch; the objective is what the cells cost under the sync model and never below its
// lower bound; on small inputs the lower bound is checked against an exhaustive search over
// every assignment of items to cells; bad options and items that cannot fit raise clear errors.

#include "orchmllm/balance/micro_batches.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <queue>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/micro_batch_objective.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::balance_micro_batches;
using orchmllm::batch_layout;
using orchmllm::infeasible_error;
using orchmllm::invalid_argument_error;
using orchmllm::linear_cost;
using orchmllm::micro_batch_order;
using orchmllm::micro_batching;
using orchmllm::padding_policy;
using orchmllm::quadratic_cost;
using orchmllm::rank_t;
using orchmllm::sync_model;
using orchmllm::test::expect_error;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;

// What one cell holds, recomputed from the plan without the library.
struct cell_figures {
  std::int64_t items = 0, tokens = 0, bytes = 0, longest = 0;
  double load = 0;
};

// The figures of every cell (r·M + m) of `res` on `layout`, loads from `cost` under `policy`
// (packed: the sum of the items' costs; padded: count × cost(padded longest)).
template <class Result, class C>
std::vector<cell_figures> cells_of(const Result& res, const batch_layout& layout, const C& cost,
                                   padding_policy policy) {
  const rank_t d = res.balance.plan.num_dst_ranks();
  const std::int64_t m_count = res.micro_batches;
  std::vector<cell_figures> cells(static_cast<std::size_t>(d * m_count));
  for (std::int64_t cell = 0; cell < d * m_count; ++cell) {
    auto& f = cells[static_cast<std::size_t>(cell)];
    for (auto h = res.cell_offsets[static_cast<std::size_t>(cell)];
         h < res.cell_offsets[static_cast<std::size_t>(cell) + 1]; ++h) {
      const auto g = res.balance.plan.source_of(h);
      ++f.items;
      f.bytes += layout.bytes(g);
      f.longest = std::max(f.longest, layout.length(g));
      f.tokens += layout.length(g);
      if (!policy.is_padded()) f.load += static_cast<double>(cost(layout.length(g)));
    }
    if (policy.is_padded() && f.items > 0) {
      f.tokens = f.items * policy.padded_length(f.longest);
      f.load =
          static_cast<double>(f.items) * static_cast<double>(cost(policy.padded_length(f.longest)));
    }
  }
  return cells;
}

// Σ_m max_r load(r, m) or max_r Σ_m load(r, m) of the cells.
double objective_of(const std::vector<cell_figures>& cells, rank_t d, std::int64_t m_count,
                    sync_model sync) {
  std::vector<double> load(cells.size());
  for (std::size_t i = 0; i < cells.size(); ++i) load[i] = cells[i].load;
  return orchmllm::test::cells_objective(load, d, m_count, sync);
}

// n items on d ranks, lengths 1..max_len, 1..3 bytes per token.
batch_layout random_micro_layout(std::mt19937_64& rng, rank_t d, std::int64_t n,
                                 std::int64_t max_len) {
  return orchmllm::test::random_uniform_layout(rng, d, n, 1, max_len, std::pair{1, 3});
}

// The smallest objective under `sync` over every assignment of the items to d × m_count cells
// that keeps `tokens` per cell and leaves no cell empty (unless `allow_empty`), packed, loads
// from `cost`: exhaustive, (d·M)^n assignments; nullopt when none is feasible.
template <class C>
std::optional<double> brute_force_micro(const batch_layout& layout, rank_t d, std::int64_t m_count,
                                        std::int64_t tokens, const C& cost,
                                        sync_model sync = sync_model::micro_batch,
                                        bool allow_empty = false) {
  const std::int64_t n = layout.num_items();
  const std::int64_t cells = d * m_count;
  std::vector<std::int64_t> cell(static_cast<std::size_t>(n), 0);
  std::optional<double> best;
  while (true) {
    std::vector<cell_figures> fig(static_cast<std::size_t>(cells));
    for (std::int64_t g = 0; g < n; ++g) {
      auto& f = fig[static_cast<std::size_t>(cell[static_cast<std::size_t>(g)])];
      f.load += static_cast<double>(cost(layout.length(g)));
      f.tokens += layout.length(g);
      ++f.items;
    }
    const bool ok = std::all_of(fig.begin(), fig.end(), [&](const cell_figures& f) {
      return (allow_empty || f.items > 0) && f.tokens <= tokens;
    });
    if (ok) {
      const double total = objective_of(fig, d, m_count, sync);
      if (!best || total < *best) best = total;
    }
    std::int64_t g = 0;
    while (g < n && ++cell[static_cast<std::size_t>(g)] == cells)
      cell[static_cast<std::size_t>(g++)] = 0;
    if (g == n) break;
  }
  return best;
}

}  // namespace

TEST_CASE("micro_batches: cells keep every limit, cover every item and group slots by cell") {
  std::mt19937_64 rng(4242);
  int planned = 0;
  for (int iter = 0; iter < 600; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 4));
    const std::int64_t n = uniform(rng, d, 40);
    const auto layout = random_micro_layout(rng, d, n, 200);
    const padding_policy policy =
        uniform(rng, 0, 2) == 0 ? padding_policy::padded(8) : padding_policy::packed();
    micro_batching micro;
    micro.sync = uniform(rng, 0, 1) == 0 ? sync_model::step : sync_model::micro_batch;
    micro.allow_empty = uniform(rng, 0, 3) == 0;
    micro.multiple_of = uniform(rng, 1, 2);
    micro.order =
        uniform(rng, 0, 1) == 0 ? micro_batch_order::planned : micro_batch_order::light_ends;
    std::int64_t largest = 0, total = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      largest = std::max(largest, policy.padded_length(layout.length(g)));
      total += policy.padded_length(layout.length(g));
    }
    // From the tightest possible cap (the largest item) to a loose one.
    micro.limits.tokens = std::max(largest, total / d / uniform(rng, 1, 4));
    if (policy.is_padded()) micro.limits.tokens = std::max(micro.limits.tokens, 2 * largest);
    if (uniform(rng, 0, 3) == 0) micro.limits.items = uniform(rng, 1, 6);
    if (uniform(rng, 0, 3) == 0) {  // a byte cap as well, from the widest item up
      std::int64_t widest = 0, bytes = 0;
      for (std::int64_t g = 0; g < n; ++g) {
        widest = std::max(widest, layout.bytes(g));
        bytes += layout.bytes(g);
      }
      micro.limits.bytes =
          std::max(policy.is_padded() ? 2 * widest : widest, bytes / d / uniform(rng, 1, 4));
    }
    if (uniform(rng, 0, 3) == 0) micro.count = micro.multiple_of * uniform(rng, 1, 3);
    if (uniform(rng, 0, 1) == 0) micro.exact_max_items = 0;  // the heuristics alone
    CAPTURE(iter);
    CAPTURE(d);
    CAPTURE(n);
    std::optional<orchmllm::micro_batch_result<std::int64_t>> res;
    try {
      res = balance_micro_batches(layout, linear_cost{1}, policy, micro);
    } catch (const infeasible_error&) {
      // Only a given count, or cells that must all hold an item, can be infeasible.
      CHECK((micro.count != 0 || !micro.allow_empty));
      continue;
    }
    ++planned;
    const std::int64_t m_count = res->micro_batches;
    CHECK(m_count >= micro.min_count);
    CHECK(m_count % micro.multiple_of == 0);
    if (micro.count != 0) CHECK(m_count == micro.count);
    REQUIRE(res->cell_offsets.size() == static_cast<std::size_t>(d * m_count + 1));
    CHECK(res->cell_offsets.back() == n);
    const auto dst = res->balance.plan.dst_offsets();
    for (rank_t r = 0; r <= d; ++r)
      CHECK(res->cell_offsets[static_cast<std::size_t>(r * m_count)] ==
            dst[static_cast<std::size_t>(r)]);
    // Every item once, in the cell whose destination range holds it: cells are contiguous.
    const auto& plan = res->balance.plan;
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    for (std::int64_t h = 0; h < n; ++h) ++seen[static_cast<std::size_t>(plan.source_of(h))];
    CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
    for (rank_t r = 0; r < d; ++r)
      for (std::int64_t m = 0; m < m_count; ++m) {
        const auto [first, last] = res->cell(r, m);
        for (auto h = first; h < last; ++h) {
          const auto g = static_cast<std::size_t>(plan.source_of(h));
          CHECK(plan.dst_ranks()[g] == r);
          CHECK(dst[static_cast<std::size_t>(r)] + plan.dst_slots()[g] == h);
        }
      }
    const auto cells = cells_of(*res, layout, linear_cost{1}, policy);
    for (const auto& c : cells) {
      CHECK(c.tokens <= micro.limits.tokens);
      CHECK(c.bytes <= micro.limits.bytes);
      CHECK(c.items <= micro.limits.items);
      if (!micro.allow_empty) CHECK(c.items >= 1);
    }
    const double objective = objective_of(cells, d, m_count, micro.sync);
    CHECK(static_cast<double>(res->objective) == objective);
    CHECK(res->objective >= res->objective_lower_bound);
    CHECK(static_cast<double>(res->balance.makespan) ==
          objective_of(cells, d, m_count, sync_model::step));
    CHECK(res->balance.makespan >= res->balance.lower_bound);
    // The same input plans the same cells.
    const auto again = balance_micro_batches(layout, linear_cost{1}, policy, micro);
    CHECK(again.cell_offsets == res->cell_offsets);
    CHECK(std::equal(again.balance.plan.dst_ranks().begin(), again.balance.plan.dst_ranks().end(),
                     res->balance.plan.dst_ranks().begin(), res->balance.plan.dst_ranks().end()));
    CHECK(std::equal(again.balance.plan.dst_slots().begin(), again.balance.plan.dst_slots().end(),
                     res->balance.plan.dst_slots().begin()));
  }
  CHECK(planned > 400);
}

TEST_CASE("micro_batches: per step without binding limits is balance's plan") {
  std::mt19937_64 rng(77);
  for (int iter = 0; iter < 100; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto layout = random_micro_layout(rng, d, uniform(rng, d, 60), 500);
    const quadratic_cost cost{0.0, 1.0, 1e-3};
    micro_batching micro;
    micro.sync = sync_model::step;
    micro.allow_empty = true;
    micro.count = uniform(rng, 1, 4);
    const auto res = balance_micro_batches(layout, cost, padding_policy::packed(), micro);
    const auto plain = orchmllm::balance(layout, cost, padding_policy::packed());
    CHECK(res.objective == doctest::Approx(plain.makespan).epsilon(1e-12));
  }
}

TEST_CASE("micro_batches: exact on small inputs, the bound below every assignment") {
  std::mt19937_64 rng(9);
  int solved = 0;
  for (int iter = 0; iter < 150; ++iter) {
    const rank_t d = 2;
    const std::int64_t m_count = 2;
    const std::int64_t n = uniform(rng, 4, 7);
    const auto layout = random_micro_layout(rng, d, n, 50);
    std::int64_t total = 0, largest = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      total += layout.length(g);
      largest = std::max(largest, layout.length(g));
    }
    micro_batching micro;
    micro.count = m_count;
    micro.limits.tokens = std::max(largest, total / (d * m_count) + uniform(rng, 0, 30));
    const auto opt = brute_force_micro(layout, d, m_count, micro.limits.tokens, linear_cost{1});
    CAPTURE(iter);
    if (!opt) {
      CHECK_THROWS_AS(
          (void)balance_micro_batches(layout, linear_cost{1}, padding_policy::packed(), micro),
          infeasible_error);
      continue;
    }
    const auto res = balance_micro_batches(layout, linear_cost{1}, padding_policy::packed(), micro);
    ++solved;
    CHECK(static_cast<double>(res.objective_lower_bound) <= *opt);
    CHECK(static_cast<double>(res.objective) == *opt);
    CHECK(res.objective_proven_optimal);
  }
  CHECK(solved > 100);
}

TEST_CASE("micro_batches: the cap-aware bound when the longest item fills its cell") {
  // Cost l², cap 100 tokens, d = 2: the item of 100 fills its cell; its micro-batch holds at
  // most two items of 50 besides (5,000), so the other six (15,000) need two more micro-batches
  // whose tops add up to at least 15,000 / 2: 10,000 + 7,500. The average (15,000) and the
  // tops bound (10,000 + 2,500 + 2,500) are lower; 17,500 is reached by {100 | 50 50},
  // {50 50 | 50 50}, {50 | 50}.
  const auto layout = batch_layout::from_ranks({{100, 50, 50, 50, 50}, {50, 50, 50, 50}});
  micro_batching micro;
  micro.count = 3;
  micro.limits.tokens = 100;
  const quadratic_cost square{0.0, 0.0, 1.0};
  const auto res = balance_micro_batches(layout, square, padding_policy::packed(), micro);
  CHECK(res.objective_lower_bound == doctest::Approx(17'500.0).epsilon(1e-12));
  CHECK(res.objective >= res.objective_lower_bound);
  // Without the cap the bound is the average again.
  micro.limits.tokens = 400;
  const auto loose = balance_micro_batches(layout, square, padding_policy::packed(), micro);
  CHECK(loose.objective_lower_bound == doctest::Approx(15'000.0).epsilon(1e-12));
}

TEST_CASE("micro_batches: the bound under an attention cost against every assignment") {
  std::mt19937_64 rng(31);
  int solved = 0, above_average = 0;
  for (int iter = 0; iter < 120; ++iter) {
    const rank_t d = 2;
    const std::int64_t m_count = uniform(rng, 1, 3);
    const std::int64_t n = uniform(rng, d * m_count, 7);
    const auto layout = random_micro_layout(rng, d, n, 60);
    std::int64_t total = 0, largest = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      total += layout.length(g);
      largest = std::max(largest, layout.length(g));
    }
    const quadratic_cost cost{0.0, 1.0, 0.05};
    micro_batching micro;
    micro.count = m_count;
    micro.limits.tokens = std::max(largest, total / (d * m_count) + uniform(rng, 0, 20));
    const auto opt = brute_force_micro(layout, d, m_count, micro.limits.tokens, cost);
    CAPTURE(iter);
    if (!opt) {
      CHECK_THROWS_AS((void)balance_micro_batches(layout, cost, padding_policy::packed(), micro),
                      infeasible_error);
      continue;
    }
    const auto res = balance_micro_batches(layout, cost, padding_policy::packed(), micro);
    ++solved;
    CHECK(res.objective_lower_bound <= *opt * (1 + 1e-12));
    CHECK(res.objective == doctest::Approx(*opt).epsilon(1e-12));
    double sum = 0;
    for (std::int64_t g = 0; g < n; ++g) sum += cost(layout.length(g));
    if (res.objective_lower_bound > sum / d * (1 + 1e-9)) ++above_average;
  }
  CHECK(solved > 60);
  CHECK(above_average > 10);
}

TEST_CASE("micro_batches: exact per step, with empty cells, and the smallest M that fits") {
  std::mt19937_64 rng(2027);
  int solved = 0, exact_needed = 0;
  for (int iter = 0; iter < 200; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 2));
    const std::int64_t n = uniform(rng, d, 6);
    const auto layout = random_micro_layout(rng, d, n, 40);
    std::int64_t total = 0, largest = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      total += layout.length(g);
      largest = std::max(largest, layout.length(g));
    }
    micro_batching micro;
    micro.sync = uniform(rng, 0, 1) == 0 ? sync_model::step : sync_model::micro_batch;
    micro.allow_empty = uniform(rng, 0, 1) == 0;
    micro.limits.tokens = std::max(largest, total / (d * uniform(rng, 1, 3)));
    const bool automatic = uniform(rng, 0, 1) == 0;
    micro.count = automatic ? 0 : uniform(rng, 1, 3);
    CAPTURE(iter);
    // The M to expect: the given one, or the smallest with a plan: at most ⌊n/d⌋ without empty
    // cells; with them ⌈n/d⌉ always has one (an item per cell).
    std::optional<double> opt;
    std::int64_t m_count = micro.count;
    const std::int64_t most = micro.allow_empty ? (n + d - 1) / d : n / d;
    for (std::int64_t m = automatic ? 1 : micro.count; m <= (automatic ? most : micro.count); ++m) {
      opt = brute_force_micro(layout, d, m, micro.limits.tokens, linear_cost{1}, micro.sync,
                              micro.allow_empty);
      m_count = m;
      if (opt) break;
    }
    if (!opt) {
      CHECK_THROWS_AS(
          (void)balance_micro_batches(layout, linear_cost{1}, padding_policy::packed(), micro),
          infeasible_error);
      continue;
    }
    const auto res = balance_micro_batches(layout, linear_cost{1}, padding_policy::packed(), micro);
    ++solved;
    CHECK(res.micro_batches == m_count);
    CHECK(static_cast<double>(res.objective) == *opt);
    CHECK(static_cast<double>(res.objective_lower_bound) <= *opt);
    CHECK(res.objective_proven_optimal);
    // Did the search beat the heuristics (or find a plan where they found none)?
    micro_batching heuristic = micro;
    heuristic.exact_max_items = 0;
    try {
      const auto h =
          balance_micro_batches(layout, linear_cost{1}, padding_policy::packed(), heuristic);
      if (h.micro_batches != res.micro_batches || h.objective > res.objective) ++exact_needed;
    } catch (const infeasible_error&) {
      ++exact_needed;
    }
  }
  CHECK(solved > 120);
  CHECK(exact_needed > 0);
}

TEST_CASE("micro_batches: the bound's fractional knapsack against a full sort") {
  std::mt19937_64 rng(606);
  for (int iter = 0; iter < 40; ++iter) {
    const std::int64_t n = iter % 4 == 0 ? uniform(rng, 1, 20) : uniform(rng, 1'000, 12'000);
    std::vector<double> value(static_cast<std::size_t>(n));
    std::vector<std::int64_t> weight(static_cast<std::size_t>(n));
    long double total_weight = 0;
    for (std::size_t i = 0; i < value.size(); ++i) {
      weight[i] = uniform(rng, 0, 9) == 0 ? 0 : uniform(rng, 1, 5'000);
      value[i] = weight[i] == 0 ? static_cast<double>(uniform(rng, 0, 50))
                                : static_cast<double>(weight[i]) *
                                      (1.0 + static_cast<double>(uniform(rng, 0, 999)) / 100.0);
      total_weight += static_cast<long double>(weight[i]);
    }
    const auto skip = static_cast<std::size_t>(uniform(rng, 0, n - 1));
    const long double capacity =
        total_weight * static_cast<long double>(uniform(rng, 0, 110)) / 100.0L;
    // Reference: weightless items whole, the others by value per unit, highest first.
    std::vector<std::size_t> by(value.size());
    std::iota(by.begin(), by.end(), std::size_t{0});
    std::stable_partition(by.begin(), by.end(), [&](std::size_t i) { return weight[i] == 0; });
    const auto first_weighted =
        std::find_if(by.begin(), by.end(), [&](std::size_t i) { return weight[i] > 0; });
    std::sort(first_weighted, by.end(), [&](std::size_t a, std::size_t b) {
      return value[a] / static_cast<double>(weight[a]) > value[b] / static_cast<double>(weight[b]);
    });
    long double expected = 0, room = capacity;
    for (const auto i : by) {
      if (i == skip) continue;
      if (weight[i] == 0) {
        expected += value[i];
      } else if (room > 0) {
        const auto w = static_cast<long double>(weight[i]);
        expected += w <= room ? value[i] : value[i] * room / w;
        room -= w;
      }
    }
    CAPTURE(iter);
    CAPTURE(n);
    const long double got = orchmllm::detail::fractional_knapsack(value, weight, capacity, skip);
    CHECK(static_cast<double>(got) == doctest::Approx(static_cast<double>(expected)).epsilon(1e-9));
  }
}

TEST_CASE("micro_batches: the cells' heap pops in the order of a priority queue") {
  std::mt19937_64 rng(77);
  using entry = std::pair<std::int64_t, int>;
  for (int iter = 0; iter < 40; ++iter) {
    orchmllm::detail::min_heap<entry> heap;
    std::priority_queue<entry, std::vector<entry>, std::greater<>> reference;
    int next = 0;
    for (int op = 0; op < 400; ++op) {
      const auto kind = uniform(rng, 0, 2);
      if (kind == 0 || reference.empty()) {
        const entry e{uniform(rng, 0, 50), next++};
        heap.push(e);
        reference.push(e);
      } else if (kind == 1) {
        REQUIRE(heap.top() == reference.top());
        heap.pop();
        reference.pop();
      } else {  // the top grows
        const entry e{reference.top().first + uniform(rng, 0, 20), reference.top().second};
        heap.replace_top(e);
        reference.pop();
        reference.push(e);
      }
      REQUIRE(heap.empty() == reference.empty());
      if (!reference.empty()) REQUIRE(heap.top() == reference.top());
    }
  }
}

TEST_CASE("micro_batches: relieving full micro-batches keeps every limit and never costs more") {
  namespace detail = orchmllm::detail;
  std::mt19937_64 rng(1234);
  int improved = 0;
  for (int iter = 0; iter < 60; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 2, 8));
    const std::int64_t m_count = uniform(rng, 2, 5);
    const std::int64_t n = uniform(rng, 4 * d * m_count, 12 * d * m_count);
    const auto layout = random_micro_layout(rng, d, n, 400);
    const quadratic_cost cost{0.0, 1.0, 1.0 / 200};
    std::int64_t total = 0, largest = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      total += layout.length(g);
      largest = std::max(largest, layout.length(g));
    }
    orchmllm::micro_batch_limits limits;
    limits.tokens = std::max(largest, total * uniform(rng, 100, 125) / (100 * d * m_count));
    detail::micro_items<double> in;
    in.cost = detail::checked_costs(layout, cost, orchmllm::packed);
    for (std::int64_t g = 0; g < n; ++g) in.shape.push_back(orchmllm::item_shape_of(layout, g));
    in.alone = in.cost;
    in.order =
        detail::canonical_order<double>(layout, std::span<const double>(in.cost), orchmllm::packed);
    const detail::cell_rules<double, quadratic_cost> rules{orchmllm::packed, limits, cost};
    auto plan = detail::plan_per_micro_batch_greedy(in, d, m_count, false, rules);
    if (!plan) continue;
    auto members = detail::members_of(in, std::span<const std::int64_t>(plan->batch), m_count);
    const auto greedy = detail::objectives(plan->load, d, m_count).first;
    // Odd iterations balance the micro-batches again with lpt, even ones refine their cells.
    const orchmllm::any_balancer lpt = orchmllm::balancers::lpt{};
    const orchmllm::any_balancer* const b = iter % 2 != 0 ? &lpt : nullptr;
    detail::rebalance_micro_batches(layout, in, m_count, false, b, rules, members, *plan);
    const auto before = detail::objectives(plan->load, d, m_count).first;
    CHECK(before <= greedy);
    detail::relieve_full_micro_batches(layout, in, m_count, false, b, rules, members, *plan);
    CAPTURE(iter);
    // The members it keeps are the plan's.
    const auto fresh = detail::members_of(in, std::span<const std::int64_t>(plan->batch), m_count);
    CHECK(fresh.ids == members.ids);
    CHECK(fresh.order == members.order);
    // The cells from scratch: every item once, every limit, no empty cell, the loads it keeps.
    std::vector<std::int64_t> tokens(static_cast<std::size_t>(d * m_count), 0),
        items(static_cast<std::size_t>(d * m_count), 0);
    std::vector<double> load(static_cast<std::size_t>(d * m_count), 0.0);
    for (std::int64_t g = 0; g < n; ++g) {
      const auto gi = static_cast<std::size_t>(g);
      REQUIRE(plan->batch[gi] >= 0);
      REQUIRE(plan->batch[gi] < m_count);
      const auto c = static_cast<std::size_t>(plan->rank[gi] * m_count + plan->batch[gi]);
      tokens[c] += layout.length(g);
      ++items[c];
      load[c] += cost(layout.length(g));
    }
    for (std::size_t c = 0; c < load.size(); ++c) {
      CHECK(tokens[c] <= limits.tokens);
      CHECK(items[c] >= 1);
      CHECK(load[c] == doctest::Approx(plan->load[c]).epsilon(1e-9));
    }
    const auto after = detail::objectives(plan->load, d, m_count).first;
    CHECK(after <= before);
    if (after < before) ++improved;
  }
  CHECK(improved > 0);
}

TEST_CASE("micro_batches: light_ends puts the lightest micro-batches first and last") {
  std::mt19937_64 rng(5);
  for (int iter = 0; iter < 50; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 4));
    const auto layout = random_micro_layout(rng, d, 10 * d, 300);
    micro_batching micro;
    micro.count = 5;
    micro.order = micro_batch_order::light_ends;
    const auto res = balance_micro_batches(layout, linear_cost{1}, padding_policy::packed(), micro);
    const auto cells = cells_of(res, layout, linear_cost{1}, padding_policy::packed());
    std::vector<double> weight(5, 0.0);
    for (std::int64_t m = 0; m < 5; ++m)
      for (rank_t r = 0; r < d; ++r)
        weight[static_cast<std::size_t>(m)] = std::max(
            weight[static_cast<std::size_t>(m)], cells[static_cast<std::size_t>(r * 5 + m)].load);
    for (std::size_t k = 1; k + 1 < weight.size(); ++k) {
      CHECK(weight.front() <= weight[k]);
      CHECK(weight.back() <= weight[k]);
    }
  }
}

TEST_CASE("micro_batches: the input as sampled, cut greedily under the cap") {
  // Rank 0: 5, 5, 5 under a cap of 10 tokens -> cells 10, 5; rank 1: 1 -> one cell.
  const auto layout = batch_layout::from_ranks({{5, 5, 5}, {1}});
  micro_batching micro;
  micro.limits.tokens = 10;
  micro.sync = sync_model::micro_batch;
  CHECK(orchmllm::micro_batch_objective_as_sampled(layout, linear_cost{1}, padding_policy::packed(),
                                                   micro) == 15);
  micro.sync = sync_model::step;
  CHECK(orchmllm::micro_batch_objective_as_sampled(layout, linear_cost{1}, padding_policy::packed(),
                                                   micro) == 15);
  const auto wide = batch_layout::from_ranks({{4, 4}, {8}});
  micro.sync = sync_model::micro_batch;
  micro.limits.tokens = 4;
  // Rank 0: 4 | 4; rank 1: 8 needs 8 tokens alone -> an error naming the item.
  expect_invalid(
      [&] {
        (void)orchmllm::micro_batch_objective_as_sampled(wide, linear_cost{1},
                                                         padding_policy::packed(), micro);
      },
      {"item 2", "8 tokens", "4 tokens"});
}

TEST_CASE("micro_batches: identity keeps every item on its rank under both sync models") {
  std::mt19937_64 rng(515);
  for (int trial = 0; trial < 40; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 6));
    const std::int64_t n = uniform(rng, 4 * d, 12 * d);
    const auto layout = random_micro_layout(rng, d, n, 900);
    micro_batching micro;
    micro.count = uniform(rng, 1, 3);
    micro.allow_empty = true;
    micro.sync = trial % 2 == 0 ? sync_model::micro_batch : sync_model::step;
    const padding_policy policy =
        trial % 3 == 0 ? padding_policy::padded() : padding_policy::packed();
    const auto res = balance_micro_batches(layout, linear_cost{1}, policy, micro,
                                           orchmllm::balancers::identity{});
    CAPTURE(trial);
    CHECK(res.balance.used == std::string_view("identity"));
    for (std::int64_t g = 0; g < n; ++g)
      CHECK(res.balance.plan.destination_of(g).rank == layout.rank_of(g));
    const auto cells = cells_of(res, layout, linear_cost{1}, policy);
    CHECK(objective_of(cells, d, res.micro_batches, micro.sync) ==
          doctest::Approx(static_cast<double>(res.objective)));
  }
}

TEST_CASE("micro_batches: the cells follow their bins through map_bins") {
  std::mt19937_64 rng(808);
  for (int trial = 0; trial < 20; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 2, 12));
    const auto layout = random_micro_layout(rng, d, uniform(rng, 3 * d, 10 * d), 700);
    micro_batching micro;
    micro.count = uniform(rng, 1, 3);
    const auto res = balance_micro_batches(layout, linear_cost{1}, padding_policy::packed(), micro);
    const auto mapped = orchmllm::map_bins(res.balance.plan, layout.item_bytes(),
                                           orchmllm::topology::uniform(d, 2));
    const auto cells =
        orchmllm::cell_offsets_on_ranks(res.cell_offsets, res.micro_batches, mapped.rank_of_bin);
    REQUIRE(cells.size() == res.cell_offsets.size());
    CAPTURE(trial);
    // item_micro_batches: every item's micro-batch, the same before and after the mapping.
    const auto of_item =
        orchmllm::item_micro_batches(res.balance.plan, res.cell_offsets, res.micro_batches);
    CHECK(orchmllm::item_micro_batches(mapped.plan, cells, res.micro_batches) == of_item);
    REQUIRE(of_item.size() == static_cast<std::size_t>(layout.num_items()));
    for (rank_t b = 0; b < d; ++b) {
      const rank_t r = mapped.rank_of_bin[static_cast<std::size_t>(b)];
      for (std::int64_t m = 0; m < res.micro_batches; ++m) {
        const auto [first, last] = res.cell(b, m);
        const auto at = static_cast<std::size_t>(r * res.micro_batches + m);
        REQUIRE(cells[at + 1] - cells[at] == last - first);
        for (auto h = first; h < last; ++h) {
          CHECK(mapped.plan.source_of(cells[at] + (h - first)) == res.balance.plan.source_of(h));
          CHECK(of_item[static_cast<std::size_t>(res.balance.plan.source_of(h))] == m);
        }
      }
    }
    CHECK(res.objective_ratio() >= 1.0);
  }
  const auto two = batch_layout::from_ranks({{3, 4}});
  const auto plan = balance(two, linear_cost{1}, padding_policy::packed()).plan;
  CHECK(orchmllm::item_micro_batches(plan, std::vector<std::int64_t>{0, 1, 2}, 2) ==
        std::vector<std::int64_t>{0, 1});
  expect_invalid(
      [&] {
        (void)orchmllm::item_micro_batches(plan, std::vector<std::int64_t>{0, 1}, 1);
      },
      {"run from 0 to 1", "from 0 to 2"});
  expect_invalid(
      [&] {
        (void)orchmllm::item_micro_batches(plan, std::vector<std::int64_t>{0, 2, 1, 2}, 3);
      },
      {"below offset"});
  expect_invalid(
      [&] {
        (void)orchmllm::item_micro_batches(plan, std::vector<std::int64_t>{0, 2}, 2);
      },
      {"2 cell offsets for 2 micro-batches"});
  expect_invalid(
      [] {
        (void)orchmllm::cell_offsets_on_ranks(std::vector<std::int64_t>{0, 1, 2}, 2,
                                              std::vector<rank_t>{0, 1});
      },
      {"rank_of_bin has 2 entries"});
}

TEST_CASE("micro_batches: rank-level constraints hold under either sync model") {
  std::mt19937_64 rng(5150);
  int constrained = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 2, 6));
    const auto layout = random_micro_layout(rng, d, uniform(rng, 2 * d, 8 * d), 300);
    const std::int64_t n = layout.num_items();
    std::int64_t total = 0, largest = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      total += layout.length(g);
      largest = std::max(largest, layout.length(g));
    }
    orchmllm::constraints limits;
    if (uniform(rng, 0, 1) == 0)
      limits.cap = orchmllm::capacity{orchmllm::capacity::measure::tokens,
                                      std::max(largest, total / d + uniform(rng, 0, largest))};
    if (uniform(rng, 0, 1) == 0) limits.min_items = uniform(rng, 1, 2);
    if (uniform(rng, 0, 1) == 0) limits.max_items = (n + d - 1) / d + uniform(rng, 0, 2);
    micro_batching micro;
    micro.limits.tokens = std::max(largest, total / d / 2);
    micro.allow_empty = true;
    micro.sync = uniform(rng, 0, 1) == 0 ? sync_model::step : sync_model::micro_batch;
    CAPTURE(trial);
    std::optional<orchmllm::micro_batch_result<std::int64_t>> res;
    try {
      res = balance_micro_batches(layout, linear_cost{1}, padding_policy::packed(), micro,
                                  orchmllm::balancers::automatic{}, limits);
    } catch (const infeasible_error&) {
      continue;  // the rank-level constraints themselves may not fit
    }
    if (res->balance.fallback) continue;
    ++constrained;
    const auto dst = res->balance.plan.dst_offsets();
    for (rank_t r = 0; r < d; ++r) {
      const auto count = dst[static_cast<std::size_t>(r) + 1] - dst[static_cast<std::size_t>(r)];
      CHECK(count >= limits.min_items);
      CHECK(count <= limits.max_items);
      std::int64_t tokens = 0;
      for (auto h = dst[static_cast<std::size_t>(r)]; h < dst[static_cast<std::size_t>(r) + 1]; ++h)
        tokens += layout.length(res->balance.plan.source_of(h));
      if (limits.cap) CHECK(tokens <= limits.cap->limit);
    }
  }
  CHECK(constrained > 100);
}

TEST_CASE("micro_batches: bad options and impossible inputs raise clear errors") {
  const auto layout = batch_layout::from_ranks({{3, 4, 5}, {6, 7}});
  const auto run = [&](const micro_batching& m) {
    return balance_micro_batches(layout, linear_cost{1}, padding_policy::packed(), m);
  };
  micro_batching m;
  m.count = -1;
  expect_invalid([&] { (void)run(m); }, {"micro-batch count is -1"});
  m = {};
  m.multiple_of = 0;
  expect_invalid([&] { (void)run(m); }, {"multiple_of is 0"});
  m = {};
  m.count = 3;
  m.multiple_of = 2;
  expect_invalid([&] { (void)run(m); }, {"micro-batch count 3", "multiple of 2"});
  m = {};
  m.exact_max_items = -1;
  expect_invalid([&] { (void)run(m); }, {"exact_max_items is -1"});
  m = {};
  m.limits.tokens = 0;
  expect_invalid([&] { (void)run(m); }, {"tokens >= 1"});
  m = {};
  m.limits.tokens = 6;
  expect_invalid([&] { (void)run(m); }, {"item 4", "7 tokens", "6 tokens"});
  m = {};
  m.count = 2;  // 5 items cannot fill 2 micro-batches on each of 2 ranks... they can (4 cells)
  CHECK(run(m).micro_batches == 2);
  m.count = 3;  // 6 cells, 5 items
  expect_error<infeasible_error>([&] { (void)run(m); }, {"5 items", "3 micro-batches"});
  m.allow_empty = true;
  CHECK(run(m).micro_batches == 3);
  CHECK(orchmllm::parse_sync_model("step") == sync_model::step);
  CHECK(orchmllm::parse_sync_model("micro-batch") == sync_model::micro_batch);
  expect_invalid([] { (void)orchmllm::parse_sync_model("fsdp"); }, {"'fsdp'", "micro-batch"});
}
