// Tests of the orchmllm-bench command-line tool (bench/cli/): flag parsing (--name value and
// --name=value, mistakes named), the problem flags (cost, policy, constraints), every usage error
// (exit 2 with the message and a usage line) and the help texts, through orchmllm::tool::run
// (in-process; tests/tool/cli_check.cmake drives the real binary).

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <orchmllm/orchmllm.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "bench/cli/tool.hpp"
#include "support/tool_fixtures.hpp"

namespace fs = std::filesystem;
namespace tool = orchmllm::tool;
using namespace orchmllm::test::tool_fixtures;  // support/tool_fixtures.hpp

// =============================================================================================
// Flag parsing
// =============================================================================================

TEST_CASE("parse_flags accepts --name value and --name=value and rejects mistakes by name") {
  const std::vector<tool::flag_spec> specs = {
      {"items", "F", "", true}, {"ranks", "D", "", false}, {"json", "", "", false}};
  auto parse = [&](std::vector<std::string> a) { return tool::parse_flags(specs, a); };

  const auto a = parse({"--items", "x.csv", "--ranks=7", "--json"});
  CHECK(a.require("items") == "x.csv");
  CHECK(a.require_int("ranks") == 7);
  CHECK(a.has("json"));
  CHECK(parse({"--items=a=b"}).require("items") == "a=b");
  CHECK(parse({"--items", "-5"}).require("items") == "-5");  // a leading single dash is a value

  auto fails_with = [&](std::vector<std::string> args, const std::string& needle) {
    try {
      (void)parse(std::move(args));
    } catch (const tool::usage_error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
      return;
    }
    FAIL("no usage_error for ", needle);
  };
  fails_with({"--items", "x", "--bogus", "1"}, "unknown flag --bogus");
  fails_with({"--items"}, "flag --items needs a value");
  fails_with({"--items", "--json"}, "flag --items needs a value");
  fails_with({"--items="}, "flag --items needs a value");
  fails_with({"--items", "x", "--json=1"}, "flag --json takes no value");
  fails_with({"--items", "x", "--items", "y"}, "flag --items given twice");
  fails_with({"--ranks", "3"}, "missing required flag --items");
  fails_with({"--items", "x", "stray"}, "unexpected argument 'stray'");

  const auto b = parse({"--items", "x", "--ranks", "12abc"});
  CHECK_THROWS_WITH_AS((void)b.require_int("ranks"), "--ranks expects an integer, got '12abc'",
                       tool::usage_error);
  const auto c = parse({"--items", "x", "--ranks", "0"});
  CHECK_THROWS_WITH_AS((void)c.require_int("ranks", 1, 10), "--ranks is 0, must be in [1, 10]",
                       tool::usage_error);
}

TEST_CASE("problem flags: cost, policy and constraints") {
  const auto [lin, lin_name] = tool::parse_cost("linear");
  CHECK(std::holds_alternative<orchmllm::linear_cost>(lin));
  CHECK(lin_name == "linear");
  const auto [quad, quad_name] = tool::parse_cost("quadratic:1,0.0005");
  REQUIRE(std::holds_alternative<orchmllm::quadratic_cost>(quad));
  CHECK(std::get<orchmllm::quadratic_cost>(quad) == orchmllm::quadratic_cost{0.0, 1.0, 0.0005});
  CHECK(quad_name == "quadratic:1,0.0005");  // shortest round-trip spelling
  CHECK(tool::parse_cost("quadratic:0,2e-3").second == "quadratic:0,0.002");
  CHECK_THROWS_AS((void)tool::parse_cost("quadratic:1,inf"), tool::usage_error);
  CHECK_THROWS_AS((void)tool::parse_cost("quadratic:1,2,3,4"), tool::usage_error);
  CHECK(tool::parse_cost("quadratic:1,2,3").second == "quadratic:1,2,3");

  const auto specs = tool::problem_flags();
  auto parse = [&](std::vector<std::string> a) { return tool::parse_flags(specs, a); };
  const std::vector<std::string> base = {"--items", "x", "--ranks", "2"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return parse(a);
  };
  CHECK(tool::parse_policy(with({})) == orchmllm::packed);
  CHECK(tool::parse_policy(with({"--policy", "padded"})) == orchmllm::padded);
  CHECK(tool::parse_policy(with({"--policy=padded", "--pad-multiple=64"})) ==
        orchmllm::padding_policy::padded(64));
  const auto b = tool::parse_policy(with({"--policy", "bucketed:512,1024,4096"}));
  CHECK(b == orchmllm::bucketed({512, 1024, 4096}));
  CHECK(tool::policy_name(b) == "bucketed:512,1024,4096");
  CHECK(tool::parse_policy(with({"--policy=bucketed:7"})) == orchmllm::bucketed({7}));
  const auto c = tool::parse_constraints(with({"--cap-bytes", "100", "--min-items", "1"}));
  REQUIRE(c.cap.has_value());
  CHECK(c.cap->what == orchmllm::capacity::measure::bytes);
  CHECK(c.cap->limit == 100);
  CHECK(c.min_items == 1);
  CHECK(c.max_items == INT64_MAX);
  CHECK_FALSE(tool::parse_constraints(with({})).any());
}

TEST_CASE("usage errors exit 2 with the message and a usage line") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  write_text(items, "rank,slot,length\n0,0,5\n");
  const std::string out = dir.file("plan.csv");
  struct usage_case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<usage_case> cases = {
      {{}, "missing subcommand"},
      {{"frobnicate"}, "unknown subcommand 'frobnicate'"},
      {{"help", "frobnicate"}, "no help for 'frobnicate'"},
      {{"plan", "--items", items, "--ranks", "2"}, "missing required flag --out"},
      {{"plan", "--ranks", "2", "--out", out}, "missing required flag --items"},
      {{"plan", "--items", items, "--out", out}, "missing required flag --ranks"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--bogus", "1"},
       "unknown flag --bogus"},
      {{"plan", "--items", items, "--ranks", "--out", out}, "flag --ranks needs a value"},
      {{"plan", "--items", items, "--ranks", "two", "--out", out},
       "--ranks expects an integer, got 'two'"},
      {{"plan", "--items", items, "--ranks", "0", "--out", out}, "--ranks is 0"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--policy", "ragged"},
       "--policy is 'ragged'"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--pad-multiple", "8"},
       "--pad-multiple needs --policy padded"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--policy", "bucketed:8,x"},
       "--policy expects an integer, got 'x'"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--policy", "bucketed:"},
       "--policy expects an integer, got ''"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--policy", "bucketed:0"},
       "--policy is 0"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--policy", "bucketed:8,4"},
       "strictly increasing"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--policy", "bucketed:8",
        "--pad-multiple", "2"},
       "--pad-multiple needs --policy padded"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--policy", "padded",
        "--pad-multiple", "0"},
       "--pad-multiple is 0"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--cost", "cubic"},
       "--cost is 'cubic'"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--cost", "quadratic:1"},
       "--cost is 'quadratic:1'"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--cost", "quadratic:1,x"},
       "--cost expects a finite number, got 'x'"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--cost", "quadratic:-1,0"},
       "linear coefficient is -1"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--algorithm", "magic"},
       "--algorithm: unknown balancer 'magic'; expected one of: identity, lpt, karmarkar_karp, "
       "karmarkar_karp_equal, exact, padded_exact, automatic, locality"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--algorithm", "kk"},
       "--algorithm: unknown balancer 'kk' (did you mean 'karmarkar_karp'?)"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--algorithm", "auto"},
       "--algorithm: unknown balancer 'auto' (did you mean 'automatic'?)"},
      {{"compare", "--items", items, "--ranks", "2", "--algorithm", "lpt"},
       "unknown flag --algorithm"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--cap", "5", "--cap-bytes", "5"},
       "exclusive"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--min-items", "3", "--max-items",
        "2"},
       "--max-items 2 is below --min-items 3"},
      {{"plan", "--items", items, "--ranks", "2", "--out", out, "--cap", "-1"}, "--cap is -1"},
      {{"compare", "--items", items, "--ranks", "2", "--out", out}, "unknown flag --out"},
      {{"generate", "--ranks", "2", "--items-per-rank", "3"}, "missing required flag --out"},
      {{"generate", "--ranks", "2", "--items-per-rank", "3", "--out", out, "--min", "9", "--max",
        "8"},
       "--max 8 is below --min 9"},
      {{"generate", "--ranks", "2", "--items-per-rank", "3", "--out", out, "--sigma", "-1"},
       "--sigma is -1"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.needle);
    const auto r = run_tool(c.args);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK_MESSAGE(r.err.find(c.needle) != std::string::npos, r.err);
    CHECK(r.err.find("usage: orchmllm-bench") != std::string::npos);
    CHECK(count_lines(r.err) == 2);
    CHECK_FALSE(fs::exists(out));
  }
  // A library refusal (karmarkar_karp on a padded policy) is an error with the library's message.
  const auto r = run_tool({"plan", "--items", items, "--ranks", "2", "--out", out, "--policy",
                           "padded", "--algorithm", "karmarkar_karp"});
  CHECK(r.rc == 2);
  CHECK(r.err.find("karmarkar_karp balances the packed policy only") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  // Unreadable input.
  const auto missing =
      run_tool({"plan", "--items", dir.file("nope.csv"), "--ranks", "2", "--out", out});
  CHECK(missing.rc == 2);
  CHECK(missing.err.find("cannot open") != std::string::npos);
  // Unwritable output.
  const auto unwritable = run_tool(
      {"plan", "--items", items, "--ranks", "2", "--out", dir.file("no/such/dir/plan.csv")});
  CHECK(unwritable.rc == 2);
  CHECK(unwritable.err.find("cannot create") != std::string::npos);
  CHECK(dir.entries() == std::set<std::string>{"items.csv"});
}

TEST_CASE("help") {
  const auto all = run_tool({"--help"});
  CHECK(all.rc == 0);
  CHECK(all.err.empty());
  for (const char* name : {"generate", "plan", "compare", "help"})
    CHECK(all.out.find(std::string("  ") + name) != std::string::npos);
  CHECK(run_tool({"help"}).out == all.out);
  const auto plan = run_tool({"help", "plan"});
  CHECK(plan.rc == 0);
  for (const char* flag :
       {"--items ITEMS.csv", "--ranks D", "--policy", "--pad-multiple", "--cost", "--algorithm",
        "--cap C", "--cap-bytes", "--min-items", "--max-items", "--out PLAN.csv"})
    CHECK_MESSAGE(plan.out.find(flag) != std::string::npos, flag);
  CHECK(run_tool({"plan", "--help"}).out == plan.out);
  CHECK(run_tool({"compare", "--ranks", "3", "-h"}).rc == 0);
  CHECK(run_tool({"--version"}).out.find(orchmllm::version_string()) != std::string::npos);
}
