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

int run_generate(const parsed_args& args, std::ostream& out, std::ostream& err);

/// Largest number of items `generate` writes (a guard against typos).
inline constexpr std::int64_t generate_max_items = 100'000'000;

/// The `generate` subcommand.
inline const command& generate_command() {
  static const command cmd = [] {
    command c;
    c.name = "generate";
    c.summary = "Write a synthetic ITEMS.csv with lognormal lengths.";
    c.flags = {
        {"ranks", "D", "number of ranks", true},
        {"items-per-rank", "K", "items on every rank", true},
        {"seed", "S", "random seed (std::mt19937_64); default 1", false},
        {"mu", "MU", "mean of log(length); default 7 (median ~1097)", false},
        {"sigma", "SIGMA", "standard deviation of log(length); default 1", false},
        {"min", "L", "smallest length; default 16", false},
        {"max", "L", "largest length; default 32768", false},
        {"bytes-per-token", "B", "also write a bytes column = B x length", false},
        {"out", "ITEMS.csv", "output file", true},
    };
    c.details =
        "D ranks x K items; length = clamp(round(exp(mu + sigma*z)), min, max), z standard "
        "normal.\n"
        "The same flags give a byte-identical file on every platform (own Box-Muller transform\n"
        "over std::mt19937_64). stdout: one JSON object with items, ranks, seed, total_length,\n"
        "min_length, max_length, out.\n";
    c.run = &run_generate;
    return c;
  }();
  return cmd;
}

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
inline batch_layout generate_layout(std::int64_t ranks, std::int64_t items_per_rank,
                                    std::uint64_t seed, double mu, double sigma, std::int64_t lo,
                                    std::int64_t hi, std::int64_t bytes_per_token = 0) {
  lognormal_lengths gen(seed, mu, sigma, lo, hi);
  const auto n = ranks * items_per_rank;
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(ranks) + 1);
  for (std::int64_t r = 0; r <= ranks; ++r)
    offsets[static_cast<std::size_t>(r)] = r * items_per_rank;
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(n));
  for (auto& l : lengths) l = gen.next();
  std::vector<std::int64_t> bytes;
  if (bytes_per_token > 0) {
    bytes.reserve(lengths.size());
    for (auto l : lengths) bytes.push_back(l * bytes_per_token);
  }
  return batch_layout(std::move(offsets), std::move(lengths), std::move(bytes));
}

/// Runs `generate`. Returns the exit code (see command.hpp).
inline int run_generate(const parsed_args& args, std::ostream& out, std::ostream& err) {
  return guarded(generate_command(), err, [&] {
    const auto ranks = args.require_int("ranks", 1, max_ranks);
    const auto k = args.require_int("items-per-rank", 0, generate_max_items);
    if (k > generate_max_items / ranks)
      throw usage_error("--ranks " + std::to_string(ranks) + " x --items-per-rank " +
                        std::to_string(k) + " exceeds " + std::to_string(generate_max_items) +
                        " items");
    const auto seed = args.get_int("seed", 1, 0);
    const double mu = args.get_double("mu", 7.0);
    const double sigma = args.get_double("sigma", 1.0);
    if (sigma < 0) throw usage_error("--sigma is " + json_number(sigma) + ", must be >= 0");
    const auto lo = args.get_int("min", 16, 0);
    const auto hi = args.get_int("max", 32768, 0, std::int64_t{1} << 36);
    if (hi < lo)
      throw usage_error("--max " + std::to_string(hi) + " is below --min " + std::to_string(lo));
    const auto bpt = args.get_int("bytes-per-token", 0, 1, std::int64_t{1} << 10);
    const std::string path = args.require("out");

    const auto layout =
        generate_layout(ranks, k, static_cast<std::uint64_t>(seed), mu, sigma, lo, hi, bpt);
    write_file_atomically(path, format_items(layout));
    std::int64_t shortest = 0, longest = 0;
    for (std::int64_t g = 0; g < layout.num_items(); ++g) {
      shortest = g == 0 ? layout.length(g) : std::min(shortest, layout.length(g));
      longest = std::max(longest, layout.length(g));
    }
    json_object j;
    j.add("items", layout.num_items())
        .add("ranks", ranks)
        .add("seed", seed)
        .add("total_length", layout.total_length())
        .add("min_length", shortest)
        .add("max_length", longest)
        .add("out", path);
    out << j.str() << "\n";
    return exit_ok;
  });
}

}  // namespace orchmllm::tool
