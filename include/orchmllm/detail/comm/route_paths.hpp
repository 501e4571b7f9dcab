#pragma once
// The route builder's global computations (comm/route.hpp): where every item is after each hop
// (direct and node-wise paths), the time model that picks between them, and each hop's group
// figures. Pure functions of the global view (plan, item bytes, topology), identical on every
// rank.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/core/checked.hpp"
#include "orchmllm/detail/core/csr.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

namespace detail {

// Checks that item_bytes has one non-negative entry per item whose total fits in std::int64_t
// (so does every rank's, hop's and buffer's partial sum the route forms, unchecked) and that
// the topology matches the plan. O(n).
inline void check_route_inputs(const rearrangement& plan, std::span<const std::int64_t> item_bytes,
                               const topology& topo) {
  ORCHMLLM_REQUIRE(plan.num_src_ranks() == plan.num_dst_ranks(), invalid_argument_error,
                   "a route needs a plan between equal rank counts, got ", plan.num_src_ranks(),
                   " source and ", plan.num_dst_ranks(), " destination ranks");
  ORCHMLLM_REQUIRE(topo.num_ranks() == plan.num_src_ranks(), invalid_argument_error,
                   "the topology has ", topo.num_ranks(), " ranks but the plan ",
                   plan.num_src_ranks());
  ORCHMLLM_REQUIRE(static_cast<std::int64_t>(item_bytes.size()) == plan.num_items(),
                   invalid_argument_error, item_bytes.size(), " item sizes for a plan of ",
                   plan.num_items(), " items");
  std::int64_t total = 0;
  for (std::size_t g = 0; g < item_bytes.size(); ++g) {
    ORCHMLLM_REQUIRE(item_bytes[g] >= 0, invalid_argument_error, "item ", g, " has ", item_bytes[g],
                     " bytes");
    total = checked_add(total, item_bytes[g], "the total of the item sizes at item ", g);
  }
}

// Source rank of every item (n entries).
inline std::vector<rank_t> source_ranks(const rearrangement& plan) {
  return ranks_of_items(plan.src_offsets());
}

// Where every item is before and after each hop: at[g·(hops+1) + k], k = 0..hops.
struct item_paths {
  int hops = 0;
  std::vector<rank_t> at;

  [[nodiscard]] rank_t where(std::int64_t g, int k) const noexcept {
    return at[static_cast<std::size_t>(g) * static_cast<std::size_t>(hops + 1) +
              static_cast<std::size_t>(k)];
  }
};

inline item_paths direct_paths(const rearrangement& plan, std::span<const rank_t> src) {
  item_paths p;
  p.hops = 1;
  const auto n = static_cast<std::size_t>(plan.num_items());
  p.at.resize(2 * n);
  for (std::size_t g = 0; g < n; ++g) {
    p.at[2 * g] = src[g];
    p.at[2 * g + 1] = plan.dst_ranks()[g];
  }
  return p;
}

// Whether every node's ranks are consecutive (node_of never decreases with the rank; nodes are
// numbered in order of their lowest rank): then a destination id's node never decreases with
// the id, and a sender's receivers below, on and above its node come in that order. O(d).
inline bool nodes_contiguous(const topology& topo) noexcept {
  const auto m = topo.node_map();
  return std::is_sorted(m.begin(), m.end());
}

// Node-wise paths [s, rail in source node, same rail in destination node, t]; see the
// `schedule` enum (comm/route.hpp). Rails split each node pair's bytes evenly, walking its items
// in (source local rank, destination id) order.
inline item_paths node_wise_paths(const rearrangement& plan, std::span<const std::int64_t> bytes,
                                  const topology& topo, std::span<const rank_t> src) {
  item_paths p;
  p.hops = 3;
  const auto n = static_cast<std::size_t>(plan.num_items());
  p.at.resize(4 * n);
  // Items that change node, with their sort key (source node, destination node, source local
  // rank, destination id) computed once, bucketed by source node (a counting sort). Keys are
  // distinct, so any way of sorting gives the same order:
  //  - nodes of consecutive ranks: each bucket is filled in destination-id order (walking the
  //    destinations), so its destination nodes come in runs of increasing node, and only each
  //    run (usually a few items) is sorted on (source local rank, id): O(n + d) and small sorts;
  //  - otherwise: each bucket filled in item order and sorted on (destination node, source
  //    local rank, id): N sorts of a node's items.
  struct remote_item {
    rank_t ns, nt, ls;
    std::int64_t id, g;
  };
  const auto nodes = static_cast<std::size_t>(topo.num_nodes());
  std::vector<std::size_t> start(nodes + 1, 0);
  for (std::size_t g = 0; g < n; ++g) {
    const rank_t s = src[g];
    const rank_t t = plan.dst_ranks()[g];
    p.at[4 * g] = s;
    p.at[4 * g + 3] = t;
    if (topo.same_node(s, t)) {
      p.at[4 * g + 1] = p.at[4 * g + 2] = t;
    } else {
      ++start[static_cast<std::size_t>(topo.node_of(s)) + 1];
    }
  }
  for (std::size_t m = 0; m < nodes; ++m) start[m + 1] += start[m];
  std::vector<remote_item> remote(start[nodes]);
  const bool contiguous = nodes_contiguous(topo);
  {
    std::vector<std::size_t> at(start.begin(), start.end() - 1);
    const auto put = [&](std::int64_t id, std::size_t g, rank_t t) {
      const rank_t s = src[g];
      if (topo.same_node(s, t)) return;
      const rank_t ns = topo.node_of(s);
      remote[at[static_cast<std::size_t>(ns)]++] = {ns, topo.node_of(t), topo.local_rank(s), id,
                                                    static_cast<std::int64_t>(g)};
    };
    if (contiguous) {
      const auto doff = plan.dst_offsets();
      for (rank_t t = 0; t < plan.num_dst_ranks(); ++t)
        for (auto h = doff[static_cast<std::size_t>(t)]; h < doff[static_cast<std::size_t>(t) + 1];
             ++h)
          put(h, static_cast<std::size_t>(plan.source_of(h)), t);
    } else {
      for (std::size_t g = 0; g < n; ++g)
        put(plan.destination_id(static_cast<std::int64_t>(g)), g, plan.dst_ranks()[g]);
    }
  }
  if (contiguous) {
    // Runs of one (source node, destination node), each in id order: sort on (local rank, id).
    for (std::size_t i = 0; i < remote.size();) {
      std::size_t j = i + 1;
      while (j < remote.size() && remote[j].ns == remote[i].ns && remote[j].nt == remote[i].nt) ++j;
      if (j - i > 1)
        std::sort(remote.begin() + static_cast<std::ptrdiff_t>(i),
                  remote.begin() + static_cast<std::ptrdiff_t>(j),
                  [](const remote_item& a, const remote_item& b) {
                    if (a.ls != b.ls) return a.ls < b.ls;
                    return a.id < b.id;
                  });
      i = j;
    }
  } else {
    for (std::size_t m = 0; m < nodes; ++m)
      std::sort(remote.begin() + static_cast<std::ptrdiff_t>(start[m]),
                remote.begin() + static_cast<std::ptrdiff_t>(start[m + 1]),
                [](const remote_item& a, const remote_item& b) {
                  if (a.nt != b.nt) return a.nt < b.nt;
                  if (a.ls != b.ls) return a.ls < b.ls;
                  return a.id < b.id;
                });
  }
  for (std::size_t i = 0; i < remote.size();) {
    const rank_t ns = remote[i].ns;
    const rank_t nt = remote[i].nt;
    std::size_t j = i;
    std::int64_t total = 0;
    while (j < remote.size() && remote[j].ns == ns && remote[j].nt == nt) {
      total += bytes[static_cast<std::size_t>(remote[j].g)];
      ++j;
    }
    const rank_t rails = std::min(topo.node_size(ns), topo.node_size(nt));
    const auto count = static_cast<std::int64_t>(j - i);
    std::int64_t cum = 0;
    for (std::size_t k = i; k < j; ++k) {
      const auto g = static_cast<std::size_t>(remote[k].g);
      const std::int64_t b = bytes[g];
      rank_t rail;
      if (total > 0) {
        // Midpoint of the item's byte range, scaled to [0, rails): an even byte split.
        const double mid =
            (static_cast<double>(cum) + 0.5 * static_cast<double>(b)) / static_cast<double>(total);
        rail = static_cast<rank_t>(std::min<double>(rails - 1, std::floor(mid * rails)));
      } else {
        rail = static_cast<rank_t>(static_cast<std::int64_t>(k - i) * rails / count);
      }
      cum += b;
      p.at[4 * g + 1] = topo.rank_at(ns, rail);
      p.at[4 * g + 2] = topo.rank_at(nt, rail);
    }
    i = j;
  }
  return p;
}

// A lower bound on the number of rails that carry a message of one (source node, destination
// node) pair in `node_wise_paths`: `count` items of positive bytes, `total` bytes, the largest
// `largest`, over `rails` rails. Each positive item goes to rail ⌊mid · rails⌋ (clamped), mid
// the midpoint of its byte range in [0, 1): consecutive midpoints lie at most s = largest/total
// apart, the first within s/2 of 0 and the last within s/2 of 1, so the rails hit span at
// least rails − 1 − s·rails with steps of at most ⌊s·rails⌋ + 1. One rail of slack at the span
// and one at the step absorb the rounding of the midpoints. A single item uses exactly one rail.
inline std::int64_t rails_lower_bound(std::int64_t count, std::int64_t total, std::int64_t largest,
                                      rank_t rails) noexcept {
  if (count <= 1 || rails <= 1) return 1;
  const double sr = static_cast<double>(largest) / static_cast<double>(total) *
                    static_cast<double>(rails) * (1 + 1e-9);
  const double span = std::floor(static_cast<double>(rails) - 2 - sr);
  if (span <= 0) return 1;
  const auto step = static_cast<std::int64_t>(std::floor(sr)) + 2;
  return std::min<std::int64_t>({rails, count, 1 + static_cast<std::int64_t>(span) / step});
}

// A lower bound on `predict_seconds(node_wise_paths(...))`, without building the paths: the
// inter-node hop alone. Every (source node, destination node) pair with bytes sends them over
// the rails, at least `rails_lower_bound` messages of them, all from ranks of the source node
// to ranks of the destination node: so the hop takes at least a node's total (bytes / inter
// bandwidth + messages · inter latency) over its rank count, on either side; and a pair with a
// single item sends it on rail ⌊rails/2⌋ (its midpoint is exactly 1/2), which bounds that
// rank's own time. Exact on the real numbers; the caller leaves a relative margin for the
// rounding of both sums. O(n + d), reading the items in order: their source nodes never
// decrease when nodes are of consecutive ranks, so each source node's pairs are summed in an
// N-sized table and flushed when it ends; 0 (no bound) for other node maps.
//
// `enough(b)`, a test monotone in b (the caller's decision), ends the pass early: the terms
// on the sending side (a source node's total over its ranks, a single-item pair's sending
// rank) are final once the source node's items are flushed, and the first final term that
// passes `enough` is returned. A lower bound too (one term of the maximum), and it passes
// `enough` exactly when the full bound would: the decision is the same, often after the
// first node's items (the planner's routes: direct is 2–8× faster than this bound).
template <class Enough>
double node_wise_lower_bound(const rearrangement& plan, std::span<const std::int64_t> bytes,
                             const topology& topo, std::span<const rank_t> src, Enough&& enough) {
  if (!nodes_contiguous(topo)) return 0;
  const auto& L = topo.links;
  const auto nodes = static_cast<std::size_t>(topo.num_nodes());
  const auto d = static_cast<std::size_t>(topo.num_ranks());
  // The current source node's pairs, by destination node: positive items, bytes, largest.
  struct pair_sum {
    std::int64_t count = 0, total = 0, largest = 0;
  };
  std::vector<pair_sum> pairs(nodes);
  std::vector<rank_t> touched;
  std::vector<double> node_send(nodes, 0.0), node_recv(nodes, 0.0);
  std::vector<double> rank_send(d, 0.0), rank_recv(d, 0.0);
  // Flushes source node ns's pairs; returns the largest of its final (sending-side) terms.
  const auto flush = [&](rank_t ns) {
    double sending = 0;
    for (const rank_t nt : touched) {
      auto& c = pairs[static_cast<std::size_t>(nt)];
      const rank_t rails = std::min(topo.node_size(ns), topo.node_size(nt));
      const double secs =
          static_cast<double>(c.total) / L.inter_bandwidth +
          static_cast<double>(rails_lower_bound(c.count, c.total, c.largest, rails)) *
              L.inter_latency;
      node_send[static_cast<std::size_t>(ns)] += secs;
      node_recv[static_cast<std::size_t>(nt)] += secs;
      if (c.count == 1) {
        const rank_t rail = rails / 2;  // ⌊R/2⌋ ≤ R − 1 for every R ≥ 1: no clamp
        const auto from = static_cast<std::size_t>(topo.rank_at(ns, rail));
        rank_send[from] += secs;
        rank_recv[static_cast<std::size_t>(topo.rank_at(nt, rail))] += secs;
        sending = std::max(sending, rank_send[from]);
      }
      c = pair_sum{};
    }
    touched.clear();
    return std::max(
        sending, node_send[static_cast<std::size_t>(ns)] / static_cast<double>(topo.node_size(ns)));
  };
  const auto dst = plan.dst_ranks();
  rank_t current = 0;
  for (std::size_t g = 0; g < bytes.size(); ++g) {
    const std::int64_t b = bytes[g];
    if (b == 0) continue;  // posts no message
    const rank_t ns = topo.node_of(src[g]);
    const rank_t nt = topo.node_of(dst[g]);
    if (ns == nt) continue;  // stays on its node
    if (ns != current) {
      if (const double t = flush(current); enough(t)) return t;
      current = ns;
    }
    auto& c = pairs[static_cast<std::size_t>(nt)];
    if (c.count == 0) touched.push_back(nt);
    ++c.count;
    c.total += b;
    c.largest = std::max(c.largest, b);
  }
  if (const double t = flush(current); enough(t)) return t;
  double bound = 0;
  for (std::size_t m = 0; m < nodes; ++m) {
    const auto size = static_cast<double>(topo.node_size(static_cast<rank_t>(m)));
    bound = std::max({bound, node_send[m] / size, node_recv[m] / size});
  }
  for (std::size_t r = 0; r < d; ++r) bound = std::max({bound, rank_send[r], rank_recv[r]});
  return bound;
}

// The full bound (no early end).
inline double node_wise_lower_bound(const rearrangement& plan, std::span<const std::int64_t> bytes,
                                    const topology& topo, std::span<const rank_t> src) {
  return node_wise_lower_bound(plan, bytes, topo, src, [](double) { return false; });
}

// Drops hops in which no item changes rank (the same decision on every rank).
inline item_paths drop_idle_hops(item_paths p, std::int64_t n) {
  std::vector<int> keep{0};
  for (int k = 1; k <= p.hops; ++k) {
    bool moves = false;
    for (std::int64_t g = 0; g < n && !moves; ++g) moves = p.where(g, k - 1) != p.where(g, k);
    if (moves) keep.push_back(k);
  }
  if (static_cast<int>(keep.size()) == p.hops + 1) return p;
  item_paths q;
  q.hops = static_cast<int>(keep.size()) - 1;
  q.at.reserve(static_cast<std::size_t>(n) * keep.size());
  for (std::int64_t g = 0; g < n; ++g) {
    // A dropped hop moves nothing (column k equals column k-1), so the kept columns still end
    // at each item's final rank.
    for (const int k : keep) q.at.push_back(p.where(g, k));
  }
  return q;
}

// Time model of a set of paths (see `route`, comm/route.hpp). Per hop, the bandwidth terms are
// added in item order and the latency terms in increasing (sender, receiver) order, so the
// floating-point sums (and with them `automatic`'s choice) are the same on every rank and
// platform. O(hops · (n + d)) with nodes of consecutive ranks, plus Σ distinct receivers of a
// sender · log of their count otherwise: the moving items are bucketed by sender (a counting
// sort), each sender's distinct receivers marked in a d-sized table (and sorted when nodes are
// not consecutive ranks).
inline double predict_seconds(const item_paths& p, std::span<const std::int64_t> bytes,
                              const topology& topo) {
  const auto d = static_cast<std::size_t>(topo.num_ranks());
  const auto n = static_cast<std::int64_t>(bytes.size());
  const auto& L = topo.links;
  double total = 0;
  std::vector<double> send_t(d), recv_t(d);
  std::vector<std::int64_t> first(d + 1);
  std::vector<rank_t> by_sender;  // the receivers of the moving items, bucketed by sender
  std::vector<char> seen(d, 0);
  std::vector<rank_t> peers;
  const bool contiguous = nodes_contiguous(topo);
  // Sender a's latency terms: its distinct receivers (collected in `peers`), in increasing order.
  // Each receiver's own sum gets one term per sender, in increasing sender order whatever the
  // order within a sender. With nodes of consecutive ranks, the sender's sum in increasing
  // receiver order is its receivers below its node (inter), on it (intra), then above it
  // (inter): counted, not sorted, the same sequence of additions.
  const auto flush = [&](std::size_t a) {
    const rank_t node = topo.node_of(static_cast<rank_t>(a));
    if (!contiguous) std::sort(peers.begin(), peers.end());
    std::int64_t below = 0, same = 0;
    for (const rank_t b : peers) {
      seen[static_cast<std::size_t>(b)] = 0;
      const rank_t nb = topo.node_of(b);
      const double lat = nb == node ? L.intra_latency : L.inter_latency;
      recv_t[static_cast<std::size_t>(b)] += lat;
      if (contiguous) {
        below += nb < node ? 1 : 0;
        same += nb == node ? 1 : 0;
      } else {
        send_t[a] += lat;
      }
    }
    if (contiguous) {
      const auto above = static_cast<std::int64_t>(peers.size()) - below - same;
      for (std::int64_t i = 0; i < below; ++i) send_t[a] += L.inter_latency;
      for (std::int64_t i = 0; i < same; ++i) send_t[a] += L.intra_latency;
      for (std::int64_t i = 0; i < above; ++i) send_t[a] += L.inter_latency;
    }
    peers.clear();
  };
  const auto peer = [&](rank_t b) {
    if (seen[static_cast<std::size_t>(b)] == 0) {
      seen[static_cast<std::size_t>(b)] = 1;
      peers.push_back(b);
    }
  };
  for (int k = 1; k <= p.hops; ++k) {
    std::fill(send_t.begin(), send_t.end(), 0.0);
    std::fill(recv_t.begin(), recv_t.end(), 0.0);
    std::fill(first.begin(), first.end(), 0);
    bool by_sender_order = true;  // the moving items' senders never decrease with g
    rank_t last_sender = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      const rank_t a = p.where(g, k - 1), b = p.where(g, k);
      // Zero-byte items post no message (zero counts are skipped on both sides): no latency.
      if (a == b || bytes[static_cast<std::size_t>(g)] == 0) continue;
      const double secs = static_cast<double>(bytes[static_cast<std::size_t>(g)]) /
                          (topo.same_node(a, b) ? L.intra_bandwidth : L.inter_bandwidth);
      send_t[static_cast<std::size_t>(a)] += secs;
      recv_t[static_cast<std::size_t>(b)] += secs;
      ++first[static_cast<std::size_t>(a) + 1];
      by_sender_order = by_sender_order && a >= last_sender;
      last_sender = a;
    }
    if (by_sender_order) {
      // Already grouped by sender (the first hop leaves in source order): the same visits as
      // the bucketed walk below, without bucketing.
      std::size_t at = 0;
      for (std::int64_t g = 0; g < n; ++g) {
        const rank_t a = p.where(g, k - 1), b = p.where(g, k);
        if (a == b || bytes[static_cast<std::size_t>(g)] == 0) continue;
        if (static_cast<std::size_t>(a) != at) {
          flush(at);
          at = static_cast<std::size_t>(a);
        }
        peer(b);
      }
      flush(at);
    } else {
      for (std::size_t r = 0; r < d; ++r) first[r + 1] += first[r];
      by_sender.resize(static_cast<std::size_t>(first[d]));
      {
        std::vector<std::int64_t> at(first.begin(), first.end() - 1);
        for (std::int64_t g = 0; g < n; ++g) {
          const rank_t a = p.where(g, k - 1);
          if (a == p.where(g, k) || bytes[static_cast<std::size_t>(g)] == 0) continue;
          by_sender[static_cast<std::size_t>(at[static_cast<std::size_t>(a)]++)] = p.where(g, k);
        }
      }
      for (std::size_t a = 0; a < d; ++a) {
        for (auto i = first[a]; i < first[a + 1]; ++i) peer(by_sender[static_cast<std::size_t>(i)]);
        flush(a);
      }
    }
    double hop = 0;
    for (std::size_t r = 0; r < d; ++r) hop = std::max({hop, send_t[r], recv_t[r]});
    total += hop;
  }
  return total;
}

// The group's figures of hop k (see `agreed_exchange`): every rank's send and receive buffer,
// and every block between two ranks, from where the items are before and after the hop.
// O(n + d): items bucketed by sending rank, blocks summed per destination with a touched list.
inline agreed_exchange hop_group_figures(const item_paths& p, std::span<const std::int64_t> bytes,
                                         int k, rank_t d) {
  const auto ud = static_cast<std::size_t>(d);
  const auto n = bytes.size();
  agreed_exchange a;
  std::vector<std::int64_t> send(ud, 0), recv(ud, 0), items(ud + 1, 0);
  bool by_sender_order = true;  // the senders never decrease with g (the first hop's do not)
  std::size_t last = 0;
  for (std::size_t g = 0; g < n; ++g) {
    const auto from = static_cast<std::size_t>(p.where(static_cast<std::int64_t>(g), k - 1));
    send[from] += bytes[g];
    recv[static_cast<std::size_t>(p.where(static_cast<std::int64_t>(g), k))] += bytes[g];
    ++items[from + 1];
    by_sender_order = by_sender_order && from >= last;
    last = from;
  }
  for (std::size_t r = 0; r < ud; ++r) {
    a.max_buffer = std::max({a.max_buffer, send[r], recv[r]});
    a.max_items = std::max(a.max_items, items[r + 1]);
    items[r + 1] += items[r];
  }
  // Each sender's items: in item order when the senders never decrease, else their
  // (receiver, bytes) bucketed by sender, so the walk reads them in order either way.
  struct sent {
    rank_t to;
    std::int64_t bytes;
  };
  std::vector<sent> by_sender;
  if (!by_sender_order) {
    by_sender.resize(n);
    std::vector<std::int64_t> at(items.begin(), items.end() - 1);
    for (std::size_t g = 0; g < n; ++g) {
      const auto gi = static_cast<std::int64_t>(g);
      by_sender[static_cast<std::size_t>(at[static_cast<std::size_t>(p.where(gi, k - 1))]++)] = {
          p.where(gi, k), bytes[g]};
    }
  }
  const auto item = [&](std::int64_t i) {
    return by_sender_order ? sent{p.where(i, k), bytes[static_cast<std::size_t>(i)]}
                           : by_sender[static_cast<std::size_t>(i)];
  };
  std::vector<std::int64_t> block(ud, 0);
  std::vector<rank_t> touched;
  for (std::size_t from = 0; from < ud; ++from) {
    touched.clear();
    for (auto i = items[from]; i < items[from + 1]; ++i) {
      const sent x = item(i);
      if (block[static_cast<std::size_t>(x.to)] == 0) touched.push_back(x.to);
      block[static_cast<std::size_t>(x.to)] += x.bytes;
    }
    for (const auto to : touched) {
      a.max_block = std::max(a.max_block, block[static_cast<std::size_t>(to)]);
      block[static_cast<std::size_t>(to)] = 0;
    }
  }
  return a;
}

}  // namespace detail

}  // namespace orchmllm
