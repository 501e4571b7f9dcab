#pragma once
/// @file mapping.hpp
/// Mapping balanced bins to ranks so that data moves as little as possible across nodes:
/// `map_bins` picks the bijection bins → ranks (any one keeps the balance) with a mapper
/// (topology/mapper.hpp: `identity`, the baseline; `transport`, the exact minimum of
/// inter-node bytes, the default; `bottleneck`, the worst node; `auction`, `transport` to within
/// a tolerance for large clusters; or the application's own) and reports the remapped plan and
/// its byte figures (`mapping_result`, topology/mapping_result.hpp). Pure functions;
/// integer arithmetic and fixed tie-breaks, so every rank plans the same mapping locally. See
/// docs/algorithms.md, "Mapping balanced bins to ranks".

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/mapper.hpp"
#include "orchmllm/topology/mapping_result.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// Maps the bins of a balancer plan to ranks.
///
/// `binned` is a plan whose destination ranks are bins 0..d-1, with d = topo.num_ranks() =
/// binned.num_src_ranks() = binned.num_dst_ranks(); `item_bytes` has one non-negative entry per
/// item (source global id order). Returns the bijection bin → rank, the remapped plan (every
/// item keeps its slot: a balancer's canonical slots stay canonical, a plan whose slots are
/// grouped by micro-batch stays grouped) and its byte figures (see `mapping_result`).
///
/// Complexity: O(n + d log d) to gather per-bin bytes by node and by rank; `transport` adds the
/// flow, d shortest-path augmentations of O((A + V) log V) each in the worst case (A ≤ nnz + d
/// + N arcs with nnz ≤ min(n, d·N) the non-zero (bin, node) pairs, V = d + N + 2) but usually
/// far fewer steps thanks to early stopping, plus O(Σ_m G_m³) for the per-node assignments (so
/// a topology with one huge node costs O(d³)). `bottleneck` adds at most `2·d + 64` swap steps
/// of O(G·(d + N)) each. `auction` replaces the flow by bids of O(deg + log G) each, a few per
/// bin in practice (at most d·⌈C/ε⌉ + 2d, detail/topology/auction.hpp). Memory O(n + d + nnz +
/// max_m G_m²).
///
/// `m` is a built-in mapper (topology/mapper.hpp: `mappers::identity`, `transport` (the
/// default), `bottleneck`, `auction`) or an `any_mapper` holding one; the overload below takes
/// the application's own.
///
/// Throws `invalid_argument_error` when the plan is not square, the topology's rank count
/// differs, item_bytes has the wrong size, a byte count is negative, or a bin's bytes exceed
/// 2^62 / (d + N + 4 + 2G), G the largest node (the exact solvers' overflow guard).
ORCHMLLM_FUNC mapping_result map_bins(const rearrangement& binned,
                                      std::span<const std::int64_t> item_bytes,
                                      const topology& topo,
                                      const any_mapper& m = mappers::transport{});

namespace detail {

/// `map_bins` with a mapper (the body, header-only: detail/topology/mapper_impl.hpp).
template <class M>
mapping_result map_bins_with(const rearrangement& binned, std::span<const std::int64_t> item_bytes,
                             const topology& topo, const M& m);

/// `map_bins` with a mapper behind a std::function (the compiled library's entry point; the
/// header-only build defines it too).
ORCHMLLM_FUNC mapping_result map_bins_erased(const rearrangement& binned,
                                             std::span<const std::int64_t> item_bytes,
                                             const topology& topo, const erased_mapper& m);

}  // namespace detail

/// Maps the bins of `binned` to ranks with the application's own mapper `m` (or the GLPK one,
/// backend/glpk/mapping.hpp): checks the inputs as the overload above does, builds the problem,
/// calls `m` once, checks its answer and returns the remapped plan (every item in its slot) with
/// its figures (`mapping_result`). Complexity: O(n + d + N) around the mapper's own cost. In
/// compiled mode the mapper runs from the library through one std::function call; the result
/// is the same. Throws what the overload above throws for bad inputs, what `m` throws, and
/// `invalid_argument_error` when `m` returns a vector whose size is not d or that is not a
/// permutation of 0..d-1 (the message names the size or the first bad entry).
template <class M>
requires(mapper<M> && !std::is_convertible_v<const M&, any_mapper>) mapping_result
    map_bins(const rearrangement& binned, std::span<const std::int64_t> item_bytes,
             const topology& topo, const M& m) {
#if ORCHMLLM_USE_COMPILED
  return detail::map_bins_erased(binned, item_bytes, topo,
                                 detail::erased_mapper([&m](const bin_mapping_problem& p) {
                                   return std::vector<rank_t>(m(p));
                                 }));
#else
  return detail::map_bins_with(binned, item_bytes, topo, m);
#endif
}

}  // namespace orchmllm

#if !ORCHMLLM_USE_COMPILED
#include "orchmllm/detail/topology/mapper_impl.hpp"
#endif
