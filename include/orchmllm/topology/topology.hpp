#pragma once
/// @file topology.hpp
/// Cluster shape (nodes × GPUs, uneven nodes allowed) and the link figures of the time model:
/// `topology` (every rank's node, `link_params`), the shipped model of the `topology_model`
/// concept that every entry point reads, and to which a trainer's own cluster description (its
/// launcher's host list, a SLURM node list) converts implicitly, once, in O(d). See
/// docs/orchestrator.md, "A topology from the trainer's launcher".

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/core/fnv.hpp"

namespace orchmllm {

/// Link figures of the communication time model: per-GPU bandwidth in bytes/s per direction and
/// per-message latency in seconds, for links inside a node (NVLink) and between nodes (one NIC
/// per GPU). Defaults: an H100/H200 NVLink node (≈450 GB/s per direction per GPU) with one
/// 400 Gb/s NIC per GPU (≈48 GB/s achievable, nccl-tests#267). All settable.
struct link_params {
  double intra_bandwidth = 450e9;  ///< bytes/s per GPU per direction inside a node
  double intra_latency = 3e-6;     ///< seconds per message inside a node
  double inter_bandwidth = 48e9;   ///< bytes/s per GPU NIC per direction between nodes
  double inter_latency = 10e-6;    ///< seconds per message between nodes

  /// Throws `invalid_argument_error` unless bandwidths are > 0 and latencies ≥ 0 (and finite).
  void validate() const {
    ORCHMLLM_REQUIRE(intra_bandwidth > 0 && intra_bandwidth < 1e300, invalid_argument_error,
                     "intra-node bandwidth ", intra_bandwidth, " must be positive and finite");
    ORCHMLLM_REQUIRE(inter_bandwidth > 0 && inter_bandwidth < 1e300, invalid_argument_error,
                     "inter-node bandwidth ", inter_bandwidth, " must be positive and finite");
    ORCHMLLM_REQUIRE(intra_latency >= 0 && intra_latency < 1e300, invalid_argument_error,
                     "intra-node latency ", intra_latency, " must be non-negative and finite");
    ORCHMLLM_REQUIRE(inter_latency >= 0 && inter_latency < 1e300, invalid_argument_error,
                     "inter-node latency ", inter_latency, " must be non-negative and finite");
  }
  friend bool operator==(const link_params&, const link_params&) = default;
};

/// A cluster as the library reads it: `t.num_ranks()` ranks (≥ 1), each on node `t.node_of(r)`
/// (any non-negative integer id; equal ids are one node), and optionally its link figures as a
/// `links` data member or `links()` function returning `link_params` (else the defaults). The
/// model must be identical on every rank. `topology` models it; any other model converts to
/// `topology` implicitly (nodes renumbered in order of their lowest rank), once, in O(d),
/// wherever an entry point (plan_step, map_bins, the mappers, route building,
/// gather_step_metadata) takes a topology:
///
///     struct hosts_topology {                       // the trainer's own model
///       std::vector<std::string> host_of_rank;      // identical on every rank
///       orchmllm::rank_t num_ranks() const { return host_of_rank.size(); }
///       std::int64_t node_of(orchmllm::rank_t r) const;  // any non-negative id per host
///       orchmllm::link_params links() const { return {.inter_bandwidth = 24e9}; }  // optional
///     };
///     auto step = orchmllm::plan_step(decl, meta, hosts_topology{...});
template <class T>
concept topology_model = requires(const T& t, rank_t r) {
  { t.num_ranks() } -> std::convertible_to<std::int64_t>;
  { t.node_of(r) } -> std::convertible_to<std::int64_t>;
};

/// The link figures of a topology model: its `links` member or `links()`, else `link_params{}`.
template <topology_model T>
[[nodiscard]] link_params link_figures(const T& t) {
  if constexpr (requires {
                  { t.links() } -> std::convertible_to<link_params>;
                }) {
    return t.links();
  } else if constexpr (requires {
                         { t.links } -> std::convertible_to<link_params>;
                       }) {
    return t.links;
  } else {
    return link_params{};
  }
}

/// A topology: every rank 0..d-1 assigned to a node. Nodes are numbered 0..N-1 in order of their
/// lowest rank; inside a node, ranks have local indices 0..size-1 in increasing rank order.
/// Nodes need not be consecutive blocks of ranks (MPI may place ranks round-robin), but
/// `uniform` builds the common case: consecutive blocks of G ranks. Thread-safety: immutable
/// after construction except `links`, a plain settable field.
class topology {
 public:
  /// One rank on one node.
  topology() : topology(std::vector<rank_t>{0}) {}

  /// `ranks` ranks in consecutive blocks of `gpus_per_node` (the last node holds the rest when
  /// `ranks` is not a multiple). `gpus_per_node` = 0 puts every rank on one node. O(d).
  /// Throws `invalid_argument_error` when ranks < 1 or gpus_per_node < 0.
  static topology uniform(rank_t ranks, rank_t gpus_per_node, link_params links = {}) {
    ORCHMLLM_REQUIRE(ranks >= 1, invalid_argument_error, "a topology needs at least one rank, got ",
                     ranks);
    ORCHMLLM_REQUIRE(gpus_per_node >= 0, invalid_argument_error, "GPUs per node ", gpus_per_node,
                     " is negative");
    const rank_t g = gpus_per_node == 0 ? ranks : gpus_per_node;
    std::vector<rank_t> node(static_cast<std::size_t>(ranks));
    for (rank_t r = 0; r < ranks; ++r) node[static_cast<std::size_t>(r)] = r / g;
    return topology(std::move(node), links);
  }

  /// From each rank's node index. Node indices must be numbered in order of first appearance
  /// (node 0 holds rank 0, the next new index is 1, ...) so every rank derives the same numbering.
  /// O(d). Throws `invalid_argument_error` naming the first rank that breaks this.
  explicit topology(std::vector<rank_t> node_of_rank, link_params links_ = {})
      : links(links_), node_of_(std::move(node_of_rank)) {
    ORCHMLLM_REQUIRE(!node_of_.empty(), invalid_argument_error,
                     "a topology needs at least one rank");
    links.validate();
    rank_t next = 0;
    local_.resize(node_of_.size());
    for (std::size_t r = 0; r < node_of_.size(); ++r) {
      const rank_t m = node_of_[r];
      ORCHMLLM_REQUIRE(m >= 0 && m <= next, invalid_argument_error, "rank ", r, " is on node ", m,
                       " but nodes must be numbered 0, 1, ... in order of their lowest rank (next "
                       "new node would be ",
                       next, ")");
      if (m == next) {
        ++next;
        node_offsets_.push_back(0);
      }
      local_[r] = node_offsets_[static_cast<std::size_t>(m)]++;
    }
    // node_offsets_ holds sizes; turn into CSR offsets and list ranks per node.
    std::vector<std::int64_t> sizes(node_offsets_.begin(), node_offsets_.end());
    node_offsets_.assign(sizes.size() + 1, 0);
    for (std::size_t m = 0; m < sizes.size(); ++m)
      node_offsets_[m + 1] = node_offsets_[m] + static_cast<rank_t>(sizes[m]);
    members_.resize(node_of_.size());
    for (std::size_t r = 0; r < node_of_.size(); ++r)
      members_[static_cast<std::size_t>(node_offsets_[static_cast<std::size_t>(node_of_[r])] +
                                        local_[r])] = static_cast<rank_t>(r);
  }

  /// From any other `topology_model`: its rank count, its nodes renumbered in order of their
  /// lowest rank, its link figures (`link_figures`). Implicit, so a trainer's model passes
  /// wherever a `topology` is taken. O(d log N). Throws `invalid_argument_error` when the model
  /// has no rank, more than 2^31 − 1 ranks, a negative node id, or invalid link figures.
  template <class T>
  requires(!std::same_as<std::remove_cvref_t<T>, topology> && topology_model<T>)
      topology(const T& model)  // NOLINT(google-explicit-constructor)
      : topology(dense_nodes(model), link_figures(model)) {}

  /// Number of ranks d.
  [[nodiscard]] rank_t num_ranks() const noexcept { return static_cast<rank_t>(node_of_.size()); }
  /// Number of nodes N.
  [[nodiscard]] rank_t num_nodes() const noexcept {
    return static_cast<rank_t>(node_offsets_.size() - 1);
  }
  /// Node of rank r. O(1), no bounds check.
  [[nodiscard]] rank_t node_of(rank_t r) const noexcept {
    return node_of_[static_cast<std::size_t>(r)];
  }
  /// Local index of rank r inside its node. O(1).
  [[nodiscard]] rank_t local_rank(rank_t r) const noexcept {
    return local_[static_cast<std::size_t>(r)];
  }
  /// Number of ranks on node m. O(1).
  [[nodiscard]] rank_t node_size(rank_t m) const noexcept {
    return node_offsets_[static_cast<std::size_t>(m) + 1] -
           node_offsets_[static_cast<std::size_t>(m)];
  }
  /// Rank with local index l on node m. O(1), no bounds check.
  [[nodiscard]] rank_t rank_at(rank_t m, rank_t l) const noexcept {
    return members_[static_cast<std::size_t>(node_offsets_[static_cast<std::size_t>(m)] + l)];
  }
  /// Ranks of node m in local-index order.
  [[nodiscard]] std::span<const rank_t> ranks_of(rank_t m) const noexcept {
    return std::span<const rank_t>(members_).subspan(
        static_cast<std::size_t>(node_offsets_[static_cast<std::size_t>(m)]),
        static_cast<std::size_t>(node_size(m)));
  }
  /// Each rank's node index (d entries).
  [[nodiscard]] std::span<const rank_t> node_map() const noexcept { return node_of_; }
  /// True when ranks r and q share a node.
  [[nodiscard]] bool same_node(rank_t r, rank_t q) const noexcept {
    return node_of(r) == node_of(q);
  }

  /// Bandwidth and latency figures used by the time model (settable).
  link_params links;

  /// Equal shape and links.
  friend bool operator==(const topology&, const topology&) = default;

 private:
  // A model's node ids, renumbered 0, 1, ... in order of their lowest rank, i.e. of first
  // appearance in rank order. O(d log N).
  template <class T>
  static std::vector<rank_t> dense_nodes(const T& model) {
    const std::int64_t d = static_cast<std::int64_t>(model.num_ranks());
    ORCHMLLM_REQUIRE(d >= 1 && d <= INT32_MAX, invalid_argument_error,
                     "a topology needs 1 to 2^31 - 1 ranks, the model has ", d);
    std::vector<std::int64_t> id(static_cast<std::size_t>(d));
    for (std::size_t r = 0; r < id.size(); ++r) {
      id[r] = static_cast<std::int64_t>(model.node_of(static_cast<rank_t>(r)));
      ORCHMLLM_REQUIRE(id[r] >= 0, invalid_argument_error, "rank ", r, " is on node ", id[r],
                       ", node ids must be non-negative");
    }
    std::vector<std::int64_t> ids(id);  // the distinct ids, sorted, for lookup
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::vector<rank_t> number(ids.size(), -1);  // dense number of ids[k], once seen
    std::vector<rank_t> node(id.size());
    rank_t next = 0;
    for (std::size_t r = 0; r < id.size(); ++r) {
      auto& n = number[static_cast<std::size_t>(std::lower_bound(ids.begin(), ids.end(), id[r]) -
                                                ids.begin())];
      if (n < 0) n = next++;
      node[r] = n;
    }
    return node;
  }

  std::vector<rank_t> node_of_;
  std::vector<rank_t> local_;
  std::vector<rank_t> node_offsets_;
  std::vector<rank_t> members_;
};

/// 64-bit fingerprint of a topology: every rank's node and the link figures (their bit
/// patterns). Equal topologies give equal fingerprints on every platform. O(d), never throws.
[[nodiscard]] inline std::uint64_t fingerprint(const topology& t) noexcept {
  detail::fnv f;
  f.mix(static_cast<std::uint64_t>(t.num_ranks()));
  for (const rank_t m : t.node_map()) f.mix(static_cast<std::uint64_t>(m));
  for (const double x : {t.links.intra_bandwidth, t.links.intra_latency, t.links.inter_bandwidth,
                         t.links.inter_latency})
    f.mix_double(x);
  return f.h;
}

}  // namespace orchmllm
