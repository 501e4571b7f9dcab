#pragma once
// MPI error text and checks, and the deadline waits of the MPI backend: an MPI call's failing
// return code becomes a `communication_error` naming the call; with a timeout a collective is
// its non-blocking form, polled, and past the deadline the job aborts (MPI cannot cancel a
// collective whose peer never arrives).

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "orchmllm/core/error.hpp"

namespace orchmllm::detail::mpi_backend {

// Text for an MPI error code: the implementation's string plus the code itself.
inline std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  std::string out;
  if (MPI_Error_string(code, text, &len) == MPI_SUCCESS && len > 0)
    out.assign(text, len);
  else
    out = "unknown MPI error";
  return out + " (MPI error code " + std::to_string(code) + ")";
}

// Throws communication_error naming the MPI call and the error. The location is the caller's.
inline void check(int rc, std::string_view call,
                  source_location where = source_location::current()) {
  if (rc != MPI_SUCCESS) [[unlikely]]
    throw communication_error(std::string(call) + " failed: " + error_string(rc), where);
}

// Past its deadline a wait aborts the whole job: a peer that failed, returned early or called
// another operation will never arrive, and MPI cannot cancel a collective. Prints which
// operation on which rank did not complete (stderr, one line), then MPI_Abort.
[[noreturn]] inline void abort_after_deadline(const char* what, int rank,
                                              std::chrono::milliseconds timeout, MPI_Comm comm) {
  std::fprintf(stderr,
               "orchmllm: mpi::communicator: %s on rank %d did not complete within %lld ms (a "
               "peer failed, returned early or called another operation); aborting the job\n",
               what, rank, static_cast<long long>(timeout.count()));
  std::fflush(stderr);
  MPI_Abort(comm, 1);
  std::abort();  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

// Between two polls of a deadline wait: yield the processor, then sleep briefly, so that
// oversubscribed ranks (CI runs 8 on 2 cores) still progress.
inline void pause_between_polls(unsigned polls) {
  if (polls < 64)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// Polls `req` until it completes (`done` set) or `deadline` passes (`done` false). Returns the
// MPI error code of the last MPI_Test.
inline int poll_until(MPI_Request& req, std::chrono::steady_clock::time_point deadline,
                      bool& done) {
  done = false;
  for (unsigned polls = 0;; ++polls) {
    int flag = 0;
    const int rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    done = flag != 0;
    if (rc != MPI_SUCCESS || done || std::chrono::steady_clock::now() >= deadline) return rc;
    pause_between_polls(polls);
  }
}

// Polls `req` (posted with return code `posted`) until it completes; past `deadline` aborts the
// job (abort_after_deadline). Returns the MPI error code.
inline int wait_until(int posted, MPI_Request& req,
                      std::chrono::steady_clock::time_point deadline,
                      std::chrono::milliseconds timeout, const char* what, int rank,
                      MPI_Comm comm) {
  if (posted != MPI_SUCCESS) return posted;
  bool done = false;
  const int rc = poll_until(req, deadline, done);
  if (rc == MPI_SUCCESS && !done) abort_after_deadline(what, rank, timeout, comm);
  return rc;
}

// One MPI collective: `blocking()` without a timeout (timeout <= 0), else `posting(&request)`
// (its non-blocking form) completed by wait_until. Returns the MPI error code.
template <class Blocking, class Posting>
int run_collective(std::chrono::milliseconds timeout, int rank, MPI_Comm comm, const char* what,
                   Blocking&& blocking, Posting&& posting) {
  if (timeout.count() <= 0) return blocking();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MPI_Request req = MPI_REQUEST_NULL;
  const int posted = posting(&req);
  return wait_until(posted, req, deadline, timeout, what, rank, comm);
}

}  // namespace orchmllm::detail::mpi_backend
