// Tests of the orchmllm-bench command-line tool (bench/cli/): the ITEMS.csv reader (shuffled
// rows, empty ranks, a bytes column, tolerated formatting, every bad input named by line and
// value, an optional segments column) and the PLAN.csv reader's refusals.

#include <doctest/doctest.h>

#include <cstdint>
#include <orchmllm/orchmllm.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cli/tool.hpp"
#include "support/tool_fixtures.hpp"

namespace tool = orchmllm::tool;
using orchmllm::batch_layout;
using namespace orchmllm::test::tool_fixtures;  // support/tool_fixtures.hpp

// =============================================================================================
// ITEMS.csv reader
// =============================================================================================

TEST_CASE("ITEMS.csv: shuffled rows, empty ranks and a bytes column parse to the same layout") {
  for (bool with_bytes : {false, true}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      const auto layout = random_layout(seed, 7, 5, with_bytes);
      const std::string text = shuffled_items(layout, seed * 11);
      std::vector<std::int64_t> lines;
      const auto parsed = tool::parse_items(text, 7, "items.csv", &lines);
      CHECK(parsed == layout);
      CHECK(parsed.has_bytes() == with_bytes);
      // Every item's recorded line holds exactly that item.
      REQUIRE(static_cast<std::int64_t>(lines.size()) == layout.num_items());
      std::vector<std::string> file_lines;
      std::istringstream in(text);
      for (std::string l; std::getline(in, l);) file_lines.push_back(l);
      for (std::int64_t g = 0; g < layout.num_items(); ++g) {
        const auto r = layout.rank_of(g);
        const std::string prefix =
            std::to_string(r) + "," + std::to_string(g - layout.offset(r)) + ",";
        CHECK(file_lines[static_cast<std::size_t>(lines[static_cast<std::size_t>(g)] - 1)].rfind(
                  prefix, 0) == 0);
      }
      // More ranks than the file mentions: trailing empty ranks.
      const auto wider = tool::parse_items(text, 10, "items.csv");
      CHECK(wider.num_ranks() == 10);
      CHECK(wider.num_items() == layout.num_items());
      CHECK(wider.rank_size(9) == 0);
    }
  }
}

TEST_CASE("ITEMS.csv: tolerated formatting (BOM, CRLF, spaces, blank lines, header only)") {
  const auto l = tool::parse_items(
      "\xEF\xBB\xBFrank, slot ,length\r\n\r\n 1 ,0, 30\r\n0,0,10\r\n\r\n1,1,0\r\n", 3, "f");
  CHECK(l.num_ranks() == 3);
  CHECK(std::vector<std::int64_t>(l.offsets().begin(), l.offsets().end()) ==
        std::vector<std::int64_t>{0, 1, 3, 3});
  CHECK(std::vector<std::int64_t>(l.lengths().begin(), l.lengths().end()) ==
        std::vector<std::int64_t>{10, 30, 0});
  CHECK_FALSE(l.has_bytes());
  const auto empty = tool::parse_items("rank,slot,length\n", 4, "f");
  CHECK(empty.num_items() == 0);
  CHECK(empty.num_ranks() == 4);
  const auto big = tool::parse_items("rank,slot,length,bytes\n0,0,9223372036854775807,0\n", 1, "f");
  CHECK(big.length(0) == INT64_MAX);
  CHECK(big.bytes(0) == 0);
}

TEST_CASE("ITEMS.csv: every bad input raises parse_error naming the line and value") {
  for (const auto& c : bad_items_cases()) {
    CAPTURE(c.what);
    try {
      (void)tool::parse_items(c.text, 4, "items.csv");
      FAIL("accepted: ", c.what);
    } catch (const orchmllm::parse_error& e) {
      const std::string msg = e.message();
      CHECK(msg.find('\n') == std::string::npos);
      for (const auto& n : c.needles)
        CHECK_MESSAGE(msg.find(n) != std::string::npos, msg, " lacks ", n);
    }
  }
}

TEST_CASE("ITEMS.csv: an optional segments column (equal segments per item)") {
  const auto l =
      tool::parse_items("rank,slot,length,segments\n1,0,8,2\n0,0,12,3\n0,1,5,1\n", 2, "items.csv");
  const auto want =
      batch_layout({0, 2, 3}, {12, 5, 8}).with_equal_segments(std::vector<std::int64_t>{3, 1, 2});
  CHECK(l == want);
  CHECK(l.num_segments(0) == 3);
  CHECK(std::vector<std::int64_t>(l.segments(2).begin(), l.segments(2).end()) ==
        std::vector<std::int64_t>{4, 4});
  // With bytes; and round trips through format_items.
  const auto b = tool::parse_items("rank,slot,length,bytes,segments\n0,0,12,7,4\n", 1, "f");
  CHECK(b.num_segments(0) == 4);
  CHECK(b.bytes(0) == 7);
  CHECK(tool::format_items(b) == "rank,slot,length,bytes,segments\n0,0,12,7,4\n");
  CHECK(tool::parse_items(tool::format_items(l), 2, "f") == l);
  // All 1: exactly the file without the column (no segments stored), and formatted without it.
  const auto ones = tool::parse_items("rank,slot,length,segments\n0,0,12,1\n0,1,5,1\n", 1, "f");
  const auto plain = tool::parse_items("rank,slot,length\n0,0,12\n0,1,5\n", 1, "f");
  CHECK(ones == plain);
  CHECK_FALSE(ones.has_segments());
  CHECK(tool::format_items(ones) == "rank,slot,length\n0,0,12\n0,1,5\n");
}

TEST_CASE("PLAN.csv reader rejects malformed plans") {
  const std::vector<std::int64_t> offsets = {0, 2, 3};
  const std::string h = "rank,slot,dst_rank,dst_slot\n";
  CHECK_NOTHROW((void)tool::parse_plan(h + "0,0,1,0\n0,1,0,0\n1,0,0,1\n", offsets, 2, "p"));
  CHECK_THROWS_AS((void)tool::parse_plan("", offsets, 2, "p"), orchmllm::parse_error);
  CHECK_THROWS_AS((void)tool::parse_plan("rank,slot\n", offsets, 2, "p"), orchmllm::parse_error);
  CHECK_THROWS_WITH_AS((void)tool::parse_plan(h + "0,0,1,0\n0,0,0,0\n1,0,0,1\n", offsets, 2, "p"),
                       doctest::Contains("p:3: item (rank 0, slot 0) appears twice"),
                       orchmllm::parse_error);
  CHECK_THROWS_WITH_AS((void)tool::parse_plan(h + "0,0,1,0\n0,1,0,0\n", offsets, 2, "p"),
                       doctest::Contains("no row for source item 2"), orchmllm::parse_error);
  CHECK_THROWS_WITH_AS((void)tool::parse_plan(h + "0,0,2,0\n", offsets, 2, "p"),
                       doctest::Contains("dst_rank 2"), orchmllm::parse_error);
  CHECK_THROWS_WITH_AS((void)tool::parse_plan(h + "0,5,0,0\n", offsets, 2, "p"),
                       doctest::Contains("no source item (rank 0, slot 5)"), orchmllm::parse_error);
  // Two items in one destination slot: the plan algebra refuses it.
  CHECK_THROWS_AS((void)tool::parse_plan(h + "0,0,0,0\n0,1,0,0\n1,0,1,0\n", offsets, 2, "p"),
                  orchmllm::invalid_argument_error);
}
