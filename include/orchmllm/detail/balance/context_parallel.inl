#pragma once
// The definitions of balance/context_parallel.hpp: the shard times of the zigzag split, the
// groups of every allowed size, the lower bound over the allowed sizes, the placement for one
// target and the result's accessors. docs/algorithms.md, "Context parallelism", has the proofs.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/core/pieces.hpp"

namespace orchmllm {

namespace detail {

/// Causal attention entries of the queries [a, b): Σ_{q=a}^{b-1} (q + 1) = (b − a)(a + b + 1)/2.
inline double cp_entries(std::int64_t a, std::int64_t b) noexcept {
  return rounded_mul(static_cast<double>(b - a), static_cast<double>(a + b + 1)) * 0.5;
}

/// First token of chunk k of a sample of l tokens cut into `chunks` zigzag chunks.
inline std::int64_t cp_chunk_begin(std::int64_t l, std::int64_t k, std::int64_t chunks) noexcept {
  return scaled_share(l, k, chunks);
}

/// Tokens held by position i of a group of c ≥ 2: its chunks i and 2c − 1 − i.
inline std::int64_t cp_position_tokens(std::int64_t l, std::int64_t c, std::int64_t i) noexcept {
  const std::int64_t chunks = 2 * c;
  return (cp_chunk_begin(l, i + 1, chunks) - cp_chunk_begin(l, i, chunks)) +
         (cp_chunk_begin(l, chunks - i, chunks) - cp_chunk_begin(l, chunks - 1 - i, chunks));
}

inline void cp_check_cost_value(double v, const char* name) {
  ORCHMLLM_REQUIRE(std::isfinite(v) && v >= 0.0, invalid_argument_error, "cp_cost ", name, " is ",
                   v, ", must be finite and >= 0");
}

/// Every position's time of sample length l over c ≥ 2 ranks (`out` has c entries); returns the
/// largest token count of a position. The ring exchange is paced by the largest shard.
inline std::int64_t cp_shard_times(const cp_cost& cost, std::int64_t l, std::int64_t c,
                                   const link_params& links, bool intra, std::span<double> out) {
  const std::int64_t chunks = 2 * c;
  std::int64_t max_tokens = 0;
  for (std::int64_t i = 0; i < c; ++i) {
    const std::int64_t h0 = cp_chunk_begin(l, i, chunks), h1 = cp_chunk_begin(l, i + 1, chunks);
    const std::int64_t t0 = cp_chunk_begin(l, chunks - 1 - i, chunks),
                       t1 = cp_chunk_begin(l, chunks - i, chunks);
    const std::int64_t tokens = cp_position_tokens(l, c, i);
    max_tokens = std::max(max_tokens, tokens);
    out[static_cast<std::size_t>(i)] =
        cost.constant + rounded_mul(cost.linear, static_cast<double>(tokens)) +
        rounded_mul(cost.attention, cp_entries(h0, h1) + cp_entries(t0, t1));
  }
  const double bandwidth = intra ? links.intra_bandwidth : links.inter_bandwidth;
  const double latency = intra ? links.intra_latency : links.inter_latency;
  const double step =
      latency + rounded_mul(cost.kv_bytes_per_token, static_cast<double>(max_tokens)) / bandwidth;
  const double ring = rounded_mul(cost.ring_rounds, rounded_mul(static_cast<double>(c - 1), step));
  for (auto& t : out) t += ring;
  return max_tokens;
}

/// The groups of one allowed size: `ranks` holds c ranks per group (in position order), and
/// `intra` whether each group lies inside one node.
struct cp_groups {
  std::int64_t c = 1;
  std::vector<rank_t> ranks;
  std::vector<unsigned char> intra;
  bool any_intra = false;
  bool any_inter = false;
  [[nodiscard]] std::int64_t count() const noexcept {
    return static_cast<std::int64_t>(intra.size());
  }
};

inline cp_groups cp_make_groups(const topology& topo, std::int64_t c, bool within_node) {
  cp_groups g;
  g.c = c;
  const auto add = [&](auto rank_at, bool intra) {
    for (std::int64_t i = 0; i < c; ++i) g.ranks.push_back(rank_at(i));
    g.intra.push_back(intra ? 1 : 0);
    (intra ? g.any_intra : g.any_inter) = true;
  };
  if (within_node) {
    for (rank_t m = 0; m < topo.num_nodes(); ++m) {
      const std::int64_t size = topo.node_size(m);
      for (std::int64_t j = 0; j + c <= size; j += c)
        add([&](std::int64_t i) { return topo.rank_at(m, static_cast<rank_t>(j + i)); }, true);
    }
  } else {
    const std::int64_t d = topo.num_ranks();
    for (std::int64_t j = 0; j + c <= d; j += c) {
      bool intra = true;
      for (std::int64_t i = 1; i < c; ++i)
        intra = intra && topo.same_node(static_cast<rank_t>(j), static_cast<rank_t>(j + i));
      add([&](std::int64_t i) { return static_cast<rank_t>(j + i); }, intra);
    }
  }
  return g;
}

/// One allowed size for one sample: its busiest shard, the group's total time and the most
/// tokens a position holds, with the figures of the cheaper link kind the size's groups offer
/// (so the bound stays below every placement). `usable` is false when the size has no group or
/// a shard exceeds the cap.
struct cp_option {
  std::array<double, 2> link_peak{};  // busiest shard on groups inside a node, across nodes
  double peak = 0.0;
  double work = 0.0;
  std::int64_t max_tokens = 0;
  bool usable = false;
};

/// Everything the bound and the placements share.
struct cp_setup {
  rank_t d = 0;
  std::int64_t n = 0;
  std::int64_t cap = 0;  // a rank's tokens: token_cap, and M micro-batches of micro_batch_tokens
  std::vector<cp_groups> groups;    // per allowed size with at least one group
  std::vector<cp_option> options;   // n × groups.size()
  std::vector<std::int64_t> order;  // items by whole-sample time descending, then id
  [[nodiscard]] const cp_option& option(std::int64_t g, std::size_t s) const noexcept {
    return options[static_cast<std::size_t>(g) * groups.size() + s];
  }
};

inline void cp_validate(const batch_layout& layout, const cp_cost& cost, const topology& topo,
                        const cp_options& o) {
  (void)cost.validated();
  ORCHMLLM_REQUIRE(topo.num_ranks() == layout.num_ranks(), invalid_argument_error, "topology has ",
                   topo.num_ranks(), " ranks, the layout ", layout.num_ranks());
  ORCHMLLM_REQUIRE(!o.sizes.empty(), invalid_argument_error,
                   "cp_options: no group size allowed (sizes is empty)");
  for (std::size_t i = 0; i < o.sizes.size(); ++i) {
    ORCHMLLM_REQUIRE(o.sizes[i] >= 1, invalid_argument_error, "cp_options: group size ", o.sizes[i],
                     " must be >= 1");
    ORCHMLLM_REQUIRE(i == 0 || o.sizes[i] > o.sizes[i - 1], invalid_argument_error,
                     "cp_options: group sizes must increase (", o.sizes[i - 1], " then ",
                     o.sizes[i], ")");
  }
  ORCHMLLM_REQUIRE(o.token_cap >= 1, invalid_argument_error, "cp_options: token_cap ", o.token_cap,
                   " must be >= 1");
  ORCHMLLM_REQUIRE(o.min_shard_tokens >= 0, invalid_argument_error, "cp_options: min_shard_tokens ",
                   o.min_shard_tokens, " must be >= 0");
  ORCHMLLM_REQUIRE(o.micro_batches >= 1, invalid_argument_error, "cp_options: micro_batches ",
                   o.micro_batches, " must be >= 1");
  ORCHMLLM_REQUIRE(o.micro_batch_tokens >= 1, invalid_argument_error,
                   "cp_options: micro_batch_tokens ", o.micro_batch_tokens, " must be >= 1");
  ORCHMLLM_REQUIRE(o.targets >= 1, invalid_argument_error, "cp_options: targets ", o.targets,
                   " must be >= 1");
}

inline cp_setup cp_prepare(const batch_layout& layout, const cp_cost& cost, const topology& topo,
                           const cp_options& o) {
  cp_validate(layout, cost, topo, o);
  cp_setup s;
  s.d = layout.num_ranks();
  s.n = layout.num_items();
  for (const std::int64_t c : o.sizes) {
    if (c > s.d) break;
    cp_groups g = cp_make_groups(topo, c, o.within_node);
    if (g.count() > 0) s.groups.push_back(std::move(g));
  }
  ORCHMLLM_REQUIRE(!s.groups.empty(), invalid_argument_error, "cp_options: no allowed group size (",
                   o.sizes.front(), (o.sizes.size() > 1 ? " ..." : ""),
                   ") has a group of ranks in this topology",
                   (o.within_node ? " inside one node" : ""));
  s.cap = o.micro_batch_tokens <= std::numeric_limits<std::int64_t>::max() / o.micro_batches
              ? std::min(o.token_cap, o.micro_batch_tokens * o.micro_batches)
              : o.token_cap;
  if (s.cap <= std::numeric_limits<std::int64_t>::max() / s.d) {
    const std::int64_t room = s.cap * s.d;
    std::int64_t total = 0;
    for (std::int64_t g = 0; g < s.n; ++g) {
      ORCHMLLM_REQUIRE(layout.length(g) <= room - total, infeasible_error, "the ", s.n,
                       " samples hold more than ", room, " tokens, the ", s.d, " ranks' token cap ",
                       s.cap, " in all");
      total += layout.length(g);
    }
  }
  const std::size_t k = s.groups.size();
  s.options.resize(static_cast<std::size_t>(s.n) * k);
  std::vector<double> times;
  std::vector<double> whole(static_cast<std::size_t>(s.n));
  for (std::int64_t g = 0; g < s.n; ++g) {
    const std::int64_t l = layout.length(g);
    whole[static_cast<std::size_t>(g)] = cost(l);
    bool any = false;
    for (std::size_t i = 0; i < k; ++i) {
      const cp_groups& grp = s.groups[i];
      cp_option& opt = s.options[static_cast<std::size_t>(g) * k + i];
      if (grp.c == 1) {
        const double w = whole[static_cast<std::size_t>(g)];
        opt = {{w, w}, w, w, l, true};
      } else {
        times.resize(static_cast<std::size_t>(grp.c));
        opt.peak = opt.work = std::numeric_limits<double>::infinity();
        opt.link_peak = {opt.peak, opt.peak};
        for (const bool intra : {true, false}) {
          if (!(intra ? grp.any_intra : grp.any_inter)) continue;
          opt.max_tokens = cp_shard_times(cost, l, grp.c, topo.links, intra, times);
          double peak = 0.0, work = 0.0;
          for (const double t : times) {
            peak = std::max(peak, t);
            work += t;
          }
          opt.link_peak[intra ? 0 : 1] = peak;
          opt.peak = std::min(opt.peak, peak);
          opt.work = std::min(opt.work, work);
        }
      }
      ORCHMLLM_REQUIRE(std::isfinite(opt.peak) && std::isfinite(opt.work), invalid_argument_error,
                       "sample ", g, " of ", l, " tokens takes ", opt.peak, " s over ", grp.c,
                       " ranks, must be finite: the cost overflows double");
      opt.usable = opt.max_tokens <= std::min(s.cap, o.micro_batch_tokens) &&
                   (grp.c == 1 || l / grp.c >= o.min_shard_tokens);
      any = any || opt.usable;
    }
    ORCHMLLM_REQUIRE(any, infeasible_error, "sample ", g, " of ", l, " tokens fits the token cap ",
                     std::min(s.cap, o.micro_batch_tokens),
                     " at no allowed group size (the widest gives a rank ",
                     s.option(g, k - 1).max_tokens, " tokens; shards of at least ",
                     o.min_shard_tokens, " tokens)");
  }
  s.order.resize(static_cast<std::size_t>(s.n));
  for (std::int64_t g = 0; g < s.n; ++g) s.order[static_cast<std::size_t>(g)] = g;
  std::sort(s.order.begin(), s.order.end(), [&](std::int64_t a, std::int64_t b) {
    const double ca = whole[static_cast<std::size_t>(a)], cb = whole[static_cast<std::size_t>(b)];
    return ca > cb || (ca == cb && a < b);
  });
  return s;
}

/// The least total time among the usable sizes of sample g whose busiest shard is ≤ t (ties to
/// the smaller size); when no size meets t, the size with the least busiest shard (then the
/// least work, then the smaller size). Returns the size index.
inline std::int64_t cp_choose(const cp_setup& s, std::int64_t g, double t) noexcept {
  std::int64_t best = -1, narrowest = -1;
  for (std::size_t i = 0; i < s.groups.size(); ++i) {
    const cp_option& o = s.option(g, i);
    if (!o.usable) continue;
    const auto ii = static_cast<std::int64_t>(i);
    if (narrowest < 0) {
      narrowest = ii;
    } else {
      const cp_option& n = s.option(g, static_cast<std::size_t>(narrowest));
      if (o.peak < n.peak || (o.peak == n.peak && o.work < n.work)) narrowest = ii;
    }
    if (o.peak <= t && (best < 0 || o.work < s.option(g, static_cast<std::size_t>(best)).work))
      best = ii;
  }
  return best >= 0 ? best : narrowest;
}

/// The bound (docs/algorithms.md, "Context parallelism"): W(T), the least total work with
/// every busiest shard ≤ T, is a non-increasing step function of T; L is the smallest T ≥ the
/// largest per-sample least peak with W(T) ≤ d · T.
inline double cp_bound(const cp_setup& s) {
  if (s.n == 0) return 0.0;
  const std::size_t k = s.groups.size();
  double base = 0.0;
  for (std::int64_t g = 0; g < s.n; ++g) {
    double least = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < k; ++i)
      if (s.option(g, i).usable) least = std::min(least, s.option(g, i).peak);
    base = std::max(base, least);
  }
  struct event {
    double peak;
    std::int64_t g;
    double work;
  };
  std::vector<double> best(static_cast<std::size_t>(s.n));
  std::vector<event> events;
  double w = 0.0;
  for (std::int64_t g = 0; g < s.n; ++g) {
    const std::int64_t i = cp_choose(s, g, base);
    best[static_cast<std::size_t>(g)] = s.option(g, static_cast<std::size_t>(i)).work;
    w += best[static_cast<std::size_t>(g)];
    for (std::size_t j = 0; j < k; ++j) {
      const cp_option& o = s.option(g, j);
      if (o.usable && o.peak > base && o.work < best[static_cast<std::size_t>(g)])
        events.push_back({o.peak, g, o.work});
    }
  }
  std::sort(events.begin(), events.end(), [](const event& a, const event& b) {
    return a.peak < b.peak || (a.peak == b.peak && (a.g < b.g || (a.g == b.g && a.work < b.work)));
  });
  const double d = static_cast<double>(s.d);
  double t = base;
  std::size_t e = 0;
  for (;;) {
    const double next =
        e < events.size() ? events[e].peak : std::numeric_limits<double>::infinity();
    if (w / d < next) return std::max(t, w / d);
    t = next;
    for (; e < events.size() && events[e].peak == t; ++e) {
      double& b = best[static_cast<std::size_t>(events[e].g)];
      if (events[e].work < b) {
        w -= b - events[e].work;
        b = events[e].work;
      }
    }
  }
}

/// One placement: every sample's size index and group (its rank when c = 1), the ranks' times
/// and tokens.
struct cp_placement {
  std::vector<std::int64_t> size_index;
  std::vector<std::int64_t> group;  // group index in its size's groups, or the rank for c = 1
  std::vector<double> loads;
  std::vector<std::int64_t> tokens;
  double makespan = std::numeric_limits<double>::infinity();
};

/// A tournament tree over the groups of one size, keyed by the group's busiest rank, that also
/// knows every subtree's emptiest group in tokens: the least busy group (ties to the lower index)
/// in O(1), the least busy one with at most `limit` tokens on its fullest rank by a pruned
/// descent (subtrees without room, or without a group that beats the best found, are skipped),
/// O(log B) updates.
class cp_group_tree {
 public:
  void assign(std::int64_t blocks) {
    size_ = 1;
    while (size_ < static_cast<std::size_t>(blocks)) size_ *= 2;
    key_.assign(static_cast<std::size_t>(blocks), 0.0);
    node_.assign(2 * size_, -1);
    room_.assign(2 * size_, std::numeric_limits<std::int64_t>::max());
    for (std::size_t b = 0; b < static_cast<std::size_t>(blocks); ++b) {
      node_[size_ + b] = static_cast<std::int64_t>(b);
      room_[size_ + b] = 0;
    }
    for (std::size_t i = size_; i-- > 1;) pull(i);
  }
  [[nodiscard]] std::int64_t least() const noexcept { return node_[1]; }
  [[nodiscard]] double key(std::int64_t b) const noexcept {
    return key_[static_cast<std::size_t>(b)];
  }
  /// Tokens on group b's fullest rank.
  [[nodiscard]] std::int64_t fullest(std::int64_t b) const noexcept {
    return room_[size_ + static_cast<std::size_t>(b)];
  }
  /// The least busy group whose fullest rank holds at most `limit` tokens, or -1.
  [[nodiscard]] std::int64_t least_with_room(std::int64_t limit) const {
    std::int64_t best = -1;
    search(1, limit, best);
    return best;
  }
  /// Group b's busiest rank now has time `k` and its fullest rank `fullest` tokens.
  void update(std::int64_t b, double k, std::int64_t fullest) {
    key_[static_cast<std::size_t>(b)] = k;
    room_[size_ + static_cast<std::size_t>(b)] = fullest;
    // Up to the first subtree whose least busy group and emptiest room stay the same (the
    // same group with a grown key is a change: its ancestors compare it again).
    const auto leaf = static_cast<std::int64_t>(b);
    for (std::size_t i = (size_ + static_cast<std::size_t>(b)) / 2; i >= 1; i /= 2) {
      const std::int64_t node = node_[i], room = room_[i];
      pull(i);
      if (node_[i] == node && node != leaf && room_[i] == room) break;
    }
  }

 private:
  [[nodiscard]] bool before(std::int64_t a, std::int64_t b) const noexcept {
    if (b < 0) return a >= 0;
    if (a < 0) return false;
    const double ka = key_[static_cast<std::size_t>(a)], kb = key_[static_cast<std::size_t>(b)];
    return ka < kb || (ka == kb && a < b);
  }
  void pull(std::size_t i) {
    node_[i] = before(node_[2 * i + 1], node_[2 * i]) ? node_[2 * i + 1] : node_[2 * i];
    room_[i] = std::min(room_[2 * i], room_[2 * i + 1]);
  }
  void search(std::size_t i, std::int64_t limit, std::int64_t& best) const {
    if (room_[i] > limit || !before(node_[i], best)) return;
    if (i >= size_) {
      best = node_[i];
      return;
    }
    // The child holding the subtree's least busy group first: without a binding cap the
    // descent reaches it directly and every other subtree is pruned.
    const std::size_t first = node_[2 * i] == node_[i] ? 2 * i : 2 * i + 1;
    search(first, limit, best);
    search(first ^ 1, limit, best);
  }
  std::size_t size_ = 1;
  std::vector<double> key_;
  std::vector<std::int64_t> node_;  // the least busy group of each subtree
  std::vector<std::int64_t> room_;  // the fewest tokens on a group's fullest rank, per subtree
};

/// The ranks' times and tokens during one placement, with a tree per allowed size that finds
/// the least busy group with room for a shard's tokens (O(1) when the least busy one has room,
/// a pruned descent otherwise), and places a sample whole or sharded on a group.
class cp_state {
 public:
  cp_state(const batch_layout& layout, const cp_cost& cost, const topology& topo, const cp_setup& s,
           cp_placement& p)
      : layout_(layout), cost_(cost), topo_(topo), s_(s), p_(p) {
    const auto d = static_cast<std::size_t>(s.d);
    const std::size_t k = s.groups.size();
    p.loads.assign(d, 0.0);
    p.tokens.assign(d, 0);
    p.size_index.resize(static_cast<std::size_t>(s.n));
    p.group.assign(static_cast<std::size_t>(s.n), -1);
    trees_.resize(k);
    group_of_.assign(k * d, -1);
    for (std::size_t i = 0; i < k; ++i) {
      const cp_groups& grp = s.groups[i];
      trees_[i].assign(grp.count());
      for (std::size_t j = 0; j < grp.ranks.size(); ++j)
        group_of_[i * d + static_cast<std::size_t>(grp.ranks[j])] =
            static_cast<std::int64_t>(j) / grp.c;
    }
  }

  /// The least busy group of size index i with room for `need` tokens on each rank, or -1.
  [[nodiscard]] std::int64_t least(std::size_t i, std::int64_t need) const {
    return trees_[i].least_with_room(s_.cap - need);
  }

  /// When sample g would finish on group b of size index i: the group's busiest rank plus the
  /// busiest shard on its kind of link.
  [[nodiscard]] double finish(std::int64_t g, std::size_t i, std::int64_t b) const {
    const bool intra = s_.groups[i].intra[static_cast<std::size_t>(b)] != 0;
    return trees_[i].key(b) + s_.option(g, i).link_peak[intra ? 0 : 1];
  }

  /// Puts sample g on group b of size index i.
  void place(std::int64_t g, std::size_t i, std::int64_t b) {
    const cp_groups& grp = s_.groups[i];
    const std::int64_t c = grp.c, l = layout_.length(g);
    const rank_t* q = grp.ranks.data() + b * c;
    p_.size_index[static_cast<std::size_t>(g)] = static_cast<std::int64_t>(i);
    if (c == 1) {
      p_.group[static_cast<std::size_t>(g)] = q[0];
      p_.loads[static_cast<std::size_t>(q[0])] += s_.option(g, i).peak;
      p_.tokens[static_cast<std::size_t>(q[0])] += l;
      refresh(q[0]);
      return;
    }
    p_.group[static_cast<std::size_t>(g)] = b;
    times_.resize(static_cast<std::size_t>(c));
    cp_shard_times(cost_, l, c, topo_.links, grp.intra[static_cast<std::size_t>(b)] != 0, times_);
    for (std::int64_t j = 0; j < c; ++j) {
      const auto r = static_cast<std::size_t>(q[j]);
      p_.loads[r] += times_[static_cast<std::size_t>(j)];
      p_.tokens[r] += cp_position_tokens(l, c, j);
    }
    for (std::int64_t j = 0; j < c; ++j) refresh(q[j]);
  }

  /// Sets the makespan once every sample is placed.
  void finish_placement() {
    p_.makespan = 0.0;
    for (const double x : p_.loads) p_.makespan = std::max(p_.makespan, x);
  }

 private:
  // Rank r's time and tokens grew: re-key its group of every size (they only grow during a
  // placement, so a group's busiest and fullest rank are the larger of theirs and r's).
  void refresh(rank_t r) {
    const auto d = static_cast<std::size_t>(s_.d);
    const auto ri = static_cast<std::size_t>(r);
    for (std::size_t i = 0; i < trees_.size(); ++i) {
      const std::int64_t b = group_of_[i * d + ri];
      if (b < 0) continue;
      trees_[i].update(b, std::max(trees_[i].key(b), p_.loads[ri]),
                       std::max(trees_[i].fullest(b), p_.tokens[ri]));
    }
  }

  const batch_layout& layout_;
  const cp_cost& cost_;
  const topology& topo_;
  const cp_setup& s_;
  cp_placement& p_;
  std::vector<cp_group_tree> trees_;
  std::vector<std::int64_t> group_of_;  // per size index, per rank: its group or -1
  std::vector<double> times_;
};

/// The placement with the proven guarantee (docs/algorithms.md): the choices `choice` (a size
/// index per sample), sharded samples by size descending, then busiest shard descending, each
/// onto the least busy group of its size; then the whole samples by LPT (whole time descending,
/// each to the least loaded rank with room). False when the cap leaves a sample no room.
inline bool cp_place_nested(const batch_layout& layout, const cp_cost& cost, const topology& topo,
                            const cp_setup& s, const std::vector<std::int64_t>& choice,
                            cp_placement& p) {
  cp_state state(layout, cost, topo, s, p);
  const auto size_of = [&](std::int64_t g) {
    return s.groups[static_cast<std::size_t>(choice[static_cast<std::size_t>(g)])].c;
  };
  std::vector<std::int64_t> sharded;
  for (const std::int64_t g : s.order)
    if (size_of(g) > 1) sharded.push_back(g);
  std::stable_sort(sharded.begin(), sharded.end(), [&](std::int64_t a, std::int64_t b) {
    const std::int64_t ca = size_of(a), cb = size_of(b);
    if (ca != cb) return ca > cb;
    return s.option(a, static_cast<std::size_t>(choice[static_cast<std::size_t>(a)])).peak >
           s.option(b, static_cast<std::size_t>(choice[static_cast<std::size_t>(b)])).peak;
  });
  const auto put = [&](std::int64_t g) {
    const auto i = static_cast<std::size_t>(choice[static_cast<std::size_t>(g)]);
    const std::int64_t b = state.least(i, s.option(g, i).max_tokens);
    if (b < 0) return false;
    state.place(g, i, b);
    return true;
  };
  for (const std::int64_t g : sharded)
    if (!put(g)) return false;
  for (const std::int64_t g : s.order)
    if (size_of(g) == 1 && !put(g)) return false;
  state.finish_placement();
  return true;
}

/// The placement for a target: samples by whole time descending, each whole onto the least
/// loaded rank if it finishes by `target` there, else onto the least busy group of the
/// narrowest allowed size that finishes it by `target`, else wherever it finishes first (ties
/// to the narrower size). False when the cap leaves a sample no room.
inline bool cp_place_target(const batch_layout& layout, const cp_cost& cost, const topology& topo,
                            const cp_setup& s, double target, cp_placement& p) {
  cp_state state(layout, cost, topo, s, p);
  for (const std::int64_t g : s.order) {
    std::int64_t chosen = -1, chosen_group = -1;
    double chosen_finish = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < s.groups.size(); ++i) {
      const cp_option& opt = s.option(g, i);
      if (!opt.usable) continue;
      const std::int64_t b = state.least(i, opt.max_tokens);
      if (b < 0) continue;
      const double finish = state.finish(g, i, b);
      if (finish <= target || finish < chosen_finish) {
        chosen = static_cast<std::int64_t>(i), chosen_group = b, chosen_finish = finish;
        if (finish <= target) break;
      }
    }
    if (chosen < 0) return false;
    state.place(g, static_cast<std::size_t>(chosen), chosen_group);
  }
  state.finish_placement();
  return true;
}

/// Every sample's micro-batch (`out.micro_batch`), its chunks' destinations (`dst`, by chunk
/// id) given: samples by busiest shard descending (then id), each to the micro-batch m where
/// Σ_m max_r load(r, m) grows least (then where its busiest cell ends lowest, then the lowest
/// m) among those with room for its tokens on every rank of its group. Sets `cell_offsets` and
/// `objective`; false when a sample finds no room.
inline bool cp_micro_batches(const batch_layout& layout, const cp_cost& cost, const topology& topo,
                             const cp_setup& s, const cp_options& o, const std::vector<rank_t>& dst,
                             cp_result& out) {
  const std::int64_t m_count = o.micro_batches;
  const auto n = static_cast<std::size_t>(s.n);
  const auto cells = static_cast<std::size_t>(s.d) * static_cast<std::size_t>(m_count);
  std::vector<double> load(cells, 0.0), top(static_cast<std::size_t>(m_count), 0.0), peak(n);
  std::vector<std::int64_t> tokens(cells, 0);
  // Every sample's ranks, times and tokens per position, flattened (c entries each).
  std::vector<std::int64_t> first(n + 1, 0);
  for (std::size_t g = 0; g < n; ++g) first[g + 1] = first[g] + out.group_size[g];
  std::vector<rank_t> ranks(static_cast<std::size_t>(first[n]));
  std::vector<double> times(ranks.size());
  std::vector<std::int64_t> held(ranks.size());
  std::vector<double> scratch;
  for (std::size_t g = 0; g < n; ++g) {
    const std::int64_t c = out.group_size[g], l = layout.length(static_cast<std::int64_t>(g));
    const auto at = static_cast<std::size_t>(first[g]);
    const auto chunk = static_cast<std::size_t>(out.chunk_offsets[g]);
    if (c == 1) {
      ranks[at] = dst[chunk];
      times[at] = cost(l);
      held[at] = l;
    } else {
      bool intra = true;
      for (std::int64_t i = 0; i < c; ++i) {
        ranks[at + static_cast<std::size_t>(i)] = dst[chunk + static_cast<std::size_t>(i)];
        intra = intra && topo.same_node(ranks[at], ranks[at + static_cast<std::size_t>(i)]);
        held[at + static_cast<std::size_t>(i)] = cp_position_tokens(l, c, i);
      }
      scratch.resize(static_cast<std::size_t>(c));
      cp_shard_times(cost, l, c, topo.links, intra, scratch);
      std::copy(scratch.begin(), scratch.end(), times.begin() + static_cast<std::ptrdiff_t>(at));
    }
    peak[g] = *std::max_element(times.begin() + static_cast<std::ptrdiff_t>(at),
                                times.begin() + static_cast<std::ptrdiff_t>(first[g + 1]));
  }
  std::vector<std::int64_t> order(n);
  for (std::size_t g = 0; g < n; ++g) order[g] = static_cast<std::int64_t>(g);
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    const double pa = peak[static_cast<std::size_t>(a)], pb = peak[static_cast<std::size_t>(b)];
    return pa > pb || (pa == pb && a < b);
  });
  out.micro_batch.assign(n, 0);
  for (const std::int64_t g : order) {
    const auto at = static_cast<std::size_t>(first[static_cast<std::size_t>(g)]);
    const auto end = static_cast<std::size_t>(first[static_cast<std::size_t>(g) + 1]);
    std::int64_t best = -1;
    double best_rise = 0.0, best_end = 0.0;
    for (std::int64_t m = 0; m < m_count; ++m) {
      double ends = 0.0;
      bool room = true;
      for (std::size_t i = at; i < end && room; ++i) {
        const auto cell = static_cast<std::size_t>(ranks[i]) * static_cast<std::size_t>(m_count) +
                          static_cast<std::size_t>(m);
        room = tokens[cell] <= o.micro_batch_tokens - held[i];
        ends = std::max(ends, load[cell] + times[i]);
      }
      if (!room) continue;
      const double rise = std::max(0.0, ends - top[static_cast<std::size_t>(m)]);
      if (best < 0 || rise < best_rise || (rise == best_rise && ends < best_end)) {
        best = m, best_rise = rise, best_end = ends;
      }
    }
    if (best < 0) return false;
    out.micro_batch[static_cast<std::size_t>(g)] = best;
    for (std::size_t i = at; i < end; ++i) {
      const auto cell = static_cast<std::size_t>(ranks[i]) * static_cast<std::size_t>(m_count) +
                        static_cast<std::size_t>(best);
      load[cell] += times[i];
      tokens[cell] += held[i];
      top[static_cast<std::size_t>(best)] =
          std::max(top[static_cast<std::size_t>(best)], load[cell]);
    }
  }
  out.objective = 0.0;
  for (const double t : top) out.objective += t;
  return true;
}

inline cp_result cp_build(const batch_layout& layout, const cp_cost& cost, const topology& topo,
                          const cp_setup& s, const cp_options& o, cp_placement&& p, double bound) {
  cp_result out;
  const auto n = static_cast<std::size_t>(s.n);
  out.group_size.resize(n);
  out.chunk_offsets.resize(n + 1);
  out.chunk_offsets[0] = 0;
  for (std::size_t g = 0; g < n; ++g) {
    const std::int64_t c = s.groups[static_cast<std::size_t>(p.size_index[g])].c;
    out.group_size[g] = c;
    out.chunk_offsets[g + 1] = out.chunk_offsets[g] + (c == 1 ? 1 : 2 * c);
    out.sharded += c > 1 ? 1 : 0;
  }
  const auto m = static_cast<std::size_t>(out.chunk_offsets[n]);
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(s.d) + 1);
  for (rank_t r = 0; r <= s.d; ++r)
    offsets[static_cast<std::size_t>(r)] =
        out.chunk_offsets[static_cast<std::size_t>(layout.offset(r))];
  std::vector<std::int64_t> lengths(m), bytes, parents;
  if (layout.has_bytes()) bytes.resize(m);
  if (layout.has_parents()) parents.resize(m);
  out.chunk_begins.resize(m);
  std::vector<rank_t> dst(m);
  for (std::size_t g = 0; g < n; ++g) {
    const std::int64_t c = out.group_size[g];
    const std::int64_t l = layout.length(static_cast<std::int64_t>(g));
    const std::int64_t chunks = out.chunk_offsets[g + 1] - out.chunk_offsets[g];
    const auto first = static_cast<std::size_t>(out.chunk_offsets[g]);
    for (std::int64_t k = 0; k < chunks; ++k) {
      const auto h = first + static_cast<std::size_t>(k);
      const std::int64_t b = cp_chunk_begin(l, k, chunks), e = cp_chunk_begin(l, k + 1, chunks);
      out.chunk_begins[h] = b;
      lengths[h] = e - b;
      if (!bytes.empty()) {
        const std::int64_t total = layout.bytes(static_cast<std::int64_t>(g));
        bytes[h] = l > 0 ? scaled_share(total, e, l) - scaled_share(total, b, l)
                         : scaled_share(total, k + 1, chunks) - scaled_share(total, k, chunks);
      }
      if (!parents.empty()) parents[h] = layout.parent(static_cast<std::int64_t>(g));
      if (c == 1) {
        dst[h] = static_cast<rank_t>(p.group[g]);
      } else {
        const cp_groups& grp = s.groups[static_cast<std::size_t>(p.size_index[g])];
        const std::int64_t position = std::min(k, chunks - 1 - k);
        dst[h] = grp.ranks[static_cast<std::size_t>(p.group[g] * c + position)];
      }
    }
  }
  out.chunks = batch_layout(offsets, std::move(lengths), std::move(bytes), std::move(parents));
  out.micro_batches = o.micro_batches;
  if (o.micro_batches == 1) {
    out.plan = rearrangement::from_destinations(offsets, dst, s.d);
    out.micro_batch.assign(n, 0);
    out.cell_offsets.assign(out.plan.dst_offsets().begin(), out.plan.dst_offsets().end());
    out.objective = p.makespan;
  } else {
    ORCHMLLM_REQUIRE(cp_micro_batches(layout, cost, topo, s, o, dst, out), infeasible_error,
                     "no micro-batch of the ", o.micro_batches, " has room under ",
                     o.micro_batch_tokens, " tokens for every sample's shards");
    // Destination slots by (micro-batch, chunk id) on every rank: cell (r, m) is one range.
    const auto m_count = static_cast<std::size_t>(o.micro_batches);
    std::vector<std::int64_t> fill(static_cast<std::size_t>(s.d) * m_count + 1, 0);
    std::vector<std::size_t> cell(dst.size());
    for (std::size_t g = 0; g < n; ++g)
      for (auto h = static_cast<std::size_t>(out.chunk_offsets[g]);
           h < static_cast<std::size_t>(out.chunk_offsets[g + 1]); ++h) {
        cell[h] = static_cast<std::size_t>(dst[h]) * m_count +
                  static_cast<std::size_t>(out.micro_batch[g]);
        ++fill[cell[h] + 1];
      }
    for (std::size_t c = 1; c < fill.size(); ++c) fill[c] += fill[c - 1];
    out.cell_offsets = fill;
    std::vector<placement> where(dst.size());
    for (std::size_t h = 0; h < dst.size(); ++h) {
      const auto r = static_cast<std::size_t>(dst[h]);
      where[h] = {dst[h], fill[cell[h]]++ - out.cell_offsets[r * m_count]};
    }
    out.plan = rearrangement::from_placements(offsets, where, s.d);
  }
  out.loads = std::move(p.loads);
  out.tokens = std::move(p.tokens);
  out.makespan = p.makespan;
  out.lower_bound = bound;
  return out;
}

}  // namespace detail

inline double cp_cost::operator()(std::int64_t length) const noexcept {
  return constant + rounded_mul(linear, static_cast<double>(length)) +
         rounded_mul(attention, detail::cp_entries(0, length));
}

inline cp_cost cp_cost::from_transformer(const transformer_config& config, double flops_per_second,
                                         double bytes_per_element) {
  ORCHMLLM_REQUIRE(config.causal, invalid_argument_error,
                   "cp_cost::from_transformer: the zigzag split balances causal attention only "
                   "(config.causal is false)");
  ORCHMLLM_REQUIRE(std::isfinite(flops_per_second) && flops_per_second > 0.0,
                   invalid_argument_error, "cp_cost::from_transformer: flops_per_second is ",
                   flops_per_second, ", must be finite and > 0");
  ORCHMLLM_REQUIRE(std::isfinite(bytes_per_element) && bytes_per_element > 0.0,
                   invalid_argument_error, "cp_cost::from_transformer: bytes_per_element is ",
                   bytes_per_element, ", must be finite and > 0");
  const transformer_flops_cost flops(config);  // validates
  const transformer_config& c = flops.config();
  // flops(l) = linear · l + a · l(l+1) with a per-entry figure of 2a (l(l+1)/2 entries):
  // recovered from two lengths exactly as the model computes them.
  const double one = flops(1), two = flops(2);  // linear + 2a, 2·linear + 6a
  const double a = (two - 2.0 * one) / 2.0;
  cp_cost out;
  out.linear = (one - 2.0 * a) / flops_per_second;
  out.attention = 2.0 * a / flops_per_second;
  const double head_dim = static_cast<double>(c.hidden / c.heads);
  out.kv_bytes_per_token =
      2.0 * rounded_mul(rounded_mul(static_cast<double>(c.kv_heads), head_dim), bytes_per_element);
  out.ring_rounds = rounded_mul(static_cast<double>(c.layers), c.passes);
  return out.validated();
}

inline cp_cost cp_cost::validated() const {
  detail::cp_check_cost_value(constant, "constant");
  detail::cp_check_cost_value(linear, "linear");
  detail::cp_check_cost_value(attention, "attention");
  detail::cp_check_cost_value(kv_bytes_per_token, "kv_bytes_per_token");
  detail::cp_check_cost_value(ring_rounds, "ring_rounds");
  return *this;
}

inline double cp_shard_time(const cp_cost& cost, std::int64_t length, std::int64_t c,
                            std::int64_t position, const link_params& links, bool intra_node) {
  ORCHMLLM_REQUIRE(length >= 0, invalid_argument_error, "cp_shard_time: length ", length,
                   " must be >= 0");
  ORCHMLLM_REQUIRE(c >= 1, invalid_argument_error, "cp_shard_time: group size ", c,
                   " must be >= 1");
  ORCHMLLM_REQUIRE(position >= 0 && position < c, invalid_argument_error,
                   "cp_shard_time: position ", position, " is outside the group of ", c);
  if (c == 1) return cost(length);
  std::vector<double> times(static_cast<std::size_t>(c));
  detail::cp_shard_times(cost, length, c, links, intra_node, times);
  return times[static_cast<std::size_t>(position)];
}

inline double cp_lower_bound(const batch_layout& layout, const cp_cost& cost, const topology& topo,
                             const cp_options& options) {
  return detail::cp_bound(detail::cp_prepare(layout, cost, topo, options));
}

inline cp_result balance_context_parallel(const batch_layout& layout, const cp_cost& cost,
                                          const topology& topo, const cp_options& options) {
  const detail::cp_setup s = detail::cp_prepare(layout, cost, topo, options);
  const double bound = detail::cp_bound(s);
  detail::cp_placement best, trial;
  bool found = false;
  const auto keep = [&](bool ok) {
    if (ok && (!found || trial.makespan < best.makespan)) std::swap(best, trial), found = true;
  };
  // The bound's own choices, groups first: the placement with the proven guarantee.
  std::vector<std::int64_t> choice(static_cast<std::size_t>(s.n));
  for (std::int64_t g = 0; g < s.n; ++g)
    choice[static_cast<std::size_t>(g)] = detail::cp_choose(s, g, bound);
  keep(detail::cp_place_nested(layout, cost, topo, s, choice, trial));
  static constexpr std::array<double, 7> factors{1.0, 1.01, 1.02, 1.05, 1.1, 1.2, 1.5};
  for (int t = 0; t + 1 < options.targets && t < static_cast<int>(factors.size()); ++t)
    keep(detail::cp_place_target(layout, cost, topo, s,
                                 bound * factors[static_cast<std::size_t>(t)], trial));
  ORCHMLLM_REQUIRE(found, infeasible_error, "no placement of the ", s.n,
                   " samples keeps every rank within the token cap ", s.cap);
  return detail::cp_build(layout, cost, topo, s, options, std::move(best), bound);
}

inline token_range cp_result::chunk_range(std::int64_t k) const {
  const std::int64_t b = chunk_begins[static_cast<std::size_t>(k)];
  return {b, b + chunks.length(k)};
}

inline std::int64_t cp_result::chunk_item(std::int64_t k) const {
  const auto it = std::upper_bound(chunk_offsets.begin(), chunk_offsets.end(), k);
  return static_cast<std::int64_t>(it - chunk_offsets.begin()) - 1;
}

inline rank_t cp_result::group_rank(std::int64_t g, std::int64_t position) const {
  return plan.destination_of(chunk_offsets[static_cast<std::size_t>(g)] + position).rank;
}

inline std::vector<cp_shard> cp_result::shards_of(rank_t r) const {
  std::vector<cp_shard> out;
  const auto dst = plan.dst_offsets();
  for (std::int64_t h = dst[static_cast<std::size_t>(r)]; h < dst[static_cast<std::size_t>(r) + 1];
       ++h) {
    const std::int64_t k = plan.source_of(h);
    const std::int64_t g = chunk_item(k);
    const std::int64_t c = group_size[static_cast<std::size_t>(g)];
    const std::int64_t idx = k - chunk_offsets[static_cast<std::size_t>(g)];
    if (c == 1) {
      out.push_back({g, 1, 0, {chunk_range(k), token_range{}}, h});
    } else if (idx < c) {  // the head; the tail is the next destination id
      out.push_back({g, c, idx, {chunk_range(k), chunk_range(plan.source_of(h + 1))}, h});
    }
  }
  return out;
}

}  // namespace orchmllm
