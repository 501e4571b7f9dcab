#pragma once
// What the two NCCL communicators (backend/nccl/communicator.cuh, which owns its NCCL
// communicator, and backend/nccl/communicator_ref.cuh, which adopts the trainer's) share: their
// default deadline (`orchmllm::nccl::default_timeout`, documented with them) and, in
// `orchmllm::detail::nccl_backend`, error messages, waiting for an NCCL communicator and a CUDA
// stream with a deadline (0: none, the waits are unbounded), and one all_to_allv as a group of
// ncclSend/ncclRecv. Needs NCCL >= 2.14 and CUDA; no MPI. See docs/communication.md.

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <thread>

#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/deadline.hpp"

#if !defined(NCCL_VERSION_CODE) || !defined(NCCL_VERSION)
#error "orchmllm/backend/nccl: nccl.h defines no NCCL_VERSION_CODE"
#elif NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error \
    "orchmllm/backend/nccl needs NCCL >= 2.14 (ncclCommInitRankConfig, non-blocking communicators, ncclCommFinalize)"
#endif

namespace orchmllm::nccl {

/// The deadline of both NCCL communicators' waits when neither their options nor
/// ORCHMLLM_TIMEOUT_MS set one: 5 minutes, the MPI backend's too (detail/comm/deadline.hpp;
/// docs/communication.md, "Deadlines").
inline constexpr std::chrono::milliseconds default_timeout =
    ::orchmllm::detail::default_comm_timeout;

}  // namespace orchmllm::nccl

namespace orchmllm::detail::nccl_backend {

// "ncclXxx failed: <error string> (<last error detail>)".
inline std::string nccl_message(const char* call, ncclResult_t rc, ncclComm_t comm) {
  std::string out = ::orchmllm::detail::concat(call, " failed: ", ncclGetErrorString(rc));
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') out += ::orchmllm::detail::concat(" (", last, ")");
  }
  return out;
}

// "cudaXxx failed: <name>: <description>".
inline std::string cuda_message(const char* call, cudaError_t e) {
  return ::orchmllm::detail::concat(call, " failed: ", cudaGetErrorName(e), ": ",
                                    cudaGetErrorString(e));
}

inline std::string timeout_message(const char* what, std::chrono::milliseconds timeout) {
  return ::orchmllm::detail::concat(what, " did not complete within the timeout of ",
                                    timeout.count(),
                                    " ms (a peer rank failed, diverged or is stuck)");
}

// The end of a wait that starts now: `timeout` from now, or never for 0 (no deadline).
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return timeout.count() > 0 ? std::chrono::steady_clock::now() + timeout
                             : std::chrono::steady_clock::time_point::max();
}

// True when `rc` is a failure (ncclInProgress is not: a non-blocking communicator's call
// returns it while the operation is being posted).
inline bool failed(ncclResult_t rc) noexcept { return rc != ncclSuccess && rc != ncclInProgress; }

// Polls until `comm` has no operation in progress (a non-blocking communicator's init,
// finalise or posted calls; a blocking one is always ready). Returns "" on success, else the
// failure (NCCL error or timeout) for `what`. `timeout` 0: no deadline.
inline std::string wait_ready(ncclComm_t comm, std::chrono::milliseconds timeout,
                              const char* what) {
  const auto deadline = deadline_after(timeout);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return nccl_message("ncclCommGetAsyncError", rc, comm);
    if (state == ncclSuccess) return {};
    if (state != ncclInProgress) return nccl_message(what, state, comm);
    if (std::chrono::steady_clock::now() > deadline) return timeout_message(what, timeout);
    std::this_thread::yield();
  }
}

// Polls until the NCCL work posted on `comm` is on `stream` and the stream has finished it
// (the group may still be launching, ncclInProgress, before its kernels are on the stream, so
// the stream is only queried once NCCL reports success). Returns "" or the failure. `timeout`
// 0: no deadline.
inline std::string wait_stream(ncclComm_t comm, cudaStream_t stream,
                               std::chrono::milliseconds timeout, const char* what) {
  const auto deadline = deadline_after(timeout);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return nccl_message("ncclCommGetAsyncError", rc, comm);
    if (failed(state)) return nccl_message(what, state, comm);
    if (state == ncclSuccess) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return {};
      if (q != cudaErrorNotReady) return cuda_message("cudaStreamQuery", q);
    }
    if (std::chrono::steady_clock::now() > deadline) return timeout_message(what, timeout);
    std::this_thread::yield();
  }
}

// One all_to_allv: a group of ncclSend/ncclRecv of ncclUint8 for every peer with a nonzero
// count (zero counts post nothing, on both sides), on `stream`, then waits for the stream.
// Arguments are checked by the caller. Returns "" on success, else the failure.
inline std::string exchange(ncclComm_t comm, cudaStream_t stream, std::chrono::milliseconds timeout,
                            const std::byte* send, std::span<const std::int64_t> send_counts,
                            std::span<const std::int64_t> send_displs, std::byte* recv,
                            std::span<const std::int64_t> recv_counts,
                            std::span<const std::int64_t> recv_displs) {
  const auto p = send_counts.size();
  bool any = false;
  for (std::size_t q = 0; q < p; ++q) any = any || send_counts[q] > 0 || recv_counts[q] > 0;
  if (any) {
    ncclResult_t rc = ncclGroupStart();
    if (rc != ncclSuccess) return nccl_message("ncclGroupStart", rc, comm);
    std::string failure;
    for (std::size_t q = 0; q < p && failure.empty(); ++q) {
      const int peer = static_cast<int>(q);
      if (send_counts[q] > 0) {
        rc = ncclSend(send + send_displs[q], static_cast<std::size_t>(send_counts[q]), ncclUint8,
                      peer, comm, stream);
        if (failed(rc)) failure = nccl_message("ncclSend", rc, comm);
      }
      if (failure.empty() && recv_counts[q] > 0) {
        rc = ncclRecv(recv + recv_displs[q], static_cast<std::size_t>(recv_counts[q]), ncclUint8,
                      peer, comm, stream);
        if (failed(rc)) failure = nccl_message("ncclRecv", rc, comm);
      }
    }
    rc = ncclGroupEnd();  // always closes the group, also after a failed call inside it
    if (!failure.empty()) return failure;
    if (failed(rc)) return nccl_message("ncclGroupEnd", rc, comm);
  }
  return wait_stream(comm, stream, timeout, "the ncclSend/ncclRecv group");
}

}  // namespace orchmllm::detail::nccl_backend
