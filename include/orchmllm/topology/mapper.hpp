#pragma once
/// @file mapper.hpp
/// The bin → rank mapping as a customisation point: the problem as a public read-only view
/// (`bin_mapping_problem`), the `mapper` concept (any callable that takes the problem and
/// returns the rank of every bin, a permutation of 0..d-1, checked by `map_bins`), the built-in
/// mappers as types (`mappers::identity`, `mappers::transport`, `mappers::bottleneck`,
/// `mappers::auction`) and `any_mapper` (one of them chosen at run time, `parse_mapper`);
/// `map_bins(binned, item_bytes, topo, mapper)` (topology/mapping.hpp, included at the end) runs
/// one. A mapper must be a pure function of the problem (every rank runs it and must get the
/// same answer) and safe to call from several threads. See docs/algorithms.md, "Choosing a
/// mapper, and writing your own".

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/core/text.hpp"
#include "orchmllm/detail/topology/sparse_profits.hpp"
#include "orchmllm/topology/mapping_result.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

namespace detail {
struct mapping_problem;
}  // namespace detail

/// One entry of a bin's sparse row: `node`, and `profit` = the bytes of the bin whose items
/// were sampled on that node (w[b][m] > 0; bytes that stay on their node if the bin goes there).
using node_bytes_entry = detail::profit_arc;

/// One mapping problem, as `map_bins` hands it to a mapper after its checks (square plan, rank
/// counts agree, item bytes non-negative, every bin's below 2^62 / (d + N + 4 + 2G)): the binned
/// plan (destination "ranks" are bins 0..d-1), the item bytes, the topology, and what every
/// mapping figure follows from: per bin b its bytes W_b and its sparse row w[b][m] > 0 (bytes
/// already on node m, nodes ascending), per node m the bytes held_m = Σ_b w[b][m]. With bin b
/// on node m, w[b][m] bytes stay on their node and W_b − w[b][m] cross nodes.
///
/// A read-only view of data owned by the `map_bins` call; it must not outlive it. All accessors
/// are O(1) unless stated and never throw. Deterministic: the same inputs give the same problem
/// on every rank.
class bin_mapping_problem {
 public:
  /// Internal: `map_bins` builds the view over its gathered problem.
  explicit bin_mapping_problem(const detail::mapping_problem& p) noexcept;

  /// The balancer plan whose destinations are bins (d bins = d source ranks).
  [[nodiscard]] const rearrangement& binned() const noexcept { return *binned_; }
  /// Bytes of every item, in source global-id order.
  [[nodiscard]] std::span<const std::int64_t> item_bytes() const noexcept { return item_bytes_; }
  /// The cluster: rank → node, node sizes.
  [[nodiscard]] const orchmllm::topology& topology() const noexcept { return *topo_; }
  /// d, the number of bins (= ranks).
  [[nodiscard]] rank_t num_bins() const noexcept { return static_cast<rank_t>(bin_bytes_.size()); }
  /// N, the number of nodes.
  [[nodiscard]] rank_t num_nodes() const noexcept { return static_cast<rank_t>(node_held_.size()); }
  /// W_b for every bin.
  [[nodiscard]] std::span<const std::int64_t> bin_bytes() const noexcept { return bin_bytes_; }
  /// W_b. Precondition: 0 ≤ b < d.
  [[nodiscard]] std::int64_t bin_bytes(rank_t b) const noexcept {
    return bin_bytes_[static_cast<std::size_t>(b)];
  }
  /// Bin b's sparse row: the nodes m with w[b][m] > 0, ascending, with those bytes. Precondition:
  /// 0 ≤ b < d.
  [[nodiscard]] std::span<const node_bytes_entry> bytes_by_node(rank_t b) const noexcept {
    const auto first = static_cast<std::size_t>(row_offsets_[static_cast<std::size_t>(b)]);
    const auto last = static_cast<std::size_t>(row_offsets_[static_cast<std::size_t>(b) + 1]);
    return rows_.subspan(first, last - first);
  }
  /// w[b][m] (0 when none of b's items were sampled on m). O(log of b's row).
  [[nodiscard]] std::int64_t bytes_on_node(rank_t b, rank_t m) const noexcept {
    const auto row = bytes_by_node(b);
    const auto it =
        std::lower_bound(row.begin(), row.end(), m,
                         [](const node_bytes_entry& e, rank_t node) { return e.node < node; });
    return it != row.end() && it->node == m ? it->profit : 0;
  }
  /// held_m, the bytes sampled on node m, for every node.
  [[nodiscard]] std::span<const std::int64_t> node_bytes() const noexcept { return node_held_; }
  /// Σ_b (W_b − max_m w[b][m]): no mapping moves fewer bytes across nodes
  /// (`mapping_result::inter_node_bytes_lower_bound`).
  [[nodiscard]] std::int64_t inter_node_bytes_lower_bound() const noexcept { return lower_; }
  /// No mapping has a smaller worst node (`mapping_result::worst_node_bytes_lower_bound`).
  [[nodiscard]] std::int64_t worst_node_bytes_lower_bound() const noexcept { return worst_lower_; }

  /// The result of mapping bin b to rank_of_bin[b]: the remapped plan and every figure, as
  /// `map_bins` would return it. O(n + d + N). Throws `invalid_argument_error` when
  /// `rank_of_bin` does not have d entries or is not a permutation of 0..d-1 (the message names
  /// the first bad entry).
  [[nodiscard]] mapping_result evaluate(std::span<const rank_t> rank_of_bin) const;

  /// Internal: the gathered problem the built-in mappers work on.
  [[nodiscard]] const detail::mapping_problem& internal() const noexcept { return *impl_; }

 private:
  const detail::mapping_problem* impl_;
  const rearrangement* binned_;
  std::span<const std::int64_t> item_bytes_;
  const orchmllm::topology* topo_;
  std::span<const std::int64_t> bin_bytes_;
  std::span<const std::int64_t> row_offsets_;
  std::span<const node_bytes_entry> rows_;
  std::span<const std::int64_t> node_held_;
  std::int64_t lower_ = 0;
  std::int64_t worst_lower_ = 0;
};

/// A mapper: callable as `m(problem)` on a `const bin_mapping_problem&`, returning the rank of
/// every bin (anything convertible to `std::vector<rank_t>`).
template <class M>
concept mapper = requires(const M& m, const bin_mapping_problem& p) {
  { m(p) } -> std::convertible_to<std::vector<rank_t>>;
};

/// The built-in mappers as types (see topology/mapping.hpp for the algorithms and guarantees).
/// Each returns the rank of every bin. Deterministic; never throw on a problem `map_bins`
/// built, except `auction` with a tolerance outside (0, 1].
namespace mappers {

/// Bin k → rank k (the baseline). O(d).
struct identity {
  static constexpr std::string_view name = "identity";
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const;
};

/// Minimum total inter-node bytes, then per-node GPU placement (the default). With w[b][m] the
/// bytes of bin b already on node m, sending bin b to node m costs W_b − w[b][m] inter-node
/// bytes; bins → nodes with node m taking exactly node_size(m) bins is a transportation problem,
/// solved by a min-cost flow (detail/topology/min_cost_flow.hpp). Then, inside each node, a
/// G × G Hungarian assignment (detail/topology/hungarian.hpp) places the node's bins on its
/// GPUs maximising the bytes that are already on their final GPU. A node of more than 512 GPUs
/// (`detail::dense_assignment_limit`; G² memory and G³ time would take tens of GB and hours at
/// 30,000) uses a sparse greedy assignment instead, which keeps at least half of those bytes.
/// Guarantees: (1) `inter_node_bytes` is the minimum over all d! bijections; (2) given the
/// bin → node assignment it chose, `moved_bytes` is the minimum over all bijections with that
/// node assignment (for nodes of up to 512 GPUs). It does not promise the minimum
/// `moved_bytes` among all bijections of minimum inter-node bytes: when several node
/// assignments tie on inter-node bytes, the one the flow returns need not be the best for
/// intra-node moves. Complexity: see `map_bins`.
struct transport {
  static constexpr std::string_view name = "transport";
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const;
};

/// Minimises the worst node, F = max over nodes of max(inter-node egress, ingress), what an
/// all-to-all's inter-node time follows: `transport` improved by swapping bins between nodes
/// (detail/topology/bottleneck.hpp), at most `step_budget` swaps of O(G·(d + N)) each. Never
/// worse than `transport` on F; a local optimum, not a proven one (the exact integer program
/// with a node limit is `glpk::bottleneck_ilp`, backend/glpk/mapping.hpp, opt-in).
struct bottleneck {
  static constexpr std::string_view name = "bottleneck";
  /// Swap steps of the local search; -1 = 2·d + 64. Values below -1 are read as 0.
  std::int64_t step_budget = -1;
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const;
};

/// The `transport` problem to within a tolerance, by an auction: inter-node bytes at most the
/// minimum + tolerance · U, U = Σ_b max_m w[b][m] (the bytes any mapping can keep, `total −
/// inter_node_bytes_lower_bound`), or the minimum + d bytes when that is larger; then per-node
/// GPU placement as `transport`. For large clusters: 8–53 times faster than `transport` from
/// 10,240 ranks, measured 0.005–0.014 % of U above the minimum (docs/results.md). Complexity:
/// O(nnz) plus bids of O(deg + log G) each, a few per bin in practice (at most d·⌈C/ε⌉ + 2d,
/// ε = max(1, ⌊tolerance·U/d⌋), C the largest w[b][m]). Throws `invalid_argument_error` unless
/// 0 < tolerance ≤ 1.
struct auction {
  static constexpr std::string_view name = "auction";
  /// The default: at most 1 % of U lost against `transport`.
  static constexpr double default_tolerance = 0.01;
  /// The fraction of U the result may keep less than the exact `transport` does.
  double tolerance = default_tolerance;
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const;
};

}  // namespace mappers

/// Whether M is one of the built-in mapper types above.
template <class M>
inline constexpr bool is_builtin_mapper_v =
    std::is_same_v<M, mappers::identity> || std::is_same_v<M, mappers::transport> ||
    std::is_same_v<M, mappers::bottleneck> || std::is_same_v<M, mappers::auction>;

/// One of the built-in mappers, chosen at run time: what configs, the command-line tool and the
/// Python package hold. A `mapper` itself (it runs the one it holds), so it goes wherever a
/// mapper object does; `map_bins` with it maps exactly as with the object it holds. Default:
/// `mappers::transport{}`. A plain copyable value.
class any_mapper {
 public:
  /// The alternatives, in the order of `mapper_names()`.
  using variant =
      std::variant<mappers::identity, mappers::transport, mappers::bottleneck, mappers::auction>;

  any_mapper() : v_(mappers::transport{}) {}
  /// Holds `m` (implicit: `any_mapper m = mappers::auction{.tolerance = 0.003};`).
  template <class M>
  requires is_builtin_mapper_v<M> any_mapper(M m)
      : v_(std::move(m)) {}  // NOLINT(google-explicit-constructor)

  /// The held mapper's name (its type's `name`).
  [[nodiscard]] std::string_view name() const noexcept {
    return std::visit([](const auto& m) { return m.name; }, v_);
  }
  /// Calls `f` with the held mapper object and returns what it returns (the same type for
  /// every alternative).
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), v_);
  }
  /// The held mapper when it is an M, else null.
  template <class M>
  [[nodiscard]] const M* get_if() const noexcept {
    return std::get_if<M>(&v_);
  }
  /// Runs the held mapper (see `mapper`).
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const {
    return visit([&](const auto& m) { return m(p); });
  }

 private:
  variant v_;
};

/// The names `parse_mapper` takes, in the order of `any_mapper::variant`: "identity",
/// "transport", "bottleneck", "auction".
[[nodiscard]] constexpr std::array<std::string_view, 4> mapper_names() noexcept {
  return {mappers::identity::name, mappers::transport::name, mappers::bottleneck::name,
          mappers::auction::name};
}

/// The built-in mapper named `name` (one of `mapper_names()`), with its default knobs. O(1).
/// Throws `invalid_argument_error` naming the unknown name and listing the valid ones.
[[nodiscard]] inline any_mapper parse_mapper(std::string_view name) {
  if (name == mappers::identity::name) return mappers::identity{};
  if (name == mappers::transport::name) return mappers::transport{};
  if (name == mappers::bottleneck::name) return mappers::bottleneck{};
  if (name == mappers::auction::name) return mappers::auction{};
  detail::raise<invalid_argument_error>(
      detail::concat("unknown mapper ", detail::quote_text(name),
                     "; expected one of: identity, transport, bottleneck, auction"));
}

namespace detail {

/// A mapper behind one indirect call: how the application's mapper reaches the compiled
/// library, and how a stage declaration holds it.
using erased_mapper = std::function<std::vector<rank_t>(const bin_mapping_problem&)>;

/// Throws `invalid_argument_error` unless 0 < tolerance ≤ 1 (`mappers::auction`'s knob).
inline void check_auction_tolerance(double tolerance) {
  ORCHMLLM_REQUIRE(tolerance > 0.0 && tolerance <= 1.0, invalid_argument_error,
                   "mappers::auction: tolerance ", tolerance, " is outside (0, 1]");
}

}  // namespace detail

}  // namespace orchmllm

// map_bins, and in header-only mode the bodies of the mappers above.
#include "orchmllm/topology/mapping.hpp"  // IWYU pragma: export
