#pragma once
/// @file collectives.hpp
/// Typed collectives over any `communicator`: values of trivially copyable types in, vectors of
/// them out, instead of byte casts at every call site; and `exchange_checked`, the pattern of
/// the library's agreements (a small record per rank, then the same check, and so the same
/// error, on every rank) for a trainer's own.
///
///     const auto nodes = orchmllm::all_gather(comm, comm.node());      // one value per rank
///     const auto rows = orchmllm::all_gatherv(comm, std::span(my_lengths));  // any count each
///     for (auto x : rows.of(2)) ...                                        // rank 2's values
///
/// All functions are collective: every rank of the group calls them in the same order with
/// the same template arguments. Deterministic: every rank receives the same values in rank
/// order. They throw what the communicator throws (`communication_error`), and
/// `invalid_argument_error` for arguments of the wrong size before anything is sent. See
/// docs/communication.md, "Typed collectives".

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <type_traits>
#include <vector>

#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm {

/// A value the typed collectives move: trivially copyable, so its bytes are the value. Not a
/// pointer (an address means nothing on another rank).
template <class T>
concept wire_value =
    std::is_trivially_copyable_v<T> && !std::is_pointer_v<T> && !std::is_member_pointer_v<T>;

/// Values gathered from every rank, in rank order: rank r's are `values[offsets[r] ..
/// offsets[r + 1])`.
template <class T>
struct gathered_values {
  std::vector<T> values;
  std::vector<std::int64_t> offsets{0};  ///< size() + 1 entries, offsets[0] = 0

  /// Rank r's values. Precondition: 0 ≤ r < the group size. O(1).
  [[nodiscard]] std::span<const T> of(rank_t r) const noexcept {
    const auto b = offsets[static_cast<std::size_t>(r)];
    const auto e = offsets[static_cast<std::size_t>(r) + 1];
    return std::span<const T>(values).subspan(static_cast<std::size_t>(b),
                                              static_cast<std::size_t>(e - b));
  }
};

/// Collective: every rank's `mine`, in rank order (size() values). One all_gather of
/// sizeof(T) bytes per rank: the same count on every rank by construction, so a communicator
/// with `agreed_gather_communicator` runs it without its argument agreement (one collective).
template <wire_value T, communicator Comm>
[[nodiscard]] std::vector<T> all_gather(Comm& comm, const T& mine) {
  std::vector<T> all(static_cast<std::size_t>(comm.size()));
  const auto* send = reinterpret_cast<const std::byte*>(&mine);
  auto* recv = reinterpret_cast<std::byte*>(all.data());
  if constexpr (agreed_gather_communicator<Comm>)
    comm.all_gather(send, static_cast<std::int64_t>(sizeof(T)), recv, agreed_gather{});
  else
    comm.all_gather(send, static_cast<std::int64_t>(sizeof(T)), recv);
  return all;
}

/// Collective: every rank's `mine`, concatenated in rank order (size() · mine.size() values).
/// Every rank passes the same count. One all_gather of mine.size() · sizeof(T) bytes per rank.
template <wire_value T, communicator Comm>
[[nodiscard]] std::vector<T> all_gather(Comm& comm, std::span<const T> mine) {
  std::vector<T> all(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.all_gather(reinterpret_cast<const std::byte*>(mine.data()),
                  static_cast<std::int64_t>(mine.size_bytes()),
                  reinterpret_cast<std::byte*>(all.data()));
  return all;
}

namespace detail {

// The all_gatherv of the typed overloads below; `agreed`: the counts are the same on every rank
// by construction (the communicator's agreed overload where it has one).
template <bool agreed, wire_value T, communicator Comm>
gathered_values<T> typed_all_gatherv(Comm& comm, std::span<const T> mine,
                                     std::span<const std::int64_t> counts) {
  const auto d = static_cast<std::size_t>(comm.size());
  ORCHMLLM_REQUIRE(counts.size() == d, invalid_argument_error, "all_gatherv: ", counts.size(),
                   " counts for a group of ", d);
  constexpr auto width = static_cast<std::int64_t>(sizeof(T));
  gathered_values<T> out;
  out.offsets.assign(d + 1, 0);
  std::vector<std::int64_t> bytes(d), displs(d);
  for (std::size_t r = 0; r < d; ++r) {
    ORCHMLLM_REQUIRE(counts[r] >= 0 && out.offsets[r] <= (INT64_MAX / width) - counts[r],
                     invalid_argument_error, "all_gatherv: count ", counts[r], " of rank ", r,
                     " is negative or the total exceeds 2^63 - 1 bytes");
    out.offsets[r + 1] = out.offsets[r] + counts[r];
    bytes[r] = counts[r] * width;
    displs[r] = out.offsets[r] * width;
  }
  const auto me = static_cast<std::size_t>(comm.rank());
  ORCHMLLM_REQUIRE(counts[me] == static_cast<std::int64_t>(mine.size()), invalid_argument_error,
                   "all_gatherv: rank ", me, " passes ", mine.size(), " values but counts say ",
                   counts[me]);
  out.values.resize(static_cast<std::size_t>(out.offsets[d]));
  const auto* send = reinterpret_cast<const std::byte*>(mine.data());
  auto* recv = reinterpret_cast<std::byte*>(out.values.data());
  if constexpr (agreed && agreed_gather_communicator<Comm>)
    comm.all_gatherv(send, bytes[me], recv, bytes, displs, agreed_gather{});
  else
    comm.all_gatherv(send, bytes[me], recv, bytes, displs);
  return out;
}

}  // namespace detail

/// Collective: every rank's `mine` when every rank already knows every count: `counts[r]`
/// values come from rank r (the same counts on every rank). One all_gatherv of
/// mine.size() · sizeof(T) bytes per rank. O(size()) besides. Throws `invalid_argument_error`
/// when counts has another size than the group, a count is negative, counts[rank()] differs
/// from mine.size(), or the total exceeds 2^63 − 1 bytes.
template <wire_value T, communicator Comm>
[[nodiscard]] gathered_values<T> all_gatherv(Comm& comm, std::span<const T> mine,
                                             std::span<const std::int64_t> counts) {
  return detail::typed_all_gatherv<false>(comm, mine, counts);
}

/// Collective: the same for counts that every rank holds by construction (derived from data
/// the ranks gathered, e.g. the item counts of records from `exchange_checked`): a communicator
/// with `agreed_gather_communicator` runs it without its argument agreement. Counts that differ
/// between ranks break the contract (the transfer may hang until the backend's deadline).
template <wire_value T, communicator Comm>
[[nodiscard]] gathered_values<T> all_gatherv(Comm& comm, std::span<const T> mine,
                                             std::span<const std::int64_t> counts, agreed_gather) {
  return detail::typed_all_gatherv<true>(comm, mine, counts);
}

/// Collective: every rank's `mine`, any count per rank: the counts first (one all_gather of 8
/// bytes per rank), then the values (one all_gatherv, of counts agreed by construction).
template <wire_value T, communicator Comm>
[[nodiscard]] gathered_values<T> all_gatherv(Comm& comm, std::span<const T> mine) {
  const auto counts = all_gather(comm, static_cast<std::int64_t>(mine.size()));
  return all_gatherv(comm, mine, std::span<const std::int64_t>(counts), agreed_gather{});
}

/// Collective: every rank's record (one all_gather of sizeof(T) bytes per rank), then
/// `check(records)` on every rank. Every rank sees the same records, so a deterministic check
/// that throws throws the same error on every rank, and no rank is left waiting in a later
/// collective: this is how a rank's local fault (bad input, another plan) reaches the whole
/// group, as in `gather_layout` and `gather_step_metadata`. Returns the records when the check
/// passes.
template <wire_value T, communicator Comm, class Check>
requires std::invocable<Check&, std::span<const T>> std::vector<T> exchange_checked(Comm& comm,
                                                                                    const T& mine,
                                                                                    Check check) {
  auto all = all_gather(comm, mine);
  std::invoke(check, std::span<const T>(all));
  return all;
}

}  // namespace orchmllm
