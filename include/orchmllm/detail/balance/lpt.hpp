#pragma once
// Greedy LPT (longest processing time first) for both padding policies. Internal: called by
// `orchmllm::balance` (balance/balancer.hpp), which documents the public behaviour.
//
// Packed policy: items in the canonical order (cost descending) each go to the least-loaded
// rank, ties to the lower rank index: Graham's LPT, makespan within 4/3 − 1/(3d) of the optimum.
// Padded policy: items in the canonical order (length descending) each go to the rank whose
// load after taking the item is smallest, ties to the lower rank index. Because lengths
// descend, a non-empty rank's longest item is its first one, so its load after one more item is
// (count + 1) · cost(padded(first length)): a key that depends on the rank alone, which is what
// lets a heap drive the padded greedy too. Empty ranks (whose key would depend on the item) are
// kept aside: they are taken in increasing index order, so one cursor represents all of them.
//
// Per-rank state (constrained or padded): a `rank_load` per rank (core/rank_load.hpp), which holds
// the policy's rule: a rank's heap key is its `load_if_added(max_length(), 0)`, the load after
// one more item no longer than its longest, and the cap test is `fits_if_added`.
//
// Constraints: a rank leaves the heap when it holds max_items; a rank that cannot fit the item
// under the cap is set aside and the next rank is tried (set-aside ranks return to the heap
// afterwards; a rank that cannot fit even the smallest remaining item leaves for good); once
// the remaining items are exactly the ones still owed to ranks below min_items, only those ranks
// receive. When the cap forces too much searching (see lpt_search_budget) or no rank can take
// an item, the result is std::nullopt and the façade falls back to constrained first fit.
//
// Complexity: O(n log d) time (plus the set-aside work, bounded), O(n + d) memory. The
// unconstrained packed case — the hot path — needs no constraint test and uses a monotone
// radix queue instead of the binary heap (popped loads never decrease there), with no allocation
// per item: one pop and one push of (load bits, rank) per item, O(1) amortised in practice.
// Deterministic: both queues order ranks by (load, rank index), a strict total order, so they
// return the same assignment.

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/core/prefetch.hpp"

namespace orchmllm::detail {

/// A rank in a greedy heap: its key (load, or load after one more item) and its index.
template <class Cost>
struct rank_key {
  Cost key;
  rank_t rank;
};

/// Strict total order of rank_key: smaller key first, ties to the lower rank index.
template <class Cost>
constexpr bool rank_key_before(const rank_key<Cost>& a, const rank_key<Cost>& b) noexcept {
  return a.key < b.key || (a.key == b.key && a.rank < b.rank);
}

/// Binary min-heap of rank_key on a contiguous array. Hand-rolled rather than
/// std::priority_queue because LPT's inner step is "replace the top", which this does with one
/// bottom-up sift (Floyd): the hole at the root walks down to a leaf along the smaller children
/// (one comparison per level), then the new entry climbs back up. In LPT the root just received
/// an item and is usually heavier than most ranks, so it settles near the leaves and the climb
/// is short: about half the comparisons of a classic sift-down.
template <class Cost>
class rank_heap {
 public:
  using entry = rank_key<Cost>;

  /// The d ranks 0..d-1 with key zero (already a heap: equal keys, increasing ranks).
  void assign_zero(rank_t d) {
    data_.resize(static_cast<std::size_t>(d));
    for (rank_t r = 0; r < d; ++r) data_[static_cast<std::size_t>(r)] = entry{Cost{}, r};
  }
  void reserve(std::size_t n) { data_.reserve(n); }
  [[nodiscard]] bool empty() const noexcept { return data_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return data_.size(); }
  [[nodiscard]] const entry& top() const noexcept { return data_.front(); }
  [[nodiscard]] std::vector<entry>& raw() noexcept { return data_; }

  /// Restores the heap property over the whole array. O(size).
  void make() {
    const std::size_t n = data_.size();
    for (std::size_t i = n / 2; i-- > 0;) sift_down(i, data_[i]);
  }

  void push(const entry& e) {
    data_.push_back(e);
    sift_up(data_.size() - 1, e);
  }

  void pop() {
    const entry last = data_.back();
    data_.pop_back();
    if (!data_.empty()) replace_top(last);
  }

  /// Replaces the top by `e` and restores the heap. O(log size).
  void replace_top(const entry& e) {
    entry* const a = data_.data();
    const std::size_t n = data_.size();
    std::size_t hole = 0;
    // Walk the hole down to a leaf along the smaller child.
    for (;;) {
      std::size_t child = 2 * hole + 1;
      if (child + 1 < n) {
        child += static_cast<std::size_t>(rank_key_before(a[child + 1], a[child]));
      } else if (child >= n) {
        break;
      }
      a[hole] = a[child];
      hole = child;
    }
    sift_up(hole, e);
  }

 private:
  void sift_up(std::size_t hole, const entry e) {
    entry* const a = data_.data();
    while (hole > 0) {
      const std::size_t parent = (hole - 1) / 2;
      if (!rank_key_before(e, a[parent])) break;
      a[hole] = a[parent];
      hole = parent;
    }
    a[hole] = e;
  }

  void sift_down(std::size_t hole, const entry e) {  // by value: e may live in the array
    entry* const a = data_.data();
    const std::size_t n = data_.size();
    for (;;) {
      std::size_t child = 2 * hole + 1;
      if (child >= n) break;
      if (child + 1 < n && rank_key_before(a[child + 1], a[child])) ++child;
      if (!rank_key_before(a[child], e)) break;
      a[hole] = a[child];
      hole = child;
    }
    a[hole] = e;
  }

  std::vector<entry> data_;
};

/// Work allowed for set-aside ranks (ranks popped because the cap stopped them from taking the
/// item, then pushed back) over a whole LPT run. Counts heap operations, not time, so the
/// outcome is deterministic. Caps loose enough for LPT to be useful need a handful per item;
/// beyond this the greedy would degrade to O(n · d) and the façade's first fit is the better
/// tool.
inline std::int64_t lpt_search_budget(std::int64_t n, std::int64_t d) noexcept {
  return 16 * (n + d) + 4096;
}

/// Order-preserving map of a non-negative load to an unsigned integer, for the monotone queue
/// below: the identity on non-negative integers, the IEEE bit pattern on non-negative floats
/// (monotone for +0 … +inf). Loads are never −0.0: they start at +0.0 and +0.0 + (−0.0) = +0.0.
/// `supported` is false for types without such a map (long double): those use the binary heap.
template <class Cost>
struct load_bits {
  static constexpr bool supported =
      std::is_integral_v<Cost> ||
      (std::is_floating_point_v<Cost> && sizeof(Cost) <= 8 && std::numeric_limits<Cost>::is_iec559);
  static std::uint64_t of(Cost x) noexcept {
    if constexpr (std::is_integral_v<Cost>) {
      return static_cast<std::uint64_t>(x);
    } else if constexpr (sizeof(Cost) == 8) {
      return std::bit_cast<std::uint64_t>(x);
    } else {
      return std::bit_cast<std::uint32_t>(x);
    }
  }
};

/// Monotone priority queue of ranks keyed by (load bits, rank): a radix heap (Ahuja, Mehlhorn,
/// Orlin, Tarjan 1990). It applies to unconstrained LPT because every key pushed is the key just
/// popped plus a non-negative cost, so popped keys never decrease. Bucket 0 holds the ranks whose
/// key equals the last popped key, in decreasing rank order (so the back is the lowest rank);
/// bucket b ≥ 1 holds keys whose highest bit differing from the last popped key is b − 1. Push
/// is O(1); a pop that finds bucket 0 empty scans the lowest non-empty bucket for its minimum
/// and redistributes it into lower buckets; every entry only moves down, so a pop is amortised
/// O(64). In practice ~1.5× faster than a binary heap here: no unpredictable branch per level.
/// Memory O(d) (65 buckets, each holding at most d entries).
class monotone_rank_queue {
 public:
  struct entry {
    std::uint64_t key;
    rank_t rank;
  };

  /// The ranks 0..d-1, all with key 0.
  explicit monotone_rank_queue(rank_t d) {
    auto& zero = buckets_[0];
    zero.reserve(static_cast<std::size_t>(d));
    for (rank_t r = d; r-- > 0;) zero.push_back(entry{0, r});
    nonempty_ = d > 0 ? 1 : 0;
  }

  /// The entry with the smallest (key, rank); removes it. Precondition: not empty.
  entry pop() {
    if (buckets_[0].empty()) refill();
    entry e = buckets_[0].back();
    buckets_[0].pop_back();
    if (buckets_[0].empty()) nonempty_ &= ~std::uint64_t{1};
    return e;
  }

  /// Inserts a key ≥ the last popped key. Precondition: that monotonicity.
  void push(entry e) {
    const auto b = bucket_of(e.key);
    buckets_[b].push_back(e);
    if (b < 64) nonempty_ |= std::uint64_t{1} << b;
  }

 private:
  [[nodiscard]] std::size_t bucket_of(std::uint64_t key) const noexcept {
    const std::uint64_t x = key ^ last_;
    return x == 0 ? 0 : static_cast<std::size_t>(64 - std::countl_zero(x));
  }

  // Bucket 0 is empty: make the least key of the lowest non-empty bucket the new reference.
  // Bucket 64 (keys differing in bit 63) has no mask bit: it is the one left when no other bit
  // is set. The library's load types (non-negative std::int64_t, non-negative IEEE floats) never
  // set bit 63; the bucket keeps the queue correct for any unsigned key all the same.
  void refill() {
    const std::uint64_t rest = nonempty_ & ~std::uint64_t{1};
    const std::size_t b = rest != 0 ? static_cast<std::size_t>(std::countr_zero(rest)) : 64;
    auto& v = buckets_[b];
    std::uint64_t least = v.front().key;
    for (const entry& e : v) least = e.key < least ? e.key : least;
    last_ = least;
    for (const entry& e : v) {
      const auto nb = bucket_of(e.key);  // < b ≤ 64: they share the bits above b − 1 with least
      buckets_[nb].push_back(e);
      nonempty_ |= std::uint64_t{1} << nb;
    }
    v.clear();
    if (b < 64) nonempty_ &= ~(std::uint64_t{1} << b);
    auto& zero = buckets_[0];
    if (zero.size() > 1)
      std::sort(zero.begin(), zero.end(),
                [](const entry& x, const entry& y) { return x.rank > y.rank; });
  }

  std::array<std::vector<entry>, 65> buckets_;
  std::uint64_t nonempty_ = 0;  // bit b: bucket b non-empty (b < 64)
  std::uint64_t last_ = 0;      // last popped key
};

/// Unconstrained packed LPT: the hot path. Precondition: d ≥ 1. Keeps bare loads instead of
/// `rank_load`s: with the packed policy and no constraint a rank's state is its load alone, Σ
/// cost (what `rank_load::load` returns for it, added in the same order), and the greedy reads
/// nothing else; an 8-byte load per rank instead of an 80-byte state keeps this loop 1.2× as
/// fast at d = 2560 (docs/results.md).
template <class Cost>
std::vector<rank_t> lpt_packed_unconstrained(const balance_input<Cost>& in) {
  const auto n = static_cast<std::size_t>(in.layout.num_items());
  std::vector<rank_t> out(n);
  const Cost* const costs = in.costs.data();
  const std::int64_t* const order = in.order.data();
  rank_t* const dst = out.data();
  if constexpr (load_bits<Cost>::supported) {
    monotone_rank_queue queue(in.d);
    std::vector<Cost> load(static_cast<std::size_t>(in.d), Cost{});
    for (std::size_t i = 0; i < n; ++i) {
      const auto g = static_cast<std::size_t>(order[i]);
      // Items come in cost order, so their costs and destinations are scattered: fetch those
      // of an item a few places ahead while the queue works (the same plan, faster at scale).
      if (const auto k = i + static_cast<std::size_t>(prefetch_distance); k < n) {
        const auto ahead = static_cast<std::size_t>(order[k]);
        prefetch(costs + ahead);
        prefetch(dst + ahead, true);
      }
      const rank_t r = queue.pop().rank;
      dst[g] = r;
      Cost& l = load[static_cast<std::size_t>(r)];
      l += costs[g];
      queue.push({load_bits<Cost>::of(l), r});
    }
  } else {
    rank_heap<Cost> heap;
    heap.assign_zero(in.d);
    for (std::size_t i = 0; i < n; ++i) {
      const auto g = static_cast<std::size_t>(order[i]);
      const rank_key<Cost> t = heap.top();
      dst[g] = t.rank;
      heap.replace_top(rank_key<Cost>{t.key + costs[g], t.rank});
    }
  }
  return out;
}

/// LPT with constraints and/or the padded policy. See the file comment. Precondition: d ≥ 1.
template <class Cost, class C>
std::optional<std::vector<rank_t>> lpt_general(const balance_input<Cost>& in, const C& cost) {
  using entry = rank_key<Cost>;
  const std::int64_t n = in.layout.num_items();
  const auto d = static_cast<std::size_t>(in.d);
  const bool padded = in.policy.is_padded();
  const auto& lim = in.limits;
  const bool capped = lim.cap.has_value();
  const bool bytes_capped = capped && lim.cap->what == capacity::measure::bytes;

  // Per-rank state: the items each rank holds, under the policy (load, footprint under the cap).
  using tally = rank_load<Cost, rank_load_mode::add_only>;
  std::vector<tally> st(d, tally(in.policy));
  const tally empty(in.policy);

  // Whether a rank can take one more item of this length and byte size under the cap.
  auto fits = [&](const tally& t, const item_shape& item) {
    return !capped || t.fits_if_added(*lim.cap, item);
  };
  // The least the cap measures (length or bytes) among the items at order positions ≥ i: a
  // rank that cannot fit an item that small can never take another (footprints grow with the
  // item's). The other quantity is passed as 0: the cap test reads only its own measure.
  std::vector<std::int64_t> suffix_min;
  if (capped) {
    suffix_min.assign(static_cast<std::size_t>(n) + 1, INT64_MAX);
    for (std::int64_t i = n - 1; i >= 0; --i) {
      const auto u = static_cast<std::size_t>(i);
      const std::int64_t g = in.order[u];
      // Padded with segments: the shortest row (one row is the least an item adds).
      suffix_min[u] = std::min(suffix_min[u + 1], bytes_capped ? in.layout.bytes(g)
                                                  : padded ? item_shape_of(in.layout, g).row_length
                                                           : in.layout.length(g));
    }
  }

  rank_heap<Cost> heap;
  heap.reserve(d);
  // Packed: every rank starts in the heap with load 0. Padded: ranks start empty and are handed
  // out by `next_empty`; they enter the heap after their first item.
  if (!padded) heap.assign_zero(in.d);
  std::size_t next_empty = padded ? 0 : d;

  // min_items reserve: `deficit` = Σ max(0, min_items − count). Once the remaining items equal
  // it, only ranks below min_items may receive (and this stays so until the end).
  std::int64_t deficit = lim.min_items * static_cast<std::int64_t>(d);
  bool reserve = false;
  auto below_min = [&](std::size_t r) { return st[r].count() < lim.min_items; };

  std::int64_t search_left = lpt_search_budget(n, static_cast<std::int64_t>(d));
  std::vector<entry> aside;
  std::vector<rank_t> out(static_cast<std::size_t>(n));

  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t g = in.order[static_cast<std::size_t>(i)];
    if (!reserve && deficit > 0 && n - i == deficit) {
      reserve = true;
      auto& raw = heap.raw();
      raw.erase(std::remove_if(
                    raw.begin(), raw.end(),
                    [&](const entry& e) { return !below_min(static_cast<std::size_t>(e.rank)); }),
                raw.end());
      heap.make();
    }
    // Bytes only where a byte cap reads them: the states' byte footprints are read nowhere
    // else here.
    item_shape item = item_shape_of(in.layout, g);
    if (!bytes_capped) item.bytes = 0;
    // Padded: what an empty rank's load would become (smallest possible resulting load).
    const Cost empty_key = padded ? empty.load_if_added(item, Cost{}, cost) : Cost{};
    // The chosen rank stays at the top of the heap (not popped) so that, in the common case,
    // its update is one replace-top; ranks the cap refused are popped and set aside.
    std::size_t chosen = d;
    bool at_top = false;
    while (!heap.empty()) {
      const entry t = heap.top();
      if (next_empty < d && !rank_key_before(t, entry{empty_key, static_cast<rank_t>(next_empty)}))
        break;  // the empty rank is at least as good as every rank left in the heap
      const auto r = static_cast<std::size_t>(t.rank);
      if (fits(st[r], item)) {
        chosen = r;
        at_top = true;
        break;
      }
      heap.pop();
      // A rank that cannot fit even the smallest remaining item simply stays out of the heap.
      const std::int64_t least = suffix_min[static_cast<std::size_t>(i)];
      if (fits(st[r], item_shape{bytes_capped ? 0 : least, bytes_capped ? least : 0, 1,
                                 bytes_capped ? 0 : least})) {
        aside.push_back(t);
        if (--search_left < 0) return std::nullopt;
      }
    }
    if (chosen == d && next_empty < d && fits(st[next_empty], item)) chosen = next_empty++;
    if (chosen == d) return std::nullopt;

    const std::size_t r = chosen;
    out[static_cast<std::size_t>(g)] = static_cast<rank_t>(r);
    if (below_min(r)) --deficit;
    tally& t = st[r];
    t.add(item, in.costs[static_cast<std::size_t>(g)], cost);
    // The key: the load after one more item, which is no longer than this one (packed: the
    // load itself, the next item's cost being common to all ranks).
    const Cost key = t.load_if_added(t.max_length(), Cost{}, cost);
    const bool eligible = reserve ? below_min(r) : t.count() < lim.max_items;
    if (at_top) {
      if (eligible) {
        heap.replace_top(entry{key, static_cast<rank_t>(r)});
      } else {
        heap.pop();
      }
    } else if (eligible) {
      heap.push(entry{key, static_cast<rank_t>(r)});
    }
    for (const entry& e : aside) heap.push(e);
    aside.clear();
  }
  return out;
}

/// LPT entry point used by the façade: one destination rank per item in global-id order, or
/// std::nullopt when the constraints stopped the greedy (see the file comment).
template <class Cost, class C>
std::optional<std::vector<rank_t>> lpt(const balance_input<Cost>& in, const C& cost) {
  if (in.layout.num_items() == 0 || in.d <= 0) {
    if (in.layout.num_items() != 0) return std::nullopt;
    return std::vector<rank_t>{};
  }
  if (!in.policy.is_padded() && !in.limits.any()) return lpt_packed_unconstrained(in);
  return lpt_general(in, cost);
}

}  // namespace orchmllm::detail
