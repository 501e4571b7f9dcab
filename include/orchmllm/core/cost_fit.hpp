#pragma once
/// @file cost_fit.hpp
/// Cost models fitted to measured times.
///
///   fit_quadratic_cost()  per item: one (length, seconds) pair per profiled item
///   cost_calibration      per rank: what the trainer measures in warmup steps, the time each
///                         rank spent in a stage over the items it processed
///
/// Both solve non-negative least squares, so the fitted `quadratic_cost` is non-decreasing and
/// valid under every padding policy (docs/cost_models.md, "Fitting a model").

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/detail/core/nnls.hpp"

namespace orchmllm {

/// Least-squares fit of `quadratic_cost` to profiled (length, seconds) pairs.
///
/// `degree` 1 fits constant + linear·l, degree 2 adds quadratic·l². Coefficients that come out
/// negative are clamped to 0 and the remaining ones refitted (non-negative least squares over
/// the 2^(degree+1) active sets, tiny), so the fitted model is non-decreasing and usable with
/// padded policies. Columns are scaled by the largest length before solving for conditioning.
/// O(n log n) (the distinct-length count sorts), deterministic. Throws `invalid_argument_error`
/// when sizes differ, fewer than degree + 1 distinct lengths are given, a length is negative, a
/// time is not finite or negative, or the times are so large that the squared errors overflow
/// double.
inline quadratic_cost fit_quadratic_cost(std::span<const std::int64_t> lengths,
                                         std::span<const double> seconds, int degree = 2);

/// What `cost_calibration::fit` returns.
struct calibration_result {
  /// The per-item model: a + b·l + c·l² (`c` = 0 for degree 1), all coefficients ≥ 0.
  quadratic_cost cost{};
  /// Per-rank time that does not depend on the items (kernel launches, synchronisation); 0
  /// when the calibration was built without it. It shifts every rank alike, so balancing
  /// ignores it, but leaving it out of the fit would push it into the per-item constant.
  double overhead_seconds = 0.0;
  /// Root-mean-square residual over the observations, in seconds: how well the model explains
  /// the measured rank times.
  double rms_seconds = 0.0;
  std::size_t observations = 0;  ///< rank times the fit used
};

/// Fits a stage's cost model from the per-rank stage times measured in warmup steps: for each
/// rank, the wall time of the stage and the lengths of the items it processed, not per-item
/// timings (which a trainer cannot take without serialising the stage).
///
/// With `policy` packed a rank's time is modelled as
///     overhead + Σᵢ (a + b·lᵢ + c·lᵢ²) = overhead + a·n + b·Σ lᵢ + c·Σ lᵢ²,
/// padded (any padded policy: padded, to a multiple, bucketed, the trainer's own rule) as
///     overhead + n · (a + b·p + c·p²),  p = policy.padded_length(max lᵢ),
/// the load formula of `rank_load`. The fit minimises the squared error over all observations
/// subject to a, b, c, overhead ≥ 0 (exact NNLS over the 2^k active sets, k ≤ 4 unknowns, on
/// columns scaled to their largest value), so the model is non-decreasing and valid under every
/// padding policy. When every observation has the same item count n, the per-item constant a and
/// the overhead are not separately identifiable (only overhead + a·n is); the fit then prefers a.
///
///     orchmllm::cost_calibration calib;                // packed, degree 2, with overhead
///     for (auto& step : warmup) calib.add_step(step.vision_layout, step.vision_seconds);
///     const auto vision = calib.fit().cost;            // use in the stage declaration
///
/// Memory: 5 doubles per observation. `add_rank` O(n) for n items, `fit` O(observations).
/// Deterministic: the same observations in the same order give bit-identical coefficients.
class cost_calibration {
 public:
  /// `degree` 1 fits a + b·l, 2 adds c·l². `fit_overhead` adds the per-rank constant.
  /// Throws `invalid_argument_error` for a degree other than 1 or 2.
  explicit cost_calibration(padding_policy policy = packed, int degree = 2,
                            bool fit_overhead = true)
      : policy_(policy), degree_(degree), overhead_(fit_overhead) {
    ORCHMLLM_REQUIRE(degree == 1 || degree == 2, invalid_argument_error, "degree is ", degree,
                     ", must be 1 or 2");
  }

  /// One observation: a rank processed items of these lengths in `seconds`. An empty rank is a
  /// valid observation (of the overhead). Throws `invalid_argument_error` for a negative length
  /// or a time that is negative or not finite; the calibration is unchanged then.
  void add_rank(std::span<const std::int64_t> lengths, double seconds);

  /// One step: rank r of `processed` holds the items rank r ran the stage on (the stage's
  /// arrangement after balancing, e.g. `apply` of the plan to the gathered layout) and took
  /// `seconds[r]`. Throws `invalid_argument_error` when `seconds` does not have one entry per
  /// rank, or as `add_rank` (checked before anything is added).
  void add_step(const batch_layout& processed, std::span<const double> seconds) {
    ORCHMLLM_REQUIRE(seconds.size() == static_cast<std::size_t>(processed.num_ranks()),
                     invalid_argument_error, "add_step: ", seconds.size(), " rank times for ",
                     processed.num_ranks(), " ranks");
    for (std::size_t r = 0; r < seconds.size(); ++r)
      ORCHMLLM_REQUIRE(std::isfinite(seconds[r]) && seconds[r] >= 0, invalid_argument_error,
                       "add_step: rank ", r, " has time ", seconds[r], ", must be finite and >= 0");
    for (rank_t r = 0; r < processed.num_ranks(); ++r)
      add_rank(processed.rank_lengths(r), seconds[static_cast<std::size_t>(r)]);
  }

  /// Observations added so far.
  [[nodiscard]] std::size_t observations() const noexcept { return rows_.size(); }

  /// The non-negative least-squares model of the observations. Throws `invalid_argument_error`
  /// with fewer observations than unknowns (degree + 1, plus one with the overhead), or when
  /// the times are so large that the squared errors overflow double.
  [[nodiscard]] calibration_result fit() const;

 private:
  padding_policy policy_;
  int degree_;
  bool overhead_;
  std::vector<std::array<double, 4>> rows_;  // a-, b-, c- and overhead column of each observation
  std::vector<double> seconds_;
};

}  // namespace orchmllm

// The definitions of the functions declared only above.
#include "orchmllm/detail/core/cost_fit.inl"  // IWYU pragma: export
