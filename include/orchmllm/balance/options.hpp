#pragma once
/// @file options.hpp
/// The built-in balancers as data: the `algorithm` selector, its text form, and
/// `balance_options`, the runtime configuration that configs, stage declarations and the
/// command-line tool use (balance/balancers.hpp holds the same balancers as types).

#include <cstdint>
#include <string_view>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm {

/// The built-in balancing algorithms, as a selector for configurations, stage declarations and
/// the command-line tool (balance/balancer.hpp describes each; balance/balancers.hpp holds them
/// as types). `custom` is what `balance_result::used` reports for a plan made by the
/// application's own balancer; it is never a valid `balance_options::method`. The numeric
/// values are stable (they enter stage fingerprints).
enum class balance_method : std::uint8_t {
  none,
  lpt,
  kk,
  exact,
  padded_exact,
  automatic,
  locality,
  kk_equal,
  custom
};

/// The former name of `balance_method`, kept so existing code compiles.
using algorithm = balance_method;

/// Largest n · d for which `balance_method::kk` runs the complete differencing (its tuples hold
/// n · d sums); above it `kk` runs `kk_equal`.
inline constexpr std::int64_t kk_complete_max_entries = std::int64_t{1} << 21;

/// Fewest items for which `balance_options::concurrent` starts its second thread: below it the
/// thread costs more than it saves.
inline constexpr std::int64_t concurrent_min_items = std::int64_t{1} << 16;

/// True for the algorithms that balance the packed policy only (`kk`, `kk_equal`).
constexpr bool packed_only(balance_method a) noexcept {
  return a == balance_method::kk || a == balance_method::kk_equal;
}

/// Whether `balance_method::kk` runs the complete differencing for n items on d ranks (n · d ≤
/// `kk_complete_max_entries`) rather than `kk_equal`. O(1).
constexpr bool kk_complete_fits(std::int64_t n, std::int64_t d) noexcept {
  return d <= kk_complete_max_entries / (n > 1 ? n : 1);
}

/// Name of an algorithm as used by the command-line tool ("auto" for automatic, "padded" for
/// padded_exact).
constexpr std::string_view to_string(balance_method a) noexcept {
  switch (a) {
    case balance_method::none: return "none";
    case balance_method::lpt: return "lpt";
    case balance_method::kk: return "kk";
    case balance_method::exact: return "exact";
    case balance_method::padded_exact: return "padded";
    case balance_method::automatic: return "auto";
    case balance_method::locality: return "locality";
    case balance_method::kk_equal: return "kk-equal";
    case balance_method::custom: return "custom";
  }
  return "?";
}

/// Parses "none", "lpt", "kk", "kk-equal", "exact", "padded", "auto" or "locality" (the inverse
/// of `to_string` on every built-in; "custom" names no algorithm and is rejected). Throws
/// `invalid_argument_error` naming the unknown name.
inline balance_method parse_balance_method(std::string_view name) {
  for (auto a : {balance_method::none, balance_method::lpt, balance_method::kk,
                 balance_method::kk_equal, balance_method::exact, balance_method::padded_exact,
                 balance_method::automatic, balance_method::locality})
    if (to_string(a) == name) return a;
  detail::raise<invalid_argument_error>(
      detail::concat("unknown algorithm '", name,
                     "' (expected none, lpt, kk, kk-equal, exact, padded, auto or locality)"));
}

/// `parse_balance_method` under its former name.
inline balance_method parse_algorithm(std::string_view name) { return parse_balance_method(name); }

/// Options of `balance`.
struct balance_options {
  balance_method method = balance_method::automatic;  ///< which algorithm
  constraints limits{};                     ///< per-rank cap and item counts
  bool refine = false;                      ///< refine lpt/kk results (automatic always does)
  std::int64_t refine_budget = -1;          ///< refinement steps; -1 = 2·n + 64
  std::int64_t exact_node_budget = 2'000'000;  ///< search nodes for `exact`
  std::int64_t exact_max_items = 14;        ///< automatic runs `exact` up to this many items
  /// `automatic` (and `locality`'s base run): the relative gap to the lower bound at which the
  /// search stops. A plan with makespan ≤ lower bound · (1 + gap_tolerance) (rounded down for
  /// integral costs) ends it: the later candidates are skipped and the refinement stops there
  /// too. 0 (the default) stops only at the lower bound itself. Either the result is within the
  /// gap or it is exactly the plan of gap 0 (a search that never reaches the target takes the
  /// same steps). Trades balance for planning time on large inputs. Must be finite and >= 0.
  double gap_tolerance = 0;
  /// `automatic` (and `locality`'s base run) on the packed policy with at least
  /// `concurrent_min_items` items: the equal-count Karmarkar–Karp candidate, which the search
  /// considers when lpt and its refinement miss the target, is computed on a second thread from
  /// the start, beside them, and stopped unused when they meet it. The same plan as without
  /// (the search takes the same steps; tested), sooner where a core is spare (a planner beside
  /// training); `plan_step` sets it with `plan_options::parallel_stages`. Plans do not depend on
  /// it, so declarations' fingerprints do not either. The cost model is not called on that
  /// thread; when no thread can be started, kk runs on the calling thread as without.
  bool concurrent = false;
  /// `locality`: relative makespan slack over automatic's makespan M that the locality plan may
  /// use (target T = M · (1 + tolerance)); the knob that trades balance for moved bytes. Must be
  /// finite and >= 0.
  double locality_tolerance = 0.001;
  /// `locality`: the node of every rank (d entries, nodes numbered 0, 1, … as
  /// `topology::node_map()` gives them); empty = all ranks on one node. Plain data because the
  /// balance layer sits below topology/. Every entry must be in [0, d) (else
  /// `invalid_argument_error`).
  std::vector<rank_t> node_of_rank{};
};

}  // namespace orchmllm
