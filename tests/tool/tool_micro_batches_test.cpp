// Tests of the micro-batch flags of `orchmllm-bench plan` and `compare` (bench/cli/), end to end
// through orchmllm::tool::run: PLAN.csv's dst_micro_batch column and the JSON figures are the
// library's cells and objective (recomputed from the file), limits and counts hold on random
// inputs under every policy, sync model and mapping; bad flags exit 2 with a message; without
// the flags nothing changes.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <orchmllm/orchmllm.hpp>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/cli/tool.hpp"
#include "support/tool_fixtures.hpp"

namespace tool = orchmllm::tool;
using orchmllm::batch_layout;
using orchmllm::rank_t;
using namespace orchmllm::test::tool_fixtures;  // support/tool_fixtures.hpp

namespace {

/// One row of a PLAN.csv with micro-batches.
struct micro_row {
  std::int64_t rank, slot, dst_rank, dst_slot, dst_micro_batch;
};

std::vector<micro_row> parse_micro_rows(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  REQUIRE(line == "rank,slot,dst_rank,dst_slot,dst_micro_batch");
  std::vector<micro_row> rows;
  while (std::getline(in, line)) {
    micro_row r{};
    char c[4] = {};
    std::istringstream ls(line);
    ls >> r.rank >> c[0] >> r.slot >> c[1] >> r.dst_rank >> c[2] >> r.dst_slot >> c[3] >>
        r.dst_micro_batch;
    REQUIRE(ls);
    rows.push_back(r);
  }
  return rows;
}

/// The figures of one micro-batch plan recomputed from its PLAN.csv rows (in source global-id
/// order): per cell, the items in slot order; the objective under both sync models; the largest
/// cell's physical tokens.
struct recomputed {
  std::int64_t step = 0;         // max_r Σ_m load(r, m)
  std::int64_t micro_batch = 0;  // Σ_m max_r load(r, m)
  std::int64_t max_cell_tokens = 0;
  bool slots_grouped = true;  // on every rank, the micro-batch index never decreases with slot
  bool every_cell_used = true;
};

recomputed recompute(const batch_layout& layout, const std::vector<micro_row>& rows, rank_t d,
                     std::int64_t m_count, orchmllm::padding_policy policy) {
  const orchmllm::linear_cost cost;
  recomputed out;
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> on(static_cast<std::size_t>(d));
  for (std::size_t g = 0; g < rows.size(); ++g)
    on[static_cast<std::size_t>(rows[g].dst_rank)].push_back(
        {rows[g].dst_slot, static_cast<std::int64_t>(g)});
  std::vector<std::int64_t> cell_max(static_cast<std::size_t>(m_count), 0);
  for (auto& v : on) {
    std::sort(v.begin(), v.end());
    std::vector<std::int64_t> count(static_cast<std::size_t>(m_count), 0), longest(count),
        sum(count);
    std::int64_t last = 0;
    for (const auto& [slot, g] : v) {
      const auto m = rows[static_cast<std::size_t>(g)].dst_micro_batch;
      REQUIRE(m >= 0);
      REQUIRE(m < m_count);
      out.slots_grouped = out.slots_grouped && m >= last;
      last = m;
      const auto i = static_cast<std::size_t>(m);
      ++count[i];
      longest[i] = std::max(longest[i], layout.length(g));
      sum[i] += layout.length(g);
    }
    std::int64_t total = 0;
    for (std::size_t i = 0; i < count.size(); ++i) {
      const auto tokens = policy.is_padded() ? count[i] * policy.padded_length(longest[i]) : sum[i];
      const auto load =
          policy.is_padded() ? count[i] * cost(policy.padded_length(longest[i])) : sum[i];
      out.max_cell_tokens = std::max(out.max_cell_tokens, tokens);
      out.every_cell_used = out.every_cell_used && count[i] > 0;
      cell_max[i] = std::max(cell_max[i], load);
      total += load;
    }
    out.step = std::max(out.step, total);
  }
  for (const auto c : cell_max) out.micro_batch += c;
  return out;
}

/// The JSON object of a one-line output.
std::map<std::string, json_value> json_line(const std::string& out) {
  REQUIRE(!out.empty());
  REQUIRE(out.back() == '\n');
  return parse_flat_json(out.substr(0, out.size() - 1));
}

}  // namespace

TEST_CASE("plan --micro-batches: cells under the limit, the library's objective, on random input") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  int checked = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    const auto d = static_cast<rank_t>(2 + rng() % 6);
    const auto layout = random_layout(seed, d, 9, false);
    if (layout.num_items() < 2 * static_cast<std::int64_t>(d)) continue;
    std::int64_t longest = 1;
    for (std::int64_t g = 0; g < layout.num_items(); ++g)
      longest = std::max(longest, layout.length(g));
    const bool padded = seed % 3 == 0;
    const auto policy = padded ? orchmllm::padded : orchmllm::packed;
    const std::int64_t tokens =
        padded ? 2 * longest : longest + static_cast<std::int64_t>(rng() % 4000);
    const bool sync_step = seed % 4 == 1;
    const bool mapped = seed % 5 == 2 && d >= 4;
    write_text(items, tool::format_items(layout));
    std::vector<std::string> args = {"plan",
                                     "--items",
                                     items,
                                     "--ranks",
                                     std::to_string(d),
                                     "--out",
                                     out,
                                     "--micro-batch-tokens",
                                     std::to_string(tokens),
                                     "--sync",
                                     sync_step ? "step" : "micro-batch"};
    if (padded) args.insert(args.end(), {"--policy", "padded"});
    if (mapped) args.insert(args.end(), {"--gpus-per-node", "2"});
    const auto r = run_tool(args);
    CAPTURE(seed);
    CAPTURE(r.err);
    if (r.rc != 0) {
      // Only an M that leaves a cell empty may fail: the message names it.
      CHECK(r.rc == 2);
      CHECK(r.err.find("micro-batch") != std::string::npos);
      continue;
    }
    const auto j = json_line(r.out);
    const auto m = j.at("micro_batches").integer();
    CHECK(j.at("sync").text == (sync_step ? "step" : "micro-batch"));
    CHECK(j.at("micro_batch_tokens").integer() == tokens);
    const auto rows = parse_micro_rows(read_text(out));
    REQUIRE(rows.size() == static_cast<std::size_t>(layout.num_items()));
    const auto got = recompute(layout, rows, d, m, policy);
    CHECK(got.max_cell_tokens <= tokens);
    CHECK(got.slots_grouped);
    CHECK(got.every_cell_used);
    CHECK(j.at("objective").integer() == (sync_step ? got.step : got.micro_batch));
    // Packed, a rank's load is the sum of its cells' (padded, each cell pads on its own).
    if (!padded) CHECK(j.at("makespan").integer() == got.step);
    CHECK(j.at("objective_lower_bound").integer() <= j.at("objective").integer());
    // The library's own figures for the same input.
    orchmllm::micro_batching micro;
    micro.limits.tokens = tokens;
    micro.sync = sync_step ? orchmllm::sync_model::step : orchmllm::sync_model::micro_batch;
    const auto lib =
        orchmllm::balance_micro_batches(layout, orchmllm::linear_cost{}, policy, micro);
    CHECK(lib.micro_batches == m);
    CHECK(lib.objective == j.at("objective").integer());
    CHECK(lib.objective_lower_bound == j.at("objective_lower_bound").integer());
    CHECK(orchmllm::micro_batch_objective_as_sampled(layout, orchmllm::linear_cost{}, policy,
                                                     micro) == j.at("objective_before").integer());
    // The plan without the mapping is the library's, slot for slot.
    if (!mapped) {
      for (std::int64_t g = 0; g < layout.num_items(); ++g) {
        const auto dst = lib.balance.plan.destination_of(g);
        CHECK(rows[static_cast<std::size_t>(g)].dst_rank == dst.rank);
        CHECK(rows[static_cast<std::size_t>(g)].dst_slot == dst.slot);
      }
    }
    // Another tool command reads the file back.
    CHECK_NOTHROW((void)tool::parse_plan(read_text(out), layout.offsets(), d, "plan.csv"));
    ++checked;
  }
  CHECK(checked >= 12);
}

TEST_CASE("plan: the counts the micro-batch flags ask for") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  const auto layout = random_layout(77, 4, 40, false);
  REQUIRE(layout.num_items() >= 16);
  write_text(items, tool::format_items(layout));
  const auto plan = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"plan", "--items", items, "--ranks", "4", "--out", out};
    args.insert(args.end(), flags.begin(), flags.end());
    return run_tool(args);
  };
  SUBCASE("a given M") {
    const auto r = plan({"--micro-batches", "3"});
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    CHECK(json_line(r.out).at("micro_batches").integer() == 3);
    CHECK(json_line(r.out).at("micro_batch_tokens").k == json_value::kind::null);
  }
  SUBCASE("a minimum and a multiple") {
    const auto r = plan({"--min-micro-batches", "3", "--micro-batch-multiple", "2"});
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    CHECK(json_line(r.out).at("micro_batches").integer() == 4);
    const auto rows = parse_micro_rows(read_text(out));
    CHECK(recompute(layout, rows, 4, 4, orchmllm::packed).every_cell_used);
  }
  SUBCASE("--sync alone: one micro-batch") {
    const auto r = plan({"--sync", "step"});
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    const auto j = json_line(r.out);
    CHECK(j.at("micro_batches").integer() == 1);
    CHECK(j.at("objective").integer() == j.at("makespan").integer());
  }
}

TEST_CASE("plan and compare: bad micro-batch flags and inputs exit 2 and say why") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  write_text(items, "rank,slot,length\n0,0,100\n0,1,40\n1,0,30\n1,1,900\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--micro-batches", "0"}, "--micro-batches"},
      {{"--micro-batches", "many"}, "--micro-batches"},
      {{"--sync", "sometimes"}, "--sync"},
      {{"--micro-batches", "3", "--micro-batch-multiple", "2"}, "multiple"},
      {{"--micro-batch-tokens", "0"}, "--micro-batch-tokens"},
      {{"--micro-batch-tokens", "500"}, "item (rank 1, slot 1) alone needs 900 tokens"},
      {{"--micro-batches", "3"}, "micro-batch"}};
  for (const auto& [flags, says] : cases) {
    for (const char* cmd : {"plan", "compare"}) {
      std::vector<std::string> args = {cmd, "--items", items, "--ranks", "2"};
      if (std::string(cmd) == "plan") args.insert(args.end(), {"--out", out});
      args.insert(args.end(), flags.begin(), flags.end());
      const auto r = run_tool(args);
      CAPTURE(cmd);
      CAPTURE(flags.front());
      CAPTURE(r.err);
      CHECK(r.rc == 2);
      // The first line says why (a usage error adds the usage line).
      CHECK(r.err.substr(0, r.err.find('\n')).find(says) != std::string::npos);
    }
  }
}

TEST_CASE("compare --micro-batches: every row balances cells; automatic's is plan's") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  const auto layout = random_layout(31, 6, 10, false);
  write_text(items, tool::format_items(layout));
  const std::vector<std::string> flags = {"--micro-batch-tokens", "6000"};
  std::vector<std::string> args = {"compare", "--items", items, "--ranks", "6", "--json"};
  args.insert(args.end(), flags.begin(), flags.end());
  const auto r = run_tool(args);
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  std::istringstream in(r.out);
  std::map<std::string, std::map<std::string, json_value>> by_name;
  for (std::string line; std::getline(in, line);) {
    auto j = parse_flat_json(line);
    by_name[j.at("algorithm").text] = j;
  }
  int ok = 0;
  for (const auto& [name, j] : by_name) {
    if (j.at("status").text != "ok") continue;
    CAPTURE(name);
    CHECK(j.at("sync").text == "micro-batch");
    CHECK(j.at("objective_lower_bound").integer() <= j.at("objective").integer());
    CHECK(j.at("objective_ratio").num() >= 1.0);
    ++ok;
  }
  CHECK(ok >= 5);
  std::vector<std::string> plan_args = {"plan", "--items", items, "--ranks", "6", "--out", out};
  plan_args.insert(plan_args.end(), flags.begin(), flags.end());
  const auto p = run_tool(plan_args);
  REQUIRE_MESSAGE(p.rc == 0, p.err);
  const auto pj = json_line(p.out);
  const auto& aj = by_name.at("automatic");
  for (const char* key :
       {"micro_batches", "objective", "objective_before", "objective_lower_bound"})
    CHECK(aj.at(key).text == pj.at(key).text);
  // The table: the objective columns and the objective of the input as sampled.
  args.erase(args.begin() + 5);
  const auto t = run_tool(args);
  REQUIRE_MESSAGE(t.rc == 0, t.err);
  CHECK(t.out.find("objective before " + pj.at("objective_before").text) != std::string::npos);
  CHECK(t.out.find("objective") != std::string::npos);
}

TEST_CASE("plan and compare without micro-batch flags print no micro-batch figures") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  write_text(items, tool::format_items(random_layout(9, 4, 6, false)));
  const auto r = run_tool({"plan", "--items", items, "--ranks", "4", "--out", out});
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(json_line(r.out).count("micro_batches") == 0);
  CHECK(read_text(out).rfind("rank,slot,dst_rank,dst_slot\n", 0) == 0);
  const auto c = run_tool({"compare", "--items", items, "--ranks", "4", "--json"});
  REQUIRE_MESSAGE(c.rc == 0, c.err);
  CHECK(c.out.find("objective") == std::string::npos);
}
