#pragma once
// Runs independent tasks on a few threads: what the planner uses to build a step's routes
// concurrently. Internal.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace orchmllm::detail {

// The planner splits one stage's work over threads (a report beside the mapping, halves of a
// composition) only from this many items: below it, starting a thread costs more than it saves.
inline constexpr std::size_t parallel_min_items = std::size_t{1} << 16;

// Calls fn(i) for every i in [0, count), on at most `workers` threads (the calling thread is
// one of them; workers ≤ 1 runs everything here, in order). Each task writes only its own
// results, so the outcome does not depend on the thread timing. If tasks throw, the exception
// of the lowest index is rethrown after all tasks have finished, whatever the timing (every
// rank reports the same error). Throws std::system_error when a thread cannot be started.
template <class F>
void run_indexed(std::size_t count, std::size_t workers, F&& fn) {
  std::vector<std::exception_ptr> errors(count);
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  const auto extra = std::min(count, std::max<std::size_t>(workers, 1)) - (count > 0 ? 1 : 0);
  threads.reserve(extra);
  try {
    for (std::size_t t = 0; t < extra; ++t) threads.emplace_back(work);
  } catch (...) {
    next.store(count);  // the started threads stop after their current task
    for (auto& th : threads) th.join();
    throw;
  }
  work();
  for (auto& th : threads) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Threads worth using for CPU-bound planning work: the hardware's, at least 1.
inline std::size_t planning_threads() noexcept {
  return std::max<std::size_t>(1, std::thread::hardware_concurrency());
}

}  // namespace orchmllm::detail
