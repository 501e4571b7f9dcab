#pragma once
// The greedy feasibility check and target search behind the exact padded balancer
// (detail/balance/padded.hpp, where the method and its proof are described) and the tight
// padded lower bound of the statistics (detail/core/statistics_impl.hpp): for padded policies
// the optimum itself is cheap, so the bound the statistics report is that optimum (without the
// memory cap, which can only raise it).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"

namespace orchmllm::detail {

/// What the padded greedy reads: the items in canonical padded order (length desc, id asc),
/// the rank count, the policy and the constraints.
struct padded_instance {
  const batch_layout& layout;
  rank_t d;
  std::span<const std::int64_t> order;
  padding_policy policy;
  const constraints& limits;
};

/// cost(pad(l)) over lengths met in canonical padded order (length descending), where equal
/// lengths are adjacent: the model is called once per run of one padded length instead of once
/// per item (a cost model is a function of the length, so the values are the same). O(1) per
/// call after the first of a run.
template <class Cost, class C>
class padded_unit_cost {
 public:
  padded_unit_cost(const C& cost, padding_policy policy) : cost_(cost), policy_(policy) {}
  Cost operator()(std::int64_t length) {
    if (length != length_) {
      length_ = length;
      const std::int64_t padded = policy_.padded_length(length);
      if (padded != padded_) {
        padded_ = padded;
        unit_ = static_cast<Cost>(cost_(padded));
      }
    }
    return unit_;
  }

 private:
  const C& cost_;
  padding_policy policy_;
  std::int64_t length_ = -1;  // lengths and padded lengths are >= 0: the first call computes
  std::int64_t padded_ = -1;
  Cost unit_{};
};

namespace padded_impl {

// The padded rule for a group of c items whose longest costs `unit` once padded.
template <class Cost>
constexpr Cost group_load(std::int64_t c, Cost unit) {
  return rank_load<Cost, rank_load_mode::add_only>::padded_load(c, unit);
}

// Largest c in [0, limit] with Cost(c) * unit <= T, for unit > 0 and limit >= 0. The integral
// quotient is exact; the floating one is rounded, so it is corrected against the product itself
// (the product is monotone in c, so the walk is a step or two).
template <class Cost>
std::int64_t max_count(Cost T, Cost unit, std::int64_t limit) {
  if constexpr (std::is_integral_v<Cost>) {
    const Cost q = T / unit;
    if constexpr (std::is_signed_v<Cost>) {
      if (q < Cost{0}) return 0;
    }
    if (static_cast<std::uint64_t>(q) >= static_cast<std::uint64_t>(limit)) return limit;
    return static_cast<std::int64_t>(q);
  } else {
    const Cost q = std::floor(T / unit);
    std::int64_t c;
    if (!(q >= Cost{0})) {
      c = 0;
    } else if (q >= static_cast<Cost>(limit)) {
      c = limit;
    } else {
      c = static_cast<std::int64_t>(q);
    }
    while (c > 0 && group_load(c, unit) > T) --c;
    while (c < limit && group_load(c + 1, unit) <= T) ++c;
    return c;
  }
}

// The greedy feasibility check and the plan it builds, over items in canonical order.
//
// Items with segments (a layout with segments under a padded policy) weigh their rows: a group
// of items costs (Σ rows) × unit of its first item. `prefix_rows` (n + 1 entries, the rows of the
// first s items in order) switches this on; empty means one row per item (the unweighted greedy,
// whose code path is unchanged). With rows, the greedy gives a group the longest run of items
// whose rows fit the target (strict), or, with `overfill`, takes items while the rows before
// the next one stay below ⌊T / unit⌋ (the last item may overshoot T: the bound of
// docs/algorithms.md, "Padded policies with segments"). Hard limits (item counts, the cap) are
// never exceeded.
template <class Cost>
class greedy {
 public:
  greedy(padded_instance in, std::vector<Cost> unit_cost, bool bytes_sorted,
         std::vector<std::int64_t> prefix_rows = {}, bool overfill = false)
      : in_(in),
        unit_(std::move(unit_cost)),
        bytes_sorted_(bytes_sorted),
        prefix_(std::move(prefix_rows)),
        overfill_(overfill) {}

  struct outcome {
    bool feasible = false;
    Cost makespan{};
  };

  // Runs the greedy at target T. When `sizes` is given it receives the group sizes.
  outcome run(Cost T, std::vector<std::int64_t>* sizes = nullptr) const {
    const std::int64_t n = static_cast<std::int64_t>(in_.order.size());
    const std::int64_t d = in_.d;
    const std::int64_t m = in_.limits.min_items;
    const auto& cap = in_.limits.cap;
    outcome out;
    if (sizes) sizes->clear();
    std::int64_t s = 0;
    std::int64_t groups = 0;
    while (s < n) {
      if (groups == d) return out;  // items left, no rank left
      const std::int64_t left = n - s;
      std::int64_t c = left;
      // Reserve min_items for each group still to open after this one.
      if (m > 0) c = std::min(c, left - m * (d - groups - 1));
      c = std::min(c, in_.limits.max_items);
      if (c < std::max<std::int64_t>(m, 1)) return out;
      const Cost unit = unit_[static_cast<std::size_t>(s)];
      const std::int64_t first = in_.order[static_cast<std::size_t>(s)];
      if (!prefix_.empty()) {
        if (!weighted_count(T, unit, s, first, c)) return out;
        out.makespan = std::max(out.makespan, group_load(rows(s, c), unit));
        if (sizes) sizes->push_back(c);
        s += c;
        ++groups;
        continue;
      }
      if (unit > Cost{0}) c = max_count(T, unit, c);
      if (cap && c > 0) {
        if (cap->what == capacity::measure::tokens) {
          const std::int64_t pl = in_.policy.padded_length(in_.layout.length(first));
          if (pl > 0) c = std::min(c, cap->limit / pl);
        } else if (bytes_sorted_) {
          const std::int64_t b = in_.layout.bytes(first);
          if (b > 0) c = std::min(c, cap->limit / b);
        } else {
          c = bytes_scan(s, c, cap->limit);
        }
      }
      if (c < std::max<std::int64_t>(m, 1)) return out;
      out.makespan = std::max(out.makespan, group_load(c, unit));
      if (sizes) sizes->push_back(c);
      s += c;
      ++groups;
    }
    out.feasible = groups <= d && (m == 0 || groups == d);
    return out;
  }

 private:
  // Rows of the c items from position s.
  std::int64_t rows(std::int64_t s, std::int64_t c) const {
    return prefix_[static_cast<std::size_t>(s + c)] - prefix_[static_cast<std::size_t>(s)];
  }
  // The rows before position s plus `extra` (>= 0), saturated at INT64_MAX: a prefix value
  // to search for.
  std::int64_t rows_before_plus(std::int64_t s, std::int64_t extra) const {
    const std::int64_t before = prefix_[static_cast<std::size_t>(s)];
    return before > INT64_MAX - extra ? INT64_MAX : before + extra;
  }
  // Most items from s (at most `limit`) whose rows stay <= `most` rows.
  std::int64_t items_within(std::int64_t s, std::int64_t limit, std::int64_t most) const {
    const auto base = prefix_.begin() + static_cast<std::ptrdiff_t>(s);
    const auto it = std::upper_bound(base, base + limit + 1, rows_before_plus(s, most));
    return static_cast<std::int64_t>(it - base) - 1;
  }
  // Fewest items from s (at most `limit`) that hold at least `least` rows (`limit` if none).
  std::int64_t items_reaching(std::int64_t s, std::int64_t limit, std::int64_t least) const {
    const auto base = prefix_.begin() + static_cast<std::ptrdiff_t>(s);
    const auto it = std::lower_bound(base, base + limit + 1, rows_before_plus(s, least));
    return std::min(limit, static_cast<std::int64_t>(it - base));
  }
  // The weighted group size at position s: `c` comes in as the item-count limit and leaves as
  // the group size; false when the group cannot hold the items it must.
  bool weighted_count(Cost T, Cost unit, std::int64_t s, std::int64_t first,
                      std::int64_t& c) const {
    const std::int64_t left = static_cast<std::int64_t>(in_.order.size()) - s;
    const std::int64_t m = in_.limits.min_items;
    if (unit > Cost{0}) {
      // Rows the target allows at this unit (the count limit is only an upper bound on it).
      const std::int64_t most = max_count(T, unit, rows(s, left));
      c = overfill_ ? items_reaching(s, c, most) : items_within(s, c, most);
    }
    const auto& cap = in_.limits.cap;
    if (cap && c > 0) {
      if (cap->what == capacity::measure::tokens) {
        const std::int64_t pl =
            in_.policy.padded_length(item_shape_of(in_.layout, first).row_length);
        if (pl > 0) c = items_within(s, c, cap->limit / pl);
      } else if (bytes_sorted_) {
        const std::int64_t b = in_.layout.bytes(first);
        if (b > 0) c = std::min(c, cap->limit / b);
      } else {
        c = bytes_scan(s, c, cap->limit);
      }
    }
    return c >= std::max<std::int64_t>(m, 1);
  }

  // Longest run from position s, at most `limit` items, with count · max bytes <= cap.
  std::int64_t bytes_scan(std::int64_t s, std::int64_t limit, std::int64_t cap) const {
    std::int64_t c = 0;
    std::int64_t max_bytes = 0;
    while (c < limit) {
      const auto g = in_.order[static_cast<std::size_t>(s + c)];
      const std::int64_t mb = std::max(max_bytes, in_.layout.bytes(g));
      if (mb > 0 && c + 1 > cap / mb) break;  // (c + 1) · mb > cap, without overflow
      max_bytes = mb;
      ++c;
    }
    return c;
  }

  padded_instance in_;
  std::vector<Cost> unit_;  // cost(padded length) of the item at each order position
  bool bytes_sorted_;
  std::vector<std::int64_t> prefix_;  // rows of the first s items in order (empty: one each)
  bool overfill_;
};

// The row relaxation of a padded instance with segments: every row (segment) placed on its own,
// no item counts, no cap. Its optimum is a lower bound on the optimum with whole items (every
// plan of items is a plan of rows), and the greedy over rows in canonical order is exact for it
// (the unweighted proof, rows as items). `run(T)`: whether at most d groups of rows cover all
// rows at target T, and the makespan of that plan. O(n + d) per check.
template <class Cost>
class row_greedy {
 public:
  // `unit[s]`, `rows[s]`: cost(pad(row length)) and rows of the item at order position s.
  row_greedy(rank_t d, std::vector<Cost> unit, std::vector<std::int64_t> rows)
      : d_(d), unit_(std::move(unit)), rows_(std::move(rows)) {
    for (const auto w : rows_) total_ += w;
  }

  struct outcome {
    bool feasible = false;
    Cost makespan{};
  };

  outcome run(Cost T) const {
    const auto n = unit_.size();
    outcome out;
    std::size_t i = 0;
    std::int64_t rem = n > 0 ? rows_[0] : 0;  // rows of item i not placed yet
    std::int64_t left = total_;               // rows not placed yet
    std::int64_t groups = 0;
    while (left > 0) {
      if (groups == d_) return out;
      const Cost u = unit_[i];
      const std::int64_t c = u > Cost{0} ? max_count(T, u, left) : left;
      if (c == 0) return out;
      out.makespan = std::max(out.makespan, group_load(c, u));
      left -= c;
      std::int64_t take = c;
      while (take > 0) {
        const std::int64_t t = std::min(take, rem);
        rem -= t;
        take -= t;
        if (rem == 0 && ++i < n) rem = rows_[i];
      }
      ++groups;
    }
    out.feasible = true;
    return out;
  }

 private:
  rank_t d_;
  std::vector<Cost> unit_;
  std::vector<std::int64_t> rows_;
  std::int64_t total_ = 0;
};

// Bit pattern <-> value of a non-negative floating value (patterns of non-negative IEEE values
// are ordered like the values). -0.0 maps to the pattern of +0.0.
template <class Cost>
using float_bits_t = std::conditional_t<sizeof(Cost) == 4, std::uint32_t, std::uint64_t>;

template <class Cost>
float_bits_t<Cost> to_bits(Cost x) noexcept {
  return std::bit_cast<float_bits_t<Cost>>(x == Cost{0} ? Cost{0} : x);
}

template <class Cost>
Cost from_bits(float_bits_t<Cost> b) noexcept {
  return std::bit_cast<Cost>(b);
}

// The smallest makespan the greedy reaches at some target in [lo, hi], for lo a valid lower
// bound on it and hi a makespan the greedy reaches (`check.run(hi).feasible`): a binary search
// on the target, over the integers for integral costs and over the bit patterns of non-negative
// values for floating ones (at most 64 checks). When the greedy is exact (see padded.hpp) this
// is the optimum. The bound itself is tried first: when the greedy reaches it, no target can do
// better, and the search would end there too (feasibility only grows with the target, so every
// midpoint above a feasible `lo` is feasible and the upper end falls to `lo`). Often so in
// practice (e.g. items of one padded length: the bound ⌈n/d⌉ · cost is met), where it saves the
// ~60 checks of the search.
template <class Cost, class Check>
Cost min_feasible_makespan(const Check& check, Cost lo, Cost hi) {
  if (lo < hi) {
    const auto at_bound = check.run(lo);
    if (at_bound.feasible) return at_bound.makespan;
  }
  if constexpr (std::is_integral_v<Cost>) {
    while (lo < hi) {
      const Cost mid = static_cast<Cost>(lo + (hi - lo) / 2);
      const auto o = check.run(mid);
      if (o.feasible) {
        hi = o.makespan;  // <= mid: the plan it built achieves it
      } else {
        lo = static_cast<Cost>(mid + 1);
      }
    }
  } else if constexpr (sizeof(Cost) == 4 || sizeof(Cost) == 8) {
    using bits = padded_impl::float_bits_t<Cost>;
    bits blo = padded_impl::to_bits(lo);
    bits bhi = padded_impl::to_bits(hi);
    while (blo < bhi) {
      const bits mid = static_cast<bits>(blo + (bhi - blo) / 2);
      const auto o = check.run(padded_impl::from_bits<Cost>(mid));
      if (o.feasible) {
        bhi = padded_impl::to_bits(o.makespan);
      } else {
        blo = static_cast<bits>(mid + 1);
      }
    }
    hi = padded_impl::from_bits<Cost>(bhi);
  } else {
    // Other floating widths (e.g. 80/128-bit long double): bisect on values until the interval
    // cannot be split; terminates because the midpoint strictly shrinks it each time.
    while (lo < hi) {
      Cost mid = lo + (hi - lo) / 2;
      if (!(mid < hi)) mid = lo;
      const auto o = check.run(mid);
      if (o.feasible) {
        hi = o.makespan;
      } else {
        const Cost next = std::nextafter(mid, hi);
        if (!(next > lo)) break;
        lo = next;
      }
    }
  }

  return hi;
}

}  // namespace padded_impl

}  // namespace orchmllm::detail
