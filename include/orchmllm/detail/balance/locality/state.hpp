#pragma once
// The state the phases of the locality-aware balancer share (detail/balance/locality.hpp): the
// assignment, every rank's items, load and footprint, the receiver index, and the operations
// every phase uses on them (take an item off its rank, put it on a rank, ask whether a rank can
// take an item, find the best receiver). Internal: may change without notice.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/detail/balance/input.hpp"

namespace orchmllm::detail {

/// How many receivers a capped best-fit query looks at before giving up on a set.
inline constexpr int locality_scan = 64;
/// How many ranks (most room first) an eviction looks at for items to give up.
inline constexpr int locality_evict_scan = 1024;

namespace locality_impl {

/// Every item on the rank that sampled it: the starting point, and the whole answer when
/// there is nothing to balance (no item, or one rank).
inline std::vector<rank_t> home_placement(const batch_layout& layout, rank_t d, std::int64_t n) {
  std::vector<rank_t> a(static_cast<std::size_t>(n));
  for (rank_t r = 0; r < d; ++r)
    std::fill(a.begin() + layout.offset(r), a.begin() + layout.offset(r + 1), r);
  return a;
}

/// The balancer's working state over one balance input, a target T and a node map.
///
/// Per-rank state: the item list (for the searches of the phases), load and footprint under
/// the cap's measure. Packed: Σ cost and Σ footprint, updated in place (a packed rank is its
/// sums, and the phases move items one by one: `rank_load`s that can remove took 1.2× as long
/// on a 16,384-item plan for the same bits). Padded: a `rank_load` per rank, which holds the
/// rule (count · cost of the longest, count · widest footprint) and answers the receivers'
/// questions; a rank that loses an item is rebuilt from its list (O(k)), so the states stay
/// add-only and small for the receiver scans, which read every rank per item.
///
/// Receiver index (packed): the ranks open for receiving, keyed by (room, rank), per node and
/// global. A rank is open when it is within T, the cap and max_items and below max_items;
/// `detach` and `attach` keep the index in step with the loads.
template <class Cost, class C>
struct state {
  using tally = rank_load<Cost, rank_load_mode::add_only>;
  using key = std::pair<Cost, rank_t>;

  const balance_input<Cost>& in;
  const C& cost;
  const Cost target;
  const std::span<const rank_t> node_of_rank;  // d entries, or empty = one node
  const batch_layout& layout;
  const rank_t d;
  const std::int64_t n;
  const std::size_t D;
  const constraints& lim;
  const bool capped;
  const std::int64_t cap;  // the cap's limit, or the largest value when uncapped
  const bool cap_tokens;   // the cap measures tokens (true when uncapped)
  const bool padded;

  std::vector<rank_t> a;  // the assignment: rank of every item (a pooled item: where it was)
  std::vector<std::vector<std::int64_t>> items;
  std::vector<Cost> load;
  std::vector<std::int64_t> fp;  // footprint under the cap's measure
  std::vector<tally> st;         // padded only
  std::vector<std::set<key>> by_node;
  std::set<key> all;
  std::vector<char> open;

  /// Starts from `home` (`home_placement`); O(n + d).
  state(const balance_input<Cost>& input, const C& c, Cost t, std::span<const rank_t> nodes,
        std::vector<rank_t> home)
      : in(input),
        cost(c),
        target(t),
        node_of_rank(nodes),
        layout(input.layout),
        d(input.d),
        n(input.layout.num_items()),
        D(static_cast<std::size_t>(input.d)),
        lim(input.limits),
        capped(input.limits.cap.has_value()),
        cap(capped ? input.limits.cap->limit : std::numeric_limits<std::int64_t>::max()),
        cap_tokens(!capped || input.limits.cap->what == capacity::measure::tokens),
        padded(input.policy.is_padded()),
        a(std::move(home)),
        items(D),
        load(D, Cost{}),
        fp(D, 0),
        st(padded ? D : 0, tally(input.policy)),
        by_node(static_cast<std::size_t>(node_count(nodes))),
        open(D, 0) {
    for (std::int64_t g = 0; g < n; ++g)
      items[static_cast<std::size_t>(a[static_cast<std::size_t>(g)])].push_back(g);
    for (std::size_t R = 0; R < D; ++R) {
      for (auto g : items[R]) {
        if (padded) {
          st[R].add(item_shape_of(layout, g), cost_of(g), cost);
        } else {
          load[R] += cost_of(g);
          fp[R] += footprint_of(g);
        }
      }
      if (padded) mirror(R);
    }
  }

  static rank_t node_count(std::span<const rank_t> nodes) {
    rank_t count = 1;
    for (auto m : nodes) count = std::max<rank_t>(count, m + 1);
    return count;
  }

  // Item and rank figures.
  rank_t node(rank_t r) const {
    return node_of_rank.empty() ? 0 : node_of_rank[static_cast<std::size_t>(r)];
  }
  Cost cost_of(std::int64_t g) const { return in.costs[static_cast<std::size_t>(g)]; }
  std::int64_t bytes_of(std::int64_t g) const { return layout.bytes(g); }
  // The length a padded rank pads: the item's, or its longest segment (`item_shape_of`).
  std::int64_t length_of(std::int64_t g) const { return item_shape_of(layout, g).row_length; }
  std::int64_t footprint_of(std::int64_t g) const {
    return item_footprint(layout, g, in.policy,
                          cap_tokens ? capacity::measure::tokens : capacity::measure::bytes);
  }
  /// Cost of one padded item of the given longest length.
  Cost unit(std::int64_t longest) const {
    return static_cast<Cost>(cost(in.policy.padded_length(longest)));
  }
  std::int64_t count(rank_t r) const {
    return static_cast<std::int64_t>(items[static_cast<std::size_t>(r)].size());
  }
  Cost room(rank_t r) const {
    return static_cast<Cost>(target - load[static_cast<std::size_t>(r)]);
  }
  Cost excess(rank_t r) const {
    return static_cast<Cost>(load[static_cast<std::size_t>(r)] - target);
  }

  /// Padded: load and footprint from the rank's state.
  void mirror(std::size_t R) {
    load[R] = st[R].load(cost);
    fp[R] = cap_tokens ? st[R].tokens() : st[R].bytes();
  }

  /// Load of receiver r after taking item g (nullopt when it cannot take it).
  std::optional<Cost> after_gain(rank_t r, std::int64_t g) const {
    const auto R = static_cast<std::size_t>(r);
    if (count(r) + 1 > lim.max_items) return std::nullopt;
    Cost nl{};
    if (padded) {
      const item_shape item = item_shape_of(layout, g);
      if (capped && !st[R].fits_if_added(*lim.cap, item)) return std::nullopt;
      nl = st[R].load_if_added(item, cost_of(g), cost);
    } else {
      nl = load[R] + cost_of(g);
      if (capped && footprint_of(g) > cap - fp[R]) return std::nullopt;
    }
    if (nl > target) return std::nullopt;
    return nl;
  }
  /// Whether rank r is above T, the cap or max_items.
  bool violates(rank_t r) const {
    const auto R = static_cast<std::size_t>(r);
    return load[R] > target || fp[R] > cap || count(r) > lim.max_items;
  }

  // The receiver index.
  void close_rank(rank_t r) {
    if (!open[static_cast<std::size_t>(r)]) return;
    open[static_cast<std::size_t>(r)] = 0;
    if (!padded) {
      by_node[static_cast<std::size_t>(node(r))].erase({room(r), r});
      all.erase({room(r), r});
    }
  }
  void open_rank(rank_t r) {
    if (open[static_cast<std::size_t>(r)] || violates(r) || count(r) >= lim.max_items) return;
    open[static_cast<std::size_t>(r)] = 1;
    if (!padded) {
      by_node[static_cast<std::size_t>(node(r))].insert({room(r), r});
      all.insert({room(r), r});
    }
  }

  /// Takes g off its rank (it joins the pool; a[g] still names that rank).
  void detach(std::int64_t g) {
    const rank_t from = a[static_cast<std::size_t>(g)];
    const bool was_open = open[static_cast<std::size_t>(from)] != 0;
    close_rank(from);
    auto& v = items[static_cast<std::size_t>(from)];
    v.erase(std::find(v.begin(), v.end(), g));
    if (padded) {
      const auto F = static_cast<std::size_t>(from);
      st[F] = tally(in.policy);
      for (auto x : v) st[F].add(item_shape_of(layout, x), cost_of(x), cost);
      mirror(F);
    } else {
      load[static_cast<std::size_t>(from)] -= cost_of(g);
      fp[static_cast<std::size_t>(from)] -= footprint_of(g);
    }
    if (was_open) open_rank(from);
  }
  /// Puts a pooled g on rank `to`.
  void attach(std::int64_t g, rank_t to) {
    const bool was_open = open[static_cast<std::size_t>(to)] != 0;
    close_rank(to);
    items[static_cast<std::size_t>(to)].push_back(g);
    a[static_cast<std::size_t>(g)] = to;
    if (padded) {
      st[static_cast<std::size_t>(to)].add(item_shape_of(layout, g), cost_of(g), cost);
      mirror(static_cast<std::size_t>(to));
    } else {
      load[static_cast<std::size_t>(to)] += cost_of(g);
      fp[static_cast<std::size_t>(to)] += footprint_of(g);
    }
    if (was_open) open_rank(to);
  }
  void move(std::int64_t g, rank_t to) {
    detach(g);
    attach(g, to);
  }

  /// Best receiver for item g of rank r: same node first, best fit (least room left).
  /// Packed: from the receiver index (`search`); padded: a scan over the open ranks.
  std::optional<rank_t> find_receiver(rank_t r, std::int64_t g) const {
    if (!padded) {
      if (auto q = search(by_node[static_cast<std::size_t>(node(r))], r, g)) return q;
      return search(all, r, g);
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
  }
  /// Packed: the first rank of s (other than r) with room ≥ cost(g) that can take g, looking
  /// at no more than `locality_scan` of them.
  std::optional<rank_t> search(const std::set<key>& s, rank_t r, std::int64_t g) const {
    int looked = 0;
    for (auto it = s.lower_bound({cost_of(g), rank_t{0}}); it != s.end(); ++it) {
      if (it->second != r && after_gain(it->second, g)) return it->second;
      if (++looked >= locality_scan) break;
    }
    return std::nullopt;
  }
};

}  // namespace locality_impl
}  // namespace orchmllm::detail
