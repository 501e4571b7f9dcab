#pragma once
// The agreement step of the MPI backend: agree before anyone throws. Before a transfer one
// MPI_Allreduce(MAX) of a few int64 tells every rank whether some rank has invalid arguments,
// whether the ranks pass the same keys (byte counts, a digest of the counts, options) and
// whether some rank needs the chunked path; after a chunked transfer one more agrees on its
// outcome. So a failure seen by one rank raises the same error class on every rank instead of
// leaving its peers blocked in the next collective.

#include <mpi.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/backend/mpi/detail/error_and_wait.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/chunking.hpp"
#include "orchmllm/detail/core/fnv.hpp"

namespace orchmllm::detail::mpi_backend {

// The outcome of a local transfer attempt that must be agreed on before anyone throws.
struct outcome {
  int rc = MPI_SUCCESS;
  std::string what;  // empty when rc == MPI_SUCCESS
  void fail(int code, std::string text) {
    if (rc != MPI_SUCCESS) return;  // keep the first failure
    rc = code == MPI_SUCCESS ? MPI_ERR_OTHER : code;
    what = std::move(text);
  }
  [[nodiscard]] bool ok() const noexcept { return rc == MPI_SUCCESS; }
};

// A deterministic digest for "do all ranks pass the same counts".
inline std::int64_t digest(std::span<const std::int64_t> v) {
  ::orchmllm::detail::fnv f;
  f.mix_all(v);
  return std::bit_cast<std::int64_t>(f.h);
}

using ::orchmllm::detail::check_all_to_allv_args;

// The optional pairwise count check (`verify_counts`): one MPI_Alltoall of the send counts
// tells every rank what its peers are about to send. A rank with invalid arguments (`invalid`)
// still takes part, sending -1s, so nobody blocks. Returns the mismatch this rank sees.
inline std::optional<communication_error> exchange_and_compare_counts(
    MPI_Comm comm, const char* op, rank_t me, bool invalid,
    std::span<const std::int64_t> send_counts, std::span<const std::int64_t> recv_counts,
    std::size_t p, watchdog* watch) {
  std::vector<std::int64_t> mine(p, -1);
  if (!invalid) std::copy(send_counts.begin(), send_counts.end(), mine.begin());
  std::vector<std::int64_t> theirs(p, -1);
  check(run_collective(watch, "MPI_Alltoall (all_to_allv count check)",
                       [&] {
                         return MPI_Alltoall(mine.data(), 1, MPI_INT64_T, theirs.data(), 1,
                                             MPI_INT64_T, comm);
                       }),
        std::string("MPI_Alltoall (") + op + " count check)");
  for (std::size_t q = 0; q < p && !invalid; ++q) {
    if (theirs[q] >= 0 && theirs[q] != recv_counts[q])
      return communication_error(concat(op, ": rank ", me, " expects recv_counts[", q,
                                        "] = ", recv_counts[q], " bytes but rank ", q, " sends ",
                                        theirs[q], "; nothing was sent"));
  }
  return std::nullopt;
}

// What the ranks agreed on before a transfer.
struct agreement {
  std::int64_t bad_rank = -1;       // highest rank with invalid arguments, -1 if none
  std::int64_t mismatch_rank = -1;  // highest rank that saw a count mismatch, -1 if none
  bool chunked = false;             // some rank needs the chunked path
  std::array<std::int64_t, 4> key_min{};
  std::array<std::int64_t, 4> key_max{};
};

// r = element-wise MPI_MAX of v over the ranks of `comm`, under `watch`'s deadline (null:
// none). Throws communication_error "MPI_Allreduce (<op><what>) failed: ..." when MPI fails.
template <std::size_t N>
void max_reduce(MPI_Comm comm, const char* op, const std::array<std::int64_t, N>& v,
                std::array<std::int64_t, N>& r, watchdog* watch, const char* what) {
  check(run_collective(watch, op,
                       [&] {
                         return MPI_Allreduce(v.data(), r.data(), static_cast<int>(N), MPI_INT64_T,
                                              MPI_MAX, comm);
                       }),
        std::string("MPI_Allreduce (") + op + what + ")");
}

// One MPI_Allreduce(MAX) over [bad rank+1, mismatch rank+1, chunked, k0, ~k0, k1, ~k1, ...]:
// ~k is monotone decreasing and never overflows, so max(~k) gives ~min(k).
template <std::size_t K>
agreement agree(MPI_Comm comm, rank_t rank, watchdog* watch, const char* op, bool invalid,
                const std::array<std::int64_t, K>& keys, bool chunked, bool mismatch) {
  static_assert(K <= 4);
  std::array<std::int64_t, 3 + 2 * K> v{};
  v[0] = invalid ? rank + 1 : 0;
  v[1] = mismatch ? rank + 1 : 0;
  v[2] = chunked ? 1 : 0;
  if constexpr (K > 0) {
    for (std::size_t k = 0; k < K; ++k) {
      v[3 + 2 * k] = invalid ? std::numeric_limits<std::int64_t>::min() : keys[k];
      v[4 + 2 * k] = invalid ? std::numeric_limits<std::int64_t>::min() : ~keys[k];
    }
  }
  std::array<std::int64_t, 3 + 2 * K> r{};
  max_reduce(comm, op, v, r, watch, " argument agreement");
  agreement a;
  a.bad_rank = r[0] - 1;
  a.mismatch_rank = r[1] - 1;
  a.chunked = r[2] != 0;
  if constexpr (K > 0) {
    for (std::size_t k = 0; k < K; ++k) {
      a.key_max[k] = r[3 + 2 * k];
      a.key_min[k] = ~r[4 + 2 * k];
    }
  }
  return a;
}

inline void throw_if_invalid(const char* op, const agreement& a) {
  ORCHMLLM_REQUIRE(a.bad_rank < 0, invalid_argument_error, op, ": rank ", a.bad_rank,
                   " passed invalid arguments (its own error names them); nothing was sent");
}

// After a point-to-point (chunked) transfer: agrees on the outcome, then throws on every rank
// if any rank failed (a short message is seen by its receiver only). After a single MPI
// collective there is nothing to agree on: MPI reports a failed collective on the ranks it
// fails on and leaves the communicator's state undefined (Open MPI aborts the job), so the
// rank that sees the error throws and the fast path costs no extra round trip.
inline void finish(MPI_Comm comm, rank_t rank, watchdog* watch, const char* op, const outcome& out,
                   bool chunked) {
  if (!chunked) {
    if (!out.ok())
      throw communication_error(::orchmllm::detail::concat(op, " on rank ", rank, ": ", out.what));
    return;
  }
  const std::int64_t mine = out.ok() ? 0 : rank + 1;
  std::int64_t worst = 0;
  const int rc = run_collective(
      watch, op, [&] { return MPI_Allreduce(&mine, &worst, 1, MPI_INT64_T, MPI_MAX, comm); });
  if (!out.ok())
    throw communication_error(::orchmllm::detail::concat(op, " on rank ", rank, ": ", out.what));
  check(rc, std::string("MPI_Allreduce (") + op + " outcome agreement)");
  ORCHMLLM_REQUIRE(worst == 0, communication_error, op, ": the transfer failed on rank ", worst - 1,
                   " (its own error names the cause)");
}

}  // namespace orchmllm::detail::mpi_backend
