#pragma once
// Shared by the tests of include/orchmllm/comm/route.hpp (tests/comm/route_*_test.cpp), without a
// communicator.
//
// A sequential emulator builds every rank's route of one plan and runs the group by hand: per
// hop, each rank packs (segment gather, every byte of its current buffer read exactly once and
// every byte of the send buffer written exactly once), then the all-to-all(v) is done by
// copying blocks between per-rank buffers after checking send_counts[p → q] on p equals
// recv_counts[q ← p] on q; finally each rank unpacks. Item content derives from (source global
// id, byte index), so a lost, duplicated, misplaced or corrupted byte shows. Also: traffic and
// the time model recomputed from the emulated hops, the node-wise structure checks, random cases
// (plans, byte sizes, topologies), and references written the obvious way for the time model,
// node-wise paths and a hop's group figures.

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/test_support.hpp"

namespace orchmllm::test::route_fixtures {

using vec = std::vector<std::int64_t>;
using ranks = std::vector<rank_t>;
using bytes_t = std::vector<std::byte>;

constexpr schedule all_schedules[] = {schedule::direct, schedule::node_wise, schedule::automatic};

inline vec exclusive_scan(std::span<const std::int64_t> v) {
  vec out(v.size(), 0);
  for (std::size_t i = 1; i < v.size(); ++i) out[i] = out[i - 1] + v[i - 1];
  return out;
}

// Bytes of item g: content_byte(g, i, 7) for i < size.
inline void append_item(bytes_t& out, std::int64_t g, std::int64_t size) {
  for (std::int64_t i = 0; i < size; ++i) out.push_back(content_byte(g, i, 7));
}

// What the group did: the routes, every rank's output and the per-hop traffic matrices.
struct emulation {
  std::vector<route> routes;
  std::vector<bytes_t> outputs;   // empty unless data moved
  std::vector<bytes_t> expected;  // same
  std::vector<vec> matrix;        // matrix[k][p * d + q]: bytes p sends q in hop k
  std::vector<std::string> issues;
};

// Builds all routes and runs them (see the file comment). With move_data = false only the
// structure is checked (counts, displacements, segment bounds and totals): for byte sizes too
// large to allocate.
inline emulation emulate(const rearrangement& plan, const vec& item_bytes, const topology& topo,
                         schedule s, bool move_data = true) {
  emulation e;
  const rank_t d = topo.num_ranks();
  const auto ud = static_cast<std::size_t>(d);
  auto expect = [&](bool ok, auto&&... what) {
    if (!ok && e.issues.size() < 20) e.issues.push_back(orchmllm::detail::concat(what...));
  };
  for (rank_t r = 0; r < d; ++r) e.routes.push_back(route::build(plan, item_bytes, topo, r, s));
  const auto off = plan.src_offsets();
  const auto doff = plan.dst_offsets();
  const auto hops = e.routes[0].hops().size();
  std::vector<bytes_t> cur(ud);
  for (rank_t r = 0; r < d; ++r) {
    const auto& rt = e.routes[static_cast<std::size_t>(r)];
    expect(rt.rank() == r && rt.num_ranks() == d, "rank ", r, ": rank/size of the route");
    expect(rt.hops().size() == hops, "rank ", r, " has ", rt.hops().size(), " hops, rank 0 ", hops);
    expect(rt.used() == e.routes[0].used(), "rank ", r, " uses another schedule");
    expect(rt.used() != schedule::automatic, "used() is automatic");
    if (s != schedule::automatic) expect(rt.used() == s, "rank ", r, " used another schedule");
    expect(rt.predicted_seconds() == e.routes[0].predicted_seconds(), "rank ", r,
           " predicts another time");
    std::int64_t in = 0;
    for (auto g = off[static_cast<std::size_t>(r)]; g < off[static_cast<std::size_t>(r) + 1]; ++g) {
      in += item_bytes[static_cast<std::size_t>(g)];
      if (move_data)
        append_item(cur[static_cast<std::size_t>(r)], g, item_bytes[static_cast<std::size_t>(g)]);
    }
    expect(rt.input_bytes() == in, "rank ", r, ": input_bytes ", rt.input_bytes(), " != ", in);
    vec out_items;
    std::int64_t out = 0;
    for (auto h = doff[static_cast<std::size_t>(r)]; h < doff[static_cast<std::size_t>(r) + 1];
         ++h) {
      out_items.push_back(item_bytes[static_cast<std::size_t>(plan.source_of(h))]);
      out += out_items.back();
    }
    expect(rt.output_bytes() == out, "rank ", r, ": output_bytes ", rt.output_bytes(), " != ", out);
    expect(vec(rt.output_item_bytes().begin(), rt.output_item_bytes().end()) == out_items, "rank ",
           r, ": output_item_bytes");
  }
  if (!e.issues.empty()) return e;

  // Checks a gather's segments: inside both buffers; with data, every output byte written
  // exactly once and (when `read_all`) every input byte read exactly once. Performs it.
  auto gather = [&](rank_t r, const char* what, const orchmllm::detail::segment_list& seg,
                    const bytes_t& from, std::int64_t from_size, std::int64_t to_size,
                    bool read_all) {
    bytes_t to;
    expect(seg.src.size() == seg.dst.size() && seg.dst.size() == seg.bytes.size(), "rank ", r, " ",
           what, ": ragged segment arrays");
    std::vector<char> written, read;
    if (move_data) {
      to.assign(static_cast<std::size_t>(to_size), std::byte{0});
      written.assign(static_cast<std::size_t>(to_size), 0);
      read.assign(static_cast<std::size_t>(from_size), 0);
    }
    std::int64_t total = 0;
    for (std::size_t i = 0; i < seg.size(); ++i) {
      const auto a = seg.src[i], b = seg.dst[i], n = seg.bytes[i];
      total += n;
      const bool inside = n > 0 && a >= 0 && b >= 0 && a + n <= from_size && b + n <= to_size;
      expect(inside, "rank ", r, " ", what, ": segment ", i, " (", a, " -> ", b, ", ", n,
             " bytes) outside ", from_size, " -> ", to_size);
      if (!inside || !move_data) continue;
      for (std::int64_t j = 0; j < n; ++j) {
        auto& w = written[static_cast<std::size_t>(b + j)];
        auto& rd = read[static_cast<std::size_t>(a + j)];
        expect(w == 0, "rank ", r, " ", what, ": byte ", b + j, " written twice");
        expect(rd == 0, "rank ", r, " ", what, ": byte ", a + j, " read twice");
        w = rd = 1;
        to[static_cast<std::size_t>(b + j)] = from[static_cast<std::size_t>(a + j)];
      }
    }
    expect(total == to_size, "rank ", r, " ", what, ": segments move ", total, " of ", to_size,
           " bytes");
    if (read_all)
      expect(total == from_size, "rank ", r, " ", what, ": reads ", total, " of ", from_size,
             " bytes");
    return to;
  };

  std::vector<std::int64_t> cur_size(ud);
  for (rank_t r = 0; r < d; ++r)
    cur_size[static_cast<std::size_t>(r)] = e.routes[static_cast<std::size_t>(r)].input_bytes();
  for (std::size_t k = 0; k < hops; ++k) {
    std::vector<bytes_t> send(ud);
    for (rank_t r = 0; r < d; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      const auto& h = e.routes[ur].hops()[k];
      expect(h.send_counts.size() == ud && h.send_displs.size() == ud &&
                 h.recv_counts.size() == ud && h.recv_displs.size() == ud,
             "rank ", r, " hop ", k, ": count arrays of the wrong size");
      if (!e.issues.empty()) return e;
      // Every item on the rank leaves it in every hop (possibly to itself).
      expect(h.send_bytes == cur_size[ur], "rank ", r, " hop ", k, " sends ", h.send_bytes,
             " of its ", cur_size[ur], " bytes");
      std::int64_t sc = 0, rc = 0;
      for (std::size_t q = 0; q < ud; ++q) {
        expect(h.send_counts[q] >= 0 && h.recv_counts[q] >= 0, "negative count");
        sc += h.send_counts[q];
        rc += h.recv_counts[q];
      }
      expect(sc == h.send_bytes && rc == h.recv_bytes, "rank ", r, " hop ", k,
             ": counts do not add up to send/recv bytes");
      // Wire order: blocks in increasing peer rank.
      expect(h.send_displs == exclusive_scan(h.send_counts) &&
                 h.recv_displs == exclusive_scan(h.recv_counts),
             "rank ", r, " hop ", k, ": displacements are not the exclusive scan of the counts");
      expect(h.pack_identity == h.pack.is_identity(h.send_bytes), "rank ", r, " hop ", k,
             ": pack_identity flag");
      if (h.pack_identity) {
        send[ur] = cur[ur];
      } else {
        send[ur] = gather(r, "pack", h.pack, cur[ur], cur_size[ur], h.send_bytes, true);
      }
    }
    vec m(ud * ud, 0);
    std::vector<bytes_t> recv(ud);
    for (rank_t q = 0; q < d; ++q) {
      const auto& hq = e.routes[static_cast<std::size_t>(q)].hops()[k];
      if (move_data)
        recv[static_cast<std::size_t>(q)].assign(static_cast<std::size_t>(hq.recv_bytes),
                                                 std::byte{0});
      for (rank_t p = 0; p < d; ++p) {
        const auto& hp = e.routes[static_cast<std::size_t>(p)].hops()[k];
        const auto n = hp.send_counts[static_cast<std::size_t>(q)];
        expect(n == hq.recv_counts[static_cast<std::size_t>(p)], "hop ", k, ": rank ", p, " sends ",
               n, " bytes to rank ", q, ", which expects ",
               hq.recv_counts[static_cast<std::size_t>(p)]);
        m[static_cast<std::size_t>(p) * ud + static_cast<std::size_t>(q)] = n;
        if (!move_data || n != hq.recv_counts[static_cast<std::size_t>(p)]) continue;
        const auto from = hp.send_displs[static_cast<std::size_t>(q)];
        const auto to = hq.recv_displs[static_cast<std::size_t>(p)];
        std::copy_n(send[static_cast<std::size_t>(p)].begin() + from, n,
                    recv[static_cast<std::size_t>(q)].begin() + to);
      }
    }
    e.matrix.push_back(std::move(m));
    for (rank_t r = 0; r < d; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      cur[ur] = std::move(recv[ur]);
      cur_size[ur] = e.routes[ur].hops()[k].recv_bytes;
    }
  }
  for (rank_t r = 0; r < d; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    const auto& rt = e.routes[ur];
    expect(!(rt.unpack_identity() && hops == 0), "rank ", r, ": unpack_identity without hops");
    expect(rt.unpack_identity() == (hops > 0 && rt.unpack().is_identity(rt.output_bytes())),
           "rank ", r, ": unpack_identity flag");
    bytes_t out;
    if (rt.unpack_identity()) {
      expect(cur_size[ur] == rt.output_bytes(), "rank ", r, ": received ", cur_size[ur],
             " bytes, output ", rt.output_bytes());
      out = cur[ur];
    } else {
      out = gather(r, "unpack", rt.unpack(), cur[ur], cur_size[ur], rt.output_bytes(), true);
    }
    if (!move_data) continue;
    bytes_t want;
    for (auto h = doff[ur]; h < doff[ur + 1]; ++h) {
      const auto g = plan.source_of(h);
      append_item(want, g, item_bytes[static_cast<std::size_t>(g)]);
    }
    expect(out == want, "rank ", r, ": output differs from the planned items");
    e.outputs.push_back(std::move(out));
    e.expected.push_back(std::move(want));
  }
  return e;
}

inline void require_clean(const emulation& e) {
  std::string all;
  for (const auto& s : e.issues) all += s + "\n";
  INFO(all);
  REQUIRE(e.issues.empty());
}

// Traffic recomputed from the per-hop matrices by link class, per sending rank.
inline std::vector<traffic_stats> traffic_from_matrices(const emulation& e, const topology& topo) {
  const auto d = static_cast<std::size_t>(topo.num_ranks());
  std::vector<traffic_stats> out(d);
  for (const auto& m : e.matrix)
    for (std::size_t p = 0; p < d; ++p)
      for (std::size_t q = 0; q < d; ++q) {
        const auto n = m[p * d + q];
        auto& st = out[p];
        if (p == q) {
          st.local_bytes += n;
          continue;
        }
        const bool same = topo.same_node(static_cast<rank_t>(p), static_cast<rank_t>(q));
        (same ? st.intra_node_bytes : st.inter_node_bytes) += n;
        if (n > 0) ++(same ? st.intra_node_messages : st.inter_node_messages);
      }
  if (e.matrix.empty())
    for (std::size_t r = 0; r < d; ++r) out[r].local_bytes = e.routes[r].input_bytes();
  return out;
}

// The time model recomputed from the per-hop matrices: per hop and rank, Σ bytes / bandwidth +
// non-empty blocks to other ranks · latency, each direction; a hop costs its slowest rank.
inline double model_seconds(const emulation& e, const topology& topo) {
  const auto d = static_cast<std::size_t>(topo.num_ranks());
  const auto& L = topo.links;
  double total = 0;
  for (const auto& m : e.matrix) {
    std::vector<double> send(d, 0), recv(d, 0);
    for (std::size_t p = 0; p < d; ++p)
      for (std::size_t q = 0; q < d; ++q) {
        const auto n = m[p * d + q];
        if (p == q || n == 0) continue;
        const bool same = topo.same_node(static_cast<rank_t>(p), static_cast<rank_t>(q));
        const double t = static_cast<double>(n) / (same ? L.intra_bandwidth : L.inter_bandwidth) +
                         (same ? L.intra_latency : L.inter_latency);
        send[p] += t;
        recv[q] += t;
      }
    double hop = 0;
    for (std::size_t r = 0; r < d; ++r) hop = std::max({hop, send[r], recv[r]});
    total += hop;
  }
  return total;
}

inline traffic_stats sum(const std::vector<traffic_stats>& v) {
  traffic_stats t;
  for (const auto& s : v) t += s;
  return t;
}

// Node-wise structure: inter-node blocks only between equal local indices, at most one block per
// (rank, destination node) per hop, and the rail bound: each rail carries at most 1/R of a node
// pair's bytes plus one item (R = min of the two node sizes).
inline void check_node_wise_structure(const emulation& e, const rearrangement& plan,
                                      const vec& bytes, const topology& topo) {
  const rank_t d = topo.num_ranks();
  const auto ud = static_cast<std::size_t>(d);
  const auto N = static_cast<std::size_t>(topo.num_nodes());
  vec rail_bytes(N * N * ud, 0);  // [ns][nt][rail]
  for (const auto& m : e.matrix) {
    for (rank_t p = 0; p < d; ++p) {
      std::vector<int> per_node(N, 0);
      for (rank_t q = 0; q < d; ++q) {
        const auto n = m[static_cast<std::size_t>(p) * ud + static_cast<std::size_t>(q)];
        if (n == 0 || topo.same_node(p, q)) continue;
        CHECK(topo.local_rank(p) == topo.local_rank(q));
        ++per_node[static_cast<std::size_t>(topo.node_of(q))];
        rail_bytes[(static_cast<std::size_t>(topo.node_of(p)) * N +
                    static_cast<std::size_t>(topo.node_of(q))) *
                       ud +
                   static_cast<std::size_t>(topo.local_rank(p))] += n;
      }
      for (const int c : per_node) CHECK(c <= 1);
    }
  }
  vec pair_total(N * N, 0), pair_max_item(N * N, 0);
  const auto off = plan.src_offsets();
  for (std::int64_t g = 0; g < plan.num_items(); ++g) {
    const auto ns = static_cast<std::size_t>(topo.node_of(owner(off, g)));
    const auto nt =
        static_cast<std::size_t>(topo.node_of(plan.dst_ranks()[static_cast<std::size_t>(g)]));
    if (ns == nt) continue;
    pair_total[ns * N + nt] += bytes[static_cast<std::size_t>(g)];
    pair_max_item[ns * N + nt] =
        std::max(pair_max_item[ns * N + nt], bytes[static_cast<std::size_t>(g)]);
  }
  for (std::size_t ns = 0; ns < N; ++ns)
    for (std::size_t nt = 0; nt < N; ++nt) {
      const auto T = pair_total[ns * N + nt];
      const rank_t R = std::min(topo.node_size(static_cast<rank_t>(ns)),
                                topo.node_size(static_cast<rank_t>(nt)));
      std::int64_t carried = 0;
      for (std::size_t l = 0; l < ud; ++l) {
        const auto b = rail_bytes[(ns * N + nt) * ud + l];
        carried += b;
        if (ns == nt) continue;
        INFO("node pair ", ns, " -> ", nt, ", rail ", l, ": ", b, " of ", T, " bytes, ", R,
             " rails");
        if (static_cast<rank_t>(l) >= R) CHECK(b == 0);  // only R rails are used
        // b ≤ T/R + max item, in integers: R·b ≤ T + R·max item.
        CHECK(R * b <= T + R * pair_max_item[ns * N + nt]);
      }
      CHECK(carried == T);
    }
}

// Route equality through the public accessors (determinism checks).
inline bool same_route(const route& a, const route& b) {
  if (a.rank() != b.rank() || a.num_ranks() != b.num_ranks() || a.used() != b.used() ||
      a.input_bytes() != b.input_bytes() || a.output_bytes() != b.output_bytes() ||
      !(a.unpack() == b.unpack()) || a.unpack_identity() != b.unpack_identity() ||
      !(a.sent() == b.sent()) || a.hops().size() != b.hops().size())
    return false;
  for (std::size_t k = 0; k < a.hops().size(); ++k) {
    const auto& x = a.hops()[k];
    const auto& y = b.hops()[k];
    if (x.send_counts != y.send_counts || x.send_displs != y.send_displs ||
        x.recv_counts != y.recv_counts || x.recv_displs != y.recv_displs || !(x.pack == y.pack) ||
        x.pack_identity != y.pack_identity || x.send_bytes != y.send_bytes ||
        x.recv_bytes != y.recv_bytes)
      return false;
  }
  const auto pa = a.predicted_seconds(), pb = b.predicted_seconds();
  return pa == pb || (std::isnan(pa) && std::isnan(pb));
}

struct random_case {
  topology topo;
  rearrangement plan;
  vec bytes;
  bool canonical = true;
  std::string what;
};

inline random_case make_random_case(std::mt19937_64& rng, int it) {
  const auto d = static_cast<rank_t>(uniform(rng, 1, 16));
  const int shape = static_cast<int>(uniform(rng, 0, 6));
  const rank_t gs[] = {0, 1, 2, 3, 4, 8};
  random_case c;
  if (shape < 6) {
    c.topo = topology::uniform(d, gs[shape]);
  } else {
    c.topo =
        topology(orchmllm::test::random_node_map(rng, d, static_cast<rank_t>(uniform(rng, 1, 5))));
  }
  const auto n = uniform(rng, 0, 5 * d);
  const auto off = orchmllm::test::random_offsets(rng, d, n);
  const bool shuffle = uniform(rng, 0, 1) == 1;
  const int stay = static_cast<int>(uniform(rng, 0, 2)) * 40;
  c.plan = orchmllm::test::random_rearrangement(rng, off, d, shuffle, stay);
  c.canonical = !shuffle;
  const auto big = uniform(rng, 1, 3) == 1 ? 300 : 40;
  for (std::int64_t g = 0; g < n; ++g)
    c.bytes.push_back(uniform(rng, 0, 3) == 0 ? 0 : uniform(rng, 1, big));
  c.what = orchmllm::detail::concat("iteration ", it, ": d = ", d, ", shape ", shape, ", nodes ",
                                    c.topo.num_nodes(), ", n = ", n, ", shuffle ", shuffle,
                                    ", stay ", stay, "%");
  return c;
}

// The time model as route.hpp's file comment states it, written the obvious way: per hop, the
// bandwidth terms in item order, then one latency per distinct (sender, receiver) pair with
// bytes, in increasing (sender, receiver) order. The library must give these exact doubles
// (the automatic choice must not depend on how the pairs are found).
inline double reference_prediction(const orchmllm::detail::item_paths& p,
                                   std::span<const std::int64_t> bytes, const topology& topo) {
  const auto d = static_cast<std::size_t>(topo.num_ranks());
  const auto& L = topo.links;
  double total = 0;
  for (int k = 1; k <= p.hops; ++k) {
    std::vector<double> send(d, 0.0), recv(d, 0.0);
    std::vector<std::pair<rank_t, rank_t>> pairs;
    for (std::size_t g = 0; g < bytes.size(); ++g) {
      const rank_t a = p.where(static_cast<std::int64_t>(g), k - 1);
      const rank_t b = p.where(static_cast<std::int64_t>(g), k);
      if (a == b || bytes[g] == 0) continue;
      const double secs = static_cast<double>(bytes[g]) /
                          (topo.same_node(a, b) ? L.intra_bandwidth : L.inter_bandwidth);
      send[static_cast<std::size_t>(a)] += secs;
      recv[static_cast<std::size_t>(b)] += secs;
      pairs.emplace_back(a, b);
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    for (const auto& [a, b] : pairs) {
      const double lat = topo.same_node(a, b) ? L.intra_latency : L.inter_latency;
      send[static_cast<std::size_t>(a)] += lat;
      recv[static_cast<std::size_t>(b)] += lat;
    }
    double hop = 0;
    for (std::size_t r = 0; r < d; ++r) hop = std::max({hop, send[r], recv[r]});
    total += hop;
  }
  return total;
}

// Node-wise paths as route.hpp's file comment states them, written the obvious way: the items
// that change node in one sort by (source node, destination node, source local rank,
// destination id), each node pair's bytes split evenly over its rails in that order. The
// library buckets and sorts in pieces (or not at all on nodes of consecutive ranks): it must
// give the same paths.
inline std::vector<rank_t> reference_node_wise(const rearrangement& plan,
                                               std::span<const std::int64_t> bytes,
                                               const topology& topo, std::span<const rank_t> src) {
  const auto n = static_cast<std::size_t>(plan.num_items());
  std::vector<rank_t> at(4 * n);
  std::vector<std::array<std::int64_t, 5>> remote;  // ns, nt, ls, id, g
  for (std::size_t g = 0; g < n; ++g) {
    const rank_t s = src[g], t = plan.dst_ranks()[g];
    at[4 * g] = s;
    at[4 * g + 3] = t;
    if (topo.same_node(s, t)) {
      at[4 * g + 1] = at[4 * g + 2] = t;
    } else {
      remote.push_back({topo.node_of(s), topo.node_of(t), topo.local_rank(s),
                        plan.destination_id(static_cast<std::int64_t>(g)),
                        static_cast<std::int64_t>(g)});
    }
  }
  std::sort(remote.begin(), remote.end());
  for (std::size_t i = 0; i < remote.size();) {
    std::size_t j = i;
    std::int64_t total = 0;
    for (; j < remote.size() && remote[j][0] == remote[i][0] && remote[j][1] == remote[i][1]; ++j)
      total += bytes[static_cast<std::size_t>(remote[j][4])];
    const auto ns = static_cast<rank_t>(remote[i][0]), nt = static_cast<rank_t>(remote[i][1]);
    const rank_t rails = std::min(topo.node_size(ns), topo.node_size(nt));
    std::int64_t cum = 0;
    for (std::size_t k = i; k < j; ++k) {
      const auto g = static_cast<std::size_t>(remote[k][4]);
      rank_t rail;
      if (total > 0) {
        const double mid = (static_cast<double>(cum) + 0.5 * static_cast<double>(bytes[g])) /
                           static_cast<double>(total);
        rail = static_cast<rank_t>(std::min<double>(rails - 1, std::floor(mid * rails)));
      } else {
        rail = static_cast<rank_t>(static_cast<std::int64_t>(k - i) * rails /
                                   static_cast<std::int64_t>(j - i));
      }
      cum += bytes[g];
      at[4 * g + 1] = topo.rank_at(ns, rail);
      at[4 * g + 2] = topo.rank_at(nt, rail);
    }
    i = j;
  }
  return at;
}

// A hop's group figures the obvious way: every rank's send and receive bytes, every rank's
// items (all of them, staying ones included) and every (sender, receiver) block, self blocks
// included.
inline orchmllm::agreed_exchange reference_group(const orchmllm::detail::item_paths& p,
                                                 std::span<const std::int64_t> bytes, int k,
                                                 rank_t d) {
  const auto ud = static_cast<std::size_t>(d);
  std::vector<std::int64_t> send(ud, 0), recv(ud, 0), items(ud, 0);
  std::map<std::pair<rank_t, rank_t>, std::int64_t> block;
  for (std::size_t g = 0; g < bytes.size(); ++g) {
    const rank_t a = p.where(static_cast<std::int64_t>(g), k - 1);
    const rank_t b = p.where(static_cast<std::int64_t>(g), k);
    send[static_cast<std::size_t>(a)] += bytes[g];
    recv[static_cast<std::size_t>(b)] += bytes[g];
    ++items[static_cast<std::size_t>(a)];
    block[{a, b}] += bytes[g];
  }
  orchmllm::agreed_exchange x;
  for (std::size_t r = 0; r < ud; ++r) {
    x.max_buffer = std::max({x.max_buffer, send[r], recv[r]});
    x.max_items = std::max(x.max_items, items[r]);
  }
  for (const auto& [pair, b] : block) x.max_block = std::max(x.max_block, b);
  return x;
}

}  // namespace orchmllm::test::route_fixtures
