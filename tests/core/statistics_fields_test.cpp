// Tests for include/orchmllm/detail/core/statistics_fields.hpp: the keys and their order (the
// contract of orchmllm-bench's JSON and Python's Plan.statistics()), every field read from its
// own member of plan_statistics, and the value types for integral, double and long double costs.

#include "orchmllm/detail/core/statistics_fields.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"

namespace {

using orchmllm::plan_statistics;
using orchmllm::detail::statistic;
using orchmllm::detail::statistic_count;
using orchmllm::detail::statistic_fields;

// A plan_statistics whose every scalar figure holds a distinct value (cost figures 1..4 times
// `unit`), so that a field read from the wrong member shows.
template <class Cost>
plan_statistics<Cost> distinct_figures_statistics(Cost unit) {
  plan_statistics<Cost> s;
  s.ranks = 3;
  s.items = 99;
  s.makespan = unit * 1;
  s.makespan_before = unit * 2;
  s.lower_bound = unit * 3;
  s.min_load = unit * 4;
  s.ratio = 1.25;
  s.imbalance_before = 1.5;
  s.imbalance_after = 1.125;
  s.mean_after = 10.5;
  s.mean_before = 20.5;
  s.items_moved = 11;
  s.bytes_moved = 12;
  s.max_tokens = 13;
  s.max_bytes = 14;
  s.max_tokens_before = 15;
  s.max_bytes_before = 16;
  s.max_items_per_rank = 17;
  s.min_items_per_rank = 18;
  return s;
}

// The count and real figures of distinct_figures_statistics, by statistic.
void check_distinct_figures_rest(const orchmllm::detail::statistic_table& t) {
  CHECK(std::get<double>(t[statistic::ratio].value) == 1.25);
  CHECK(std::get<double>(t[statistic::imbalance_before].value) == 1.5);
  CHECK(std::get<double>(t[statistic::imbalance_after].value) == 1.125);
  CHECK(std::get<double>(t[statistic::mean_load].value) == 10.5);
  CHECK(std::get<double>(t[statistic::mean_load_before].value) == 20.5);
  CHECK(std::get<std::int64_t>(t[statistic::items_moved].value) == 11);
  CHECK(std::get<std::int64_t>(t[statistic::bytes_moved].value) == 12);
  CHECK(std::get<std::int64_t>(t[statistic::max_tokens].value) == 13);
  CHECK(std::get<std::int64_t>(t[statistic::max_bytes].value) == 14);
  CHECK(std::get<std::int64_t>(t[statistic::max_tokens_before].value) == 15);
  CHECK(std::get<std::int64_t>(t[statistic::max_bytes_before].value) == 16);
  CHECK(std::get<std::int64_t>(t[statistic::max_items_per_rank].value) == 17);
  CHECK(std::get<std::int64_t>(t[statistic::min_items_per_rank].value) == 18);
  for (const auto id : {statistic::ratio, statistic::items_moved, statistic::mean_load})
    CHECK_FALSE(t[id].in_cost_unit);
}

}  // namespace

TEST_CASE("statistics_fields: keys, order and ids") {
  const std::vector<std::string_view> expected = {
      "makespan",          "makespan_before",   "lower_bound",      "ratio",
      "imbalance_before",  "imbalance_after",   "mean_load",        "mean_load_before",
      "min_load",          "items_moved",       "bytes_moved",      "max_tokens",
      "max_bytes",         "max_tokens_before", "max_bytes_before", "max_items_per_rank",
      "min_items_per_rank"};
  REQUIRE(expected.size() == statistic_count);
  const auto t = statistic_fields(distinct_figures_statistics<std::int64_t>(100));
  std::size_t i = 0;
  for (const auto& f : t) {
    CHECK(f.key == expected[i]);
    CHECK(static_cast<std::size_t>(f.id) == i);
    CHECK(orchmllm::detail::statistic_key(f.id) == expected[i]);
    ++i;
  }
  CHECK(i == statistic_count);
}

TEST_CASE("statistics_fields: integral costs stay int64, every figure from its own member") {
  const auto t = statistic_fields(distinct_figures_statistics<std::int64_t>(100));
  CHECK(std::get<std::int64_t>(t[statistic::makespan].value) == 100);
  CHECK(std::get<std::int64_t>(t[statistic::makespan_before].value) == 200);
  CHECK(std::get<std::int64_t>(t[statistic::lower_bound].value) == 300);
  CHECK(std::get<std::int64_t>(t[statistic::min_load].value) == 400);
  for (const auto id : {statistic::makespan, statistic::makespan_before, statistic::lower_bound,
                        statistic::min_load})
    CHECK(t[id].in_cost_unit);
  CHECK(t[statistic::min_load].as_double() == 400.0);
  check_distinct_figures_rest(t);
  std::size_t in_cost_unit = 0;
  for (const auto& f : t) in_cost_unit += f.in_cost_unit ? 1 : 0;
  CHECK(in_cost_unit == 4);
}

TEST_CASE("statistics_fields: floating-point costs are doubles (long double rounded)") {
  const auto d = statistic_fields(distinct_figures_statistics<double>(0.5));
  CHECK(std::get<double>(d[statistic::makespan].value) == 0.5);
  CHECK(std::get<double>(d[statistic::lower_bound].value) == 1.5);
  CHECK(std::get<double>(d[statistic::min_load].value) == 2.0);
  CHECK(d[statistic::makespan_before].in_cost_unit);
  check_distinct_figures_rest(d);

  const long double third = 1.0L / 3.0L;
  const auto l = statistic_fields(distinct_figures_statistics<long double>(third));
  CHECK(std::get<double>(l[statistic::makespan].value) == static_cast<double>(third));
  CHECK(std::get<double>(l[statistic::makespan_before].value) == static_cast<double>(third * 2));
  check_distinct_figures_rest(l);
}

TEST_CASE("statistics_fields: the figures of compute_statistics") {
  const auto layout = orchmllm::batch_layout::from_ranks({{5, 1, 7}, {}, {2, 2}});
  const auto plan = orchmllm::rearrangement::identity(layout);
  const auto s = orchmllm::compute_statistics(layout, plan, orchmllm::linear_cost{},
                                              orchmllm::padding_policy::packed());
  const auto t = statistic_fields(s);
  CHECK(std::get<std::int64_t>(t[statistic::makespan].value) == s.makespan);
  CHECK(std::get<std::int64_t>(t[statistic::makespan].value) == 13);
  CHECK(std::get<std::int64_t>(t[statistic::lower_bound].value) == s.lower_bound);
  CHECK(std::get<double>(t[statistic::imbalance_after].value) == s.imbalance_after);
  CHECK(std::get<std::int64_t>(t[statistic::items_moved].value) == 0);
  CHECK(std::get<std::int64_t>(t[statistic::max_items_per_rank].value) == 3);
  CHECK(std::get<std::int64_t>(t[statistic::min_items_per_rank].value) == 0);
}
