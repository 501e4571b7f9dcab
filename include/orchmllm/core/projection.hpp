#pragma once
/// @file projection.hpp
/// The trainer's own item types: projections in the style of std::ranges (a pointer to a data
/// member or a member function, a lambda: anything `std::invoke` can call with `const T&`) that
/// read an item's length, or an `item_size` with its length and payload bytes, so a batch of
/// the trainer's own samples becomes a `batch_layout` without a hand-written adapter:
///
///   struct Sample { std::int64_t tokens; std::vector<float> pixels; };
///   auto layout = orchmllm::make_layout(samples_by_rank, &Sample::tokens);
///   auto sized  = orchmllm::make_layout(samples_by_rank, [](const Sample& s) {
///     return orchmllm::item_size{s.tokens, std::int64_t(s.pixels.size() * sizeof(float))};
///   });
///
/// `balance` and `gather_layout` take the same projections; `apply` and `apply_by_rank`
/// (core/rearrangement.hpp) move the items along a plan. Pure functions; the layout follows the
/// ranges' iteration order. See docs/algorithms.md, "Balancing the trainer's own items".

#include <concepts>
#include <cstdint>
#include <functional>
#include <ranges>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm {

/// An item's size as a projection may return it: its length (what the cost model reads) and
/// its payload bytes (what a rank's byte cap and the mapping count).
struct item_size {
  std::int64_t length = 0;  ///< tokens, patches, frames: the cost model's input
  std::int64_t bytes = 0;   ///< payload bytes
};

/// `P` projects a `const T&` to its size: `std::invoke(p, t)` returns an integer (the length;
/// bytes are then not given) or an `item_size`.
template <class P, class T>
concept item_projection = std::invocable<const P&, const T&> &&
    (std::integral<std::remove_cvref_t<std::invoke_result_t<const P&, const T&>>> ||
     std::same_as<std::remove_cvref_t<std::invoke_result_t<const P&, const T&>>, item_size>);

/// A range of ranks, each a range of items: the single-process view of a step's batch
/// (`std::vector<std::vector<Sample>>`, a span of spans, ...). Rank r's items get global ids
/// offset(r) + slot in iteration order.
template <class R>
concept ranks_range =
    std::ranges::input_range<R> && std::ranges::input_range<std::ranges::range_reference_t<R>>;

/// The item type of a `ranks_range`.
template <ranks_range R>
using ranks_item_t = std::ranges::range_value_t<std::ranges::range_reference_t<R>>;

/// Whether projection `P` on items `T` gives payload bytes (returns `item_size`).
template <class P, class T>
inline constexpr bool projection_gives_bytes_v =
    std::same_as<std::remove_cvref_t<std::invoke_result_t<const P&, const T&>>, item_size>;

namespace detail {

// The size of one item under a projection; an integral length is checked to fit int64.
template <class P, class T>
item_size project_size(const P& proj, const T& item) {
  if constexpr (projection_gives_bytes_v<P, T>) {
    return std::invoke(proj, item);
  } else {
    using L = std::remove_cvref_t<std::invoke_result_t<const P&, const T&>>;
    const L l = std::invoke(proj, item);
    if constexpr (std::is_unsigned_v<L> && sizeof(L) >= sizeof(std::int64_t))
      ORCHMLLM_REQUIRE(l <= static_cast<L>(INT64_MAX), invalid_argument_error, "item length ", l,
                       " exceeds 2^63 - 1 (int64 overflow)");
    return {static_cast<std::int64_t>(l), 0};
  }
}

// Appends the sizes of a range of items.
template <class Items, class P>
void append_sizes(Items&& items, const P& proj, std::vector<std::int64_t>& lengths,
                  std::vector<std::int64_t>* bytes) {
  for (auto&& item : items) {
    const item_size s = project_size(proj, item);
    lengths.push_back(s.length);
    if (bytes != nullptr) bytes->push_back(s.bytes);
  }
}

// The lengths (and, when `proj` returns `item_size`, bytes) of one rank's items, in
// iteration order: what `gather_layout` sends.
template <class R, class P>
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> project_sizes(R&& items,
                                                                              const P& proj) {
  constexpr bool with_bytes = projection_gives_bytes_v<P, std::ranges::range_value_t<R>>;
  std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> out;
  append_sizes(items, proj, out.first, with_bytes ? &out.second : nullptr);
  return out;
}

}  // namespace detail

/// The layout of a batch of the trainer's own items, one range of items per rank: item `slot`
/// of rank r (in iteration order) gets global id offset(r) + slot, its length and (when `proj`
/// returns `item_size`) bytes from `proj`. O(n + d) plus n projection calls.
/// Throws `invalid_argument_error` as the `batch_layout` constructor does (a negative length
/// or byte count, totals above 2^63 − 1), naming the item.
template <ranks_range R, class P>
requires item_projection<P, ranks_item_t<R>> batch_layout make_layout(R&& ranks, P proj) {
  constexpr bool with_bytes = projection_gives_bytes_v<P, ranks_item_t<R>>;
  std::vector<std::int64_t> offsets{0};
  std::vector<std::int64_t> lengths;
  std::vector<std::int64_t> bytes;
  for (auto&& items : ranks) {
    detail::append_sizes(items, proj, lengths, with_bytes ? &bytes : nullptr);
    offsets.push_back(static_cast<std::int64_t>(lengths.size()));
  }
  return batch_layout(std::move(offsets), std::move(lengths), std::move(bytes));
}

}  // namespace orchmllm
