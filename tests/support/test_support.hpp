#pragma once
// Helpers shared by the doctest suites under tests/ (included as "support/test_support.hpp";
// tests/CMakeLists.txt puts tests/ on the include path; only *_test.cpp files become tests):
//  - fixed-seed random numbers from the raw engine (the same numbers on every platform), and
//    random layouts and plans built from them;
//  - expect_error / expect_invalid: "throws this error type, naming these values";
//  - `sanitized`: whether the build runs under a sanitizer (smaller large cases there);
//  - for the balancer suites, oracles independent of the library: the per-rank figures of an
//    assignment, and a brute-force optimum over every assignment.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/detail/balance/common.hpp"

namespace orchmllm::test {

// Whether this build runs under AddressSanitizer or ThreadSanitizer (the asan and tsan presets):
// the slowest large cases are smaller there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#else
inline constexpr bool sanitized = false;
#endif

// ---------------------------------------------------------------------------------------------
// Random inputs.

/// Uniform integer in [lo, hi] straight from the engine (the modulo bias does not matter for
/// tests; std distributions would give other numbers on other standard libraries).
inline std::int64_t uniform(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi) {
  return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
}

/// Random CSR offsets of d ranks holding n items in total (empty ranks are common).
inline std::vector<std::int64_t> random_offsets(std::mt19937_64& rng, rank_t d, std::int64_t n) {
  std::vector<std::int64_t> cuts;
  for (rank_t r = 0; r + 1 < d; ++r) cuts.push_back(uniform(rng, 0, n));
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::int64_t> off{0};
  off.insert(off.end(), cuts.begin(), cuts.end());
  if (d > 0) off.push_back(n);
  return off;
}

/// A random layout of n items on d ranks (random_offsets), lengths uniform in [min_len,
/// max_len]; with `bytes_per_token` = {lo, hi}, item g's bytes are its length times a factor
/// uniform in [lo, hi], drawn right after its length.
inline batch_layout random_uniform_layout(
    std::mt19937_64& rng, rank_t d, std::int64_t n, std::int64_t min_len, std::int64_t max_len,
    std::optional<std::pair<std::int64_t, std::int64_t>> bytes_per_token = std::nullopt) {
  auto offsets = random_offsets(rng, d, n);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(n)), bytes;
  if (bytes_per_token) bytes.resize(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    lengths[i] = uniform(rng, min_len, max_len);
    if (bytes_per_token)
      bytes[i] = lengths[i] * uniform(rng, bytes_per_token->first, bytes_per_token->second);
  }
  return batch_layout(std::move(offsets), std::move(lengths), std::move(bytes));
}

/// A random layout of n items on d ranks, item g made of 1..max_segments segments of length
/// 0..max_length each; with `bytes`, random byte sizes 0..1000 too.
inline batch_layout random_segmented_layout(std::mt19937_64& rng, rank_t d, std::int64_t n,
                                            std::int64_t max_segments, std::int64_t max_length,
                                            bool bytes = false) {
  std::vector<std::int64_t> lengths, seg_offsets{0}, segments, item_bytes;
  for (std::int64_t g = 0; g < n; ++g) {
    const auto s = uniform(rng, 1, max_segments);
    std::int64_t length = 0;
    for (std::int64_t k = 0; k < s; ++k) {
      segments.push_back(uniform(rng, 0, max_length));
      length += segments.back();
    }
    seg_offsets.push_back(static_cast<std::int64_t>(segments.size()));
    lengths.push_back(length);
    if (bytes) item_bytes.push_back(uniform(rng, 0, 1000));
  }
  return batch_layout(random_offsets(rng, d, n), std::move(lengths), std::move(item_bytes), {},
                      std::move(seg_offsets), std::move(segments));
}

// ---------------------------------------------------------------------------------------------
// Errors.

/// Runs `f`, expects an `Error` whose message contains every needle (a check fails, naming the
/// message, for each missing needle, and one more if nothing is thrown; an exception of another
/// type propagates and fails the test case).
template <class Error, class F>
void expect_error(F&& f, const std::vector<std::string>& needles) {
  bool thrown = false;
  try {
    f();
  } catch (const Error& e) {
    thrown = true;
    const std::string what = e.what();
    for (const auto& n : needles) {
      INFO("message: ", what, "; expected to contain: ", n);
      CHECK(what.find(n) != std::string::npos);
    }
  }
  CHECK(thrown);
}

/// expect_error for the most common case, invalid_argument_error.
template <class F>
void expect_invalid(F&& f, const std::vector<std::string>& needles) {
  expect_error<invalid_argument_error>(std::forward<F>(f), needles);
}

// ---------------------------------------------------------------------------------------------
// Balancer oracles.

/// Per-rank figures of an assignment: load, item count, token and byte footprints.
template <class Cost>
struct rank_figures {
  std::vector<Cost> load;
  std::vector<std::int64_t> count, tokens, bytes;
};

/// Figures of `dst` (destination rank per item, global-id order) on d ranks, recomputed without
/// the library. Packed loads are summed in global-id order, as the façade sums them, so they are
/// bit-identical to the reported ones also for floating costs.
template <class C>
rank_figures<cost_type_t<C>> figures(const batch_layout& layout, std::span<const rank_t> dst,
                                     rank_t d, const C& cost, padding_policy policy) {
  using Cost = cost_type_t<C>;
  const auto ud = static_cast<std::size_t>(d);
  rank_figures<Cost> f{std::vector<Cost>(ud, Cost{}), std::vector<std::int64_t>(ud, 0),
                       std::vector<std::int64_t>(ud, 0), std::vector<std::int64_t>(ud, 0)};
  std::vector<std::int64_t> max_len(ud, 0), max_bytes(ud, 0);
  for (std::int64_t g = 0; g < layout.num_items(); ++g) {
    const auto r = static_cast<std::size_t>(dst[static_cast<std::size_t>(g)]);
    ++f.count[r];
    f.load[r] += cost(layout.length(g));
    f.tokens[r] += layout.length(g);
    f.bytes[r] += layout.bytes(g);
    max_len[r] = std::max(max_len[r], layout.length(g));
    max_bytes[r] = std::max(max_bytes[r], layout.bytes(g));
  }
  if (policy.is_padded()) {
    for (std::size_t r = 0; r < ud; ++r) {
      f.load[r] = f.count[r] == 0 ? Cost{}
                                  : static_cast<Cost>(f.count[r]) *
                                        static_cast<Cost>(cost(policy.padded_length(max_len[r])));
      f.tokens[r] = f.count[r] * policy.padded_length(max_len[r]);
      f.bytes[r] = f.count[r] * max_bytes[r];
    }
  }
  return f;
}

/// Largest element, Cost{} for none (the makespan of a list of loads).
template <class Cost>
Cost max_of(const std::vector<Cost>& v) {
  return v.empty() ? Cost{} : *std::max_element(v.begin(), v.end());
}

/// Whether the figures satisfy every constraint (item counts and the cap).
template <class Cost>
bool honours(const rank_figures<Cost>& f, const constraints& lim) {
  for (std::size_t r = 0; r < f.count.size(); ++r) {
    if (f.count[r] < lim.min_items || f.count[r] > lim.max_items) return false;
    if (lim.cap) {
      const auto used = lim.cap->what == capacity::measure::tokens ? f.tokens[r] : f.bytes[r];
      if (used > lim.cap->limit) return false;
    }
  }
  return true;
}

/// Brute-force optimal makespan over every assignment of the layout's items to d ranks, up to
/// renaming ranks (restricted growth strings; ranks are interchangeable: the constraints are the
/// same for all), pruned only by "a partial load already >= the best" and by violated count /
/// cap limits, all monotone as items are added. nullopt = no assignment satisfies the limits.
/// Items are placed longest first; packed floating loads are therefore summed in that order and
/// may differ from the façade's by a few ulps (padded loads are one product: exact).
template <class C>
std::optional<cost_type_t<C>> brute_force(const batch_layout& layout, rank_t d, const C& cost,
                                          padding_policy policy, const constraints& lim = {}) {
  using Cost = cost_type_t<C>;
  const std::int64_t n = layout.num_items();
  std::vector<std::int64_t> items(static_cast<std::size_t>(n));
  std::iota(items.begin(), items.end(), std::int64_t{0});
  std::sort(items.begin(), items.end(),
            [&](auto a, auto b) { return layout.length(a) > layout.length(b); });
  const auto ud = static_cast<std::size_t>(d);
  std::vector<Cost> sum(ud, Cost{});
  std::vector<std::int64_t> count(ud, 0), tokens(ud, 0), bytes(ud, 0), max_len(ud, 0),
      max_bytes(ud, 0);
  std::optional<Cost> best;
  auto load_of = [&](std::size_t r) -> Cost {
    if (!policy.is_padded()) return sum[r];
    return count[r] == 0 ? Cost{}
                         : static_cast<Cost>(count[r]) *
                               static_cast<Cost>(cost(policy.padded_length(max_len[r])));
  };
  auto footprint = [&](std::size_t r) {
    const bool tok = lim.cap->what == capacity::measure::tokens;
    if (policy.is_padded())
      return count[r] * (tok ? policy.padded_length(max_len[r]) : max_bytes[r]);
    return tok ? tokens[r] : bytes[r];
  };
  auto rec = [&](auto&& self, std::size_t i, std::size_t used, Cost partial) -> void {
    if (best && !(partial < *best)) return;
    if (i == items.size()) {
      for (std::size_t r = 0; r < ud; ++r)
        if (count[r] < lim.min_items) return;
      best = partial;
      return;
    }
    std::int64_t deficit = 0;
    for (std::size_t r = 0; r < ud; ++r)
      deficit += std::max<std::int64_t>(0, lim.min_items - count[r]);
    if (deficit > static_cast<std::int64_t>(items.size() - i)) return;
    const std::int64_t g = items[i];
    for (std::size_t r = 0; r < std::min(ud, used + 1); ++r) {
      if (count[r] + 1 > lim.max_items) continue;
      const auto saved =
          std::make_tuple(sum[r], count[r], tokens[r], bytes[r], max_len[r], max_bytes[r]);
      sum[r] += cost(layout.length(g));
      ++count[r];
      tokens[r] += layout.length(g);
      bytes[r] += layout.bytes(g);
      max_len[r] = std::max(max_len[r], layout.length(g));
      max_bytes[r] = std::max(max_bytes[r], layout.bytes(g));
      if (!lim.cap || footprint(r) <= lim.cap->limit)
        self(self, i + 1, std::max(used, r + 1), std::max(partial, load_of(r)));
      std::tie(sum[r], count[r], tokens[r], bytes[r], max_len[r], max_bytes[r]) = saved;
    }
  };
  rec(rec, 0, 0, Cost{});
  return best;
}

/// The input of a detail:: balancer, prepared the way the façade prepares it (costs per item,
/// canonical order). Owns everything `in` points to; not copyable or movable for that reason.
template <class C>
struct prepared {
  using Cost = cost_type_t<C>;
  const batch_layout& layout;
  std::vector<Cost> costs;
  std::vector<std::int64_t> order;
  constraints limits;
  detail::balance_input<Cost> in;

  prepared(const batch_layout& l, const C& cost, padding_policy policy, constraints lim)
      : layout(l),
        costs(make_costs(l, cost)),
        order(detail::canonical_order<Cost>(l, costs, policy)),
        limits(lim),
        in{layout, l.num_ranks(), costs, order, policy, limits} {}
  prepared(const prepared&) = delete;
  prepared& operator=(const prepared&) = delete;

  static std::vector<Cost> make_costs(const batch_layout& l, const C& cost) {
    std::vector<Cost> c(static_cast<std::size_t>(l.num_items()));
    for (std::int64_t g = 0; g < l.num_items(); ++g)
      c[static_cast<std::size_t>(g)] = cost(l.length(g));
    return c;
  }
};

}  // namespace orchmllm::test

// ---------------------------------------------------------------------------------------------
// Communication helpers (route, dispatch, metadata and topology suites).

#include <cstddef>

#include "orchmllm/core/rearrangement.hpp"

namespace orchmllm::test {

/// Destination ranks of n items, each drawn uniformly from [0, ranks) (ranks > 0 unless n = 0).
inline std::vector<rank_t> random_destinations(std::mt19937_64& rng, std::int64_t n, rank_t ranks) {
  std::vector<rank_t> dst(static_cast<std::size_t>(n));
  for (auto& r : dst) r = static_cast<rank_t>(uniform(rng, 0, ranks - 1));
  return dst;
}

/// The plan from `src` offsets onto `d_dst` ranks that sends item g to rank dst[g]. `shuffle`:
/// slots are a random permutation on every destination rank (built with from_placements; the
/// only use of `rng`), otherwise the canonical order.
inline rearrangement plan_with_destinations(std::mt19937_64& rng, std::span<const std::int64_t> src,
                                            std::span<const rank_t> dst, rank_t d_dst,
                                            bool shuffle) {
  if (!shuffle) return rearrangement::from_destinations(src, dst, d_dst);
  const auto n = src.back();
  std::vector<std::vector<std::int64_t>> per_rank(static_cast<std::size_t>(d_dst));
  for (std::int64_t g = 0; g < n; ++g)
    per_rank[static_cast<std::size_t>(dst[static_cast<std::size_t>(g)])].push_back(g);
  std::vector<placement> pl(static_cast<std::size_t>(n));
  for (rank_t r = 0; r < d_dst; ++r) {
    auto& items = per_rank[static_cast<std::size_t>(r)];
    std::shuffle(items.begin(), items.end(), rng);
    for (std::size_t s = 0; s < items.size(); ++s)
      pl[static_cast<std::size_t>(items[s])] = placement{r, static_cast<std::int64_t>(s)};
  }
  return rearrangement::from_placements(src, pl, d_dst);
}

/// A random plan from `src` offsets onto `d_dst` ranks. Each item stays on its source rank with
/// probability stay_percent / 100 (when that rank exists among the destinations), otherwise it
/// goes to a uniformly random rank. `shuffle`: slots are a random permutation on every
/// destination rank (built with from_placements), otherwise the canonical order.
inline rearrangement random_rearrangement(std::mt19937_64& rng, std::span<const std::int64_t> src,
                                          rank_t d_dst, bool shuffle, int stay_percent = 0) {
  std::vector<rank_t> dst(static_cast<std::size_t>(src.back()));
  for (std::size_t r = 0; r + 1 < src.size(); ++r)
    for (auto g = src[r]; g < src[r + 1]; ++g) {
      const bool stay = static_cast<rank_t>(r) < d_dst && uniform(rng, 0, 99) < stay_percent;
      dst[static_cast<std::size_t>(g)] =
          stay ? static_cast<rank_t>(r) : static_cast<rank_t>(uniform(rng, 0, d_dst - 1));
    }
  return plan_with_destinations(rng, src, dst, d_dst, shuffle);
}

/// Source rank of global id g under CSR offsets `off` (a linear scan, independent of the
/// library).
inline rank_t owner(std::span<const std::int64_t> off, std::int64_t g) {
  rank_t r = 0;
  while (off[static_cast<std::size_t>(r) + 1] <= g) ++r;
  return r;
}

/// A random valid node map of d ranks (nodes numbered in order of their lowest rank, usually
/// not consecutive blocks, uneven sizes): a restricted growth string over at most `max_nodes`.
inline std::vector<rank_t> random_node_map(std::mt19937_64& rng, rank_t d, rank_t max_nodes) {
  std::vector<rank_t> node(static_cast<std::size_t>(d));
  rank_t used = 0;
  for (auto& m : node) {
    const rank_t limit = std::min(used, max_nodes - 1);  // `used` opens a new node
    m = static_cast<rank_t>(uniform(rng, 0, limit));
    if (m == used) ++used;
  }
  return node;
}

/// Deterministic content byte of (a, b, c), e.g. (source rank, slot, byte in the item): a
/// 64-bit mix, so swapped, shifted or duplicated blocks never compare equal by accident.
inline std::byte content_byte(std::int64_t a, std::int64_t b, std::int64_t c) noexcept {
  std::uint64_t x =
      (static_cast<std::uint64_t>(a) * 0x9E3779B97F4A7C15ULL) ^
      ((static_cast<std::uint64_t>(b) + 0x632BE59BD9B4E019ULL) * 0xC2B2AE3D27D4EB4FULL) ^
      ((static_cast<std::uint64_t>(c) + 0x165667B19E3779F9ULL) * 0xD6E8FEB86659FD93ULL);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 29;
  return static_cast<std::byte>(x & 0xffU);
}

}  // namespace orchmllm::test
