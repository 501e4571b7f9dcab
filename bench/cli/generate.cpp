// orchmllm-bench generate: a synthetic ITEMS.csv (generate.hpp).
#include "bench/cli/generate.hpp"

#include <algorithm>
#include <cstdint>
#include <orchmllm/core/batch_layout.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/file_io.hpp"
#include "bench/cli/items_csv.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

const command& generate_command() {
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

batch_layout generate_layout(std::int64_t ranks, std::int64_t items_per_rank, std::uint64_t seed,
                             double mu, double sigma, std::int64_t lo, std::int64_t hi,
                             std::int64_t bytes_per_token) {
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

int run_generate(const parsed_args& args, std::ostream& out, std::ostream& err) {
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
