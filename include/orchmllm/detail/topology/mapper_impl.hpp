#pragma once
// The bodies behind topology/mapping.hpp and topology/mapper.hpp (mapping.hpp includes this file
// in header-only mode; the compiled library defines them once): `map_bins` with a built-in
// mapper, the problem view, the built-in mapper types (both through detail::rank_of_bin, one
// code) and `map_bins` with the application's mapper. Internal.

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/topology/auction.hpp"
#include "orchmllm/detail/topology/bottleneck.hpp"
#include "orchmllm/detail/topology/mapping_problem.hpp"
#include "orchmllm/detail/topology/min_cost_flow.hpp"
#include "orchmllm/topology/mapper.hpp"
#include "orchmllm/topology/mapping.hpp"

namespace orchmllm {

namespace detail {

// The rank of every bin under a built-in mapper, on the gathered problem: what `map_bins` with
// a built-in and the mapper types' call operators compute, one code for both.
inline std::vector<rank_t> rank_of_bin(const mapping_problem& problem, const mappers::identity&) {
  std::vector<rank_t> ranks(static_cast<std::size_t>(problem.num_bins()));
  std::iota(ranks.begin(), ranks.end(), rank_t{0});
  return ranks;
}
inline std::vector<rank_t> rank_of_bin(const mapping_problem& problem, const mappers::transport&) {
  return place_on_gpus(problem, solve_transport(problem.by_node, problem.capacity));
}
inline std::vector<rank_t> rank_of_bin(const mapping_problem& problem,
                                       const mappers::bottleneck& m) {
  const std::int64_t budget =
      m.step_budget == -1 ? bottleneck_step_budget(problem.num_bins()) : m.step_budget;
  auto node_of_bin = solve_transport(problem.by_node, problem.capacity);
  bottleneck_local_search(problem, node_of_bin, budget);
  return place_on_gpus(problem, node_of_bin);
}
inline std::vector<rank_t> rank_of_bin(const mapping_problem& problem, const mappers::auction& m) {
  check_auction_tolerance(m.tolerance);
  return place_on_gpus(problem,
                       solve_transport_auction(problem.by_node, problem.capacity, m.tolerance));
}
inline std::vector<rank_t> rank_of_bin(const mapping_problem& problem, const any_mapper& m) {
  return m.visit([&](const auto& x) { return rank_of_bin(problem, x); });
}

}  // namespace detail

ORCHMLLM_FUNC mapping_result map_bins(const rearrangement& binned,
                                      std::span<const std::int64_t> item_bytes,
                                      const topology& topo, const any_mapper& m) {
  const auto problem = detail::build_mapping_problem(binned, item_bytes, topo);
  return detail::result_from_ranks(problem, detail::rank_of_bin(problem, m));
}

ORCHMLLM_FUNC bin_mapping_problem::bin_mapping_problem(const detail::mapping_problem& p) noexcept
    : impl_(&p),
      binned_(p.binned),
      item_bytes_(p.item_bytes),
      topo_(p.topo),
      bin_bytes_(p.bin_bytes),
      row_offsets_(p.by_node.offsets),
      rows_(p.by_node.arcs),
      node_held_(p.node_held),
      lower_(p.lower_bound),
      worst_lower_(p.worst_lower_bound) {}

namespace detail {

// Throws unless `rank_of_bin` is a permutation of 0..d-1; `who` names its author. O(d).
inline void check_rank_of_bin(std::span<const rank_t> rank_of_bin, rank_t d, std::string_view who) {
  ORCHMLLM_REQUIRE(rank_of_bin.size() == static_cast<std::size_t>(d), invalid_argument_error, who,
                   " returned ", rank_of_bin.size(), " ranks for ", d,
                   " bins (expected one rank per bin)");
  std::vector<char> taken(static_cast<std::size_t>(d), 0);
  for (std::size_t b = 0; b < rank_of_bin.size(); ++b) {
    const rank_t r = rank_of_bin[b];
    ORCHMLLM_REQUIRE(r >= 0 && r < d, invalid_argument_error, who, " mapped bin ", b, " to rank ",
                     r, ", outside [0, ", d, ")");
    ORCHMLLM_REQUIRE(!taken[static_cast<std::size_t>(r)], invalid_argument_error, who,
                     " mapped bin ", b, " to rank ", r,
                     ", which an earlier bin already has (not a permutation)");
    taken[static_cast<std::size_t>(r)] = 1;
  }
}

// `map_bins` with a mapper: build the problem, ask the mapper, check, build the result.
template <class M>
mapping_result map_bins_with(const rearrangement& binned, std::span<const std::int64_t> item_bytes,
                             const topology& topo, const M& m) {
  const auto problem = build_mapping_problem(binned, item_bytes, topo);
  const bin_mapping_problem view(problem);
  std::vector<rank_t> ranks = m(view);
  check_rank_of_bin(ranks, problem.num_bins(), "the mapper");
  return result_from_ranks(problem, std::move(ranks));
}

ORCHMLLM_FUNC mapping_result map_bins_erased(const rearrangement& binned,
                                             std::span<const std::int64_t> item_bytes,
                                             const topology& topo, const erased_mapper& m) {
  return map_bins_with(binned, item_bytes, topo, m);
}

}  // namespace detail

ORCHMLLM_FUNC mapping_result
bin_mapping_problem::evaluate(std::span<const rank_t> rank_of_bin) const {
  detail::check_rank_of_bin(rank_of_bin, num_bins(), "evaluate: the mapping");
  return detail::result_from_ranks(*impl_,
                                   std::vector<rank_t>(rank_of_bin.begin(), rank_of_bin.end()));
}

ORCHMLLM_FUNC std::vector<rank_t> mappers::identity::operator()(
    const bin_mapping_problem& p) const {
  return detail::rank_of_bin(p.internal(), *this);
}

ORCHMLLM_FUNC std::vector<rank_t> mappers::transport::operator()(
    const bin_mapping_problem& p) const {
  return detail::rank_of_bin(p.internal(), *this);
}

ORCHMLLM_FUNC std::vector<rank_t> mappers::bottleneck::operator()(
    const bin_mapping_problem& p) const {
  return detail::rank_of_bin(p.internal(), *this);
}

ORCHMLLM_FUNC std::vector<rank_t> mappers::auction::operator()(const bin_mapping_problem& p) const {
  return detail::rank_of_bin(p.internal(), *this);
}

}  // namespace orchmllm
