#pragma once
// Collective helpers of the dispatch measurements, over any orchmllm::communicator: share the
// ranks' problems, take the slowest rank's times, and their median (tests:
// tests/tool/dispatch_test.cpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <orchmllm/comm/collectives.hpp>
#include <orchmllm/comm/communicator.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace orchmllm::bench {

/// Median of `v` (mean of the two middle values for an even count); NaN when empty. O(k log k).
inline double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const auto m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// Collective: every rank's optional problem text, shared with every rank. Returns the
/// (rank, text) pairs of the ranks that reported one, in rank order (the same on every rank).
/// One all-gather of 8 bytes per rank plus one all-gatherv of the texts when any.
template <communicator Comm>
std::vector<std::pair<rank_t, std::string>> gather_problems(
    Comm& comm, const std::optional<std::string>& mine) {
  const auto d = static_cast<std::size_t>(comm.size());
  const auto lens =
      orchmllm::all_gather(comm, mine ? static_cast<std::int64_t>(mine->size()) : std::int64_t{-1});
  std::vector<std::pair<rank_t, std::string>> out;
  std::vector<std::int64_t> counts(d);
  bool any = false;
  for (std::size_t r = 0; r < d; ++r) {
    counts[r] = std::max<std::int64_t>(lens[r], 0);
    any = any || lens[r] >= 0;
  }
  if (!any) return out;
  const auto all = orchmllm::all_gatherv(
      comm, mine ? std::span<const char>(*mine) : std::span<const char>(), counts);
  for (std::size_t r = 0; r < d; ++r)
    if (lens[r] >= 0) {
      const auto text = all.of(static_cast<rank_t>(r));
      out.emplace_back(static_cast<rank_t>(r), std::string(text.begin(), text.end()));
    }
  return out;
}

/// Collective: every rank's `k` doubles; returns, for each index, the largest value over the
/// ranks (a collective step takes as long as its slowest rank).
template <communicator Comm>
std::vector<double> max_over_ranks(Comm& comm, const std::vector<double>& mine) {
  const auto d = static_cast<std::size_t>(comm.size());
  const auto k = mine.size();
  const auto all = orchmllm::all_gather(comm, std::span<const double>(mine));
  std::vector<double> out(mine);
  for (std::size_t r = 0; r < d; ++r)
    for (std::size_t i = 0; i < k; ++i) out[i] = std::max(out[i], all[r * k + i]);
  return out;
}

}  // namespace orchmllm::bench
