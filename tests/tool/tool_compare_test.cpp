// Tests of `orchmllm-bench compare` (bench/cli/), end to end through orchmllm::tool::run: the
// table and the JSON lines cover every algorithm (n/a where one does not apply), the figures
// match `plan`'s, a failing algorithm is a row and an infeasible input an error.

#include <doctest/doctest.h>

#include <cstddef>
#include <map>
#include <orchmllm/orchmllm.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cli/tool.hpp"
#include "support/tool_fixtures.hpp"

namespace tool = orchmllm::tool;
using namespace orchmllm::test::tool_fixtures;  // support/tool_fixtures.hpp

// =============================================================================================
// compare
// =============================================================================================

TEST_CASE("compare: table and JSON lines cover every algorithm") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");

  SUBCASE("packed, more than 16 items: exact and padded_exact are n/a") {
    const auto layout = random_layout(5, 8, 6, false);
    REQUIRE(layout.num_items() > 16);
    write_text(items, tool::format_items(layout));
    const auto r = run_tool({"compare", "--items", items, "--ranks", "8"});
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    CHECK(r.err.empty());
    std::istringstream in(r.out);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    REQUIRE(lines.size() == 12);  // summary, header, 10 rows
    CHECK(lines[0].find("items " + std::to_string(layout.num_items()) + ", ranks 8") == 0);
    CHECK(lines[1].find("algorithm") == 0);
    for (const char* col : {"makespan", "ratio", "imbalance", "seconds"})
      CHECK(lines[1].find(col) != std::string::npos);
    const char* names[] = {"identity",
                           "lpt",
                           "lpt+refine",
                           "karmarkar_karp",
                           "karmarkar_karp+refine",
                           "karmarkar_karp_equal",
                           "karmarkar_karp_equal+refine",
                           "exact",
                           "padded_exact",
                           "automatic"};
    for (std::size_t i = 0; i < 10; ++i) {
      CAPTURE(names[i]);
      CHECK(lines[i + 2].rfind(std::string(names[i]) + " ", 0) == 0);
    }
    CHECK(lines[9].find("n/a") != std::string::npos);
    CHECK(lines[9].find("> 16 items") != std::string::npos);
    CHECK(lines[10].find("needs --policy padded") != std::string::npos);
    CHECK(lines[11].find("used ") != std::string::npos);
    // Columns are aligned: the makespan column ends at the same offset on every "ok" row.
    const auto end_of_makespan = lines[1].find("makespan") + std::string("makespan").size();
    for (std::size_t i : {2u, 3u, 4u, 5u, 6u, 7u, 8u, 11u}) {
      CHECK(lines[i][end_of_makespan - 1] != ' ');
      CHECK(lines[i][end_of_makespan] == ' ');
    }

    const auto js = run_tool({"compare", "--items", items, "--ranks", "8", "--json"});
    REQUIRE(js.rc == 0);
    std::istringstream jin(js.out);
    std::vector<std::map<std::string, json_value>> objs;
    for (std::string l; std::getline(jin, l);) objs.push_back(parse_flat_json(l));
    REQUIRE(objs.size() == 10);
    std::map<std::string, std::map<std::string, json_value>> by_name;
    for (std::size_t i = 0; i < 10; ++i) {
      CHECK(objs[i].at("algorithm").text == names[i]);
      by_name[objs[i].at("algorithm").text] = objs[i];
    }
    CHECK(by_name["exact"].at("status").text == "n/a");
    CHECK(by_name["padded_exact"].at("status").text == "n/a");
    CHECK(by_name["padded_exact"].at("reason").text == "needs --policy padded");
    for (const char* ok :
         {"identity", "lpt", "lpt+refine", "karmarkar_karp", "karmarkar_karp+refine",
          "karmarkar_karp_equal", "karmarkar_karp_equal+refine", "automatic"}) {
      CAPTURE(ok);
      const auto& o = by_name[ok];
      REQUIRE(o.at("status").text == "ok");
      for (const char* k : {"makespan", "ratio", "imbalance", "seconds", "lower_bound", "used"})
        CHECK(o.count(k) == 1);
    }
    const auto ms = [&](const char* n) { return by_name[n].at("makespan").integer(); };
    CHECK(ms("automatic") <= ms("lpt"));
    CHECK(ms("automatic") <= ms("karmarkar_karp"));
    CHECK(ms("lpt+refine") <= ms("lpt"));
    CHECK(ms("karmarkar_karp+refine") <= ms("karmarkar_karp"));
    CHECK(ms("automatic") <= ms("karmarkar_karp_equal"));
    CHECK(ms("karmarkar_karp_equal+refine") <= ms("karmarkar_karp_equal"));
    // Each row reports the balancer that made its plan.
    for (const char* n : {"identity", "lpt", "karmarkar_karp", "karmarkar_karp_equal"})
      CHECK(by_name[n].at("used").text == n);
    CHECK(by_name["lpt+refine"].at("used").text == "lpt");
    CHECK(by_name["karmarkar_karp_equal+refine"].at("used").text == "karmarkar_karp_equal");
    CHECK(by_name["automatic"].at("used").text != "automatic");
    CHECK(by_name["identity"].at("items_moved").integer() == 0);
    CHECK(by_name["identity"].at("imbalance").num() ==
          by_name["identity"].at("imbalance_before").num());
    // The figures match what `plan` reports for the same algorithm.
    const auto p = run_tool({"plan", "--items", items, "--ranks", "8", "--algorithm", "lpt",
                             "--out", dir.file("plan.csv")});
    REQUIRE(p.rc == 0);
    CHECK(parse_flat_json(p.out.substr(0, p.out.size() - 1)).at("makespan").integer() == ms("lpt"));
  }
  SUBCASE("padded, few items: karmarkar_karp is n/a, exact and padded_exact run") {
    const auto layout = random_layout(11, 3, 4, false);
    REQUIRE(layout.num_items() <= 16);
    write_text(items, tool::format_items(layout));
    const auto js = run_tool({"compare", "--items", items, "--ranks", "3", "--policy", "padded",
                              "--cost", "quadratic:1,0.01", "--json"});
    REQUIRE_MESSAGE(js.rc == 0, js.err);
    std::map<std::string, std::map<std::string, json_value>> by_name;
    std::istringstream jin(js.out);
    for (std::string l; std::getline(jin, l);) {
      auto o = parse_flat_json(l);
      by_name[o.at("algorithm").text] = o;
    }
    REQUIRE(by_name.size() == 10);
    for (const char* packed_only : {"karmarkar_karp", "karmarkar_karp+refine",
                                    "karmarkar_karp_equal", "karmarkar_karp_equal+refine"}) {
      CAPTURE(packed_only);
      CHECK(by_name[packed_only].at("status").text == "n/a");
      CHECK(by_name[packed_only].at("reason").text == "needs --policy packed");
    }
    REQUIRE(by_name["exact"].at("status").text == "ok");
    REQUIRE(by_name["padded_exact"].at("status").text == "ok");
    CHECK(by_name["padded_exact"].at("used").text == "padded_exact");
    CHECK(by_name["automatic"].at("makespan").num() <= by_name["lpt"].at("makespan").num());
  }
  SUBCASE("a failing algorithm is a row; an infeasible input is an error") {
    write_text(items, "rank,slot,length\n0,0,50\n0,1,40\n1,0,30\n");
    // Feasible ({50}, {40, 30}), but not as sampled (rank 0 holds 90).
    const auto r = run_tool({"compare", "--items", items, "--ranks", "2", "--cap", "70", "--json"});
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    CHECK(r.out.find(R"({"algorithm":"identity","status":"failed","reason":)") == 0);
    const auto bad = run_tool({"compare", "--items", items, "--ranks", "2", "--cap", "55"});
    CHECK(bad.rc == 2);
    CHECK(bad.out.empty());
    CHECK(count_lines(bad.err) == 1);
  }
}
