#pragma once
// The out-of-class members of `rank_load`, included by core/rank_load.hpp at its end: adding and
// removing an item, the loads, the cap tests and the checked footprints.

#include <algorithm>
#include <cstdint>

namespace orchmllm {

template <class Cost, rank_load_mode Mode>
constexpr void rank_load<Cost, Mode>::add(const item_shape& item, Cost cost) {
  ++count_;
  rows_ += item.rows;
  sum_cost_ += cost;
  sum_tokens_ += item.length;
  sum_bytes_ += item.bytes;
  if (count_ == 1 || item.row_length > max_length_) {
    max_length_ = item.row_length;
    cached_model_ = nullptr;  // the cached unit was for another longest item
  }
  if (count_ == 1 || item.bytes > max_bytes_) max_bytes_ = item.bytes;
  if constexpr (removable) items_.push_back(item);
}

template <class Cost, rank_load_mode Mode>
constexpr void rank_load<Cost, Mode>::remove_item(const item_shape& item, Cost cost) {
  ORCHMLLM_REQUIRE(count_ > 0, invalid_argument_error, "removing an item of length ", item.length,
                   " from an empty rank");
  const auto it = std::find(items_.rbegin(), items_.rend(), item);
  ORCHMLLM_REQUIRE(it != items_.rend(), invalid_argument_error, "the rank holds no item of length ",
                   item.length, ", ", item.rows, " rows of ", item.row_length, " and ", item.bytes,
                   " bytes to remove");
  *it = items_.back();
  items_.pop_back();
  --count_;
  rows_ -= item.rows;
  sum_cost_ -= cost;
  sum_tokens_ -= item.length;
  sum_bytes_ -= item.bytes;
  if (count_ == 0) {
    sum_cost_ = Cost{};  // an emptied rank loads exactly 0, floating costs included
    max_length_ = max_bytes_ = 0;
    cached_model_ = nullptr;
  } else if (item.row_length == max_length_ || item.bytes == max_bytes_) {
    if (item.row_length == max_length_) cached_model_ = nullptr;  // the longest may change
    max_length_ = max_bytes_ = 0;
    for (const auto& x : items_) {
      max_length_ = std::max(max_length_, x.row_length);
      max_bytes_ = std::max(max_bytes_, x.bytes);
    }
  }
}

template <class Cost, rank_load_mode Mode>
template <class C>
constexpr Cost rank_load<Cost, Mode>::load(const C& cost) const {
  if (!policy_.is_padded()) return sum_cost_;
  if (count_ == 0) return Cost{};
  return padded_load(rows_, unit_of(max_length_, cost));
}

template <class Cost, rank_load_mode Mode>
template <class C>
constexpr Cost rank_load<Cost, Mode>::load_if_added(const item_shape& item, Cost item_cost,
                                                    const C& cost) const {
  if (!policy_.is_padded()) return sum_cost_ + item_cost;
  return padded_load(
      rows_ + item.rows,
      unit_of(count_ == 0 ? item.row_length : std::max(max_length_, item.row_length), cost));
}

template <class Cost, rank_load_mode Mode>
constexpr bool rank_load<Cost, Mode>::fits(const capacity& cap) const {
  if (!policy_.is_padded()) return sum_of(cap.what) <= cap.limit;
  return count_ == 0 ||
         fits_count(count_of(cap.what, 0), widest(cap.what, max_length_, max_bytes_), cap);
}

template <class Cost, rank_load_mode Mode>
constexpr bool rank_load<Cost, Mode>::fits_if_added(const capacity& cap,
                                                    const item_shape& item) const {
  if (!policy_.is_padded()) {
    const std::int64_t f =
        cap.what == capacity::measure::tokens ? item.length : item.bytes;  // unpadded
    return f <= cap.limit - sum_of(cap.what);
  }
  const std::int64_t w = count_ == 0 ? widest(cap.what, item.row_length, item.bytes)
                                     : widest(cap.what, std::max(max_length_, item.row_length),
                                              std::max(max_bytes_, item.bytes));
  // count_of(what, rows) + 1 more item: rows_ + item.rows rows, or count_ + 1 items.
  return fits_count(count_of(cap.what, item.rows) + (cap.what == capacity::measure::tokens ? 0 : 1),
                    w, cap);
}

template <class Cost, rank_load_mode Mode>
template <class C>
constexpr Cost rank_load<Cost, Mode>::unit_of(std::int64_t longest, const C& cost) const {
  if (count_ > 0 && longest == max_length_ && static_cast<const void*>(&cost) == cached_model_)
    return unit_;
  return static_cast<Cost>(cost(policy_.padded_length(longest)));
}

template <class Cost, rank_load_mode Mode>
template <class C>
constexpr void rank_load<Cost, Mode>::cache(const C& cost) {
  if (!policy_.is_padded() || count_ == 0) return;
  if (static_cast<const void*>(&cost) == cached_model_) return;
  unit_ = static_cast<Cost>(cost(policy_.padded_length(max_length_)));
  cached_model_ = &cost;
}

template <class Cost, rank_load_mode Mode>
constexpr std::int64_t rank_load<Cost, Mode>::footprint(std::int64_t count, std::int64_t per_item,
                                                        const char* what) const {
  ORCHMLLM_REQUIRE(per_item == 0 || count <= INT64_MAX / per_item, invalid_argument_error, count,
                   count == count_ ? " items" : " rows", " padded to ", per_item, " ", what,
                   " each exceed 2^63 - 1 ", what);
  return count * per_item;
}

}  // namespace orchmllm
