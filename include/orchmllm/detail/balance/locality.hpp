#pragma once
// Locality-aware balancing: start from the current placement (every item on its source rank)
// and move only what is needed to bring every rank to a makespan target T and inside the
// constraints. Internal: reached through `orchmllm::balance` with `balance_method::locality`, which
// sets T = automatic's makespan × (1 + tolerance), runs this, verifies the result and falls back
// to automatic's plan when it misses T or a constraint (see balance/balancer.hpp).
//
// Why: a balancer built from scratch (lpt, kk) scatters the items of every source rank over many
// bins, so even the best bin → rank mapping (topology/mapping.hpp, `transport`) keeps only a
// fraction of the bytes home. Most ranks of a sampled batch are already close to the mean; only
// the excess of the heavy ones has to move.
//
// Phases (all deterministic: fixed orders, ties by rank index or global id, no randomness):
//  1. Donors: ranks whose load exceeds T, or whose footprint exceeds the cap, or that hold more
//     than max_items. Processed by decreasing excess (ties: lower rank first). Unprocessed donors
//     never receive.
//  2. Shed set of a donor (packed): the cheapest way to cover the excess e = load − T (and the cap
//     and count excess): items by ascending bytes / cost (ties: smaller cost, then id) are taken
//     until every excess is covered, then items not needed are dropped again, most bytes first;
//     equal ratios (every item, for a linear cost with bytes ∝ length) take the LARGER item
//     first: the small items stay on their ranks, where phase 3 can evict them to fill the
//     last gaps (shedding the small ones first left rooms too fragmented for the pool's
//     larger items at d = 2560: 15 % of ranks above T against none);
//     a single item covering everything with fewer bytes replaces the set if there is one.
//     Padded (load = count · cost(longest)): every split "drop the k longest, then the m items
//     with the fewest bytes among the rest" is evaluated (O(k²) per donor) and the one with the
//     fewest bytes that meets T, the cap and the counts is taken.
//  3. Placement (packed). Every donor's shed set is taken off first, so every rank is within
//     T, the cap and max_items; the shed items form a pool, placed largest cost first (ties:
//     lower id): back home if home has room again, else best fit (the receiver left with the
//     least room, ties lower rank) among the ranks of the home node that can take it (load ≤ T,
//     cap, max_items), else best fit over all nodes. When nothing has room, eviction: among the
//     `locality_evict_scan` ranks with the most room, the first that can give up items each
//     cheaper than the pooled item, covering its cost beyond the room (one item if one covers
//     alone, else the cheapest prefix), takes it; the evicted items rejoin the pool. Costs fall
//     strictly along every eviction chain and an eviction budget (4n + 64 items) bounds the
//     work; an item still without a place goes home (over T) for phase 5. Receivers are indexed
//     in ordered sets keyed by (room, rank), per node and global: a best-fit query is O(log d)
//     plus at most `locality_scan` candidates rejected by the cap.
//     Padded: each donor places its own shed items at once, same node first, best fit by a scan
//     over the ranks (O(d) per item); if one fits nowhere the attempt stops there (the façade
//     then falls back to automatic): rectangular batches need ranks of similar lengths, which a
//     sampled placement rarely has, so a partial repair is not worth its time.
//  4. min_items: a rank below it takes, from a rank above it, the item with the fewest bytes
//     that it can take within T and the cap, same node first. O(n) per missing item.
//  5. If some rank is still above T: the existing refinement (refine.hpp), heaviest against
//     lightest with T as its target. It may move items that had stayed home (more bytes) but
//     only acts while a rank is above T.
// The façade then checks the constraints and makespan ≤ T with the same arithmetic as every
// other algorithm; this routine always hands back a complete assignment, its best attempt,
// which may still miss T (then the façade falls back).
//
// Correctness: every item is detached at most once per stay on a rank and every pooled item is
// attached again before the pool empties (home as the last resort), so every item ends on
// exactly one rank. Phases 3 and 4 only put an item on a rank that can take it (load ≤ T, cap,
// max_items; an eviction frees ≥ cost − room first, so load − evicted + cost ≤ T) and only take
// from ranks that keep min_items; so a rank within all limits stays within them. The only
// places that can leave a rank above T are "home as last resort" and shed sets a donor cannot
// cover; phase 5 and the façade's final check deal with those. Determinism: as above;
// floating-point loads are updated in one fixed order.
//
// Complexity (packed, k = items of a donor, s = pooled items incl. evicted ones): O(n + d log d)
// set-up, O(k log k) per donor, O(s log d) placements; an eviction looks at up to
// `locality_evict_scan` ranks, O(k log k) each; plus refinement when a rank is still above T
// (budget `refine_budget`). Padded: O(Σ k² log k) shed selection and O(s · d) placement; phase 4
// is O(n) per missing item. Memory O(n + d). Measured at d = 2,560 × 8 items: 1–37 ms on top of
// automatic (docs/algorithms.md).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/balance/refine.hpp"

namespace orchmllm::detail {

/// How many receivers a capped best-fit query looks at before giving up on a set.
inline constexpr int locality_scan = 64;
/// How many ranks (most room first) an eviction looks at for items to give up.
inline constexpr int locality_evict_scan = 1024;

/// The locality-aware balancer; see the file comment. `node_of_rank` has d entries (empty = one
/// node). Returns an assignment (destination rank per item), not necessarily within T.
template <class Cost, class C>
std::vector<rank_t> locality_assign(const balance_input<Cost>& in, const C& cost, Cost target,
                                    std::span<const rank_t> node_of_rank,
                                    std::int64_t refine_budget) {
  const auto& layout = in.layout;
  const rank_t d = in.d;
  const std::int64_t n = layout.num_items();
  const auto D = static_cast<std::size_t>(d);
  const auto& lim = in.limits;
  const bool capped = lim.cap.has_value();
  const std::int64_t cap = capped ? lim.cap->limit : std::numeric_limits<std::int64_t>::max();
  const bool cap_tokens = !capped || lim.cap->what == capacity::measure::tokens;
  const bool padded = in.policy.is_padded();

  std::vector<rank_t> a(static_cast<std::size_t>(n));
  for (rank_t r = 0; r < d; ++r)
    std::fill(a.begin() + layout.offset(r), a.begin() + layout.offset(r + 1), r);
  if (n == 0 || d <= 1) return a;

  auto node = [&](rank_t r) -> rank_t {
    return node_of_rank.empty() ? 0 : node_of_rank[static_cast<std::size_t>(r)];
  };
  rank_t nodes = 1;
  for (auto m : node_of_rank) nodes = std::max<rank_t>(nodes, m + 1);
  auto cst = [&](std::int64_t g) { return in.costs[static_cast<std::size_t>(g)]; };
  auto byt = [&](std::int64_t g) { return layout.bytes(g); };
  auto len = [&](std::int64_t g) { return layout.length(g); };
  auto foot = [&](std::int64_t g) {
    return item_footprint(layout, g, in.policy,
                          cap_tokens ? capacity::measure::tokens : capacity::measure::bytes);
  };
  auto unit = [&](std::int64_t longest) -> Cost {
    return static_cast<Cost>(cost(in.policy.padded_length(longest)));
  };

  // Per-rank state: the item list (for the searches below), load and footprint under the cap's
  // measure. Packed: Σ cost and Σ footprint, updated in place (a packed rank is its sums, and
  // this loop moves items one by one: `rank_load`s that can remove took 1.2× as long on a
  // 16,384-item plan for the same bits). Padded: a `rank_load` per rank, which holds the rule
  // (count · cost of the longest, count · widest footprint) and answers the receivers'
  // questions; a rank that loses an item is rebuilt from its list (O(k)), so the states stay
  // add-only and small for the receiver scans, which read every rank per item.
  std::vector<std::vector<std::int64_t>> items(D);
  for (std::int64_t g = 0; g < n; ++g) items[static_cast<std::size_t>(a[static_cast<std::size_t>(g)])].push_back(g);
  std::vector<Cost> load(D, Cost{});
  std::vector<std::int64_t> fp(D, 0);
  using tally = rank_load<Cost, rank_load_mode::add_only>;
  std::vector<tally> st(padded ? D : 0, tally(in.policy));
  auto cnt = [&](rank_t r) { return static_cast<std::int64_t>(items[static_cast<std::size_t>(r)].size()); };
  // Padded: load and footprint from the rank's state.
  auto mirror = [&](std::size_t R) {
    load[R] = st[R].load(cost);
    fp[R] = cap_tokens ? st[R].tokens() : st[R].bytes();
  };
  for (std::size_t R = 0; R < D; ++R) {
    for (auto g : items[R]) {
      if (padded) {
        st[R].add(len(g), cst(g), byt(g), cost);
      } else {
        load[R] += cst(g);
        fp[R] += foot(g);
      }
    }
    if (padded) mirror(R);
  }

  // Load of receiver r after taking item g (nullopt when it cannot take it).
  auto after_gain = [&](rank_t r, std::int64_t g) -> std::optional<Cost> {
    const auto R = static_cast<std::size_t>(r);
    if (cnt(r) + 1 > lim.max_items) return std::nullopt;
    Cost nl{};
    if (padded) {
      if (capped && !st[R].fits_if_added(*lim.cap, len(g), byt(g))) return std::nullopt;
      nl = st[R].load_if_added(len(g), cst(g), cost);
    } else {
      nl = load[R] + cst(g);
      if (capped && foot(g) > cap - fp[R]) return std::nullopt;
    }
    if (nl > target) return std::nullopt;
    return nl;
  };
  auto violates = [&](rank_t r) {
    const auto R = static_cast<std::size_t>(r);
    return load[R] > target || fp[R] > cap || cnt(r) > lim.max_items;
  };

  // Receiver index (packed): ranks open for receiving, keyed by (room, rank), per node and global.
  using key = std::pair<Cost, rank_t>;
  std::vector<std::set<key>> by_node(static_cast<std::size_t>(nodes));
  std::set<key> all;
  std::vector<char> open(D, 0);
  auto room = [&](rank_t r) { return static_cast<Cost>(target - load[static_cast<std::size_t>(r)]); };
  auto close_rank = [&](rank_t r) {
    if (!open[static_cast<std::size_t>(r)]) return;
    open[static_cast<std::size_t>(r)] = 0;
    if (!padded) {
      by_node[static_cast<std::size_t>(node(r))].erase({room(r), r});
      all.erase({room(r), r});
    }
  };
  auto open_rank = [&](rank_t r) {
    if (open[static_cast<std::size_t>(r)] || violates(r) || cnt(r) >= lim.max_items) return;
    open[static_cast<std::size_t>(r)] = 1;
    if (!padded) {
      by_node[static_cast<std::size_t>(node(r))].insert({room(r), r});
      all.insert({room(r), r});
    }
  };

  // detach: take g off its rank (it joins the pool); attach: put a pooled g on rank `to`.
  // Both keep the receiver index in step with the loads.
  auto detach = [&](std::int64_t g) {
    const rank_t from = a[static_cast<std::size_t>(g)];
    const bool was_open = open[static_cast<std::size_t>(from)] != 0;
    close_rank(from);
    auto& v = items[static_cast<std::size_t>(from)];
    v.erase(std::find(v.begin(), v.end(), g));
    if (padded) {
      const auto F = static_cast<std::size_t>(from);
      st[F] = tally(in.policy);
      for (auto x : v) st[F].add(len(x), cst(x), byt(x), cost);
      mirror(F);
    } else {
      load[static_cast<std::size_t>(from)] -= cst(g);
      fp[static_cast<std::size_t>(from)] -= foot(g);
    }
    if (was_open) open_rank(from);
  };
  auto attach = [&](std::int64_t g, rank_t to) {
    const bool was_open = open[static_cast<std::size_t>(to)] != 0;
    close_rank(to);
    items[static_cast<std::size_t>(to)].push_back(g);
    a[static_cast<std::size_t>(g)] = to;
    if (padded) {
      st[static_cast<std::size_t>(to)].add(len(g), cst(g), byt(g), cost);
      mirror(static_cast<std::size_t>(to));
    } else {
      load[static_cast<std::size_t>(to)] += cst(g);
      fp[static_cast<std::size_t>(to)] += foot(g);
    }
    if (was_open) open_rank(to);
  };
  auto move = [&](std::int64_t g, rank_t to) {
    detach(g);
    attach(g, to);
  };

  // Best receiver for item g of donor r: same node first, best fit (least room left).
  auto find_receiver = [&](rank_t r, std::int64_t g) -> std::optional<rank_t> {
    if (!padded) {
      auto search = [&](const std::set<key>& s) -> std::optional<rank_t> {
        int looked = 0;
        for (auto it = s.lower_bound({cst(g), rank_t{0}}); it != s.end(); ++it) {
          if (it->second != r && after_gain(it->second, g)) return it->second;
          if (++looked >= locality_scan) break;
        }
        return std::nullopt;
      };
      if (auto q = search(by_node[static_cast<std::size_t>(node(r))])) return q;
      return search(all);
    }
    std::optional<rank_t> best;
    Cost best_load{};
    for (int pass = 0; pass < 2 && !best; ++pass) {
      for (rank_t q = 0; q < d; ++q) {
        if (q == r || !open[static_cast<std::size_t>(q)]) continue;
        if (pass == 0 && node(q) != node(r)) continue;
        const auto nl = after_gain(q, g);
        if (nl && (!best || *nl > best_load)) {
          best = q;
          best_load = *nl;
        }
      }
    }
    return best;
  };

  // Phase 1: donors by decreasing excess.
  std::vector<rank_t> donors;
  for (rank_t r = 0; r < d; ++r) {
    if (violates(r)) {
      donors.push_back(r);
    } else {
      open_rank(r);
    }
  }
  auto excess = [&](rank_t r) { return static_cast<Cost>(load[static_cast<std::size_t>(r)] - target); };
  std::stable_sort(donors.begin(), donors.end(), [&](rank_t x, rank_t y) { return excess(x) > excess(y); });

  std::vector<std::int64_t> pool;  // packed: shed items waiting for a rank
  for (const rank_t r : donors) {
    const auto R = static_cast<std::size_t>(r);
    if (!padded) {
      {
        const Cost need_c = excess(r);
        const std::int64_t need_f = capped ? fp[R] - cap : 0;
        const std::int64_t need_n = cnt(r) - lim.max_items;
        const std::int64_t may_shed = cnt(r) - lim.min_items;
        std::vector<std::int64_t> cand;
        for (auto g : items[R]) cand.push_back(g);
        if (cand.empty() || may_shed <= 0) continue;
        auto ratio = [&](std::int64_t g) {
          return cst(g) > Cost{} ? static_cast<double>(byt(g)) / static_cast<double>(cst(g))
                                 : std::numeric_limits<double>::infinity();
        };
        std::sort(cand.begin(), cand.end(), [&](std::int64_t x, std::int64_t y) {
          const double rx = ratio(x), ry = ratio(y);
          if (rx != ry) return rx < ry;
          if (cst(x) != cst(y)) return cst(x) > cst(y);
          return x < y;
        });
        Cost sc{};
        std::int64_t sf = 0, sn = 0;
        auto covered = [&] { return !(sc < need_c) && sf >= need_f && sn >= need_n; };
        std::vector<std::int64_t> sel;
        for (auto g : cand) {
          if (covered() || sn >= may_shed) break;
          sel.push_back(g);
          sc += cst(g);
          sf += foot(g);
          ++sn;
        }
        // Drop what is not needed, most bytes first (ties: later in `sel` first).
        std::vector<std::size_t> by_bytes(sel.size());
        for (std::size_t i = 0; i < sel.size(); ++i) by_bytes[i] = sel.size() - 1 - i;
        std::stable_sort(by_bytes.begin(), by_bytes.end(), [&](std::size_t x, std::size_t y) {
          return byt(sel[x]) > byt(sel[y]);
        });
        std::vector<char> dropped(sel.size(), 0);
        if (covered()) {
          for (auto i : by_bytes) {
            const auto g = sel[i];
            sc -= cst(g);
            sf -= foot(g);
            --sn;
            if (covered()) {
              dropped[i] = 1;
            } else {
              sc += cst(g);
              sf += foot(g);
              ++sn;
            }
          }
        }
        std::vector<std::int64_t> shed;
        std::int64_t shed_bytes = 0;
        for (std::size_t i = 0; i < sel.size(); ++i)
          if (!dropped[i]) {
            shed.push_back(sel[i]);
            shed_bytes += byt(sel[i]);
          }
        // One item covering everything with fewer bytes.
        if (need_n <= 1) {
          std::optional<std::int64_t> single;
          for (auto g : cand)
            if (!(cst(g) < need_c) && foot(g) >= need_f && byt(g) < shed_bytes &&
                (!single || byt(g) < byt(*single)))
              single = g;
          if (single) shed.assign(1, *single);
        }
        for (auto g : shed) {
          detach(g);
          pool.push_back(g);
        }
      }
    } else {
      // Padded: items by length descending (ties id); evaluate (k longest dropped, m fewest
      // bytes among the rest) and shed the cheapest split meeting T, the cap and the counts.
      std::vector<std::int64_t> v = items[R];
      std::sort(v.begin(), v.end(), [&](std::int64_t x, std::int64_t y) {
        return len(x) > len(y) || (len(x) == len(y) && x < y);
      });
      const auto k_all = static_cast<std::int64_t>(v.size());
      std::optional<std::pair<std::int64_t, std::int64_t>> best;  // (k, m)
      std::int64_t best_bytes = 0;
      std::int64_t prefix_bytes = 0;
      for (std::int64_t k = 0; k <= k_all; ++k) {
        if (k > 0) prefix_bytes += byt(v[static_cast<std::size_t>(k - 1)]);
        if (k_all - k < lim.min_items) break;
        if (best && prefix_bytes >= best_bytes) break;
        if (k == k_all) {
          if (!best || prefix_bytes < best_bytes) {
            best = std::pair{k, std::int64_t{0}};
            best_bytes = prefix_bytes;
          }
          break;
        }
        const std::int64_t longest = len(v[static_cast<std::size_t>(k)]);
        const Cost u = unit(longest);
        std::vector<std::int64_t> rest_bytes;
        std::int64_t widest = 0;
        for (std::int64_t i = k; i < k_all; ++i) widest = std::max(widest, byt(v[static_cast<std::size_t>(i)]));
        for (std::int64_t i = k + 1; i < k_all; ++i) rest_bytes.push_back(byt(v[static_cast<std::size_t>(i)]));
        std::sort(rest_bytes.begin(), rest_bytes.end());
        const std::int64_t w = cap_tokens ? in.policy.padded_length(longest) : widest;
        std::int64_t extra = 0;
        for (std::int64_t m = 0; m < k_all - k; ++m) {
          if (m > 0) extra += rest_bytes[static_cast<std::size_t>(m - 1)];
          const std::int64_t keep = k_all - k - m;
          if (keep < lim.min_items) break;
          const bool ok = !(tally::padded_load(keep, u) > target) &&
                          keep <= lim.max_items && (!capped || w == 0 || keep <= cap / w);
          if (ok) {
            if (!best || prefix_bytes + extra < best_bytes) {
              best = std::pair{k, m};
              best_bytes = prefix_bytes + extra;
            }
            break;
          }
        }
      }
      if (best) {
        std::vector<std::int64_t> shed(v.begin(), v.begin() + best->first);
        std::vector<std::int64_t> rest(v.begin() + std::min(best->first + 1, k_all), v.end());
        std::stable_sort(rest.begin(), rest.end(),
                         [&](std::int64_t x, std::int64_t y) { return byt(x) < byt(y); });
        shed.insert(shed.end(), rest.begin(), rest.begin() + best->second);
        for (auto g : shed) {
          if (!violates(r)) break;
          if (auto q = find_receiver(r, g)) {
            move(g, *q);
          } else {
            return a;  // see the file comment: padded gives up at the first item that fits nowhere
          }
        }
      }
    }
    open_rank(r);
  }

  // Phase 3 (packed): place the pool, largest cost first: home if it has room again, else best
  // fit on the home node, else best fit anywhere, else evict (see the file comment).
  if (!padded && !pool.empty()) {
    auto before = [&](std::int64_t x, std::int64_t y) {  // heap order: largest cost, then lowest id
      return cst(x) < cst(y) || (cst(x) == cst(y) && x > y);
    };
    std::make_heap(pool.begin(), pool.end(), before);
    std::int64_t evictions_left = 4 * n + 64;
    while (!pool.empty()) {
      std::pop_heap(pool.begin(), pool.end(), before);
      const std::int64_t g = pool.back();
      pool.pop_back();
      const rank_t home = a[static_cast<std::size_t>(g)];  // where it was detached from
      if (open[static_cast<std::size_t>(home)] && after_gain(home, g)) {
        attach(g, home);
        continue;
      }
      if (auto q = find_receiver(home, g)) {
        attach(g, *q);
        continue;
      }
      // Eviction: the ranks with the most room (up to locality_scan of them, global order)
      // may give up items each cheaper than g, covering g's cost beyond their room with the
      // fewest bytes (ascending cost, then unneeded ones dropped); the evicted items rejoin
      // the pool. Costs strictly fall along every eviction chain, and a budget bounds the work.
      bool placed = false;
      if (evictions_left > 0) {
        int looked = 0;
        for (auto it = all.rbegin(); it != all.rend() && looked < locality_evict_scan; ++it, ++looked) {
          const rank_t q = it->second;
          if (q == home) continue;
          const auto Q = static_cast<std::size_t>(q);
          const Cost need = static_cast<Cost>(cst(g) - it->first);
          std::vector<std::int64_t> cand;
          for (auto x : items[Q])
            if (cst(x) < cst(g)) cand.push_back(x);
          std::sort(cand.begin(), cand.end(), [&](std::int64_t x, std::int64_t y) {
            return cst(x) < cst(y) || (cst(x) == cst(y) && x < y);
          });
          Cost sum{};
          std::size_t k = 0;
          while (k < cand.size() && sum < need) sum += cst(cand[k++]);
          if (sum < need) continue;
          // Prefer one item that covers alone (least overshoot), else the prefix.
          std::vector<std::int64_t> out(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k));
          for (auto x : cand)
            if (!(cst(x) < need)) {
              out.assign(1, x);
              break;
            }
          const auto left = cnt(q) - static_cast<std::int64_t>(out.size()) + 1;
          if (left < lim.min_items || left > lim.max_items) continue;
          if (capped) {
            std::int64_t f = fp[Q] + foot(g);
            for (auto x : out) f -= foot(x);
            if (f > cap) continue;
          }
          for (auto x : out) {
            detach(x);
            pool.push_back(x);
            std::push_heap(pool.begin(), pool.end(), before);
          }
          attach(g, q);
          evictions_left -= static_cast<std::int64_t>(out.size());
          placed = true;
          break;
        }
      }
      if (!placed) attach(g, home);  // overloads home; refinement or the fallback deals with it
    }
  }

  // Phase 4: min_items.
  if (lim.min_items > 0) {
    for (rank_t r = 0; r < d; ++r) {
      while (cnt(r) < lim.min_items) {
        std::optional<std::int64_t> best;
        bool best_same = false;
        for (std::int64_t g = 0; g < n; ++g) {
          const rank_t from = a[static_cast<std::size_t>(g)];
          if (from == r || cnt(from) <= lim.min_items) continue;
          const bool same = node(from) == node(r);
          if (best && (best_same && !same)) continue;
          if (best && best_same == same && byt(g) >= byt(*best)) continue;
          if (!after_gain(r, g)) continue;
          best = g;
          best_same = same;
        }
        if (!best) break;
        move(*best, r);
      }
    }
  }

  // Phase 5: refinement while a rank is above T.
  bool over = false;
  for (rank_t r = 0; r < d; ++r) over = over || load[static_cast<std::size_t>(r)] > target;
  if (over && satisfies(in, std::span<const rank_t>(a)))
    refine(in, cost, a, refine_budget, target);
  return a;
}

}  // namespace orchmllm::detail
