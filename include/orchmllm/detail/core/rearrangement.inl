#pragma once
// The bodies of core/rearrangement.hpp's `apply_by_rank` and ragged-row `apply`, included by it
// at its end.

#include <cstddef>
#include <cstdint>
#include <ranges>
#include <type_traits>
#include <vector>

namespace orchmllm {

template <std::ranges::random_access_range R>
requires std::ranges::sized_range<R> &&
    std::ranges::random_access_range<std::ranges::range_reference_t<R>> &&
    std::ranges::sized_range<std::ranges::range_reference_t<R>>
        std::vector<std::vector<std::ranges::range_value_t<std::ranges::range_reference_t<R>>>>
        apply_by_rank(const rearrangement& plan, R&& ranks) {
  using inner = std::ranges::range_reference_t<R>;
  ORCHMLLM_REQUIRE(static_cast<std::int64_t>(std::ranges::size(ranks)) == plan.num_src_ranks(),
                   invalid_argument_error, "apply_by_rank: ", std::ranges::size(ranks),
                   " ranks for a plan from ", plan.num_src_ranks());
  const auto rank_at = [&](rank_t r) -> inner { return std::ranges::begin(ranks)[r]; };
  for (rank_t r = 0; r < plan.num_src_ranks(); ++r)
    ORCHMLLM_REQUIRE(static_cast<std::int64_t>(std::ranges::size(rank_at(r))) ==
                         plan.src_offsets()[static_cast<std::size_t>(r) + 1] -
                             plan.src_offsets()[static_cast<std::size_t>(r)],
                     invalid_argument_error, "apply_by_rank: rank ", r, " holds ",
                     std::ranges::size(rank_at(r)), " items, the plan expects ",
                     plan.src_offsets()[static_cast<std::size_t>(r) + 1] -
                         plan.src_offsets()[static_cast<std::size_t>(r)]);
  // The outer range owns its inner ranges unless they are views (spans): move only then.
  constexpr bool move =
      detail::owns_elements_v<R> && !std::ranges::view<std::remove_cvref_t<inner>>;
  std::vector<std::vector<std::ranges::range_value_t<inner>>> out(
      static_cast<std::size_t>(plan.num_dst_ranks()));
  const std::vector<rank_t> src_rank = detail::ranks_of_items(plan.src_offsets());
  for (rank_t r = 0; r < plan.num_dst_ranks(); ++r) {
    auto& dst = out[static_cast<std::size_t>(r)];
    const auto begin = plan.dst_offsets()[static_cast<std::size_t>(r)];
    const auto end = plan.dst_offsets()[static_cast<std::size_t>(r) + 1];
    dst.reserve(static_cast<std::size_t>(end - begin));
    for (auto h = begin; h < end; ++h) {
      const auto g = plan.source_of(h);
      const rank_t s = src_rank[static_cast<std::size_t>(g)];
      const auto it =
          std::ranges::begin(rank_at(s)) + (g - plan.src_offsets()[static_cast<std::size_t>(s)]);
      if constexpr (move) {
        dst.push_back(std::ranges::iter_move(it));
      } else {
        dst.push_back(*it);
      }
    }
  }
  return out;
}

template <class T>
ragged_rows<T> apply(const rearrangement& plan, const ragged_rows<T>& in) {
  const auto n = plan.num_items();
  ORCHMLLM_REQUIRE(in.row_width >= 0, invalid_argument_error, "row width ", in.row_width,
                   " is negative");
  ORCHMLLM_REQUIRE(
      static_cast<std::int64_t>(in.row_offsets.size()) == n + 1 && in.row_offsets.front() == 0,
      invalid_argument_error, "apply: ", in.row_offsets.size(), " row offsets for a plan of ", n,
      " items (need n + 1 starting at 0)");
  for (std::int64_t g = 0; g < n; ++g)
    ORCHMLLM_REQUIRE(in.row_offsets[static_cast<std::size_t>(g) + 1] >=
                         in.row_offsets[static_cast<std::size_t>(g)],
                     invalid_argument_error, "row offsets decrease at item ", g);
  // rows.size() == back · width, checked by division (the product may pass 2^63 − 1).
  const auto elements = static_cast<std::int64_t>(in.rows.size());
  ORCHMLLM_REQUIRE(in.row_width == 0 ? elements == 0
                                     : elements % in.row_width == 0 &&
                                           elements / in.row_width == in.row_offsets.back(),
                   invalid_argument_error, "apply: ", in.rows.size(), " elements but offsets give ",
                   in.row_offsets.back(), " rows of width ", in.row_width);
  ragged_rows<T> out;
  out.row_width = in.row_width;
  out.row_offsets.resize(static_cast<std::size_t>(n) + 1, 0);
  out.rows.reserve(in.rows.size());
  const auto w = static_cast<std::size_t>(in.row_width);
  for (std::int64_t h = 0; h < n; ++h) {
    const auto g = static_cast<std::size_t>(plan.source_of(h));
    const auto b = static_cast<std::size_t>(in.row_offsets[g]) * w;
    const auto e = static_cast<std::size_t>(in.row_offsets[g + 1]) * w;
    out.rows.insert(out.rows.end(), in.rows.begin() + static_cast<std::ptrdiff_t>(b),
                    in.rows.begin() + static_cast<std::ptrdiff_t>(e));
    out.row_offsets[static_cast<std::size_t>(h) + 1] =
        out.row_offsets[static_cast<std::size_t>(h)] + (in.row_offsets[g + 1] - in.row_offsets[g]);
  }
  return out;
}

}  // namespace orchmllm
