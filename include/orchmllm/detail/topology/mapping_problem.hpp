#pragma once
/// @file mapping_problem.hpp
/// The node-level view of a bin → rank mapping problem, shared by the mapping façade
/// (topology/mapping.hpp) and the GLPK backend (backend/glpk/mapping.hpp). Internal: may change
/// without notice.
///
/// From a binned plan, item bytes and a topology it gathers, per bin b: W_b (its bytes) and the
/// sparse row w[b][m] > 0 (its bytes already on node m, nodes ascending). Every node-level
/// figure of a bin → node assignment follows from these:
///   kept_m     = Σ_{b on m} w[b][m]                  (bytes that stay on node m)
///   egress_m   = held_m − kept_m,  held_m = Σ_b w[b][m]   (bytes leaving node m)
///   ingress_m  = Σ_{b on m} W_b − kept_m            (bytes entering node m)
///   inter-node = Σ_m ingress_m = Σ_m egress_m.
/// `finish_mapping` then places each node's bins on its GPUs (G × G Hungarian maximising the
/// bytes already on their final GPU) and builds the plan and its byte figures.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/topology/hungarian.hpp"
#include "orchmllm/detail/topology/min_cost_flow.hpp"
#include "orchmllm/topology/mapping_result.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

namespace detail {

// Checks the mapping inputs; returns the total byte count. The exact solvers' costs are one
// bin's bytes at most (the transport flow's profits w[b][m] ≤ W_b, the per-node Hungarian's
// bytes of a bin already on a GPU), and their potentials stay within (V + 2) · C for the flow
// (V = d + N + 2 vertices) and 2G · C for a G × G Hungarian, so every bin's bytes are checked
// against 2^62 / (d + N + 4 + 2 · the largest node). The total then stays below 2^62 too.
// O(n + d).
inline std::int64_t check_mapping_inputs(const rearrangement& binned,
                                         std::span<const std::int64_t> item_bytes,
                                         const topology& topo) {
  ORCHMLLM_REQUIRE(binned.num_src_ranks() == binned.num_dst_ranks(), invalid_argument_error,
                   "mapping needs a plan with as many bins as source ranks, got ",
                   binned.num_src_ranks(), " source ranks and ", binned.num_dst_ranks(), " bins");
  ORCHMLLM_REQUIRE(topo.num_ranks() == binned.num_src_ranks(), invalid_argument_error,
                   "the topology has ", topo.num_ranks(), " ranks but the plan has ",
                   binned.num_src_ranks());
  ORCHMLLM_REQUIRE(static_cast<std::int64_t>(item_bytes.size()) == binned.num_items(),
                   invalid_argument_error, item_bytes.size(), " item sizes for a plan of ",
                   binned.num_items(), " items");
  rank_t largest_node = 0;
  for (rank_t m = 0; m < topo.num_nodes(); ++m)
    largest_node = std::max(largest_node, topo.node_size(m));
  const std::int64_t guard = static_cast<std::int64_t>(topo.num_ranks()) +
                             static_cast<std::int64_t>(topo.num_nodes()) + 4 +
                             2 * static_cast<std::int64_t>(largest_node);
  const std::int64_t limit = (std::int64_t{1} << 62) / guard;
  std::vector<std::int64_t> bin_bytes(static_cast<std::size_t>(binned.num_dst_ranks()), 0);
  std::int64_t total = 0;
  for (std::size_t g = 0; g < item_bytes.size(); ++g) {
    ORCHMLLM_REQUIRE(item_bytes[g] >= 0, invalid_argument_error, "item ", g, " has ", item_bytes[g],
                     " bytes");
    auto& bin = bin_bytes[static_cast<std::size_t>(binned.dst_ranks()[g])];
    ORCHMLLM_REQUIRE(item_bytes[g] <= limit - bin, invalid_argument_error, "bin ",
                     binned.dst_ranks()[g], " holds more than ", limit,
                     " bytes (2^62 / (ranks + nodes + 4 + 2 x the largest node), the exact "
                     "mapping's overflow guard) at item ",
                     g);
    bin += item_bytes[g];
    total += item_bytes[g];  // < d · limit < 2^62
  }
  return total;
}

// The gathered problem. Built once by `build_mapping_problem`; read-only afterwards.
struct mapping_problem {
  struct held {
    rank_t rank;
    std::int64_t bytes;
  };
  const rearrangement* binned = nullptr;
  std::span<const std::int64_t> item_bytes;
  const topology* topo = nullptr;
  std::vector<rank_t> src_rank;         // source rank of every item
  std::vector<std::int64_t> held_off;   // CSR over bins of items_of_bin
  std::vector<held> items_of_bin;       // (source rank, bytes) of every non-empty item
  sparse_profits by_node;               // w[b][m] > 0, nodes ascending per bin
  std::vector<std::int64_t> bin_bytes;  // W_b
  std::vector<std::int32_t> capacity;   // ranks per node
  std::vector<std::int64_t> node_held;  // held_m = Σ_b w[b][m]
  std::int64_t lower_bound = 0;         // Σ_b (W_b − max_m w[b][m])
  std::int64_t worst_lower_bound = 0;   // mapping_result::worst_node_bytes_lower_bound

  [[nodiscard]] rank_t num_bins() const noexcept { return static_cast<rank_t>(bin_bytes.size()); }
  [[nodiscard]] rank_t num_nodes() const noexcept { return static_cast<rank_t>(capacity.size()); }
  // w[b][m] by binary search in b's sorted row. O(log nnz_b).
  [[nodiscard]] std::int64_t on_node(rank_t b, std::int32_t m) const noexcept {
    const auto first = by_node.arcs.begin() + by_node.offsets[static_cast<std::size_t>(b)];
    const auto last = by_node.arcs.begin() + by_node.offsets[static_cast<std::size_t>(b) + 1];
    const auto it = std::lower_bound(
        first, last, m, [](const profit_arc& a, std::int32_t v) { return a.node < v; });
    return it != last && it->node == m ? it->profit : 0;
  }
};

// The sum of the k largest (`largest`) or smallest values of `v` (all of them when k ≥ its
// size). A sum of integers, so it does not depend on how the values are selected: a sorted
// buffer of k for the small k of a node's GPU count, a partial selection in `scratch`
// otherwise. O(|v| · min(k, 16)) or O(|v|).
inline std::int64_t sum_of_extreme(std::span<const std::int64_t> v, std::size_t k,
                                   std::vector<std::int64_t>& scratch, bool largest) {
  std::int64_t sum = 0;
  if (k >= v.size()) {
    for (const auto x : v) sum += x;
    return sum;
  }
  if (k == 0) return 0;
  constexpr std::size_t small = 16;
  if (k <= small) {
    // buf[0 .. k) holds the k best seen so far, best first; a value enters when it beats the
    // last one.
    std::int64_t buf[small];
    const auto better = [largest](std::int64_t x, std::int64_t y) {
      return largest ? x > y : x < y;
    };
    std::size_t held = 0;
    for (const auto x : v) {
      if (held == k && !better(x, buf[k - 1])) continue;
      std::size_t i = held < k ? held++ : k - 1;
      for (; i > 0 && better(x, buf[i - 1]); --i) buf[i] = buf[i - 1];
      buf[i] = x;
    }
    for (std::size_t i = 0; i < k; ++i) sum += buf[i];
    return sum;
  }
  scratch.assign(v.begin(), v.end());
  const auto mid = scratch.begin() + static_cast<std::ptrdiff_t>(k);
  if (largest) {
    std::nth_element(scratch.begin(), mid, scratch.end(), std::greater<>{});
  } else {
    std::nth_element(scratch.begin(), mid, scratch.end());
  }
  for (auto it = scratch.begin(); it != mid; ++it) sum += *it;
  return sum;
}

// mapping_result::worst_node_bytes_lower_bound. Node m keeps at most the G_m largest w[b][m]
// of its column, so egress_m ≥ held_m − that sum; it receives G_m bins, each bringing
// W_b − w[b][m], so ingress_m ≥ the G_m smallest of those over all bins; and the worst node
// carries at least the average of the inter-node total. O(nnz log nnz + d log d + Σ_m G_m · N).
inline std::int64_t worst_node_lower_bound(const mapping_problem& p) {
  const auto nn = static_cast<std::size_t>(p.num_nodes());
  const auto d = static_cast<std::size_t>(p.num_bins());
  if (nn < 2) return 0;
  // The columns as one CSR by node (a counting sort of the arcs): (w, bin) per arc.
  std::vector<std::int64_t> col_off(nn + 1, 0);
  for (const auto& a : p.by_node.arcs) ++col_off[static_cast<std::size_t>(a.node) + 1];
  for (std::size_t m = 0; m < nn; ++m) col_off[m + 1] += col_off[m];
  std::vector<std::int64_t> col_w(p.by_node.arcs.size());
  std::vector<rank_t> col_bin(p.by_node.arcs.size());
  {
    std::vector<std::int64_t> at(col_off.begin(), col_off.end() - 1);
    for (std::size_t b = 0; b < d; ++b)
      for (auto k = p.by_node.offsets[b]; k < p.by_node.offsets[b + 1]; ++k) {
        const auto& a = p.by_node.arcs[static_cast<std::size_t>(k)];
        const auto i = static_cast<std::size_t>(at[static_cast<std::size_t>(a.node)]++);
        col_w[i] = a.profit;
        col_bin[i] = static_cast<rank_t>(b);
      }
  }
  // Bins by increasing W_b: only sums of the smallest are taken, so ties may fall either way.
  // A node skips its column's bins and takes G_m more, so only the first max_m (column size +
  // G_m) are ever read: those are selected, then sorted (all of them when that is most bins).
  std::vector<rank_t> by_size(d);
  std::iota(by_size.begin(), by_size.end(), rank_t{0});
  const auto smaller = [&](rank_t a, rank_t b) {
    return p.bin_bytes[static_cast<std::size_t>(a)] < p.bin_bytes[static_cast<std::size_t>(b)];
  };
  std::size_t read = 0;
  for (std::size_t m = 0; m < nn; ++m)
    read = std::max(read, static_cast<std::size_t>(col_off[m + 1] - col_off[m]) +
                              static_cast<std::size_t>(p.capacity[m]));
  if (read < d / 4) {
    const auto mid = by_size.begin() + static_cast<std::ptrdiff_t>(read);
    std::nth_element(by_size.begin(), mid, by_size.end(), smaller);
    std::sort(by_size.begin(), mid, smaller);
  } else {
    std::sort(by_size.begin(), by_size.end(), smaller);
  }
  std::vector<char> in_column(d, 0);
  const auto nodes = static_cast<std::int64_t>(nn);  // ⌈bound / nodes⌉, no bound + nodes − 1
  std::int64_t best = p.lower_bound / nodes + (p.lower_bound % nodes != 0 ? 1 : 0);
  std::vector<std::int64_t> cand, scratch;  // scratch: sum_of_extreme's selections
  for (std::size_t m = 0; m < nn; ++m) {
    const auto first = static_cast<std::size_t>(col_off[m]);
    const auto last = static_cast<std::size_t>(col_off[m + 1]);
    const auto g = static_cast<std::size_t>(p.capacity[m]);
    // Egress: the sum of the g largest w of the column (a partial selection: only the sum).
    const std::int64_t kept = sum_of_extreme(
        std::span<const std::int64_t>(col_w.data() + first, last - first), g, scratch, true);
    best = std::max(best, p.node_held[m] - kept);
    // Ingress: the g smallest of {W_b − w[b][m]}: column bins with their own value, and the g
    // smallest W_b among the other bins.
    cand.clear();
    for (auto i = first; i < last; ++i) {
      const auto b = static_cast<std::size_t>(col_bin[i]);
      cand.push_back(p.bin_bytes[b] - col_w[i]);
      in_column[b] = 1;
    }
    std::size_t taken = 0;
    for (std::size_t i = 0; i < d && taken < g; ++i)
      if (!in_column[static_cast<std::size_t>(by_size[i])]) {
        cand.push_back(p.bin_bytes[static_cast<std::size_t>(by_size[i])]);
        ++taken;
      }
    for (auto i = first; i < last; ++i) in_column[static_cast<std::size_t>(col_bin[i])] = 0;
    best = std::max(best, sum_of_extreme(cand, g, scratch, false));
  }
  return best;
}

// Gathers the problem. Validates the inputs (check_mapping_inputs). O(n + d + N). Without
// `worst_bound`, `worst_lower_bound` is left at 0 for the caller to fill (worst_node_lower_bound
// reads the problem only), e.g. on a thread beside the solver.
inline mapping_problem build_mapping_problem(const rearrangement& binned,
                                             std::span<const std::int64_t> item_bytes,
                                             const topology& topo, bool worst_bound = true) {
  check_mapping_inputs(binned, item_bytes, topo);
  mapping_problem p;
  p.binned = &binned;
  p.item_bytes = item_bytes;
  p.topo = &topo;
  const rank_t d = topo.num_ranks();
  const rank_t nn = topo.num_nodes();
  const auto ud = static_cast<std::size_t>(d);
  const auto src_off = binned.src_offsets();
  p.src_rank.resize(static_cast<std::size_t>(binned.num_items()));
  for (std::size_t r = 0; r + 1 < src_off.size(); ++r)
    std::fill(p.src_rank.begin() + src_off[r], p.src_rank.begin() + src_off[r + 1],
              static_cast<rank_t>(r));

  // Every bin's (source rank, bytes) pairs, contiguous per bin. Filled in one sequential pass
  // over the items (scattered writes into d streams) rather than by following source_of per
  // bin, whose random reads cost several times more at n ≈ 10^5. Zero-byte items are dropped:
  // they never change a figure.
  p.held_off.assign(ud + 1, 0);
  for (std::size_t g = 0; g < p.src_rank.size(); ++g)
    if (item_bytes[g] > 0) ++p.held_off[static_cast<std::size_t>(binned.dst_ranks()[g]) + 1];
  for (std::size_t b = 0; b < ud; ++b) p.held_off[b + 1] += p.held_off[b];
  p.items_of_bin.resize(static_cast<std::size_t>(p.held_off[ud]));
  {
    std::vector<std::int64_t> fill(p.held_off.begin(), p.held_off.end() - 1);
    for (std::size_t g = 0; g < p.src_rank.size(); ++g)
      if (item_bytes[g] > 0)
        p.items_of_bin[static_cast<std::size_t>(
            fill[static_cast<std::size_t>(binned.dst_ranks()[g])]++)] = {p.src_rank[g],
                                                                         item_bytes[g]};
  }

  // Per bin: bytes by node (sparse, ascending node) and total. A scratch array indexed by node
  // with a touched list keeps this O(items of the bin) per bin.
  p.by_node.offsets.reserve(ud + 1);
  // At most one arc per item: reserved, so the arcs are written once, not copied as they grow.
  p.by_node.arcs.reserve(p.items_of_bin.size());
  p.bin_bytes.assign(ud, 0);
  p.node_held.assign(static_cast<std::size_t>(nn), 0);
  std::vector<std::int64_t> acc(static_cast<std::size_t>(nn), 0);
  std::vector<std::int32_t> hit;
  for (std::size_t b = 0; b < ud; ++b) {
    hit.clear();
    std::int64_t bin_total = 0;
    for (auto k = p.held_off[b]; k < p.held_off[b + 1]; ++k) {
      const auto& it = p.items_of_bin[static_cast<std::size_t>(k)];
      const auto m = static_cast<std::size_t>(topo.node_of(it.rank));
      if (acc[m] == 0) hit.push_back(static_cast<std::int32_t>(m));
      acc[m] += it.bytes;
      bin_total += it.bytes;
    }
    std::sort(hit.begin(), hit.end());
    std::int64_t best = 0;
    for (auto m : hit) {
      const auto um = static_cast<std::size_t>(m);
      p.by_node.arcs.push_back({m, acc[um]});
      p.node_held[um] += acc[um];
      best = std::max(best, acc[um]);
      acc[um] = 0;
    }
    p.by_node.offsets.push_back(static_cast<std::int64_t>(p.by_node.arcs.size()));
    p.bin_bytes[b] = bin_total;
    p.lower_bound += bin_total - best;
  }
  p.capacity.resize(static_cast<std::size_t>(nn));
  for (rank_t m = 0; m < nn; ++m) p.capacity[static_cast<std::size_t>(m)] = topo.node_size(m);
  if (worst_bound) p.worst_lower_bound = worst_node_lower_bound(p);
  return p;
}

// Per-node inter-node egress and ingress of a bin → node assignment. O(d + nnz).
struct node_bytes {
  std::vector<std::int64_t> egress;
  std::vector<std::int64_t> ingress;
};

inline node_bytes node_traffic_of(const mapping_problem& p,
                                  std::span<const std::int32_t> node_of_bin) {
  node_bytes t;
  t.egress = p.node_held;
  t.ingress.assign(p.capacity.size(), 0);
  for (rank_t b = 0; b < p.num_bins(); ++b) {
    const auto m = node_of_bin[static_cast<std::size_t>(b)];
    const auto kept = p.on_node(b, m);
    t.egress[static_cast<std::size_t>(m)] -= kept;
    t.ingress[static_cast<std::size_t>(m)] += p.bin_bytes[static_cast<std::size_t>(b)] - kept;
  }
  return t;
}

// max over nodes of max(egress, ingress). O(d + nnz).
inline std::int64_t worst_node_bytes(const mapping_problem& p,
                                     std::span<const std::int32_t> node_of_bin) {
  const auto t = node_traffic_of(p, node_of_bin);
  std::int64_t worst = 0;
  for (std::size_t m = 0; m < t.egress.size(); ++m)
    worst = std::max({worst, t.egress[m], t.ingress[m]});
  return worst;
}

// Whether node_of_bin gives every node exactly its rank count of bins.
inline bool respects_capacity(const mapping_problem& p, std::span<const std::int32_t> node_of_bin) {
  if (static_cast<rank_t>(node_of_bin.size()) != p.num_bins()) return false;
  std::vector<std::int32_t> count(p.capacity.size(), 0);
  for (auto m : node_of_bin) {
    if (m < 0 || m >= p.num_nodes()) return false;
    ++count[static_cast<std::size_t>(m)];
  }
  return count == p.capacity;
}

// The binned plan with bin b delivered to rank rank_of_bin[b] (a permutation), every item
// keeping its slot: each bin's block of sources moves whole to its rank (copies, no sort), so
// canonical slots stay canonical and a plan grouped by micro-batch stays grouped. Requires a
// permutation (every caller has one: the built-in solvers', or checked by check_rank_of_bin).
// O(n + d).
inline rearrangement relabel_bins(const rearrangement& binned, std::span<const rank_t> rank_of_bin,
                                  std::vector<rank_t> dst) {
  const auto doff = binned.dst_offsets();
  const auto sources = binned.sources();
  const auto d = rank_of_bin.size();
  rearrangement_parts parts;
  parts.src_offsets.assign(binned.src_offsets().begin(), binned.src_offsets().end());
  std::vector<rank_t> bin_at(d);  // the bin each rank receives
  for (std::size_t b = 0; b < d; ++b)
    bin_at[static_cast<std::size_t>(rank_of_bin[b])] = static_cast<rank_t>(b);
  parts.dst_offsets.assign(d + 1, 0);
  parts.src_of_dst.resize(sources.size());
  for (std::size_t r = 0; r < d; ++r) {
    const auto b = static_cast<std::size_t>(bin_at[r]);
    parts.dst_offsets[r + 1] = parts.dst_offsets[r] + (doff[b + 1] - doff[b]);
    std::copy(sources.begin() + doff[b], sources.begin() + doff[b + 1],
              parts.src_of_dst.begin() + parts.dst_offsets[r]);
  }
  parts.dst_rank = std::move(dst);
  parts.dst_slot.assign(binned.dst_slots().begin(), binned.dst_slots().end());
  return std::move(parts).assemble();
}

// Builds the result from a rank per bin: the plan (every item in its slot) and its byte figures.
// O(n + d + N).
inline mapping_result result_from_ranks(const mapping_problem& p, std::vector<rank_t> rank_of_bin) {
  const topology& topo = *p.topo;
  mapping_result out;
  out.inter_node_bytes_lower_bound = p.lower_bound;
  out.worst_node_bytes_lower_bound = p.worst_lower_bound;
  out.rank_of_bin = std::move(rank_of_bin);
  std::vector<std::int64_t> egress(p.capacity.size(), 0), ingress(p.capacity.size(), 0);
  std::vector<rank_t> dst(p.src_rank.size());
  for (std::size_t g = 0; g < dst.size(); ++g) {
    const rank_t r = out.rank_of_bin[static_cast<std::size_t>(p.binned->dst_ranks()[g])];
    dst[g] = r;
    const rank_t s = p.src_rank[g];
    if (r == s) continue;
    out.moved_bytes += p.item_bytes[g];
    if (topo.same_node(r, s)) continue;
    out.inter_node_bytes += p.item_bytes[g];
    egress[static_cast<std::size_t>(topo.node_of(s))] += p.item_bytes[g];
    ingress[static_cast<std::size_t>(topo.node_of(r))] += p.item_bytes[g];
  }
  for (std::size_t m = 0; m < egress.size(); ++m) {
    out.max_node_egress_bytes = std::max(out.max_node_egress_bytes, egress[m]);
    out.max_node_ingress_bytes = std::max(out.max_node_ingress_bytes, ingress[m]);
  }
  out.plan = relabel_bins(*p.binned, out.rank_of_bin, std::move(dst));
  return out;
}

// Whether bin b → rank b keeps every byte of `binned` where it is and no other mapping does:
// `binned` is the identity plan (every item stays in its source slot, core/rearrangement.hpp)
// and every bin holds a positive number of bytes, so moving any bin off its rank moves bytes.
// Every built-in method then returns that mapping (its unique optimum under every objective;
// tested in tests/topology/mapper_test.cpp), which `home_mapping` gives without solving.
// O(n + d), no allocation.
inline bool stays_home(const rearrangement& binned, std::span<const std::int64_t> item_bytes) {
  if (!binned.is_identity()) return false;
  const auto off = binned.src_offsets();
  for (std::size_t r = 0; r + 1 < off.size(); ++r) {
    std::int64_t sum = 0;
    for (auto g = off[r]; g < off[r + 1]; ++g) sum |= item_bytes[static_cast<std::size_t>(g)];
    if (sum <= 0) return false;  // bytes are never negative: the OR is positive iff the sum is
  }
  return true;
}

// The mapping result of a plan that `stays_home`: bin b on rank b, the plan itself, nothing
// moved and every lower bound 0 (each bin's bytes all sit on its own rank). O(n + d).
inline mapping_result home_mapping(const rearrangement& binned) {
  mapping_result out;
  out.rank_of_bin.resize(static_cast<std::size_t>(binned.num_dst_ranks()));
  for (std::size_t b = 0; b < out.rank_of_bin.size(); ++b)
    out.rank_of_bin[b] = static_cast<rank_t>(b);
  out.plan = binned;
  return out;
}

// Places each node's bins on its GPUs (G × G Hungarian maximising the bytes already on their
// final GPU; bins of a node in increasing bin order, so ties are deterministic; above
// dense_assignment_limit GPUs the sparse greedy, at least half the optimum): the rank of every
// bin. Requires respects_capacity(p, node_of_bin). O(n log n + d + Σ_{small m} G_m³).
inline std::vector<rank_t> place_on_gpus(const mapping_problem& p,
                                         std::span<const std::int32_t> node_of_bin) {
  const topology& topo = *p.topo;
  const rank_t d = p.num_bins();
  const rank_t nn = p.num_nodes();
  std::vector<std::vector<rank_t>> bins_of(static_cast<std::size_t>(nn));
  for (rank_t b = 0; b < d; ++b)
    bins_of[static_cast<std::size_t>(node_of_bin[static_cast<std::size_t>(b)])].push_back(b);
  std::vector<rank_t> rank_of_bin(static_cast<std::size_t>(d));
  std::vector<std::int64_t> profit;
  for (rank_t m = 0; m < nn; ++m) {
    const auto& bins = bins_of[static_cast<std::size_t>(m)];
    const int g = topo.node_size(m);
    const auto ug = static_cast<std::size_t>(g);
    if (g > dense_assignment_limit) {
      // Sparse: one entry per (bin, GPU of this node) holding bytes of the bin.
      std::vector<profit_entry> entries;
      for (std::size_t i = 0; i < bins.size(); ++i) {
        const auto b = static_cast<std::size_t>(bins[i]);
        const auto first = entries.size();
        for (auto k = p.held_off[b]; k < p.held_off[b + 1]; ++k) {
          const auto& it = p.items_of_bin[static_cast<std::size_t>(k)];
          if (topo.node_of(it.rank) == m)
            entries.push_back({it.bytes, static_cast<int>(i), topo.local_rank(it.rank)});
        }
        // Merge the bin's entries per GPU (a pair listed once).
        std::sort(entries.begin() + static_cast<std::ptrdiff_t>(first), entries.end(),
                  [](const profit_entry& x, const profit_entry& y) { return x.col < y.col; });
        std::size_t out = first;
        for (std::size_t k = first; k < entries.size(); ++k) {
          if (out > first && entries[out - 1].col == entries[k].col) {
            entries[out - 1].profit += entries[k].profit;
          } else {
            entries[out++] = entries[k];
          }
        }
        entries.resize(out);
      }
      const auto col = greedy_assignment(std::move(entries), g);
      for (std::size_t i = 0; i < bins.size(); ++i)
        rank_of_bin[static_cast<std::size_t>(bins[i])] = topo.rank_at(m, col[i]);
      continue;
    }
    profit.assign(ug * ug, 0);
    // profit[i][j]: bytes of bin i already on the node's j-th rank.
    for (std::size_t i = 0; i < bins.size(); ++i) {
      const auto b = static_cast<std::size_t>(bins[i]);
      for (auto k = p.held_off[b]; k < p.held_off[b + 1]; ++k) {
        const auto& it = p.items_of_bin[static_cast<std::size_t>(k)];
        if (topo.node_of(it.rank) == m)
          profit[i * ug + static_cast<std::size_t>(topo.local_rank(it.rank))] += it.bytes;
      }
    }
    const auto col = max_profit_assignment(profit, g);
    for (std::size_t i = 0; i < bins.size(); ++i)
      rank_of_bin[static_cast<std::size_t>(bins[i])] = topo.rank_at(m, col[i]);
  }
  return rank_of_bin;
}

// place_on_gpus, then the result (result_from_ranks).
inline mapping_result finish_mapping(const mapping_problem& p,
                                     std::span<const std::int32_t> node_of_bin) {
  return result_from_ranks(p, place_on_gpus(p, node_of_bin));
}

}  // namespace detail
}  // namespace orchmllm
