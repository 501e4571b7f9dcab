// Tests for include/orchmllm/comm/payload.hpp: the ragged payload's accessors (item counts, row
// totals, byte offsets) and every validate() error: negative widths and row counts, data of
// the wrong size, 64-bit overflow of the total.

#include "orchmllm/comm/payload.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::ragged_payload;
using orchmllm::test::expect_invalid;
using vec = std::vector<std::int64_t>;

ragged_payload make(vec rows, std::int64_t row_bytes, std::size_t data_bytes) {
  ragged_payload p;
  p.rows = std::move(rows);
  p.row_bytes = row_bytes;
  p.data.resize(data_bytes);
  return p;
}

}  // namespace

TEST_CASE("payload: accessors") {
  const auto p = make(vec{3, 0, 5, 1}, 4, 36);
  CHECK(p.num_items() == 4);
  CHECK(p.total_rows() == 9);
  CHECK(p.byte_offsets() == vec{0, 12, 12, 32, 36});
  CHECK(p.item_bytes(0) == 12);
  CHECK(p.item_bytes(1) == 0);
  CHECK(p.item_bytes(2) == 20);
  CHECK(p.item_bytes(3) == 4);
  CHECK_NOTHROW(p.validate());

  const ragged_payload empty;
  CHECK(empty.num_items() == 0);
  CHECK(empty.total_rows() == 0);
  CHECK(empty.row_bytes == 1);
  CHECK(empty.byte_offsets() == vec{0});
  CHECK_NOTHROW(empty.validate());

  // Zero-width rows: every item is empty whatever its row count.
  const auto zero_width = make(vec{7, 2}, 0, 0);
  CHECK(zero_width.total_rows() == 9);
  CHECK(zero_width.byte_offsets() == vec{0, 0, 0});
  CHECK_NOTHROW(zero_width.validate());
}

TEST_CASE("payload: byte offsets are 64-bit") {
  // Offsets above 2^32 without allocating them (validate would need the data; offsets do not).
  ragged_payload p;
  p.rows = vec{std::int64_t{1} << 31, 3, std::int64_t{1} << 32};
  p.row_bytes = 3;
  const auto off = p.byte_offsets();
  CHECK(off == vec{0, 3 * (std::int64_t{1} << 31), 3 * (std::int64_t{1} << 31) + 9,
                   3 * (std::int64_t{1} << 31) + 9 + 3 * (std::int64_t{1} << 32)});
  CHECK(p.total_rows() == (std::int64_t{1} << 31) + 3 + (std::int64_t{1} << 32));
  CHECK(p.item_bytes(2) == 3 * (std::int64_t{1} << 32));
}

TEST_CASE("payload: validate errors") {
  expect_invalid([] { make(vec{1}, -2, 0).validate(); }, {"row width -2", "negative"});
  expect_invalid([] { make(vec{2, -1, 3}, 4, 16).validate(); }, {"item 1 has -1 rows"});
  expect_invalid(
      [] {
        make(vec{3, 0, 5}, 4, 31).validate();
      },
      {"holds 31 bytes", "3 items need 32", "rows × 4 bytes"});
  expect_invalid([] { make(vec{3, 0, 5}, 4, 33).validate(); }, {"holds 33 bytes", "need 32"});
  expect_invalid([] { make(vec{}, 4, 1).validate(); }, {"holds 1 bytes", "need 0"});

  // 64-bit overflow of Σ rows · row_bytes, caught before any product overflows.
  const std::int64_t big = std::int64_t{1} << 61;
  expect_invalid(
      [&] {
        make(vec{big, big, big}, 2, 0).validate();
      },
      {"overflows 64 bits at item 1"});
  expect_invalid([&] { make(vec{std::numeric_limits<std::int64_t>::max()}, 2, 0).validate(); },
                 {"overflows 64 bits at item 0"});
  expect_invalid(
      [&] {
        make(vec{1, std::numeric_limits<std::int64_t>::max()}, 1, 0).validate();
      },
      {"overflows 64 bits at item 1"});
  // Exactly INT64_MAX bytes does not overflow: only the data size is then wrong.
  expect_invalid([&] { make(vec{std::numeric_limits<std::int64_t>::max()}, 1, 0).validate(); },
                 {"holds 0 bytes", "need 9223372036854775807"});
  // Zero-width rows never overflow.
  CHECK_NOTHROW(make(vec{std::numeric_limits<std::int64_t>::max(), 5}, 0, 0).validate());
}

TEST_CASE("ragged_payload: byte offsets and totals past 2^63 are errors") {
  ragged_payload p;
  p.row_bytes = 8;
  p.rows = {1, std::int64_t{1} << 60};  // 2^63 bytes: wraps to negative unchecked
  expect_invalid([&] { (void)p.byte_offsets(); },
                 {"payload size overflows 64 bits at item 1", "1152921504606846976 rows × 8"});
  expect_invalid([&] { p.validate(); }, {"overflows 64 bits at item 1"});
  p.rows = {std::numeric_limits<std::int64_t>::max(), 1};
  expect_invalid([&] { (void)p.total_rows(); }, {"item 1 has 1 rows"});
  p.rows = {2, -1};
  expect_invalid([&] { (void)p.byte_offsets(); }, {"item 1 has -1 rows"});
  p.rows = {2, 3};
  CHECK(p.byte_offsets() == std::vector<std::int64_t>{0, 16, 40});
  CHECK(p.total_rows() == 5);
}
