// Tests for include/orchmllm/detail/core/parallel.hpp (detail::run_indexed): every index runs
// exactly once whatever the worker count (0, 1, fewer or more than the tasks, no tasks); the
// error of the lowest failing index is the one rethrown, after every task has run.
#include "orchmllm/detail/core/parallel.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

TEST_CASE("run_indexed runs every index once on any number of workers") {
  for (const std::size_t count : {0U, 1U, 2U, 7U, 100U})
    for (const std::size_t workers : {0U, 1U, 2U, 3U, 16U}) {
      CAPTURE(count);
      CAPTURE(workers);
      std::vector<std::atomic<int>> runs(count);
      orchmllm::detail::run_indexed(count, workers, [&](std::size_t i) { ++runs[i]; });
      for (const auto& r : runs) CHECK(r.load() == 1);
    }
  CHECK(orchmllm::detail::planning_threads() >= 1);
}

TEST_CASE("run_indexed rethrows the lowest index's error after every task ran") {
  for (const std::size_t workers : {1U, 2U, 4U}) {
    CAPTURE(workers);
    std::atomic<int> ran{0};
    try {
      orchmllm::detail::run_indexed(20, workers, [&](std::size_t i) {
        ++ran;
        if (i == 13 || i == 5 || i == 17) throw std::runtime_error("task " + std::to_string(i));
      });
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "task 5");
    }
    CHECK(ran.load() == 20);
  }
}
