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
                                         std::span<const double> seconds, int degree = 2) {
  ORCHMLLM_REQUIRE(degree == 1 || degree == 2, invalid_argument_error, "degree is ", degree,
                   ", must be 1 or 2");
  ORCHMLLM_REQUIRE(lengths.size() == seconds.size(), invalid_argument_error, lengths.size(),
                   " lengths but ", seconds.size(), " timings");
  double max_len = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    ORCHMLLM_REQUIRE(lengths[i] >= 0, invalid_argument_error, "sample ", i, " has negative length ",
                     lengths[i]);
    ORCHMLLM_REQUIRE(std::isfinite(seconds[i]) && seconds[i] >= 0, invalid_argument_error,
                     "sample ", i, " has time ", seconds[i], ", must be finite and >= 0");
    max_len = std::max(max_len, static_cast<double>(lengths[i]));
  }
  {
    std::vector<std::int64_t> distinct(lengths.begin(), lengths.end());
    std::sort(distinct.begin(), distinct.end());
    const auto k = std::unique(distinct.begin(), distinct.end()) - distinct.begin();
    ORCHMLLM_REQUIRE(k >= degree + 1, invalid_argument_error, "fitting degree ", degree,
                     " needs at least ", degree + 1, " distinct lengths, got ", k);
  }
  const double scale = max_len > 0 ? max_len : 1.0;
  const int m = degree + 1;
  // Normal equations on scaled powers x = l / scale: G = Σ φφᵀ, r = Σ φ·t.
  detail::normal_equations eq;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const double x = static_cast<double>(lengths[i]) / scale;
    const double phi[3] = {1.0, x, x * x};
    eq.add_row(phi, m, seconds[i]);
  }
  auto residual = [&](const double* coef) {
    double s = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      const double x = static_cast<double>(lengths[i]) / scale;
      const double pred = coef[0] + rounded_mul(x, coef[1] + rounded_mul(x, coef[2]));
      s += rounded_mul(pred - seconds[i], pred - seconds[i]);
    }
    return s;
  };
  const auto best = detail::nnls_by_active_sets(eq, m, residual);
  // Times near the top of the double range overflow the squared errors and the sums of the
  // normal equations: every coefficient set then looks alike, and the result would be garbage.
  ORCHMLLM_REQUIRE(std::isfinite(residual(best.data())), invalid_argument_error,
                   "fit_quadratic_cost: the squared errors overflow double (times up to ",
                   *std::max_element(seconds.begin(), seconds.end()), " s)");
  return quadratic_cost{best[0], best[1] / scale, best[2] / (scale * scale)};
}

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
  void add_rank(std::span<const std::int64_t> lengths, double seconds) {
    ORCHMLLM_REQUIRE(std::isfinite(seconds) && seconds >= 0, invalid_argument_error,
                     "observation ", rows_.size(), " has time ", seconds,
                     ", must be finite and >= 0");
    std::array<double, 4> row{0, 0, 0, 1.0};
    std::int64_t longest = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      ORCHMLLM_REQUIRE(lengths[i] >= 0, invalid_argument_error, "observation ", rows_.size(),
                       ": item ", i, " has negative length ", lengths[i]);
      longest = std::max(longest, lengths[i]);
    }
    const auto n = static_cast<double>(lengths.size());
    if (policy_.is_padded()) {
      if (!lengths.empty()) {
        const auto p = static_cast<double>(policy_.padded_length(longest));
        row[0] = n;
        row[1] = rounded_mul(n, p);
        row[2] = rounded_mul(row[1], p);
      }
    } else {
      row[0] = n;
      for (const auto l : lengths) {
        const auto x = static_cast<double>(l);
        row[1] += x;
        row[2] += rounded_mul(x, x);
      }
    }
    rows_.push_back(row);
    seconds_.push_back(seconds);
  }

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
  [[nodiscard]] calibration_result fit() const {
    const int m = degree_ + 1;
    const std::size_t unknowns = static_cast<std::size_t>(m) + (overhead_ ? 1 : 0);
    ORCHMLLM_REQUIRE(rows_.size() >= unknowns, invalid_argument_error, "cost_calibration: ",
                     rows_.size(), " observations for ", unknowns, " unknowns");
    // Columns: a, b, c (the first m), then the overhead at index m; scaled by their largest
    // value so the normal equations are well conditioned.
    const int cols = static_cast<int>(unknowns);
    auto column = [&](const std::array<double, 4>& row, int j) { return row[j < m ? j : 3]; };
    double scale[4] = {1, 1, 1, 1};
    for (int j = 0; j < cols; ++j) {
      double top = 0;
      for (const auto& row : rows_) top = std::max(top, column(row, j));
      scale[j] = top > 0 ? top : 1.0;
    }
    detail::normal_equations eq;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      double phi[4];
      for (int j = 0; j < cols; ++j) phi[j] = column(rows_[i], j) / scale[j];
      eq.add_row(phi, cols, seconds_[i]);
    }
    auto residual = [&](const double* coef) {
      double s = 0;
      for (std::size_t i = 0; i < rows_.size(); ++i) {
        double pred = 0;
        for (int j = 0; j < cols; ++j) pred += rounded_mul(column(rows_[i], j) / scale[j], coef[j]);
        s += rounded_mul(pred - seconds_[i], pred - seconds_[i]);
      }
      return s;
    };
    const auto best = detail::nnls_by_active_sets(eq, cols, residual);
    calibration_result out;
    out.cost = quadratic_cost{best[0] / scale[0], m > 1 ? best[1] / scale[1] : 0.0,
                              m > 2 ? best[2] / scale[2] : 0.0};
    out.overhead_seconds = overhead_ ? best[static_cast<std::size_t>(m)] / scale[m] : 0.0;
    out.rms_seconds = std::sqrt(residual(best.data()) / static_cast<double>(rows_.size()));
    out.observations = rows_.size();
    // As in fit_quadratic_cost: an overflowed fit is refused, not returned.
    ORCHMLLM_REQUIRE(std::isfinite(out.rms_seconds) && std::isfinite(out.cost.constant) &&
                         std::isfinite(out.cost.linear) && std::isfinite(out.cost.quadratic) &&
                         std::isfinite(out.overhead_seconds),
                     invalid_argument_error,
                     "cost_calibration: the squared errors overflow double (times up to ",
                     *std::max_element(seconds_.begin(), seconds_.end()), " s)");
    return out;
  }

 private:
  padding_policy policy_;
  int degree_;
  bool overhead_;
  std::vector<std::array<double, 4>> rows_;  // a-, b-, c- and overhead column of each observation
  std::vector<double> seconds_;
};

}  // namespace orchmllm
