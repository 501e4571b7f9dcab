#pragma once
/// @file mapping_result.hpp
/// `orchmllm::mapping_result`: a bin → rank mapping with its remapped plan and byte figures,
/// what `map_bins` (topology/mapping.hpp, topology/mapper.hpp), `bin_mapping_problem::evaluate`
/// and the GLPK bottleneck mapping (backend/glpk/mapping.hpp) return. Its own header so that
/// it can be named without the mapping algorithms (compiled mode, orchmllm/config.hpp).
///
/// Thread-safety: a plain value. Determinism: every figure is an exact integer computed from
/// the mapping, so equal mappings give equal results on every platform. See
/// docs/algorithms.md, "Mapping balanced bins to ranks".

#include <algorithm>
#include <cstdint>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/rearrangement.hpp"

namespace orchmllm {

/// Result of `map_bins` (topology/mapping.hpp) and of the GLPK bottleneck mapping. All figures
/// are byte counts (std::int64_t, never negative); the lower bounds depend only on the problem,
/// not on the mapping. `worst_node_bytes` is O(1) and never throws.
struct mapping_result {
  /// Rank of every bin (d entries, a permutation of 0..d-1).
  std::vector<rank_t> rank_of_bin;
  /// The remapped plan: item g goes to rank_of_bin[bin of g], in the slot it has in the binned
  /// plan (canonical when the binned plan's slots are).
  rearrangement plan;
  /// Bytes of items whose final rank differs from their source rank.
  std::int64_t moved_bytes = 0;
  /// Bytes of items whose final node differs from their source node.
  std::int64_t inter_node_bytes = 0;
  /// Σ_b (W_b − max_m w[b][m]): no bijection moves fewer bytes across nodes (W_b = bytes of bin
  /// b, w[b][m] = its bytes already on node m). Independent of the method.
  std::int64_t inter_node_bytes_lower_bound = 0;
  /// Largest bytes leaving one node (items whose source node is that node and whose final node
  /// is another).
  std::int64_t max_node_egress_bytes = 0;
  /// Largest bytes entering one node.
  std::int64_t max_node_ingress_bytes = 0;
  /// No bijection has a smaller worst node (see `worst_node_bytes`): the largest of, over nodes
  /// m with G_m GPUs, (bytes on m) − (the G_m largest w[b][m]) for egress and the sum of the
  /// G_m smallest (W_b − w[b][m]) for ingress, and ⌈inter_node_bytes_lower_bound / N⌉.
  /// Independent of the method.
  std::int64_t worst_node_bytes_lower_bound = 0;
  /// max(max_node_egress_bytes, max_node_ingress_bytes): the `bottleneck` objective, what an
  /// all-to-all's inter-node time follows when every node has the same NIC bandwidth.
  [[nodiscard]] std::int64_t worst_node_bytes() const noexcept {
    return std::max(max_node_egress_bytes, max_node_ingress_bytes);
  }
};

}  // namespace orchmllm
