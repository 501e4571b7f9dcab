#pragma once
// The scalar figures of `plan_statistics` under one set of key names, in one order: what the
// programs built on the library print (orchmllm-bench's `plan` and `compare` JSON, the Python
// Plan.statistics() dict), so that the name and the value of a figure are written down once.
// Each program picks the figures it prints by `statistic` and adds its own (timings, sizes,
// proven_optimal) where it wants them. Not API.
//
// Values: the figures in the cost model's unit (makespans, the lower bound, the smallest load)
// hold the cost type's value, as an int64 for integral costs and as a double for floating-point
// ones (a long double is rounded to double); counts are int64; means and ratios double.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <variant>

#include "orchmllm/core/statistics.hpp"

namespace orchmllm::detail {

/// The scalar figures of `plan_statistics` but `ranks` and `items` (the problem's size), in the
/// order `statistic_fields` lists them. Each one's key is its name here (`statistic_key`).
enum class statistic : std::uint8_t {
  makespan,            ///< plan_statistics::makespan (cost unit)
  makespan_before,     ///< plan_statistics::makespan_before (cost unit)
  lower_bound,         ///< plan_statistics::lower_bound (cost unit)
  ratio,               ///< plan_statistics::ratio
  imbalance_before,    ///< plan_statistics::imbalance_before
  imbalance_after,     ///< plan_statistics::imbalance_after
  mean_load,           ///< plan_statistics::mean_after
  mean_load_before,    ///< plan_statistics::mean_before
  min_load,            ///< plan_statistics::min_load (cost unit)
  items_moved,         ///< plan_statistics::items_moved
  bytes_moved,         ///< plan_statistics::bytes_moved
  max_tokens,          ///< plan_statistics::max_tokens
  max_bytes,           ///< plan_statistics::max_bytes
  max_tokens_before,   ///< plan_statistics::max_tokens_before
  max_bytes_before,    ///< plan_statistics::max_bytes_before
  max_items_per_rank,  ///< plan_statistics::max_items_per_rank
  min_items_per_rank,  ///< plan_statistics::min_items_per_rank
};

/// How many figures `statistic` names.
inline constexpr std::size_t statistic_count = 17;
static_assert(static_cast<std::size_t>(statistic::min_items_per_rank) + 1 == statistic_count);

/// The key of each figure, indexed by `statistic`.
inline constexpr std::array<std::string_view, statistic_count> statistic_keys = {
    "makespan",          "makespan_before",   "lower_bound",      "ratio",
    "imbalance_before",  "imbalance_after",   "mean_load",        "mean_load_before",
    "min_load",          "items_moved",       "bytes_moved",      "max_tokens",
    "max_bytes",         "max_tokens_before", "max_bytes_before", "max_items_per_rank",
    "min_items_per_rank"};

/// The key under which the programs print figure `id`. O(1).
constexpr std::string_view statistic_key(statistic id) noexcept {
  return statistic_keys[static_cast<std::size_t>(id)];
}

/// One figure: which one, its key, its value, and whether it is in the cost model's unit.
struct statistic_field {
  statistic id{};
  std::string_view key;
  std::variant<std::int64_t, double> value;
  bool in_cost_unit = false;

  /// The value as a double (an int64 converted, rounded above 2^53). O(1).
  [[nodiscard]] double as_double() const noexcept {
    return std::visit([](auto v) { return static_cast<double>(v); }, value);
  }
};

/// Every figure of one plan, in the order of `statistic`; `table[id]` is figure `id`.
struct statistic_table {
  std::array<statistic_field, statistic_count> fields;

  /// Figure `id`. O(1).
  [[nodiscard]] const statistic_field& operator[](statistic id) const noexcept {
    return fields[static_cast<std::size_t>(id)];
  }
  [[nodiscard]] auto begin() const noexcept { return fields.begin(); }
  [[nodiscard]] auto end() const noexcept { return fields.end(); }
};

/// The scalar figures of `s` (every `statistic`, in its order) with their keys and values as
/// the file comment says. O(1) (the per-rank load vectors are not read); never throws.
template <class Cost>
statistic_table statistic_fields(const plan_statistics<Cost>& s) {
  statistic_table t;
  auto set = [&](statistic id, std::variant<std::int64_t, double> value, bool in_cost_unit) {
    t.fields[static_cast<std::size_t>(id)] = {id, statistic_key(id), value, in_cost_unit};
  };
  auto cost = [&](statistic id, Cost v) {
    if constexpr (std::is_integral_v<Cost>) {
      set(id, static_cast<std::int64_t>(v), true);
    } else {
      set(id, static_cast<double>(v), true);
    }
  };
  auto real = [&](statistic id, double v) { set(id, v, false); };
  auto count = [&](statistic id, std::int64_t v) { set(id, v, false); };
  cost(statistic::makespan, s.makespan);
  cost(statistic::makespan_before, s.makespan_before);
  cost(statistic::lower_bound, s.lower_bound);
  real(statistic::ratio, s.ratio);
  real(statistic::imbalance_before, s.imbalance_before);
  real(statistic::imbalance_after, s.imbalance_after);
  real(statistic::mean_load, s.mean_after);
  real(statistic::mean_load_before, s.mean_before);
  cost(statistic::min_load, s.min_load);
  count(statistic::items_moved, s.items_moved);
  count(statistic::bytes_moved, s.bytes_moved);
  count(statistic::max_tokens, s.max_tokens);
  count(statistic::max_bytes, s.max_bytes);
  count(statistic::max_tokens_before, s.max_tokens_before);
  count(statistic::max_bytes_before, s.max_bytes_before);
  count(statistic::max_items_per_rank, s.max_items_per_rank);
  count(statistic::min_items_per_rank, s.min_items_per_rank);
  return t;
}

}  // namespace orchmllm::detail
