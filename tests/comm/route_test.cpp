// Tests for include/orchmllm/comm/route.hpp without a communicator.
//
// A sequential emulator builds every rank's route of one plan and runs the group by hand: per
// hop, each rank packs (segment gather, every byte of its current buffer read exactly once and
// every byte of the send buffer written exactly once), then the all-to-all(v) is done by
// copying blocks between per-rank buffers after checking send_counts[p → q] on p equals
// recv_counts[q ← p] on q; finally each rank unpacks. Item content derives from (source global
// id, byte index), so a lost, duplicated, misplaced or corrupted byte shows.
//
// Covered: random canonical and shuffled plans, byte sizes with zeros, uniform topologies with
// G in {0, 1, 2, 3, 4, 8} and random uneven/non-consecutive node maps, all three schedules
// (identical outputs), identity plans (no hops), node-wise structure (inter-node messages only
// between equal local indices, at most one per destination node, the rail bound), byte
// accounting (sent() vs plan_traffic, inter-node bytes schedule-independent, better NIC balance
// for node-wise on a skewed plan), the time model on hand examples and the automatic choice,
// NaN for unbuilt schedules, 64-bit counts above 2^31 and 2^32 (built, not executed), bad
// input, schedule names, and plan_traffic on a hand example.

#include "orchmllm/comm/route.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::link_params;
using orchmllm::placement;
using orchmllm::plan_traffic;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::schedule;
using orchmllm::topology;
using orchmllm::traffic_stats;
using orchmllm::test::content_byte;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;
using ranks = std::vector<rank_t>;
using bytes_t = std::vector<std::byte>;

constexpr schedule all_schedules[] = {schedule::direct, schedule::node_wise, schedule::automatic};

vec exclusive_scan(std::span<const std::int64_t> v) {
  vec out(v.size(), 0);
  for (std::size_t i = 1; i < v.size(); ++i) out[i] = out[i - 1] + v[i - 1];
  return out;
}

// Source rank of global id g (linear scan, independent of the library).
rank_t owner(std::span<const std::int64_t> off, std::int64_t g) {
  rank_t r = 0;
  while (off[static_cast<std::size_t>(r) + 1] <= g) ++r;
  return r;
}

// Bytes of item g: content_byte(g, i, 7) for i < size.
void append_item(bytes_t& out, std::int64_t g, std::int64_t size) {
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
emulation emulate(const rearrangement& plan, const vec& item_bytes, const topology& topo,
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

void require_clean(const emulation& e) {
  std::string all;
  for (const auto& s : e.issues) all += s + "\n";
  INFO(all);
  REQUIRE(e.issues.empty());
}

// Traffic recomputed from the per-hop matrices by link class, per sending rank.
std::vector<traffic_stats> traffic_from_matrices(const emulation& e, const topology& topo) {
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
double model_seconds(const emulation& e, const topology& topo) {
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

traffic_stats sum(const std::vector<traffic_stats>& v) {
  traffic_stats t;
  for (const auto& s : v) t += s;
  return t;
}

// Node-wise structure: inter-node blocks only between equal local indices, at most one block per
// (rank, destination node) per hop, and the rail bound: each rail carries at most 1/R of a node
// pair's bytes plus one item (R = min of the two node sizes).
void check_node_wise_structure(const emulation& e, const rearrangement& plan, const vec& bytes,
                               const topology& topo) {
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
bool same_route(const route& a, const route& b) {
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

random_case make_random_case(std::mt19937_64& rng, int it) {
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

}  // namespace

TEST_CASE("route: random plans deliver every item exactly once under every schedule") {
  std::mt19937_64 rng(31337);
  int node_wise_chosen = 0, multi_hop = 0, pruned = 0, ended_early = 0;
  for (int it = 0; it < 400; ++it) {
    const auto c = make_random_case(rng, it);
    INFO(c.what);
    const auto direct = emulate(c.plan, c.bytes, c.topo, schedule::direct);
    require_clean(direct);
    const auto nw = emulate(c.plan, c.bytes, c.topo, schedule::node_wise);
    require_clean(nw);
    const auto aut = emulate(c.plan, c.bytes, c.topo, schedule::automatic);
    require_clean(aut);
    CHECK(direct.outputs == direct.expected);
    CHECK(nw.outputs == direct.outputs);
    CHECK(aut.outputs == direct.outputs);
    CHECK(direct.routes[0].hops().size() <= 1);
    CHECK(nw.routes[0].hops().size() <= 3);
    if (nw.routes[0].hops().size() > 1) ++multi_hop;
    // Wire order: blocks by source rank, items by destination id. For a canonical plan that is
    // slot order, so the direct route receives straight into the output on every rank.
    if (c.canonical && !direct.routes[0].hops().empty())
      for (const auto& r : direct.routes) CHECK(r.unpack_identity());

    // Byte accounting: direct's sent() is plan_traffic; node-wise's sent() matches what its hops
    // carry; inter-node bytes do not depend on the schedule.
    const auto planned = plan_traffic(c.plan, c.bytes, c.topo);
    const auto d = static_cast<std::size_t>(c.topo.num_ranks());
    const auto nw_carried = traffic_from_matrices(nw, c.topo);
    const auto direct_carried = traffic_from_matrices(direct, c.topo);
    for (std::size_t r = 0; r < d; ++r) {
      CHECK(direct.routes[r].sent() == planned[r]);
      CHECK(direct.routes[r].sent() == direct_carried[r]);
      CHECK(nw.routes[r].sent() == nw_carried[r]);
    }
    CHECK(sum(planned).inter_node_bytes == [&] {
      std::int64_t t = 0;
      for (const auto& r : nw.routes) t += r.sent().inter_node_bytes;
      return t;
    }());
    // Forwarding adds intra-node bytes, never removes any.
    CHECK(sum(nw_carried).intra_node_bytes >= sum(planned).intra_node_bytes);
    check_node_wise_structure(nw, c.plan, c.bytes, c.topo);

    // The automatic choice: both predictions equal the single-schedule routes', and the faster
    // one is used (ties: direct).
    const auto& a = aut.routes[0];
    const double pd = direct.routes[0].predicted_seconds();
    const double pn = nw.routes[0].predicted_seconds();
    CHECK(pd == doctest::Approx(model_seconds(direct, c.topo)).epsilon(1e-12));
    CHECK(pn == doctest::Approx(model_seconds(nw, c.topo)).epsilon(1e-12));
    CHECK(a.predicted_seconds(schedule::direct) == pd);
    // Node-wise is skipped exactly when its lower bound reaches direct's time, and then it
    // would not have been chosen.
    const double bound = orchmllm::detail::node_wise_lower_bound(
        c.plan, c.bytes, c.topo, orchmllm::detail::source_ranks(c.plan));
    // The pass that ends at the first final term reaching direct's time: a lower bound too,
    // with the same decision.
    const auto reaches = [pd](double b) { return b * (1 - 1e-6) >= pd; };
    const double early = orchmllm::detail::node_wise_lower_bound(
        c.plan, c.bytes, c.topo, orchmllm::detail::source_ranks(c.plan), reaches);
    CHECK(early <= bound);
    CHECK(reaches(early) == reaches(bound));
    // A test that a smaller term passes too: the pass ends at a final term in [bound/2, bound].
    const double half = orchmllm::detail::node_wise_lower_bound(
        c.plan, c.bytes, c.topo, orchmllm::detail::source_ranks(c.plan),
        [bound](double b) { return b >= bound / 2; });
    CHECK(half <= bound);
    CHECK(half >= bound / 2);
    ended_early += half < bound ? 1 : 0;
    if (bound * (1 - 1e-6) >= pd) {
      ++pruned;
      CHECK(std::isnan(a.predicted_seconds(schedule::node_wise)));
      CHECK(pn >= pd);
    } else {
      CHECK(a.predicted_seconds(schedule::node_wise) == pn);
    }
    CHECK(a.used() == (pn < pd ? schedule::node_wise : schedule::direct));
    CHECK(a.predicted_seconds() == std::min(pd, pn));
    if (a.used() == schedule::node_wise) ++node_wise_chosen;
    for (std::size_t r = 0; r < d; ++r)
      CHECK(same_route(aut.routes[r],
                       a.used() == schedule::direct ? direct.routes[r] : nw.routes[r]));

    // Deterministic: building again gives the same route.
    const auto r0 = static_cast<rank_t>(uniform(rng, 0, static_cast<std::int64_t>(d) - 1));
    for (const auto s : all_schedules)
      CHECK(same_route(route::build(c.plan, c.bytes, c.topo, r0, s),
                       route::build(c.plan, c.bytes, c.topo, r0, s)));
  }
  // The sample exercises real forwarding and both automatic outcomes.
  INFO("node-wise forwarded in ", multi_hop, " of 400 plans; automatic chose it ", node_wise_chosen,
       " times and skipped it ", pruned, " times (", ended_early, " before the bound's end)");
  CHECK(multi_hop > 50);
  CHECK(node_wise_chosen > 0);
  CHECK(ended_early > 0);
}

TEST_CASE("route: every uniform G and uneven shapes with busy plans") {
  // Denser plans (every rank sends to many peers) on fixed shapes, including G in {0,1,2,3,4,8}
  // on 12 and 16 ranks and uneven nodes {3, 1, 4} and {5, 2}.
  std::mt19937_64 rng(7);
  std::vector<topology> shapes;
  for (const rank_t d : {12, 16})
    for (const rank_t g : {0, 1, 2, 3, 4, 8}) shapes.push_back(topology::uniform(d, g));
  shapes.push_back(topology(ranks{0, 0, 0, 1, 2, 2, 2, 2}));
  shapes.push_back(topology(ranks{0, 1, 0, 0, 1, 0, 0}));
  for (const auto& topo : shapes) {
    for (int it = 0; it < 6; ++it) {
      const rank_t d = topo.num_ranks();
      const auto n = uniform(rng, 2 * d, 8 * d);
      const auto off = orchmllm::test::random_offsets(rng, d, n);
      const auto plan = orchmllm::test::random_rearrangement(rng, off, d, it % 2 == 1, 20);
      vec bytes;
      for (std::int64_t g = 0; g < n; ++g)
        bytes.push_back(uniform(rng, 0, 2) == 0 ? 0 : uniform(rng, 1, 50));
      INFO("d = ", d, ", nodes ", topo.num_nodes(), ", iteration ", it);
      const auto direct = emulate(plan, bytes, topo, schedule::direct);
      const auto nw = emulate(plan, bytes, topo, schedule::node_wise);
      require_clean(direct);
      require_clean(nw);
      CHECK(direct.outputs == direct.expected);
      CHECK(nw.outputs == direct.outputs);
      check_node_wise_structure(nw, plan, bytes, topo);
      if (topo.num_nodes() == 1) {
        // One node: node-wise degenerates to direct (its inter- and scatter hops are idle).
        for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r) {
          CHECK(nw.routes[r].hops().size() == direct.routes[r].hops().size());
          CHECK(nw.routes[r].sent() == direct.routes[r].sent());
        }
        CHECK(nw.routes[0].predicted_seconds() == direct.routes[0].predicted_seconds());
        CHECK(route::build(plan, bytes, topo, 0, schedule::automatic).used() == schedule::direct);
      }
    }
  }
}

TEST_CASE("route: a plan that moves nothing has no hops") {
  std::mt19937_64 rng(3);
  for (int it = 0; it < 40; ++it) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 10));
    const auto n = uniform(rng, 0, 30);
    const auto off = orchmllm::test::random_offsets(rng, d, n);
    vec bytes;
    for (std::int64_t g = 0; g < n; ++g) bytes.push_back(uniform(rng, 0, 20));
    const auto topo = topology::uniform(d, static_cast<rank_t>(uniform(rng, 0, 3)));
    // The identity, and a permutation of slots inside every rank (no item changes rank).
    std::vector<placement> pl(static_cast<std::size_t>(n));
    for (rank_t r = 0; r < d; ++r) {
      const auto lo = off[static_cast<std::size_t>(r)], hi = off[static_cast<std::size_t>(r) + 1];
      vec slots(static_cast<std::size_t>(hi - lo));
      for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<std::int64_t>(i);
      std::shuffle(slots.begin(), slots.end(), rng);
      for (auto g = lo; g < hi; ++g)
        pl[static_cast<std::size_t>(g)] = {r, slots[static_cast<std::size_t>(g - lo)]};
    }
    for (const auto& plan :
         {rearrangement::identity(off), rearrangement::from_placements(off, pl, d)}) {
      for (const auto s : all_schedules) {
        const auto e = emulate(plan, bytes, topo, s);
        require_clean(e);
        CHECK(e.outputs == e.expected);
        for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r) {
          CHECK(e.routes[r].hops().empty());
          CHECK_FALSE(e.routes[r].unpack_identity());
          CHECK(e.routes[r].predicted_seconds() == 0.0);
          CHECK(e.routes[r].sent() == traffic_stats{e.routes[r].input_bytes(), 0, 0, 0, 0});
        }
      }
      // The identity's unpack is one copy of the whole input (a single merged segment).
      if (plan == rearrangement::identity(off))
        for (rank_t r = 0; r < d; ++r) {
          const auto rt = route::build(plan, bytes, topo, r, schedule::direct);
          CHECK(rt.unpack().is_identity(rt.input_bytes()));
        }
    }
  }
}

TEST_CASE("route: the fingerprint is shared by every rank's route of one exchange, and only") {
  std::mt19937_64 rng(31);
  for (int it = 0; it < 30; ++it) {
    const auto d = static_cast<rank_t>(uniform(rng, 2, 9));
    const auto n = uniform(rng, 1, 30);
    const auto off = orchmllm::test::random_offsets(rng, d, n);
    const auto plan = orchmllm::test::random_rearrangement(rng, off, d, true, 10);
    vec bytes;
    for (std::int64_t g = 0; g < n; ++g) bytes.push_back(uniform(rng, 0, 20));
    const auto topo = topology::uniform(d, 2);
    for (const auto s : {schedule::direct, schedule::node_wise}) {
      INFO("it ", it, ", ", std::string(to_string(s)));
      const auto fp = route::build(plan, bytes, topo, 0, s).fingerprint();
      CHECK(fp != 0);
      for (rank_t r = 1; r < d; ++r)
        CHECK(route::build(plan, bytes, topo, r, s).fingerprint() == fp);
      const auto r = static_cast<rank_t>(uniform(rng, 0, d - 1));
      // Another plan, other sizes, other nodes, another schedule: another fingerprint.
      auto other = orchmllm::test::random_rearrangement(rng, off, d, true, 10);
      if (other != plan) CHECK(route::build(other, bytes, topo, r, s).fingerprint() != fp);
      vec more = bytes;
      more[static_cast<std::size_t>(uniform(rng, 0, n - 1))] += 1;
      CHECK(route::build(plan, more, topo, r, s).fingerprint() != fp);
      if (d > 2)  // two ranks are one node either way
        CHECK(route::build(plan, bytes, topology::uniform(d, 3), r, s).fingerprint() != fp);
      const auto flip = s == schedule::direct ? schedule::node_wise : schedule::direct;
      CHECK(route::build(plan, bytes, topo, r, flip).fingerprint() != fp);
    }
  }
  CHECK(route().fingerprint() == 0);
}

TEST_CASE("route: node-wise balances NIC bytes when one GPU per node holds all remote traffic") {
  for (const rank_t G : {4, 8}) {
    const rank_t d = 2 * G;
    const auto topo = topology::uniform(d, G);
    // Rank 0 (node 0) sends 64 items of 1000 bytes to node 1, round robin over its ranks; rank G
    // (node 1) sends 64 to node 0. Every other rank sends 10 items of 1000 bytes to a neighbour
    // in its own node.
    vec off{0};
    ranks dst;
    for (rank_t r = 0; r < d; ++r) {
      const bool hot = r == 0 || r == G;
      const int items = hot ? 64 : 10;
      for (int i = 0; i < items; ++i) {
        if (hot) {
          dst.push_back(static_cast<rank_t>((r == 0 ? G : 0) + i % G));
        } else {
          const rank_t base = r / G * G;
          dst.push_back(static_cast<rank_t>(base + (r - base + 1) % G));
        }
      }
      off.push_back(off.back() + items);
    }
    const auto plan = rearrangement::from_destinations(off, dst, d);
    const vec bytes(dst.size(), 1000);
    const auto direct = emulate(plan, bytes, topo, schedule::direct);
    const auto nw = emulate(plan, bytes, topo, schedule::node_wise);
    require_clean(direct);
    require_clean(nw);
    CHECK(nw.outputs == direct.outputs);
    CHECK(direct.outputs == direct.expected);
    std::int64_t max_d = 0, max_n = 0, sum_d = 0, sum_n = 0;
    for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r) {
      max_d = std::max(max_d, direct.routes[r].sent().inter_node_bytes);
      max_n = std::max(max_n, nw.routes[r].sent().inter_node_bytes);
      sum_d += direct.routes[r].sent().inter_node_bytes;
      sum_n += nw.routes[r].sent().inter_node_bytes;
    }
    INFO("G = ", G, ": direct max ", max_d, ", node-wise max ", max_n);
    CHECK(sum_d == 2 * 64 * 1000);
    CHECK(sum_n == sum_d);
    CHECK(max_d == 64 * 1000);
    // 64 equal items over G rails: exactly 64/G items per rail.
    CHECK(max_n == 64 * 1000 / G);
    check_node_wise_structure(nw, plan, bytes, topo);
    // Direct: the hot rank sends to G remote peers; node-wise: one inter-node message per rank.
    CHECK(direct.routes[0].sent().inter_node_messages == G);
    for (const auto& r : nw.routes) CHECK(r.sent().inter_node_messages <= 1);
  }
}

TEST_CASE("route: time model on hand examples") {
  link_params L;
  L.intra_bandwidth = 100;
  L.intra_latency = 1;
  L.inter_bandwidth = 10;
  L.inter_latency = 2;
  SUBCASE("one GPU per node: node-wise is direct, a tie goes to direct") {
    const auto topo = topology::uniform(2, 1, L);
    // rank 0 holds {50 B → rank 1}; rank 1 holds {20 B → rank 0, 30 B stays}.
    const auto plan = rearrangement::from_destinations(vec{0, 1, 3}, ranks{1, 0, 1}, 2);
    const vec bytes{50, 20, 30};
    // Slowest side: rank 0 sends 50/10 + 2 = 7 s (rank 1 receives the same); self copies are free.
    const auto a = route::build(plan, bytes, topo, 0, schedule::automatic);
    CHECK(a.predicted_seconds(schedule::direct) == 7.0);
    // Node-wise's lower bound is 7 s too: within the rounding margin, so both are built.
    CHECK(a.predicted_seconds(schedule::node_wise) == 7.0);
    CHECK(a.used() == schedule::direct);
  }
  SUBCASE("two GPUs per node: forwarding costs an intra-node hop") {
    const auto topo = topology::uniform(4, 2, L);
    // rank 1 sends 40 B to rank 2. Direct: 40/10 + 2 = 6 s. Node-wise: one item on 2 rails, its
    // byte midpoint is at 1/2, so rail 1: 1 → 3 (6 s), then 3 → 2 inside node 1 (0.4 + 1 s).
    const auto plan = rearrangement::from_destinations(vec{0, 0, 1, 1, 1}, ranks{2}, 4);
    const vec bytes{40};
    const auto a = route::build(plan, bytes, topo, 3, schedule::automatic);
    CHECK(a.predicted_seconds(schedule::direct) == doctest::Approx(6.0));
    CHECK(a.predicted_seconds(schedule::node_wise) == doctest::Approx(7.4));
    CHECK(a.used() == schedule::direct);
    const auto nw = emulate(plan, bytes, topo, schedule::node_wise);
    require_clean(nw);
    REQUIRE(nw.matrix.size() == 2);  // the regroup hop is idle (1 is its own rail)
    CHECK(nw.matrix[0][1 * 4 + 3] == 40);
    CHECK(nw.matrix[1][3 * 4 + 2] == 40);
    CHECK(nw.routes[3].sent() == traffic_stats{0, 40, 0, 1, 0});
    CHECK(nw.routes[1].sent() == traffic_stats{0, 0, 40, 0, 1});
  }
  SUBCASE("zero-byte items post no message and cost nothing") {
    const auto topo = topology::uniform(3, 1, L);
    // rank 0 sends a 0-byte item to rank 1 and a 10-byte item to rank 2.
    const auto plan = rearrangement::from_destinations(vec{0, 2, 2, 2}, ranks{1, 2}, 3);
    const auto r = route::build(plan, vec{0, 10}, topo, 0, schedule::direct);
    CHECK(r.predicted_seconds() == doctest::Approx(10.0 / 10 + 2));
    CHECK(r.sent() == traffic_stats{0, 0, 10, 0, 1});
    const auto z = route::build(plan, vec{0, 0}, topo, 0, schedule::direct);
    CHECK(z.predicted_seconds() == 0.0);
    CHECK(z.sent() == traffic_stats{});
  }
  SUBCASE("latencies and bandwidths add per rank and direction; the slowest rank sets the hop") {
    const auto topo = topology::uniform(3, 3, L);  // one node
    // rank 0 sends 100 B to rank 1 and 200 B to rank 2; rank 2 sends 50 B to rank 1.
    const auto plan = rearrangement::from_destinations(vec{0, 2, 2, 3}, ranks{1, 2, 1}, 3);
    const vec bytes{100, 200, 50};
    // rank 0 sends: 2 messages (2 s) + 300/100 = 5 s; rank 1 receives 2 + 150/100 = 3.5 s.
    const auto r = route::build(plan, bytes, topo, 1, schedule::direct);
    CHECK(r.predicted_seconds() == doctest::Approx(5.0));
  }
}

TEST_CASE("route: automatic picks node-wise when latency-bound, direct on one node") {
  // 4 nodes × 8 GPUs; every rank sends one 1-byte item to every rank (itself included).
  const rank_t d = 32;
  vec off{0};
  ranks dst;
  for (rank_t r = 0; r < d; ++r) {
    for (rank_t t = 0; t < d; ++t) dst.push_back(t);
    off.push_back(off.back() + d);
  }
  const auto plan = rearrangement::from_destinations(off, dst, d);
  const vec bytes(dst.size(), 1);
  link_params L;
  L.inter_latency = 1e-3;
  const auto multi = topology::uniform(d, 8, L);
  const auto a = route::build(plan, bytes, multi, 5, schedule::automatic);
  INFO("direct ", a.predicted_seconds(schedule::direct), " s, node-wise ",
       a.predicted_seconds(schedule::node_wise), " s");
  CHECK(a.used() == schedule::node_wise);
  // Direct: 24 remote peers per rank at 1 ms each; node-wise: 3 remote messages per rank.
  CHECK(a.predicted_seconds(schedule::direct) > 24e-3);
  CHECK(a.predicted_seconds(schedule::node_wise) < 4e-3);
  CHECK(a.sent().inter_node_messages == 3);
  const auto e = emulate(plan, bytes, multi, schedule::automatic);
  require_clean(e);
  CHECK(e.outputs == e.expected);

  const auto one = topology::uniform(d, 0, L);
  const auto b = route::build(plan, bytes, one, 5, schedule::automatic);
  CHECK(b.used() == schedule::direct);
  CHECK(b.predicted_seconds(schedule::direct) == b.predicted_seconds(schedule::node_wise));
}

TEST_CASE("route: predicted_seconds is NaN for a schedule that was not built") {
  const auto plan = rearrangement::from_destinations(vec{0, 2, 3}, ranks{1, 0, 0}, 2);
  const vec bytes{5, 6, 7};
  const auto topo = topology::uniform(2, 1);
  const auto d = route::build(plan, bytes, topo, 0, schedule::direct);
  CHECK(d.used() == schedule::direct);
  CHECK_FALSE(std::isnan(d.predicted_seconds()));
  CHECK_FALSE(std::isnan(d.predicted_seconds(schedule::direct)));
  CHECK(std::isnan(d.predicted_seconds(schedule::node_wise)));
  CHECK(d.predicted_seconds(schedule::automatic) == d.predicted_seconds());
  const auto n = route::build(plan, bytes, topo, 0, schedule::node_wise);
  CHECK(n.used() == schedule::node_wise);
  CHECK(std::isnan(n.predicted_seconds(schedule::direct)));
  CHECK_FALSE(std::isnan(n.predicted_seconds(schedule::node_wise)));
  CHECK(n.predicted_seconds() == n.predicted_seconds(schedule::node_wise));
  // Automatic builds both on one node (node-wise has no inter-node hop to bound it)...
  const auto a = route::build(plan, bytes, topology::uniform(2, 0), 0, schedule::automatic);
  CHECK_FALSE(std::isnan(a.predicted_seconds(schedule::direct)));
  CHECK_FALSE(std::isnan(a.predicted_seconds(schedule::node_wise)));
  CHECK(a.predicted_seconds() == a.predicted_seconds(a.used()));
  // ... and only direct when node-wise's lower bound reaches direct's time. 3 nodes × 2 GPUs:
  // rank 0 sends one item to node 1, rank 1 one to node 2. Each node pair carries one item,
  // so both take rail ⌊2/2⌋ = 1: rank 1 sends two inter-node messages in node-wise's middle
  // hop, direct's ranks one each.
  const auto spread = rearrangement::from_destinations(vec{0, 1, 2, 2, 2, 2, 2}, ranks{2, 4}, 6);
  const auto six = topology::uniform(6, 2);
  const auto b = route::build(spread, vec{100, 100}, six, 0, schedule::automatic);
  const auto bn = route::build(spread, vec{100, 100}, six, 0, schedule::node_wise);
  CHECK(b.used() == schedule::direct);
  CHECK(std::isnan(b.predicted_seconds(schedule::node_wise)));
  CHECK(bn.predicted_seconds() > 2 * b.predicted_seconds(schedule::direct));
  const route empty;
  CHECK(empty.num_ranks() == 0);
  CHECK(empty.hops().empty());
}

TEST_CASE("route: counts above 2^31 and 2^32 bytes (built, not executed)") {
  const std::int64_t G31 = std::int64_t{1} << 31, G32 = std::int64_t{1} << 32;
  // rank 0 holds g0 (3·2^31 B → rank 1) and g1 (2^32 + 7 B, stays); rank 1 holds g2 (2^31 + 1 B
  // → rank 0) and g3 (5 B, stays).
  const auto plan = rearrangement::from_destinations(vec{0, 2, 4}, ranks{1, 0, 0, 1}, 2);
  const vec bytes{3 * G31, G32 + 7, G31 + 1, 5};
  for (const rank_t g : {0, 1}) {
    const auto topo = topology::uniform(2, g);
    for (const auto s : {schedule::direct, schedule::node_wise}) {
      INFO("G = ", g, ", ", std::string(orchmllm::to_string(s)));
      const auto e = emulate(plan, bytes, topo, s, /*move_data=*/false);
      require_clean(e);
      const auto& r0 = e.routes[0];
      const auto& r1 = e.routes[1];
      CHECK(r0.input_bytes() == 3 * G31 + G32 + 7);
      CHECK(r0.output_bytes() == G32 + 7 + G31 + 1);
      CHECK(r1.output_bytes() == 3 * G31 + 5);
      CHECK(vec(r0.output_item_bytes().begin(), r0.output_item_bytes().end()) ==
            vec{G32 + 7, G31 + 1});
      REQUIRE(r0.hops().size() == 1);  // 2 ranks: node-wise has nothing to regroup or scatter
      const auto& h = r0.hops()[0];
      CHECK(h.send_counts == vec{G32 + 7, 3 * G31});
      CHECK(h.send_displs == vec{0, G32 + 7});
      CHECK(h.recv_counts == vec{G32 + 7, G31 + 1});
      CHECK(h.recv_displs == vec{0, G32 + 7});
      // Pack: g1 (at 3·2^31 in the input) to the front, g0 behind it.
      CHECK(h.pack.src == vec{3 * G31, 0});
      CHECK(h.pack.dst == vec{0, G32 + 7});
      CHECK(h.pack.bytes == vec{G32 + 7, 3 * G31});
      CHECK(r0.unpack_identity());  // arrival order is slot order
      const auto expect_sent = g == 1 ? traffic_stats{G32 + 7, 0, 3 * G31, 0, 1}
                                      : traffic_stats{G32 + 7, 3 * G31, 0, 1, 0};
      CHECK(r0.sent() == expect_sent);
      CHECK(r1.hops()[0].send_counts == vec{G31 + 1, 5});
    }
  }
  // Four ranks on two nodes: node-wise splits a 3 × 2^32 node pair over two rails.
  const auto plan4 = rearrangement::from_destinations(vec{0, 3, 3, 3, 3}, ranks{2, 3, 2}, 4);
  const vec bytes4{G32, G32 + 1, G32 - 1};
  const auto topo4 = topology::uniform(4, 2);
  const auto e = emulate(plan4, bytes4, topo4, schedule::node_wise, false);
  require_clean(e);
  check_node_wise_structure(e, plan4, bytes4, topo4);
  std::int64_t inter = 0;
  for (const auto& r : e.routes) inter += r.sent().inter_node_bytes;
  CHECK(inter == 3 * G32);
  CHECK(e.routes[0].sent().inter_node_bytes + e.routes[1].sent().inter_node_bytes == 3 * G32);
  CHECK(e.routes[1].sent().inter_node_bytes > 0);  // the second rail carries its share
}

TEST_CASE("route: bad input") {
  const auto plan = rearrangement::from_destinations(vec{0, 2, 4}, ranks{1, 0, 0, 1}, 2);
  const vec bytes{1, 2, 3, 4};
  const auto topo = topology::uniform(2, 1);
  expect_invalid(
      [&] {
        (void)route::build(plan, vec{1, 2, 3}, topo, 0);
      },
      {"3 item sizes for a plan of 4 items"});
  expect_invalid(
      [&] {
        (void)route::build(plan, vec{1, 2, -3, 4}, topo, 0);
      },
      {"item 2 has -3 bytes"});
  expect_invalid([&] { (void)route::build(plan, bytes, topo, 2); }, {"rank 2 outside [0, 2)"});
  expect_invalid([&] { (void)route::build(plan, bytes, topo, -1); }, {"rank -1 outside [0, 2)"});
  expect_invalid([&] { (void)route::build(plan, bytes, topology::uniform(3, 1), 0); },
                 {"topology has 3 ranks but the plan 2"});
  const auto wide = rearrangement::from_destinations(vec{0, 2, 4}, ranks{1, 0, 2, 1}, 3);
  expect_invalid([&] { (void)route::build(wide, bytes, topology::uniform(2, 1), 0); },
                 {"equal rank counts", "2 source and 3 destination"});
  expect_invalid([&] { (void)plan_traffic(plan, vec{1}, topo); }, {"1 item sizes"});
  expect_invalid(
      [&] {
        (void)plan_traffic(plan, vec{1, 2, 3, -4}, topo);
      },
      {"item 3 has -4 bytes"});
  expect_invalid([&] { (void)plan_traffic(plan, bytes, topology::uniform(5, 2)); },
                 {"topology has 5 ranks"});
  expect_invalid([&] { (void)plan_traffic(wide, bytes, topology::uniform(3, 1)); },
                 {"equal rank counts"});
}

TEST_CASE("route: item sizes whose total overflows 2^63 - 1 are an error on every rank") {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t e62 = std::int64_t{1} << 62;
  // 11 items of 2^62 bytes over 2 ranks: every rank's sum, and the total, used to wrap (a
  // negative split on one rank, a crash on another).
  const auto plan =
      rearrangement::from_destinations(vec{0, 5, 11}, ranks{1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}, 2);
  const vec huge(11, e62);
  for (const rank_t r : {0, 1}) {
    for (const auto s : {schedule::direct, schedule::node_wise, schedule::automatic}) {
      expect_invalid([&] { (void)route::build(plan, huge, topology::uniform(2, 1), r, s); },
                     {"the total of the item sizes at item 1: 4611686018427387904 + "
                      "4611686018427387904 exceeds 2^63 - 1 (int64 overflow)"});
    }
  }
  expect_invalid([&] { (void)plan_traffic(plan, huge, topology::uniform(2, 1)); },
                 {"item sizes at item 1", "overflow"});
  // One rank's items alone fit, the total does not: still refused (another rank's sums would
  // not fit).
  const auto two = rearrangement::from_destinations(vec{0, 1, 2}, ranks{1, 0}, 2);
  expect_invalid(
      [&] {
        (void)route::build(two, vec{max, 1}, topology::uniform(2, 1), 0);
      },
      {"at item 1", "9223372036854775807 + 1 exceeds 2^63 - 1 (int64 overflow)"});
  // A total of exactly 2^63 - 1 is built.
  const auto r = route::build(two, vec{max - 5, 5}, topology::uniform(2, 1), 0);
  CHECK(r.input_bytes() == max - 5);
  CHECK(r.output_bytes() == 5);
}

TEST_CASE("route: schedule names") {
  for (const auto s : all_schedules) CHECK(orchmllm::parse_schedule(orchmllm::to_string(s)) == s);
  CHECK(std::string(orchmllm::to_string(schedule::direct)) == "direct");
  CHECK(std::string(orchmllm::to_string(schedule::node_wise)) == "node-wise");
  CHECK(std::string(orchmllm::to_string(schedule::automatic)) == "auto");
  CHECK(orchmllm::parse_schedule("node_wise") == schedule::node_wise);
  CHECK(orchmllm::parse_schedule("automatic") == schedule::automatic);
  for (const char* bad : {"", "Direct", "nodewise", "auto ", "node-wise2"})
    expect_invalid([&] { (void)orchmllm::parse_schedule(bad); },
                   {"unknown schedule '" + std::string(bad) + "'", "direct, node-wise, auto"});
}

TEST_CASE("route: plan_traffic on a hand example") {
  // Nodes {0, 1} and {2, 3}. Items (source → destination, bytes):
  //   rank 0: g0 0→0 5 B, g1 0→1 7 B, g2 0→3 11 B, g3 0→1 2 B
  //   rank 1: g4 1→2 0 B (a zero-byte item sends no message)
  //   rank 2: g5 2→0 3 B, g6 2→0 4 B, g7 2→1 1 B, g8 2→2 9 B
  //   rank 3: nothing
  const auto plan =
      rearrangement::from_destinations(vec{0, 4, 5, 9, 9}, ranks{0, 1, 3, 1, 2, 0, 0, 1, 2}, 4);
  const vec bytes{5, 7, 11, 2, 0, 3, 4, 1, 9};
  const auto topo = topology::uniform(4, 2);
  const auto t = plan_traffic(plan, bytes, topo);
  REQUIRE(t.size() == 4);
  CHECK(t[0] == traffic_stats{5, 9, 11, 1, 1});
  CHECK(t[1] == traffic_stats{0, 0, 0, 0, 0});
  CHECK(t[2] == traffic_stats{9, 0, 8, 0, 2});
  CHECK(t[3] == traffic_stats{});
  CHECK(t[0].moved_bytes() == 20);
  CHECK(t[0].total_bytes() == 25);
  auto all = t[0];
  all += t[2];
  CHECK(all == traffic_stats{14, 9, 19, 1, 3});
  // Everything on one node: the inter-node bytes become intra-node ones.
  const auto one = plan_traffic(plan, bytes, topology::uniform(4, 0));
  CHECK(one[0] == traffic_stats{5, 20, 0, 2, 0});
  CHECK(one[2] == traffic_stats{9, 8, 0, 2, 0});
  // The direct route of every rank sends exactly this.
  for (rank_t r = 0; r < 4; ++r)
    CHECK(route::build(plan, bytes, topo, r, schedule::direct).sent() ==
          t[static_cast<std::size_t>(r)]);
}

namespace {

// The time model as route.hpp's file comment states it, written the obvious way: per hop, the
// bandwidth terms in item order, then one latency per distinct (sender, receiver) pair with
// bytes, in increasing (sender, receiver) order. The library must give these exact doubles
// (the automatic choice must not depend on how the pairs are found).
double reference_prediction(const orchmllm::detail::item_paths& p,
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
std::vector<rank_t> reference_node_wise(const rearrangement& plan,
                                        std::span<const std::int64_t> bytes, const topology& topo,
                                        std::span<const rank_t> src) {
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
orchmllm::agreed_exchange reference_group(const orchmllm::detail::item_paths& p,
                                          std::span<const std::int64_t> bytes, int k, rank_t d) {
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

}  // namespace

TEST_CASE("route: the time model gives the reference's exact doubles on random plans") {
  std::mt19937_64 rng(4711);
  for (int it = 0; it < 300; ++it) {
    const auto c = make_random_case(rng, it);
    INFO(c.what);
    const auto src = orchmllm::detail::source_ranks(c.plan);
    const auto direct = orchmllm::detail::direct_paths(c.plan, src);
    const auto nw = orchmllm::detail::node_wise_paths(c.plan, c.bytes, c.topo, src);
    CHECK(orchmllm::detail::predict_seconds(direct, c.bytes, c.topo) ==
          reference_prediction(direct, c.bytes, c.topo));
    CHECK(orchmllm::detail::predict_seconds(nw, c.bytes, c.topo) ==
          reference_prediction(nw, c.bytes, c.topo));
  }
}

TEST_CASE("route: node-wise paths, the time model and hop figures are the reference's on larger groups") {
  std::mt19937_64 rng(2718);
  int contiguous = 0, scattered = 0, bounded = 0;
  for (int it = 0; it < 400; ++it) {
    auto c = make_random_case(rng, it);
    // Every other case on larger groups, so that node pairs carry runs of several items.
    if (it % 2 == 1) {
      const auto d = static_cast<rank_t>(uniform(rng, 16, 64));
      const auto g = static_cast<rank_t>(uniform(rng, 2, 8));
      c.topo = uniform(rng, 0, 1) == 0
                   ? topology::uniform(d, g)
                   : topology(orchmllm::test::random_node_map(rng, d, (d + g - 1) / g));
      const auto off = orchmllm::test::random_offsets(rng, d, uniform(rng, 0, 12 * d));
      c.plan = orchmllm::test::random_rearrangement(rng, off, d, uniform(rng, 0, 1) == 1, 0);
      c.bytes.clear();
      for (std::int64_t x = 0; x < c.plan.num_items(); ++x)
        c.bytes.push_back(uniform(rng, 0, 4) == 0 ? 0 : uniform(rng, 1, 500));
    }
    INFO(c.what);
    const auto map = c.topo.node_map();
    (std::is_sorted(map.begin(), map.end()) ? contiguous : scattered) += 1;
    const auto src = orchmllm::detail::source_ranks(c.plan);
    const auto nw = orchmllm::detail::node_wise_paths(c.plan, c.bytes, c.topo, src);
    CHECK(nw.at == reference_node_wise(c.plan, c.bytes, c.topo, src));
    // And the time model's exact doubles on these larger groups (many receivers per sender).
    const auto direct = orchmllm::detail::direct_paths(c.plan, src);
    CHECK(orchmllm::detail::predict_seconds(direct, c.bytes, c.topo) ==
          reference_prediction(direct, c.bytes, c.topo));
    CHECK(orchmllm::detail::predict_seconds(nw, c.bytes, c.topo) ==
          reference_prediction(nw, c.bytes, c.topo));
    // Automatic's lower bound of node-wise's time holds (0 on scattered node maps).
    const double bound = orchmllm::detail::node_wise_lower_bound(c.plan, c.bytes, c.topo, src);
    CHECK(bound <= orchmllm::detail::predict_seconds(nw, c.bytes, c.topo) * (1 + 1e-12));
    if (bound > 0) ++bounded;
    // And every hop's group figures.
    for (const auto* paths : {&direct, &nw})
      for (int k = 1; k <= paths->hops; ++k) {
        const auto got = orchmllm::detail::hop_group_figures(*paths, c.bytes, k,
                                                             c.topo.num_ranks());
        const auto want = reference_group(*paths, c.bytes, k, c.topo.num_ranks());
        CHECK(got.max_block == want.max_block);
        CHECK(got.max_buffer == want.max_buffer);
        CHECK(got.max_items == want.max_items);
      }
  }
  CHECK(contiguous > 100);
  CHECK(scattered > 50);
  CHECK(bounded > 100);
}

TEST_CASE("route: the rails bound of automatic's node-wise bound holds for every item order") {
  // One node pair's items, in random orders and sizes (with zeros), split over R rails by the
  // midpoint rule of node_wise_paths: the rails that get a positive item are at least
  // rails_lower_bound(count of positive items, bytes, largest, R).
  std::mt19937_64 rng(99);
  int above_one = 0;
  for (int it = 0; it < 20000; ++it) {
    const auto rails = static_cast<rank_t>(uniform(rng, 1, 16));
    const auto n = uniform(rng, 1, 40);
    const auto top = uniform(rng, 0, 3) == 0 ? 1000000 : uniform(rng, 1, 50);
    const bool two_sizes = uniform(rng, 0, 1) == 0;  // a few large items among small ones
    vec bytes;
    for (std::int64_t i = 0; i < n; ++i)
      bytes.push_back(uniform(rng, 0, 5) == 0 ? 0
                      : two_sizes            ? (uniform(rng, 0, 4) == 0 ? top : 1)
                                             : uniform(rng, 1, top));
    std::int64_t total = 0, largest = 0, count = 0;
    for (const auto b : bytes) {
      total += b;
      largest = std::max(largest, b);
      count += b > 0 ? 1 : 0;
    }
    if (count == 0) continue;
    std::vector<char> hit(static_cast<std::size_t>(rails), 0);
    std::int64_t cum = 0;
    for (const auto b : bytes) {
      const double mid = (static_cast<double>(cum) + 0.5 * static_cast<double>(b)) /
                         static_cast<double>(total);
      const auto rail =
          static_cast<std::size_t>(std::min<double>(rails - 1, std::floor(mid * rails)));
      if (b > 0) hit[rail] = 1;
      cum += b;
    }
    const auto used = std::count(hit.begin(), hit.end(), 1);
    const auto bound = orchmllm::detail::rails_lower_bound(count, total, largest, rails);
    INFO("rails ", rails, ", items ", n, ", total ", total, ", largest ", largest);
    CHECK(bound >= 1);
    CHECK(used >= bound);
    if (bound > 1) ++above_one;
  }
  CHECK(above_one > 5000);  // the bound is not the trivial 1
}
