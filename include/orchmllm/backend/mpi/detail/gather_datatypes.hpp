#pragma once
// The datatype path of the MPI backend (mpi::communicator::all_to_allv_gather): a route hop's
// send buffer is the gather of segments of `in`, so each peer's block is described in place
// by one MPI_Type_create_hindexed datatype and the whole hop is one MPI_Alltoallw straight from
// `in`: the packed copy is never made. Calls that do not fit MPI's `int` counts are reported
// (gather_call::fits) so that the caller packs and takes the chunked path instead.

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "orchmllm/backend/mpi/detail/agreement.hpp"
#include "orchmllm/backend/mpi/detail/error_and_wait.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/chunking.hpp"
#include "orchmllm/detail/comm/segments.hpp"

namespace orchmllm::detail::mpi_backend {

// One all_to_allv_gather call's MPI arguments: one hindexed type per peer over `in`.
struct gather_call {
  std::vector<MPI_Datatype> stypes, rtypes;
  std::vector<int> sc, sd, rc, rd;
  bool fits = false;  // MPI's int counts hold everything (this rank's call)

  explicit gather_call(rank_t size)
      : stypes(static_cast<std::size_t>(size), MPI_BYTE),
        rtypes(static_cast<std::size_t>(size), MPI_BYTE),
        sc(static_cast<std::size_t>(size), 0),
        sd(static_cast<std::size_t>(size), 0),
        rc(static_cast<std::size_t>(size), 0),
        rd(static_cast<std::size_t>(size), 0) {}
  gather_call(const gather_call&) = delete;
  gather_call& operator=(const gather_call&) = delete;

  void free_types() noexcept {
    for (auto& t : stypes)
      if (t != MPI_BYTE) MPI_Type_free(&t);
  }

  // Checks the arguments and, when they fit, builds the types: one per peer with the
  // segments (sorted by packed offset) that fall in its packed range [send_displs[q],
  // send_displs[q] + send_counts[q]); segments merged across a peer boundary are split
  // there. The error, or nullopt; never throws but bad_alloc.
  std::optional<invalid_argument_error> build(
      const char* op, const std::byte* in, const ::orchmllm::detail::segment_list& segments,
      std::span<const std::int64_t> send_counts, std::span<const std::int64_t> send_displs,
      const std::byte* recv, std::span<const std::int64_t> recv_counts,
      std::span<const std::int64_t> recv_displs, std::int64_t limit) {
    namespace d = ::orchmllm::detail;
    const auto p = stypes.size();
    // `in` plays the send buffer: the packed counts must be backed by it.
    std::optional<invalid_argument_error> local = d::mpi_backend::check_all_to_allv_args(
        op, p, in, send_counts, send_displs, recv, recv_counts, recv_displs);
    bool seg_fits = segments.size() <= static_cast<std::size_t>(INT_MAX);
    for (std::size_t k = 0; k < segments.size() && !local; ++k) {
      if (segments.bytes[k] < 0 || segments.src[k] < 0 || segments.dst[k] < 0)
        local.emplace(d::concat(op, ": segment ", k, " is negative"));
      seg_fits = seg_fits && segments.bytes[k] <= INT_MAX;
    }
    fits = !local && seg_fits && d::fits_in_int_call(send_counts, send_displs, limit) &&
           d::fits_in_int_call(recv_counts, recv_displs, limit);
    if (!fits) return local;
    std::vector<int> lens;
    std::vector<MPI_Aint> disps;
    std::size_t k = 0;
    for (std::size_t q = 0; q < p && !local; ++q) {
      rc[q] = static_cast<int>(recv_counts[q]);
      rd[q] = static_cast<int>(recv_displs[q]);
      if (send_counts[q] == 0) continue;
      const std::int64_t begin = send_displs[q], end = begin + send_counts[q];
      while (k < segments.size() && segments.dst[k] + segments.bytes[k] <= begin) ++k;
      lens.clear();
      disps.clear();
      std::int64_t covered = 0;
      for (std::size_t j = k; j < segments.size() && segments.dst[j] < end; ++j) {
        const std::int64_t lo = std::max(segments.dst[j], begin);
        const std::int64_t hi = std::min(segments.dst[j] + segments.bytes[j], end);
        disps.push_back(static_cast<MPI_Aint>(segments.src[j] + (lo - segments.dst[j])));
        lens.push_back(static_cast<int>(hi - lo));
        covered += hi - lo;
      }
      if (covered != send_counts[q]) {
        local.emplace(d::concat(op, ": the segments cover ", covered, " of the ", send_counts[q],
                                " bytes for rank ", q,
                                " (segments must be sorted by packed offset and tile it)"));
        break;
      }
      // One contiguous run with an int offset needs no datatype: bytes at a displacement
      // (the collective stays MPI_Alltoallw on every rank; only this peer's type differs).
      if (lens.size() == 1 && disps[0] <= static_cast<MPI_Aint>(INT_MAX)) {
        sc[q] = lens[0];
        sd[q] = static_cast<int>(disps[0]);
        continue;
      }
      int code = MPI_Type_create_hindexed(static_cast<int>(lens.size()), lens.data(), disps.data(),
                                          MPI_BYTE, &stypes[q]);
      if (code == MPI_SUCCESS) code = MPI_Type_commit(&stypes[q]);
      if (code != MPI_SUCCESS) {
        local.emplace(d::concat(op, ": MPI_Type_create_hindexed for rank ", q,
                                " failed: ", d::mpi_backend::error_string(code)));
        break;
      }
      sc[q] = 1;
    }
    return local;
  }
};

// The transfer of a built gather call: one MPI_Alltoallw straight from `in`; frees the types.
inline void send_gathered(MPI_Comm comm, rank_t rank, watchdog* watch, const char* op,
                          const std::byte* in, std::byte* recv, gather_call& call) {
  namespace d = ::orchmllm::detail;
  d::mpi_backend::outcome out;
  const int code = run_collective(watch, op, [&] {
    return MPI_Alltoallw(in, call.sc.data(), call.sd.data(), call.stypes.data(), recv,
                         call.rc.data(), call.rd.data(), call.rtypes.data(), comm);
  });
  call.free_types();
  if (code != MPI_SUCCESS)
    out.fail(code, "MPI_Alltoallw failed: " + d::mpi_backend::error_string(code));
  finish(comm, rank, watch, op, out, false);
}

}  // namespace orchmllm::detail::mpi_backend
