// detail/comm/chunking.hpp: splitting 64-bit transfers into int-sized messages. Pure arithmetic,
// so sizes above 2^31 and 2^32 (per peer and in total) are tested without allocating them.

#include "orchmllm/detail/comm/chunking.hpp"

#include <doctest/doctest.h>

#include <climits>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "orchmllm/core/error.hpp"

using orchmllm::invalid_argument_error;
using orchmllm::detail::chunk;
using orchmllm::detail::chunk_count;
using orchmllm::detail::chunk_plan;
using orchmllm::detail::fits_in_int_call;
using orchmllm::detail::nth_chunk;
using orchmllm::detail::plan_chunks;

namespace {

constexpr std::int64_t two31 = std::int64_t{1} << 31;
constexpr std::int64_t two32 = std::int64_t{1} << 32;
constexpr std::int64_t int_max = INT_MAX;

// Every invariant of a plan, checked message by message (O(messages), nothing else allocated).
void check_plan(const chunk_plan& plan, const std::vector<std::int64_t>& counts,
                const std::vector<std::int64_t>& displs, std::int64_t limit) {
  REQUIRE(plan.num_peers() == counts.size());
  REQUIRE(plan.first.front() == 0);
  REQUIRE(plan.first.back() == plan.num_messages());
  for (std::size_t p = 0; p < counts.size(); ++p) {
    CAPTURE(p);
    const auto msgs = plan.peer(p);
    CHECK(static_cast<std::int64_t>(msgs.size()) == chunk_count(counts[p], limit));
    if (counts[p] == 0) CHECK(msgs.empty());
    std::int64_t sum = 0;
    std::int64_t next = displs[p];
    for (std::size_t k = 0; k < msgs.size(); ++k) {
      CHECK(msgs[k].offset == next);  // contiguous, increasing
      CHECK(msgs[k].bytes >= 1);
      CHECK(msgs[k].bytes <= limit);
      if (k + 1 < msgs.size()) CHECK(msgs[k].bytes == limit);  // only the last is partial
      CHECK(msgs[k] == nth_chunk(counts[p], displs[p], limit, static_cast<std::int64_t>(k)));
      sum += msgs[k].bytes;
      next += msgs[k].bytes;
    }
    CHECK(sum == counts[p]);
  }
}

}  // namespace

TEST_CASE("chunk_count is ceil(bytes / limit) without overflow") {
  CHECK(chunk_count(0, 1) == 0);
  CHECK(chunk_count(0, int_max) == 0);
  CHECK(chunk_count(1, 7) == 1);
  CHECK(chunk_count(7, 7) == 1);
  CHECK(chunk_count(8, 7) == 2);
  CHECK(chunk_count(int_max, int_max) == 1);
  CHECK(chunk_count(two31, int_max) == 2);
  CHECK(chunk_count(two32, int_max) == 3);  // 2^32 = 2 * (2^31 - 1) + 2
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  CHECK(chunk_count(max, max) == 1);
  CHECK(chunk_count(max, 1) == max);
  CHECK(chunk_count(max, two32) == two31);  // (2^63 - 1) / 2^32 rounds up to 2^31
}

TEST_CASE("small plans: exact message lists") {
  const std::vector<std::int64_t> counts{0, 7, 8, 15, 1};
  const std::vector<std::int64_t> displs{3, 0, 100, 7, 200};
  const chunk_plan plan = plan_chunks(counts, displs, 7);
  CHECK(plan.first == std::vector<std::int64_t>{0, 0, 1, 3, 6, 7});
  CHECK(plan.chunks ==
        std::vector<chunk>{{0, 7}, {100, 7}, {107, 1}, {7, 7}, {14, 7}, {21, 1}, {200, 1}});
  check_plan(plan, counts, displs, 7);
  // limit 1: one message per byte.
  const chunk_plan bytes = plan_chunks(counts, displs, 1);
  CHECK(bytes.num_messages() == 31);
  check_plan(bytes, counts, displs, 1);
}

TEST_CASE("sizes above 2^31 and 2^32 per peer and in total, limit INT_MAX") {
  // Per-peer counts straddling every 32-bit boundary; the total is about 2^34.6.
  const std::vector<std::int64_t> counts{0,     int_max,   two31,         two31 + 1, two32 - 1,
                                         two32, two32 + 5, 3 * two32 + 7, 1,         0};
  std::vector<std::int64_t> displs(counts.size());
  std::int64_t total = 0;
  for (std::size_t p = 0; p < counts.size(); ++p) {
    displs[p] = total;
    total += counts[p];
  }
  CHECK(total > 4 * two32);
  const chunk_plan plan = plan_chunks(counts, displs, int_max);
  check_plan(plan, counts, displs, int_max);
  CHECK(plan.peer(1).size() == 1);
  CHECK(plan.peer(2).size() == 2);
  CHECK(plan.peer(2)[1] == chunk{displs[2] + int_max, 1});
  CHECK(plan.peer(5).size() == 3);
  CHECK(plan.peer(5)[2] == chunk{displs[5] + 2 * int_max, 2});
  CHECK(plan.peer(7).size() == 7);  // 3 * 2^32 + 7 = 6 * (2^31 - 1) + 13
  CHECK(plan.peer(7)[6] == chunk{displs[7] + 6 * int_max, 13});
  // Offsets far above 2^32 stay exact (64-bit pointer arithmetic in the backend).
  CHECK(plan.peer(8)[0].offset == total - 1);
  CHECK(plan.peer(9).empty());
  // Only the peers that fit in one int call do.
  CHECK(fits_in_int_call(std::span(counts).first(2), std::span(displs).first(2), int_max));
  CHECK_FALSE(fits_in_int_call(std::span(counts).first(3), std::span(displs).first(3), int_max));
}

TEST_CASE("a non-zero displacement above INT_MAX with a small count") {
  const std::vector<std::int64_t> counts{5};
  const std::vector<std::int64_t> displs{5 * two32};
  const chunk_plan plan = plan_chunks(counts, displs, int_max);
  CHECK(plan.chunks == std::vector<chunk>{{5 * two32, 5}});
  CHECK_FALSE(fits_in_int_call(counts, displs, int_max));
  // The whole extent displ + count must fit in int, not just each part.
  CHECK(fits_in_int_call(std::vector<std::int64_t>{10}, std::vector<std::int64_t>{int_max - 10},
                         int_max));
  CHECK_FALSE(fits_in_int_call(std::vector<std::int64_t>{10},
                               std::vector<std::int64_t>{int_max - 9}, int_max));
  // And the count must not exceed the limit.
  CHECK_FALSE(fits_in_int_call(std::vector<std::int64_t>{8}, std::vector<std::int64_t>{0}, 7));
  CHECK(fits_in_int_call(std::vector<std::int64_t>{7}, std::vector<std::int64_t>{0}, 7));
}

TEST_CASE("zero counts and no peers give no messages") {
  const std::vector<std::int64_t> zeros(5, 0);
  const std::vector<std::int64_t> displs{0, two32, 3, 0, 9};
  const chunk_plan plan = plan_chunks(zeros, displs, 1);
  CHECK(plan.num_messages() == 0);
  CHECK(plan.first == std::vector<std::int64_t>(6, 0));
  const chunk_plan none = plan_chunks({}, {}, 7);
  CHECK(none.num_peers() == 0);
  CHECK(none.num_messages() == 0);
}

TEST_CASE("bad limits and bad counts throw invalid_argument_error") {
  const std::vector<std::int64_t> counts{1, 2};
  const std::vector<std::int64_t> displs{0, 1};
  CHECK_THROWS_AS((void)plan_chunks(counts, displs, 0), invalid_argument_error);
  CHECK_THROWS_AS((void)plan_chunks(counts, displs, -7), invalid_argument_error);
  CHECK_THROWS_WITH_AS((void)plan_chunks(counts, displs, 0),
                       doctest::Contains("chunk limit 0 must be at least 1 byte"),
                       invalid_argument_error);
  CHECK_THROWS_AS((void)plan_chunks(counts, std::vector<std::int64_t>{0}, 7),
                  invalid_argument_error);
  CHECK_THROWS_WITH_AS((void)plan_chunks(std::vector<std::int64_t>{1, -2}, displs, 7),
                       doctest::Contains("chunk_counts[1] = -2 is negative"),
                       invalid_argument_error);
  CHECK_THROWS_AS((void)plan_chunks(counts, std::vector<std::int64_t>{0, -1}, 7),
                  invalid_argument_error);
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  CHECK_THROWS_WITH_AS(
      (void)plan_chunks(std::vector<std::int64_t>{2}, std::vector<std::int64_t>{max - 1}, 7),
      doctest::Contains("exceeds the 64-bit byte range"), invalid_argument_error);
  CHECK_NOTHROW(
      (void)plan_chunks(std::vector<std::int64_t>{1}, std::vector<std::int64_t>{max - 1}, 7));
}

TEST_CASE("the message budget is checked before allocating") {
  // 2^40 bytes in 1-byte messages would need 2^40 chunk records: refused up front.
  const std::vector<std::int64_t> huge{std::int64_t{1} << 40};
  const std::vector<std::int64_t> zero{0};
  CHECK_THROWS_WITH_AS((void)plan_chunks(huge, zero, 1),
                       doctest::Contains("needs more than 2147483647 messages"),
                       invalid_argument_error);
  // The budget counts messages over all peers together.
  const std::vector<std::int64_t> counts{10, 10, 10};
  const std::vector<std::int64_t> displs{0, 10, 20};
  CHECK(plan_chunks(counts, displs, 5, 6).num_messages() == 6);
  CHECK_THROWS_AS((void)plan_chunks(counts, displs, 5, 5), invalid_argument_error);
  CHECK_THROWS_AS((void)plan_chunks(counts, displs, 5, -1), invalid_argument_error);
  // Peers whose message counts would overflow a 64-bit sum are refused, not wrapped.
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  const std::vector<std::int64_t> big{max, max};
  CHECK_THROWS_AS((void)plan_chunks(big, std::vector<std::int64_t>{0, 0}, 1,
                                    std::numeric_limits<std::int64_t>::max()),
                  invalid_argument_error);
}
