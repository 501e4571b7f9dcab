#pragma once
// Shared by the tests of the orchmllm-bench command-line tool (tests/tool/tool_*_test.cpp,
// tests/tool/dispatch_test.cpp): a scratch directory per test case, the tool run in-process
// (orchmllm::tool::run), a flat JSON parser for its one-line outputs, random layouts written as
// ITEMS.csv (shuffled rows), PLAN.csv rows read back, a makespan recomputed independently, the
// keys every `plan` JSON line has, and every bad ITEMS.csv input with what its message names.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <orchmllm/orchmllm.hpp>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/cli/tool.hpp"
#include "support/scratch_dir.hpp"

namespace orchmllm::test::tool_fixtures {

// A fresh directory per test case, named after this test.
struct scratch_dir : orchmllm::test::scratch_dir {
  scratch_dir() : orchmllm::test::scratch_dir("orchmllm_tool_test_") {}
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct tool_result {
  int rc;
  std::string out;
  std::string err;
};

inline tool_result run_tool(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int rc = tool::run(std::span<const std::string>(args), out, err);
  return {rc, out.str(), err.str()};
}

inline std::size_t count_lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

/// One value of a flat JSON object; numbers keep their text so integers compare exactly.
struct json_value {
  enum class kind { string, number, boolean, null } k;
  std::string text;  // string content (unescaped) or number text
  bool b = false;
  [[nodiscard]] double num() const { return std::strtod(text.c_str(), nullptr); }
  [[nodiscard]] std::int64_t integer() const {
    REQUIRE(text.find_first_of(".eE") == std::string::npos);
    return std::stoll(text);
  }
};

/// Parses `{"k":v,...}` with string, number, true/false/null values (all the tool writes).
/// Throws std::runtime_error on anything else, so malformed output fails the test.
inline std::map<std::string, json_value> parse_flat_json(std::string_view t) {
  std::size_t i = 0;
  auto fail = [&](const char* what) {
    throw std::runtime_error(std::string("bad JSON (") + what + ") at " + std::to_string(i) + ": " +
                             std::string(t));
  };
  auto expect = [&](char c) {
    if (i >= t.size() || t[i] != c) fail("expected char");
    ++i;
  };
  auto parse_string = [&] {
    expect('"');
    std::string s;
    while (i < t.size() && t[i] != '"') {
      char c = t[i++];
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control char");
      if (c == '\\') {
        if (i >= t.size()) fail("dangling escape");
        const char e = t[i++];
        switch (e) {
          case '"':
            s += '"';
            break;
          case '\\':
            s += '\\';
            break;
          case '/':
            s += '/';
            break;
          case 'b':
            s += '\b';
            break;
          case 'f':
            s += '\f';
            break;
          case 'n':
            s += '\n';
            break;
          case 'r':
            s += '\r';
            break;
          case 't':
            s += '\t';
            break;
          case 'u': {
            if (i + 4 > t.size()) fail("short \\u");
            s += static_cast<char>(std::stoi(std::string(t.substr(i, 4)), nullptr, 16));
            i += 4;
            break;
          }
          default:
            fail("bad escape");
        }
      } else {
        s += c;
      }
    }
    expect('"');
    return s;
  };
  std::map<std::string, json_value> out;
  expect('{');
  if (i < t.size() && t[i] == '}') {
    ++i;
  } else {
    while (true) {
      const std::string key = parse_string();
      expect(':');
      json_value v{json_value::kind::null, "", false};
      if (t.substr(i, 4) == "null") {
        i += 4;
      } else if (t.substr(i, 4) == "true") {
        v = {json_value::kind::boolean, "true", true};
        i += 4;
      } else if (t.substr(i, 5) == "false") {
        v = {json_value::kind::boolean, "false", false};
        i += 5;
      } else if (i < t.size() && t[i] == '"') {
        v = {json_value::kind::string, parse_string(), false};
      } else {
        const std::size_t b = i;
        while (i < t.size() &&
               std::string_view("+-0123456789.eE").find(t[i]) != std::string_view::npos)
          ++i;
        if (i == b) fail("bad value");
        v = {json_value::kind::number, std::string(t.substr(b, i - b)), false};
        char* end = nullptr;
        const std::string num(v.text);
        std::strtod(num.c_str(), &end);
        if (end != num.c_str() + num.size()) fail("bad number");
      }
      if (out.count(key)) fail("duplicate key");
      out.emplace(key, v);
      if (i < t.size() && t[i] == ',') {
        ++i;
        continue;
      }
      expect('}');
      break;
    }
  }
  if (i != t.size()) fail("trailing text");
  return out;
}

/// A random layout with some empty ranks and zero lengths (std distributions are fine here:
/// the tests only need *some* fixed input, not cross-platform identical numbers).
inline batch_layout random_layout(std::uint64_t seed, rank_t d, int max_items_per_rank,
                                  bool with_bytes) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::int64_t>> lengths(static_cast<std::size_t>(d)), bytes;
  if (with_bytes) bytes.resize(static_cast<std::size_t>(d));
  for (rank_t r = 0; r < d; ++r) {
    const int k =
        r % 3 == 1 ? 0 : static_cast<int>(rng() % static_cast<unsigned>(max_items_per_rank + 1));
    for (int i = 0; i < k; ++i) {
      const auto l = static_cast<std::int64_t>(rng() % 5 == 0 ? rng() % 3 : 1 + rng() % 3000);
      lengths[static_cast<std::size_t>(r)].push_back(l);
      if (with_bytes)
        bytes[static_cast<std::size_t>(r)].push_back(l * 2 +
                                                     static_cast<std::int64_t>(rng() % 100));
    }
  }
  return batch_layout::from_ranks(lengths, bytes);
}

/// Rows of ITEMS.csv for a layout, shuffled (the reader must accept any order).
inline std::string shuffled_items(const batch_layout& layout, std::uint64_t seed) {
  const std::string text = tool::format_items(layout);
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  const std::string header = line;
  while (std::getline(in, line)) lines.push_back(line);
  std::mt19937_64 rng(seed);
  for (std::size_t i = lines.size(); i > 1; --i) std::swap(lines[i - 1], lines[rng() % i]);
  std::string out = header + "\n";
  for (const auto& l : lines) out += l + "\n";
  return out;
}

/// Parsed PLAN.csv rows, in file order.
struct plan_row {
  std::int64_t rank, slot, dst_rank, dst_slot;
};

inline std::vector<plan_row> parse_plan_rows(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  REQUIRE(line == "rank,slot,dst_rank,dst_slot");
  std::vector<plan_row> rows;
  while (std::getline(in, line)) {
    plan_row r{};
    char c1 = 0, c2 = 0, c3 = 0;
    std::istringstream ls(line);
    ls >> r.rank >> c1 >> r.slot >> c2 >> r.dst_rank >> c3 >> r.dst_slot;
    REQUIRE(ls);
    REQUIRE((c1 == ',' && c2 == ',' && c3 == ','));
    rows.push_back(r);
  }
  return rows;
}

/// Independent recomputation of the makespan of a plan read back from PLAN.csv: loads per
/// destination rank with items combined in destination-slot order.
template <class C>
auto recompute_makespan(const batch_layout& layout, const std::vector<plan_row>& rows, rank_t d,
                        const C& cost, orchmllm::padding_policy policy) {
  using Cost = orchmllm::cost_type_t<C>;
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> on(static_cast<std::size_t>(d));
  for (std::size_t g = 0; g < rows.size(); ++g)
    on[static_cast<std::size_t>(rows[g].dst_rank)].push_back(
        {rows[g].dst_slot, static_cast<std::int64_t>(g)});
  Cost best{};
  for (auto& v : on) {
    std::sort(v.begin(), v.end());
    Cost load{};
    std::int64_t longest = 0;
    for (auto [slot, g] : v) {
      (void)slot;
      load += cost(layout.length(g));
      longest = std::max(longest, layout.length(g));
    }
    if (policy.is_padded())
      load = v.empty() ? Cost{}
                       : static_cast<Cost>(static_cast<std::int64_t>(v.size())) *
                             static_cast<Cost>(cost(policy.padded_length(longest)));
    best = std::max(best, load);
  }
  return best;
}

const char* const plan_keys[] = {"algorithm",
                                 "requested",
                                 "items",
                                 "ranks",
                                 "policy",
                                 "cost",
                                 "makespan",
                                 "lower_bound",
                                 "ratio",
                                 "imbalance_before",
                                 "imbalance_after",
                                 "plan_seconds",
                                 "proven_optimal",
                                 "items_moved",
                                 "bytes_moved",
                                 "max_tokens",
                                 "max_items_per_rank",
                                 "min_items_per_rank",
                                 "gpus_per_node",
                                 "mapping",
                                 "moved_bytes",
                                 "inter_node_bytes",
                                 "inter_node_bytes_lower_bound",
                                 "max_node_egress_bytes",
                                 "max_node_ingress_bytes",
                                 "predicted_comm_seconds",
                                 "mapping_solver",
                                 "mapping_seconds",
                                 "mapping_proven_optimal"};

struct bad_case {
  const char* what;
  std::string text;
  std::vector<std::string> needles;  // all must appear in the message
};

inline std::vector<bad_case> bad_items_cases() {
  const std::string h = "rank,slot,length\n";
  return {
      {"empty file", "", {"items.csv", "empty file"}},
      {"blank file", "\n  \n\r\n", {"items.csv", "empty file"}},
      {"missing column", "rank,slot\n0,0\n", {"items.csv:1:", "lacks column 'length'"}},
      {"missing rank column", "slot,length\n0,0\n", {"items.csv:1:", "'slot', expected 'rank'"}},
      {"wrong order", "rank,length,slot\n", {"items.csv:1:", "'length', expected 'slot'"}},
      {"extra column", "rank,slot,length,bytes,weight\n", {"items.csv:1:", "'weight'"}},
      {"bad 4th column", "rank,slot,length,size\n", {"items.csv:1:", "'size', expected 'bytes'"}},
      {"too few fields", h + "0,0,5\n0,1\n", {"items.csv:3:", "2 fields, expected 3"}},
      {"too many fields", h + "0,0,5,7\n", {"items.csv:2:", "4 fields, expected 3"}},
      {"non-integer length",
       h + "0,0,5\n0,1,abc\n",
       {"items.csv:3:", "length 'abc'", "not an integer"}},
      {"fractional length", h + "0,0,1.5\n", {"items.csv:2:", "length '1.5'"}},
      {"empty field", h + "0,,5\n", {"items.csv:2:", "slot ''"}},
      {"non-integer rank", h + "x,0,5\n", {"items.csv:2:", "rank 'x'"}},
      {"negative length", h + "0,0,5\n0,1,-3\n", {"items.csv:3:", "negative length -3"}},
      {"negative slot", h + "0,-1,5\n", {"items.csv:2:", "negative slot -1"}},
      {"negative rank", h + "-1,0,5\n", {"items.csv:2:", "negative rank -1"}},
      {"negative bytes",
       "rank,slot,length,bytes\n0,0,5,-8\n",
       {"items.csv:2:", "negative bytes -8"}},
      {"overflow",
       h + "0,0,99999999999999999999\n",
       {"items.csv:2:", "99999999999999999999", "64-bit"}},
      {"duplicate slot",
       h + "0,0,5\n1,0,4\n0,0,3\n",
       {"items.csv:4:", "duplicate item (rank 0, slot 0)", "line 2"}},
      {"gapped slots", h + "0,0,5\n0,2,3\n", {"items.csv:3:", "slot 2 but no slot 1"}},
      {"slots not from 0", h + "1,1,5\n", {"items.csv:2:", "rank 1 has slot 1 but no slot 0"}},
      {"rank >= D", h + "0,0,5\n4,0,3\n", {"items.csv:3:", "rank 4", "rank count 4"}},
      {"zero segments", "rank,slot,length,segments\n0,0,6,0\n", {"items.csv:2:", "segments 0"}},
      {"segments not dividing",
       "rank,slot,length,bytes,segments\n0,0,6,1,2\n0,1,7,1,2\n",
       {"items.csv:3:", "length 7 cannot be cut into 2 equal segments"}},
      {"negative segments",
       "rank,slot,length,segments\n0,0,6,-2\n",
       {"items.csv:2:", "negative segments -2"}},
      {"segments before bytes",
       "rank,slot,length,segments,bytes\n",
       {"items.csv:1:", "unexpected extra column 'bytes'"}},
      {"segments twice",
       "rank,slot,length,segments,segments\n",
       {"items.csv:1:", "extra column 'segments'"}},
      {"too few fields with segments",
       "rank,slot,length,segments\n0,0,6\n",
       {"items.csv:2:", "3 fields, expected 4 (rank,slot,length,segments)"}},
  };
}

}  // namespace orchmllm::test::tool_fixtures
