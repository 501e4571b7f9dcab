#pragma once
// Splitting 64-bit byte transfers into messages an engine that counts in `int` can carry.
//
// MPI (before the MPI-4 `_c` entry points) and several collective implementations count
// elements in `int`, so one call moves at most INT_MAX bytes of MPI_BYTE and addresses at most
// INT_MAX bytes of displacement (ompi#5383, mpifileutils#186). A transfer of `count` bytes at
// byte offset `displ` is therefore sent as ceil(count / limit) point-to-point messages, each at
// most `limit` bytes, whose pointers are computed in 64 bits. This header holds that splitting
// as pure arithmetic, independent of MPI, so its edge cases (counts above 2^31 and 2^32 per
// peer and in total) are tested without allocating anything (tests/comm/chunking_test.cpp).
//
// Backends that walk the messages lazily use chunk_count / nth_chunk (the MPI backend does, so
// its memory does not grow with the number of messages); plan_chunks materialises the whole
// per-peer list and is the reference the tests check the arithmetic against.
//
// Zero counts produce no message at all: the receiving side computes the same (empty) list from
// its matching count, so nothing is posted on either side (the zero-count rule of the
// communicator concept).
//
// The argument checks that precede any such transfer (`validate_counts_displs`,
// `check_all_to_allv_args`) live here too: every byte-moving backend (MPI, NCCL) runs them.

#include <climits>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "orchmllm/core/error.hpp"

namespace orchmllm::detail {

/// One message of a chunked transfer: `bytes` bytes at byte `offset` of the caller's buffer.
struct chunk {
  std::int64_t offset = 0;
  std::int64_t bytes = 0;
  friend bool operator==(const chunk&, const chunk&) = default;
};

/// Default cap on the number of messages `plan_chunks` materialises: more than INT_MAX
/// messages in one call is a misconfigured limit, not a workload (and would not fit the `int`
/// request counts of MPI_Waitall).
inline constexpr std::int64_t max_chunk_messages = INT_MAX;

/// Number of messages `bytes` bytes split into with at most `limit` bytes each:
/// ceil(bytes / limit), 0 for 0 bytes. Preconditions (unchecked): bytes >= 0, limit >= 1. O(1).
[[nodiscard]] constexpr std::int64_t chunk_count(std::int64_t bytes, std::int64_t limit) noexcept {
  // bytes / limit + (remainder != 0): no `bytes + limit - 1`, which overflows near INT64_MAX.
  return bytes / limit + (bytes % limit != 0 ? 1 : 0);
}

/// Message `k` (0-based, k < chunk_count(count, limit)) of the transfer of `count` bytes at
/// `displ`: offset displ + k·limit, size min(limit, count − k·limit). O(1), no overflow for
/// displ + count <= INT64_MAX.
[[nodiscard]] constexpr chunk nth_chunk(std::int64_t count, std::int64_t displ, std::int64_t limit,
                                        std::int64_t k) noexcept {
  const std::int64_t done = k * limit;  // <= count - 1 < INT64_MAX for a valid k
  const std::int64_t left = count - done;
  return chunk{displ + done, left < limit ? left : limit};
}

/// Per-peer message lists in CSR form: peer p's messages, in increasing offset order, are
/// `chunks[first[p] .. first[p + 1])`.
struct chunk_plan {
  std::vector<std::int64_t> first{0};  // peers + 1 entries
  std::vector<chunk> chunks;

  [[nodiscard]] std::size_t num_peers() const noexcept { return first.size() - 1; }
  [[nodiscard]] std::int64_t num_messages() const noexcept {
    return static_cast<std::int64_t>(chunks.size());
  }
  /// Messages of peer p (p < num_peers(), unchecked).
  [[nodiscard]] std::span<const chunk> peer(std::size_t p) const noexcept {
    return std::span<const chunk>(chunks).subspan(
        static_cast<std::size_t>(first[p]), static_cast<std::size_t>(first[p + 1] - first[p]));
  }
};

/// Validates one side of a v-collective: `counts` and `displs` have `peers` entries each, all
/// non-negative, and displ + count fits in 64 bits for every peer. `what` names the side in
/// messages ("send", "recv"). Throws invalid_argument_error naming the peer and the value.
/// O(peers).
inline void validate_counts_displs(std::span<const std::int64_t> counts,
                                   std::span<const std::int64_t> displs, std::size_t peers,
                                   const char* what) {
  ORCHMLLM_REQUIRE(counts.size() == peers, invalid_argument_error, what, "_counts has ",
                   counts.size(), " entries but the communicator has ", peers, " ranks");
  ORCHMLLM_REQUIRE(displs.size() == peers, invalid_argument_error, what, "_displs has ",
                   displs.size(), " entries but the communicator has ", peers, " ranks");
  for (std::size_t p = 0; p < peers; ++p) {
    ORCHMLLM_REQUIRE(counts[p] >= 0, invalid_argument_error, what, "_counts[", p, "] = ", counts[p],
                     " is negative");
    ORCHMLLM_REQUIRE(displs[p] >= 0, invalid_argument_error, what, "_displs[", p, "] = ", displs[p],
                     " is negative");
    ORCHMLLM_REQUIRE(displs[p] <= std::numeric_limits<std::int64_t>::max() - counts[p],
                     invalid_argument_error, what, "_displs[", p, "] + ", what, "_counts[", p,
                     "] = ", displs[p], " + ", counts[p], " exceeds the 64-bit byte range");
  }
}

/// True when every peer's transfer can go through one int-counted call: count <= limit and
/// displ + count <= INT_MAX (the whole addressed extent fits in `int`, which also keeps MPI
/// implementations that add displacements in `int` safe). Preconditions: as checked by
/// `validate_counts_displs`. O(peers), no allocation.
[[nodiscard]] inline bool fits_in_int_call(std::span<const std::int64_t> counts,
                                           std::span<const std::int64_t> displs,
                                           std::int64_t limit) noexcept {
  for (std::size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] > limit || displs[p] > static_cast<std::int64_t>(INT_MAX) - counts[p])
      return false;
  }
  return true;
}

/// Local argument checks of an all_to_allv (shared by the MPI and NCCL backends): the error,
/// or nullopt. Never throws, so the caller can agree on it with its peers first.
inline std::optional<invalid_argument_error> check_all_to_allv_args(
    const char* op, std::size_t p, const std::byte* send, std::span<const std::int64_t> send_counts,
    std::span<const std::int64_t> send_displs, const std::byte* recv,
    std::span<const std::int64_t> recv_counts, std::span<const std::int64_t> recv_displs) {
  try {
    validate_counts_displs(send_counts, send_displs, p, "all_to_allv: send");
    validate_counts_displs(recv_counts, recv_displs, p, "all_to_allv: recv");
    for (std::size_t q = 0; q < p; ++q) {
      ORCHMLLM_REQUIRE(send_counts[q] == 0 || send != nullptr, invalid_argument_error, op,
                       ": null send buffer with send_counts[", q, "] = ", send_counts[q]);
      ORCHMLLM_REQUIRE(recv_counts[q] == 0 || recv != nullptr, invalid_argument_error, op,
                       ": null recv buffer with recv_counts[", q, "] = ", recv_counts[q]);
    }
  } catch (const invalid_argument_error& e) {
    return e;
  }
  return std::nullopt;
}

/// Splits every peer's transfer (counts[p] bytes at displs[p]) into messages of at most `limit`
/// bytes: offsets contiguous and increasing, sizes summing to counts[p], all messages but the
/// last exactly `limit` bytes, no message for a zero count.
///
/// Deterministic; O(peers + messages) time and memory. Throws invalid_argument_error when
/// limit < 1, when the spans differ in size, a count or displacement is negative, displ + count
/// overflows, or the plan would exceed `max_messages` messages in total (checked before
/// allocating, so a huge count with a tiny limit cannot exhaust memory).
[[nodiscard]] inline chunk_plan plan_chunks(std::span<const std::int64_t> counts,
                                            std::span<const std::int64_t> displs,
                                            std::int64_t limit,
                                            std::int64_t max_messages = max_chunk_messages) {
  ORCHMLLM_REQUIRE(limit >= 1, invalid_argument_error, "chunk limit ", limit,
                   " must be at least 1 byte");
  ORCHMLLM_REQUIRE(max_messages >= 0, invalid_argument_error, "max_messages ", max_messages,
                   " is negative");
  validate_counts_displs(counts, displs, counts.size(), "chunk");
  std::int64_t total = 0;
  for (std::size_t p = 0; p < counts.size(); ++p) {
    const std::int64_t n = chunk_count(counts[p], limit);
    // total + n > max_messages, written without overflow (both operands are <= INT64_MAX).
    ORCHMLLM_REQUIRE(n <= max_messages - total, invalid_argument_error, "splitting into chunks of ",
                     limit, " bytes needs more than ", max_messages, " messages (peer ", p,
                     " alone sends ", counts[p], " bytes); raise the chunk limit");
    total += n;
  }
  chunk_plan plan;
  plan.first.reserve(counts.size() + 1);
  plan.chunks.reserve(static_cast<std::size_t>(total));
  for (std::size_t p = 0; p < counts.size(); ++p) {
    const std::int64_t n = chunk_count(counts[p], limit);
    for (std::int64_t k = 0; k < n; ++k)
      plan.chunks.push_back(nth_chunk(counts[p], displs[p], limit, k));
    plan.first.push_back(static_cast<std::int64_t>(plan.chunks.size()));
  }
  return plan;
}

}  // namespace orchmllm::detail
