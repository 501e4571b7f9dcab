#pragma once
// orchmllm-bench generate: write a synthetic ITEMS.csv with lognormal lengths.
//
// Reproducibility: the numbers come from std::mt19937_64 (whose output sequence the C++
// standard fixes) through our own uniform and Box–Muller normal transforms, never through
// std::*_distribution (whose algorithms differ between standard libraries). Lengths are
// rounded to integers, so the file is byte-identical wherever exp/log/cos/sin are correctly
// rounded or nearly so (glibc, musl, libc++ platforms); only a value landing within an ulp of
// a .5 boundary could differ.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <orchmllm/core/batch_layout.hpp>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/file_io.hpp"
#include "bench/cli/items_csv.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// Largest number of items `generate` writes (a guard against typos).
inline constexpr std::int64_t generate_max_items = 100'000'000;

/// The `generate` subcommand.
const command& generate_command();

/// Deterministic lognormal integer lengths: exp(mu + sigma · z), rounded, clamped to [lo, hi].
/// z comes from the Box–Muller transform of two 53-bit uniforms; both normals of a pair are used.
class lognormal_lengths {
 public:
  lognormal_lengths(std::uint64_t seed, double mu, double sigma, std::int64_t lo, std::int64_t hi)
      : rng_(seed), mu_(mu), sigma_(sigma), lo_(lo), hi_(hi) {}

  /// Uniform in (0, 1]: the top 53 bits of one draw, plus one, times 2^-53.
  double uniform_open0() { return static_cast<double>((rng_() >> 11) + 1) * 0x1p-53; }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1p-53; }

  /// A standard normal value.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = uniform_open0();  // (0, 1]: log(u1) is finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

  /// The next length.
  std::int64_t next() {
    const double x = std::exp(mu_ + sigma_ * normal());
    if (!(x < static_cast<double>(hi_))) return hi_;  // also catches +inf
    if (x <= static_cast<double>(lo_)) return lo_;
    return std::clamp<std::int64_t>(std::llround(x), lo_, hi_);
  }

 private:
  std::mt19937_64 rng_;
  double mu_, sigma_;
  std::int64_t lo_, hi_;
  double spare_ = 0;
  bool has_spare_ = false;
};

/// The synthetic layout `generate` writes (rank-major: rank 0's K items, then rank 1's, ...).
/// `bytes_per_token` 0 = no bytes column.
batch_layout generate_layout(std::int64_t ranks, std::int64_t items_per_rank, std::uint64_t seed,
                             double mu, double sigma, std::int64_t lo, std::int64_t hi,
                             std::int64_t bytes_per_token = 0);

/// Runs `generate`. Returns the exit code (see command.hpp).
int run_generate(const parsed_args& args, std::ostream& out, std::ostream& err);

}  // namespace orchmllm::tool
