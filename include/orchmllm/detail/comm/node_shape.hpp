#pragma once
// How the ranks of a group sit on nodes, seen from one rank, with the accessors the
// `communicator` concept asks for (rank, size, node, num_nodes, local_rank, local_size) and
// `node_of`. Backends derive from it and fill it once at construction, from consecutive blocks
// of G ranks (faked nodes) or from a key per rank that is equal exactly for ranks sharing a
// node (the node's lowest rank, a host name). Numbering is the concept's: nodes in order of
// their lowest rank, local ranks in increasing rank order inside a node.

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <span>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm::detail {

class node_shape {
 public:
  /// This rank, 0..size()-1. O(1).
  [[nodiscard]] rank_t rank() const noexcept { return rank_; }
  /// Number of ranks. O(1).
  [[nodiscard]] rank_t size() const noexcept { return size_; }
  /// This rank's node, 0..num_nodes()-1. O(1).
  [[nodiscard]] rank_t node() const noexcept { return node_; }
  /// Number of nodes. O(1).
  [[nodiscard]] rank_t num_nodes() const noexcept { return num_nodes_; }
  /// This rank's index inside its node. O(1).
  [[nodiscard]] rank_t local_rank() const noexcept { return local_rank_; }
  /// Number of ranks on this rank's node. O(1).
  [[nodiscard]] rank_t local_size() const noexcept { return local_size_; }
  /// Node of any rank r (the same table on every rank). O(1); invalid_argument_error when r is
  /// outside [0, size()).
  [[nodiscard]] rank_t node_of(rank_t r) const {
    ORCHMLLM_REQUIRE(r >= 0 && r < size_, invalid_argument_error, "node_of: rank ", r,
                     " is outside [0, ", size_, ")");
    return node_of_[static_cast<std::size_t>(r)];
  }

 protected:
  // Nodes of g consecutive ranks (the last one may be smaller). O(size).
  void assign_blocks(rank_t g) {
    node_of_.resize(static_cast<std::size_t>(size_));
    for (rank_t q = 0; q < size_; ++q) node_of_[static_cast<std::size_t>(q)] = q / g;
    finish();
  }

  // Ranks whose keys compare equal share a node (keys[q] for every rank q; Key totally
  // ordered by <). O(size log size).
  template <class Key>
  void assign_by_keys(std::span<const Key> keys) {
    const auto n = static_cast<std::size_t>(size_);
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    // By key, then rank: each run is a node, its first entry the node's lowest rank.
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
    std::vector<std::size_t> lowest(n);  // per rank: its node's lowest rank
    for (std::size_t i = 0; i < n; ++i)
      lowest[order[i]] =
          i > 0 && !(keys[order[i - 1]] < keys[order[i]]) ? lowest[order[i - 1]] : order[i];
    node_of_.assign(n, 0);
    std::vector<rank_t> number(n, -1);  // per lowest rank: its node number
    rank_t next = 0;
    for (std::size_t q = 0; q < n; ++q) {
      if (number[lowest[q]] < 0) number[lowest[q]] = next++;
      node_of_[q] = number[lowest[q]];
    }
    finish();
  }

  rank_t rank_ = 0;
  rank_t size_ = 0;
  rank_t node_ = 0;
  rank_t num_nodes_ = 0;
  rank_t local_rank_ = 0;
  rank_t local_size_ = 0;
  std::vector<rank_t> node_of_;

 private:
  // node_, num_nodes_, local_rank_, local_size_ from node_of_ and rank_.
  void finish() {
    num_nodes_ = node_of_.empty() ? 0 : *std::max_element(node_of_.begin(), node_of_.end()) + 1;
    node_ = node_of_[static_cast<std::size_t>(rank_)];
    local_rank_ = 0;
    local_size_ = 0;
    for (rank_t q = 0; q < size_; ++q) {
      if (node_of_[static_cast<std::size_t>(q)] != node_) continue;
      if (q < rank_) ++local_rank_;
      ++local_size_;
    }
  }
};

}  // namespace orchmllm::detail
