#pragma once
// The agreement step of the MPI backend: agree before anyone throws. A transfer's local outcome
// is recorded (not thrown) until the ranks agreed on it; the counts' digest and the optional
// pairwise count check let every rank see a disagreement before any payload moves.

#include <mpi.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
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
    std::size_t p, std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
  std::vector<std::int64_t> mine(p, -1);
  if (!invalid) std::copy(send_counts.begin(), send_counts.end(), mine.begin());
  std::vector<std::int64_t> theirs(p, -1);
  check(run_collective(
            timeout, me, comm, "MPI_Alltoall (all_to_allv count check)",
            [&] {
              return MPI_Alltoall(mine.data(), 1, MPI_INT64_T, theirs.data(), 1, MPI_INT64_T,
                                  comm);
            },
            [&](MPI_Request* r) {
              return MPI_Ialltoall(mine.data(), 1, MPI_INT64_T, theirs.data(), 1, MPI_INT64_T,
                                   comm, r);
            }),
        std::string("MPI_Alltoall (") + op + " count check)");
  for (std::size_t q = 0; q < p && !invalid; ++q) {
    if (theirs[q] >= 0 && theirs[q] != recv_counts[q])
      return communication_error(concat(op, ": rank ", me, " expects recv_counts[", q, "] = ",
                                        recv_counts[q], " bytes but rank ", q, " sends ",
                                        theirs[q], "; nothing was sent"));
  }
  return std::nullopt;
}

}  // namespace orchmllm::detail::mpi_backend
