#pragma once
// Karmarkar–Karp largest differencing for d ways, in two forms. Internal: called by
// `orchmllm::balance` (balance/balancer.hpp) for the packed policy only.
//
// Both run the same merge loop over tuples of d subsets:
//   repeatedly take the two tuples with the largest difference (largest − smallest subset
//   sum), merge them by joining A's i-th heaviest subset with B's i-th lightest, re-sort the d
//   joined subsets by sum descending, and put the result back; when one tuple is left, its i-th
//   subset (in that final order) goes to rank i.
// They differ in the starting tuples:
//   - complete (`balancers::karmarkar_karp`, the textbook multiway method of Karmarkar–Karp 1982 as
//     generalised by Korf): one tuple per item, (cost, 0, …, 0). n tuples of d sums: O(n · d)
//     memory and n − 1 merges of O(d log d), so O(n · d log d) time; the façade runs it up to
//     n · d = kk_complete_max_entries and the equal-count form above. Counts per rank are free.
//   - equal-count (`balancers::karmarkar_karp_equal`, the chunked "balanced" differencing of
//     Michiels–Korst–Aarts–van Leeuwen 2003): the canonical order (costs descending) cut into
//     consecutive chunks of d items, the last padded with empty subsets; ⌈n/d⌉ tuples, so
//     O(n + d) memory and O(n log n) time. Every subset takes exactly one item (or one padding
//     slot) from every chunk, so ranks get ⌊n/d⌋ or ⌈n/d⌉ items: it satisfies the equal-count
//     constraint for free, at the price of quality when the optimum needs unequal counts.
//     Bound: any one-item-per-chunk assignment has makespan ≤ p₁ + Σ_{t≥1} max(chunk t) ≤ p₁ +
//     Σ_{t≥1} min(chunk t−1) ≤ p₁ + S/d ≤ 2·OPT, and that is all we claim for it.
// Only the subsets' sums are merged (O(1) per join); each merge records the order it gave its
// joins, and one backward pass over the records tells every item its final subset (sequential
// passes, where following linked lists of items missed the cache on every item at n ≈ 10^6).
// The façade follows either with refinement on request (always in automatic). Caps and other
// counts are not looked at: the result is returned only when it satisfies every constraint
// (`satisfies`), std::nullopt otherwise.
//
// Determinism: tuples are merged in (difference descending, creation index ascending) order,
// the starting tuples created in canonical order; joined subsets are re-sorted by (sum
// descending, position in the join ascending), a strict total order; sums are combined in that
// fixed sequence.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/core/order.hpp"

namespace orchmllm::detail {

/// d-way largest differencing; see the file comment. `complete`: one starting tuple per item
/// (needs n · d sums of memory); otherwise chunks of d items (equal counts). One destination
/// rank per item in global-id order, or std::nullopt if the result violates a constraint or
/// `stop` (checked before every merge) was set: a stopped run's result is never used.
template <class Cost>
std::optional<std::vector<rank_t>> karmarkar_karp(const balance_input<Cost>& in,
                                                  bool complete = false,
                                                  const std::atomic<bool>* stop = nullptr) {
  const std::int64_t n = in.layout.num_items();
  if (n == 0) return std::vector<rank_t>{};
  if (in.d <= 0) return std::nullopt;
  const auto d = static_cast<std::size_t>(in.d);
  const auto un = static_cast<std::size_t>(n);
  const std::size_t per_tuple = complete ? 1 : d;  // items that start in one tuple
  const std::size_t tuples = (un + per_tuple - 1) / per_tuple;

  // Tuple t lives in slots [t·d, t·d + d) of the sum arena, subsets sorted by sum descending.
  // A merge writes its result into the first operand's slots and frees the second's (never
  // reused). Only sums are merged; each merge records its operands and the order it gave the
  // joined subsets, and one backward pass over the records at the end tells every starting
  // slot (an item) which subset of the final tuple it ended in.
  // positive[t]: how many of tuple t's sums are positive. Costs are >= 0 and a tuple is sorted
  // descending, so those are its first ones and the rest are zeros.
  std::vector<Cost> sum(tuples * d, Cost{});
  std::vector<std::size_t> positive(tuples, 0);
  for (std::size_t k = 0; k < un; ++k) {
    const std::int64_t g = in.order[k];
    const std::size_t slot = (k / per_tuple) * d + k % per_tuple;  // chunk: k itself
    sum[slot] = in.costs[static_cast<std::size_t>(g)];
    if (sum[slot] > Cost{}) ++positive[k / per_tuple];
  }

  struct node {
    Cost diff;
    std::size_t creation;
    std::size_t slot;
  };
  // std heap algorithms build a max-heap: "less" = smaller difference, or later creation.
  auto less = [](const node& a, const node& b) {
    return a.diff < b.diff || (a.diff == b.diff && a.creation > b.creation);
  };
  std::vector<node> heap;
  heap.reserve(tuples);
  for (std::size_t t = 0; t < tuples; ++t)
    heap.push_back(node{sum[t * d] - sum[t * d + d - 1], t, t});
  std::make_heap(heap.begin(), heap.end(), less);
  std::size_t created = tuples;

  // Merge m joined slot A's subset j with slot B's subset d − 1 − j and put the join at
  // position i of A when join_order[m·d + i] = j.
  struct merge_record {
    std::size_t a, b;
  };
  std::vector<merge_record> merges;
  merges.reserve(tuples - 1);
  std::vector<std::uint32_t> join_order((tuples - 1) * d);
  std::vector<Cost> js(d);
  std::vector<std::size_t> perm(d);
  const bool radix = !std::is_same_v<Cost, long double> && d >= 4096;
  std::vector<std::pair<std::uint64_t, std::int64_t>> keyed(radix ? d : 0);
  while (heap.size() > 1) {
    if (stop && stop->load(std::memory_order_relaxed)) return std::nullopt;
    std::pop_heap(heap.begin(), heap.end(), less);
    const node a = heap.back();
    heap.pop_back();
    std::pop_heap(heap.begin(), heap.end(), less);
    const node b = heap.back();
    heap.pop_back();
    const std::size_t A = a.slot * d, B = b.slot * d;
    const std::size_t pa = positive[a.slot], pb = positive[b.slot];
    // The joined subsets in (sum descending, position ascending) order. Where A's positive sums
    // and B's (joined in reverse: B's j-th at position d − 1 − j) do not meet, each joined sum
    // is one of theirs or a zero: one merge of the two descending runs (A's positions come
    // first, so a tie takes A's; a run of equal sums of B goes in reverse, by position), then
    // the zeros in position order. Otherwise, for many ranks by the stable radix sort of the
    // sums' order keys (the same order: sums are >= 0 and, but for long double, keyed
    // exactly), else by comparison.
    const std::size_t m = merges.size();
    if (pa + pb <= d) {
      std::size_t i = 0, j = 0, at = 0;
      while (i < pa || j < pb) {
        if (j == pb || (i < pa && sum[A + i] >= sum[B + j])) {
          js[at] = sum[A + i];
          perm[at++] = i++;
        } else {
          std::size_t end = j + 1;
          while (end < pb && sum[B + end] == sum[B + j]) ++end;
          for (std::size_t t = end; t-- > j;) {
            js[at] = sum[B + t];
            perm[at++] = d - 1 - t;
          }
          j = end;
        }
      }
      for (std::size_t z = pa; z < d - pb; ++z) perm[at++] = z;
      std::copy(js.begin(), js.begin() + static_cast<std::ptrdiff_t>(pa + pb),
                sum.begin() + static_cast<std::ptrdiff_t>(A));
      for (std::size_t k = 0; k < d; ++k)
        join_order[m * d + k] = static_cast<std::uint32_t>(perm[k]);
      positive[a.slot] = pa + pb;
    } else {
      std::size_t joined = 0;  // positive joined sums
      for (std::size_t i = 0; i < d; ++i) {
        js[i] = sum[A + i] + sum[B + (d - 1 - i)];
        if (js[i] > Cost{}) ++joined;
      }
      if (radix) {
        for (std::size_t i = 0; i < d; ++i)
          keyed[i] = {order_key(js[i]), static_cast<std::int64_t>(i)};
        sort_keys_descending(keyed);
        for (std::size_t i = 0; i < d; ++i) perm[i] = static_cast<std::size_t>(keyed[i].second);
      } else {
        // Every sum that is not positive is a zero: those come last, in position order,
        // exactly where the comparison puts them, and only the positive sums are sorted.
        std::size_t pos = 0, zero = joined;
        for (std::size_t i = 0; i < d; ++i) perm[js[i] > Cost{} ? pos++ : zero++] = i;
        std::sort(
            perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(joined),
            [&](std::size_t p, std::size_t q) { return js[p] != js[q] ? js[p] > js[q] : p < q; });
      }
      for (std::size_t i = 0; i < d; ++i) {
        sum[A + i] = js[perm[i]];
        join_order[m * d + i] = static_cast<std::uint32_t>(perm[i]);
      }
      positive[a.slot] = joined;
    }
    merges.push_back({a.slot, b.slot});
    heap.push_back(node{sum[A] - sum[A + d - 1], created++, a.slot});
    std::push_heap(heap.begin(), heap.end(), less);
  }

  // rank[slot]: the final subset (the rank) of what a slot held. The last tuple's subset i goes
  // to rank i; undoing the merges from the last, a join at position i of A hands its rank to
  // the two subsets it joined (A's before the merge, and B's).
  std::vector<rank_t> rank(tuples * d);
  {
    const std::size_t F = heap.front().slot * d;
    for (std::size_t i = 0; i < d; ++i) rank[F + i] = static_cast<rank_t>(i);
    std::vector<rank_t> before(d);
    for (std::size_t m = merges.size(); m-- > 0;) {
      const std::size_t A = merges[m].a * d, B = merges[m].b * d;
      for (std::size_t i = 0; i < d; ++i) {
        const std::size_t j = join_order[m * d + i];
        before[j] = rank[A + i];
        rank[B + (d - 1 - j)] = rank[A + i];
      }
      std::copy(before.begin(), before.end(), rank.begin() + static_cast<std::ptrdiff_t>(A));
    }
  }
  std::vector<rank_t> out(un, 0);
  for (std::size_t k = 0; k < un; ++k)
    out[static_cast<std::size_t>(in.order[k])] = rank[(k / per_tuple) * d + k % per_tuple];
  if (in.limits.any() && !satisfies(in, std::span<const rank_t>(out))) return std::nullopt;
  return out;
}

/// The equal-count differencing of `in` computed on a thread of its own, started at
/// construction: what `automatic` considers after lpt and its refinement, begun beside them
/// (`balancers::automatic::concurrent`). `get` joins and returns exactly what
/// `karmarkar_karp(in)` returns (or rethrows what it threw); destroying it unused stops the run
/// at its next merge and joins. `in` must outlive it. Throws std::system_error when the thread
/// cannot be started.
template <class Cost>
class karmarkar_karp_beside {
 public:
  explicit karmarkar_karp_beside(const balance_input<Cost>& in)
      : thread_([this, &in] {
          try {
            result_ = karmarkar_karp(in, false, &stop_);
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  karmarkar_karp_beside(const karmarkar_karp_beside&) = delete;
  karmarkar_karp_beside& operator=(const karmarkar_karp_beside&) = delete;
  ~karmarkar_karp_beside() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
  }

  /// The result; call at most once.
  std::optional<std::vector<rank_t>> get() {
    thread_.join();
    if (error_) std::rethrow_exception(error_);
    return std::move(result_);
  }

 private:
  std::atomic<bool> stop_{false};
  std::optional<std::vector<rank_t>> result_;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members it writes exist
};

}  // namespace orchmllm::detail
