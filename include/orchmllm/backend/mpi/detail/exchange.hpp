#pragma once
// The transfers of the MPI backend, once the ranks agreed on their arguments and path: one MPI
// collective of MPI_BYTE when every count and displacement fits in `int` (and the chunk
// limit), else the chunked path: point-to-point messages of at most `limit` bytes each,
// addressed in 64 bits. The splitting itself is pure arithmetic (detail/comm/chunking.hpp);
// exchange_chunked is its MPI engine. Each move_* ends with finish() (the outcome agreement).

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "orchmllm/backend/mpi/detail/agreement.hpp"
#include "orchmllm/backend/mpi/detail/error_and_wait.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/chunking.hpp"

namespace orchmllm::detail::mpi_backend {

// Point-to-point exchange in messages of at most `limit` bytes, with a sliding window of
// `lane_window` messages in flight per (peer, direction) lane: posting every message of a call
// at once (hundreds of thousands with a tiny limit) drowns the engine: Open MPI's shared
// memory transport ran 1 MiB per rank in 7-byte chunks for minutes. MPI_Waitsome refills a
// lane's slot as soon as one of its messages completes. Lanes progress independently (a
// lane's next message only waits for its own earlier ones), so the window cannot deadlock.
// Failures are recorded in `out` (not thrown) so that finish() can agree on them; a short
// message does not stop the protocol (the peers still expect the remaining messages), an MPI
// call that fails does.
inline void exchange_chunked(MPI_Comm comm, rank_t rank, rank_t size, std::int64_t limit,
                             watchdog* watch, const char* op, const std::byte* send,
                             std::span<const std::int64_t> send_counts,
                             std::span<const std::int64_t> send_displs, std::byte* recv,
                             std::span<const std::int64_t> recv_counts,
                             std::span<const std::int64_t> recv_displs, outcome& out) {
  namespace d = ::orchmllm::detail;
  constexpr std::size_t lane_window = 4;
  // Chunks of one (source, tag, communicator) are matched in posting order (MPI's
  // non-overtaking rule), so one tag suffices, also across consecutive calls.
  constexpr int tag = 0x0c4d;
  const auto p = static_cast<std::size_t>(size);
  const auto me = static_cast<std::size_t>(rank);
  // One lane per peer and direction with data; the own block never goes through MPI. Chunks
  // are computed on the fly (nth_chunk), so memory stays O(size()) whatever the limit.
  struct lane {
    int peer;
    bool receive;
    std::int64_t count;
    std::int64_t displ;
    std::int64_t next = 0;  // first chunk not posted yet
  };
  std::vector<lane> lanes;
  lanes.reserve(2 * p);
  // Receive from rank - k and send to rank + k, k = 1..p-1: spreads the first messages over
  // all peers instead of every rank starting with rank 0.
  for (std::size_t k = 1; k < p; ++k) {
    const std::size_t from = (me + p - k) % p;
    if (recv_counts[from] > 0)
      lanes.push_back({static_cast<int>(from), true, recv_counts[from], recv_displs[from]});
    const std::size_t to = (me + k) % p;
    if (send_counts[to] > 0)
      lanes.push_back({static_cast<int>(to), false, send_counts[to], send_displs[to]});
  }
  const std::size_t slots = lanes.size() * lane_window;
  std::vector<MPI_Request> requests(slots, MPI_REQUEST_NULL);
  std::vector<std::int64_t> expected(slots, 0);  // bytes of the receive in each slot

  // Posts the lane's next message into `slot` (which is free); false after an MPI failure.
  auto post = [&](std::size_t slot) {
    lane& l = lanes[slot / lane_window];
    if (l.next == d::chunk_count(l.count, limit)) return true;
    const d::chunk c = d::nth_chunk(l.count, l.displ, limit, l.next++);
    const int code = l.receive ? MPI_Irecv(recv + c.offset, static_cast<int>(c.bytes), MPI_BYTE,
                                           l.peer, tag, comm, &requests[slot])
                               : MPI_Isend(send + c.offset, static_cast<int>(c.bytes), MPI_BYTE,
                                           l.peer, tag, comm, &requests[slot]);
    if (code != MPI_SUCCESS) {
      out.fail(code, d::concat(l.receive ? "MPI_Irecv from rank " : "MPI_Isend to rank ", l.peer,
                               " failed: ", d::mpi_backend::error_string(code)));
      requests[slot] = MPI_REQUEST_NULL;
      return false;
    }
    expected[slot] = c.bytes;
    return true;
  };
  bool posting = true;
  for (std::size_t slot = 0; slot < slots && posting; ++slot) posting = post(slot);

  // Own block, overlapped with the first messages in flight.
  if (posting) {
    const std::int64_t n = std::min(send_counts[me], recv_counts[me]);
    if (n > 0)  // memcpy with a null pointer is undefined even for 0 bytes
      std::memcpy(recv + recv_displs[me], send + send_displs[me], static_cast<std::size_t>(n));
    if (send_counts[me] != recv_counts[me])
      out.fail(MPI_ERR_COUNT, d::concat("own block: send_counts[", me, "] = ", send_counts[me],
                                        " but recv_counts[", me, "] = ", recv_counts[me]));
  }

  std::vector<int> done(slots);
  std::vector<MPI_Status> statuses(slots);
  const armed guard(watch, op);  // one deadline for the whole exchange
  while (posting) {
    int count = 0;
    const int code = MPI_Waitsome(static_cast<int>(slots), requests.data(), &count, done.data(),
                                  statuses.data());
    if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) {
      out.fail(code, "MPI_Waitsome failed: " + d::mpi_backend::error_string(code));
      posting = false;
      break;
    }
    if (count == MPI_UNDEFINED) break;  // every slot is empty: all messages completed
    for (int i = 0; i < count && posting; ++i) {
      const auto slot = static_cast<std::size_t>(done[static_cast<std::size_t>(i)]);
      const MPI_Status& st = statuses[static_cast<std::size_t>(i)];
      const lane& l = lanes[slot / lane_window];
      if (code == MPI_ERR_IN_STATUS && st.MPI_ERROR != MPI_SUCCESS) {
        out.fail(st.MPI_ERROR, d::concat(l.receive ? "receive from rank " : "send to rank ", l.peer,
                                         " failed: ", d::mpi_backend::error_string(st.MPI_ERROR)));
        posting = false;
        break;
      }
      if (l.receive) {
        // A short message means the sender's count was smaller than ours: the bytes after
        // it would silently stay stale.
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (got != expected[slot])
          out.fail(MPI_ERR_TRUNCATE,
                   d::concat("received a message of ", got, " bytes from rank ", l.peer, " where ",
                             expected[slot], " were expected (send and receive counts disagree)"));
      }
      posting = post(slot);
    }
  }
  // After an MPI failure: the buffers must not be released with requests in flight.
  if (!posting) {
    std::vector<MPI_Request> left;
    for (MPI_Request r : requests)
      if (r != MPI_REQUEST_NULL) left.push_back(r);
    MPI_Waitall(static_cast<int>(left.size()), left.data(), MPI_STATUSES_IGNORE);
  }
}

// The transfer of an all_gather whose arguments were agreed: one MPI_Allgather of MPI_BYTE, or
// (`chunked`) the chunked point-to-point path; then finish().
inline void move_all_gather(MPI_Comm comm, rank_t rank, rank_t size, std::int64_t limit,
                            watchdog* watch, const char* op, const std::byte* send,
                            std::int64_t bytes, std::byte* recv, bool chunked) {
  const auto p = static_cast<std::size_t>(size);
  ::orchmllm::detail::mpi_backend::outcome out;
  if (!chunked) {
    const int n = static_cast<int>(bytes);
    const int rc = run_collective(
        watch, op, [&] { return MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm); });
    if (rc != MPI_SUCCESS)
      out.fail(rc, "MPI_Allgather failed: " + ::orchmllm::detail::mpi_backend::error_string(rc));
  } else {
    std::vector<std::int64_t> send_counts(p, bytes);
    std::vector<std::int64_t> send_displs(p, 0);
    std::vector<std::int64_t> recv_counts(p, bytes);
    std::vector<std::int64_t> recv_displs(p);
    for (std::size_t q = 0; q < p; ++q) recv_displs[q] = static_cast<std::int64_t>(q) * bytes;
    exchange_chunked(comm, rank, size, limit, watch, op, send, send_counts, send_displs, recv,
                     recv_counts, recv_displs, out);
  }
  finish(comm, rank, watch, op, out, chunked);
}

// The transfer of an all_gatherv whose arguments were agreed: one MPI_Allgatherv of MPI_BYTE,
// or (`chunked`) the chunked point-to-point path; then finish().
inline void move_all_gatherv(MPI_Comm comm, rank_t rank, rank_t size, std::int64_t limit,
                             watchdog* watch, const char* op, const std::byte* send,
                             std::int64_t bytes, std::byte* recv,
                             std::span<const std::int64_t> counts,
                             std::span<const std::int64_t> displs, bool chunked) {
  namespace d = ::orchmllm::detail;
  const auto p = static_cast<std::size_t>(size);
  ::orchmllm::detail::mpi_backend::outcome out;
  if (!chunked) {
    std::vector<int> c(p);
    std::vector<int> o(p);
    for (std::size_t q = 0; q < p; ++q) {
      c[q] = static_cast<int>(counts[q]);
      o[q] = static_cast<int>(displs[q]);
    }
    const int rc = run_collective(watch, op, [&] {
      return MPI_Allgatherv(send, static_cast<int>(bytes), MPI_BYTE, recv, c.data(), o.data(),
                            MPI_BYTE, comm);
    });
    if (rc != MPI_SUCCESS)
      out.fail(rc, "MPI_Allgatherv failed: " + d::mpi_backend::error_string(rc));
  } else {
    std::vector<std::int64_t> send_counts(p, bytes);
    std::vector<std::int64_t> send_displs(p, 0);
    exchange_chunked(comm, rank, size, limit, watch, op, send, send_counts, send_displs, recv,
                     counts, displs, out);
  }
  finish(comm, rank, watch, op, out, chunked);
}

// The transfer of an all_to_allv whose arguments were agreed (or are agreed by construction):
// one MPI_Alltoallv, or the chunked point-to-point path.
inline void move_all_to_allv(MPI_Comm comm, rank_t rank, rank_t size, std::int64_t limit,
                             watchdog* watch, const char* op, const std::byte* send,
                             std::span<const std::int64_t> send_counts,
                             std::span<const std::int64_t> send_displs, std::byte* recv,
                             std::span<const std::int64_t> recv_counts,
                             std::span<const std::int64_t> recv_displs, bool chunked) {
  namespace d = ::orchmllm::detail;
  const auto p = static_cast<std::size_t>(size);
  d::mpi_backend::outcome out;
  if (!chunked) {
    std::vector<int> sc(p);
    std::vector<int> sd(p);
    std::vector<int> rc(p);
    std::vector<int> rd(p);
    for (std::size_t q = 0; q < p; ++q) {
      sc[q] = static_cast<int>(send_counts[q]);
      sd[q] = static_cast<int>(send_displs[q]);
      rc[q] = static_cast<int>(recv_counts[q]);
      rd[q] = static_cast<int>(recv_displs[q]);
    }
    const int code = run_collective(watch, op, [&] {
      return MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(),
                           MPI_BYTE, comm);
    });
    if (code != MPI_SUCCESS)
      out.fail(code, "MPI_Alltoallv failed: " + d::mpi_backend::error_string(code));
  } else {
    exchange_chunked(comm, rank, size, limit, watch, op, send, send_counts, send_displs, recv,
                     recv_counts, recv_displs, out);
  }
  finish(comm, rank, watch, op, out, chunked);
}

}  // namespace orchmllm::detail::mpi_backend
