#pragma once
// MPI error text and checks, and the deadline of the MPI backend's waits: an MPI call's failing
// return code becomes a `communication_error` naming the call. MPI offers no portable way to
// cancel a collective whose peer never arrives, so a wait past its deadline ends the job: each
// communicator with a deadline owns a `watchdog`, a thread that sleeps while the calls run
// blocking (MPI's fastest path) and, when one outlasts the deadline, prints which operation on
// which rank did not complete and calls MPI_Abort(MPI_COMM_WORLD). Polling the non-blocking
// collectives instead (MPI_Test in a loop) made a small MPI_Allreduce 7x slower and a 64 KiB
// MPI_Alltoallv 3.6x slower on 2 ranks; see docs/communication.md, "Deadlines".

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
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

// Ends the whole job after a wait past its deadline: a peer that failed, returned early or
// called another operation will never arrive. Prints one line on stderr naming `who`, the
// operation and the rank, then MPI_Abort(MPI_COMM_WORLD): the job, not only the
// communicator's group (a sub-communicator's abort could leave the other ranks of the job
// waiting). Should MPI_Abort itself not end the process within 10 s, std::abort does (the
// launcher then ends the job on the signal).
[[noreturn]] inline void abort_after_deadline(const char* who, const char* what, int rank,
                                              std::chrono::milliseconds timeout) {
  std::fprintf(stderr,
               "orchmllm: %s: %s on rank %d did not complete within %lld ms (a peer failed, "
               "returned early or called another operation); aborting the job\n",
               who, what, rank, static_cast<long long>(timeout.count()));
  std::fflush(stderr);
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::abort();
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, 1);
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
// MPI error code of the last MPI_Test. For waits off the hot path (mpi::environment's final
// barrier), where the calling thread itself must act at the deadline.
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

// The deadline of one communicator's blocking MPI calls. The calling thread arms it before a
// call that waits for peers and disarms it after (`armed`; arms nest); a thread of its own wakes
// every timeout/16 (at least 1 ms, at most 1 s) and, when one armed call has lasted the timeout,
// aborts the job (abort_after_deadline). Arming costs a clock read and two atomic stores: the
// calls themselves stay MPI's blocking ones. One thread per object, started by the
// constructor when the timeout is positive (none for 0: no deadline) and joined by the
// destructor; the object is not movable (communicators hold it by pointer). One thread arms it
// at a time (the communicator's). `what` must be a string with static storage duration.
class watchdog {
 public:
  watchdog(const char* who, std::chrono::milliseconds timeout, int rank)
      : who_(who), timeout_(timeout), rank_(rank) {
    if (timeout_.count() > 0) thread_ = std::thread([this] { watch(); });
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept { return timeout_; }

  // What is armed: the start of the call (steady ns, odd) or 0, and its name.
  struct state {
    std::int64_t since = 0;
    const char* what = "";
  };
  // Arms for the call `what` starting now; returns what was armed before (for restore).
  state arm(const char* what) noexcept {
    if (!thread_.joinable()) return {};
    const state before{since_.load(std::memory_order_relaxed),
                       what_.load(std::memory_order_relaxed)};
    what_.store(what, std::memory_order_relaxed);
    since_.store(now_ns() | 1, std::memory_order_release);  // odd: never 0 (idle)
    return before;
  }
  // Disarms, or re-arms the enclosing call `before` with its own start (nested waits).
  void restore(state before) noexcept {
    if (!thread_.joinable()) return;
    if (before.since != 0) what_.store(before.what, std::memory_order_relaxed);
    since_.store(before.since, std::memory_order_release);
  }

 private:
  static std::int64_t now_ns() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void watch() {
    const auto period = std::clamp<std::chrono::milliseconds>(
        timeout_ / 16, std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
    const std::int64_t limit = std::chrono::nanoseconds(timeout_).count();
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, period);
      if (stop_) return;
      const std::int64_t since = since_.load(std::memory_order_acquire);
      if (since == 0 || now_ns() - since < limit) continue;
      const char* what = what_.load(std::memory_order_relaxed);
      // The same call is still armed (a later call has another start time).
      if (since_.load(std::memory_order_acquire) != since) continue;
      abort_after_deadline(who_, what, rank_, timeout_);
    }
  }

  const char* who_;
  const std::chrono::milliseconds timeout_;
  const int rank_;
  std::atomic<std::int64_t> since_{0};  // start of the armed call (steady ns, odd), 0: idle
  std::atomic<const char*> what_{""};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

// Arms `w` (may be null: no deadline) for the lifetime of this object; nested guards restore
// the enclosing wait's deadline.
class armed {
 public:
  armed(watchdog* w, const char* what) noexcept : w_(w) {
    if (w_ != nullptr) before_ = w_->arm(what);
  }
  armed(const armed&) = delete;
  armed& operator=(const armed&) = delete;
  ~armed() {
    if (w_ != nullptr) w_->restore(before_);
  }

 private:
  watchdog* w_;
  watchdog::state before_;
};

// One blocking MPI call that waits for peers, under `watch`'s deadline. Returns its MPI
// error code.
template <class Call>
int run_collective(watchdog* watch, const char* what, Call&& call) {
  armed guard(watch, what);
  return call();
}

}  // namespace orchmllm::detail::mpi_backend
