// Tests of context parallelism in `orchmllm-bench` (bench/cli/), end to end through
// orchmllm::tool::run: `plan --cp-sizes` writes the library's shards as one PLAN.csv row per
// token chunk (every sample covered once, destinations dense), `simulate --workload
// long-context` orders its scenarios as the planner promises, `workload --name long-context`
// writes the input of both; bad flags exit 2 and say why; without the flags nothing changes.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <orchmllm/orchmllm.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/cli/items_csv.hpp"
#include "bench/cli/plan_cp.hpp"
#include "bench/cli/tool.hpp"
#include "bench/support/long_context.hpp"
#include "bench/support/models.hpp"
#include "support/tool_fixtures.hpp"

namespace tool = orchmllm::tool;
using orchmllm::batch_layout;
using orchmllm::rank_t;
using namespace orchmllm::test::tool_fixtures;  // support/tool_fixtures.hpp

namespace tool_cp_test {

struct cp_row {
  std::int64_t rank, slot, dst_rank, dst_slot, begin, end;
};

std::vector<cp_row> parse_cp_rows(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  REQUIRE(line == "rank,slot,dst_rank,dst_slot,token_begin,token_end");
  std::vector<cp_row> rows;
  while (std::getline(in, line)) {
    cp_row r{};
    char c[5] = {};
    std::istringstream ls(line);
    ls >> r.rank >> c[0] >> r.slot >> c[1] >> r.dst_rank >> c[2] >> r.dst_slot >> c[3] >> r.begin >>
        c[4] >> r.end;
    REQUIRE(ls);
    rows.push_back(r);
  }
  return rows;
}

// The one-line JSON output without its arrays (the flat parser reads scalars only).
std::map<std::string, json_value> scalars(const std::string& out) {
  REQUIRE(!out.empty());
  REQUIRE(out.back() == '\n');
  std::string flat = out.substr(0, out.size() - 1);
  for (std::size_t at = flat.find(":["); at != std::string::npos; at = flat.find(":[")) {
    const std::size_t key = flat.rfind(",\"", at);
    const std::size_t close = flat.find(']', at);
    REQUIRE(key != std::string::npos);
    REQUIRE(close != std::string::npos);
    flat.erase(key, close + 1 - key);
  }
  return parse_flat_json(flat);
}

// Samples with a long tail: most a few thousand tokens, some up to 256K.
batch_layout long_tailed(std::uint64_t seed, rank_t d, std::int64_t per_rank) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::int64_t>> lengths(static_cast<std::size_t>(d)), bytes;
  bytes.resize(lengths.size());
  for (std::size_t r = 0; r < lengths.size(); ++r)
    for (std::int64_t i = 0; i < per_rank; ++i) {
      const std::int64_t l = rng() % 10 == 0 ? 20'000 + static_cast<std::int64_t>(rng() % 240'000)
                                             : 1 + static_cast<std::int64_t>(rng() % 6'000);
      lengths[r].push_back(l);
      bytes[r].push_back(8 * l);
    }
  return batch_layout::from_ranks(lengths, bytes);
}

}  // namespace tool_cp_test

using namespace tool_cp_test;

TEST_CASE("plan --cp-sizes: one row per chunk, the library's shards, on random input") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const auto d = static_cast<rank_t>(4 + seed % 13);
    const batch_layout layout = long_tailed(seed, d, 5);
    write_text(items, tool::format_items(layout));
    const bool capped = seed % 3 == 0;
    std::vector<std::string> args = {"plan",
                                     "--items",
                                     items,
                                     "--ranks",
                                     std::to_string(d),
                                     "--out",
                                     out,
                                     "--gpus-per-node",
                                     "4",
                                     "--cp-sizes",
                                     seed % 2 == 0 ? "1,2,4" : "1,2"};
    if (capped) args.insert(args.end(), {"--cp-token-cap", "300000"});
    const auto r = run_tool(args);
    CAPTURE(seed);
    CAPTURE(r.err);
    REQUIRE(r.rc == 0);
    const auto j = scalars(r.out);
    const auto rows = parse_cp_rows(read_text(out));
    CHECK(j.at("algorithm").text == "context-parallel");
    CHECK(j.at("items").integer() == layout.num_items());
    CHECK(j.at("chunks").integer() == static_cast<std::int64_t>(rows.size()));
    CHECK(j.at("makespan").num() >= j.at("lower_bound").num() * (1 - 1e-12));
    // Every sample's rows cover [0, l) in order from its own (rank, slot).
    std::size_t i = 0;
    std::set<std::pair<std::int64_t, std::int64_t>> destinations;
    std::vector<std::int64_t> received(static_cast<std::size_t>(d), 0), tokens(received);
    std::int64_t sharded = 0;
    for (rank_t q = 0; q < d; ++q)
      for (std::int64_t g = layout.offset(q); g < layout.offset(q + 1); ++g) {
        std::int64_t at = 0, chunks = 0;
        for (; i < rows.size() && rows[i].rank == q && rows[i].slot == g - layout.offset(q);
             ++i, ++chunks) {
          CHECK(rows[i].begin == at);
          at = rows[i].end;
          CHECK(destinations.insert({rows[i].dst_rank, rows[i].dst_slot}).second);
          ++received[static_cast<std::size_t>(rows[i].dst_rank)];
          tokens[static_cast<std::size_t>(rows[i].dst_rank)] += rows[i].end - rows[i].begin;
        }
        CHECK(at == layout.length(g));
        CHECK((chunks == 1 || chunks == 4 || chunks == 8));
        sharded += chunks > 1 ? 1 : 0;
      }
    CHECK(i == rows.size());
    CHECK(j.at("sharded").integer() == sharded);
    for (const auto& [rank, slot] : destinations)
      CHECK(slot < received[static_cast<std::size_t>(rank)]);
    std::int64_t fullest = 0;
    for (const auto t : tokens) fullest = std::max(fullest, t);
    CHECK(j.at("max_tokens").integer() == fullest);
    if (capped) CHECK(fullest <= 300000);
    // The same plan as the library's, row for row.
    orchmllm::cp_options o;
    o.sizes = seed % 2 == 0 ? std::vector<std::int64_t>{1, 2, 4} : std::vector<std::int64_t>{1, 2};
    if (capped) o.token_cap = 300000;
    const auto lib = orchmllm::balance_context_parallel(
        layout, orchmllm::cp_cost::from_transformer(orchmllm::bench::llm_7b(), 989e12 * 0.5),
        orchmllm::topology::uniform(d, 4), o);
    CHECK(read_text(out) == tool::format_cp_plan(layout, lib));
    CHECK(j.at("makespan").num() == doctest::Approx(lib.makespan).epsilon(1e-12));
  }
}

TEST_CASE("plan: without --cp-sizes the four-column PLAN.csv, unchanged") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const batch_layout layout = long_tailed(3, 6, 4);
  write_text(items, tool::format_items(layout));
  const auto r = run_tool({"plan", "--items", items, "--ranks", "6", "--out", dir.file("p.csv")});
  REQUIRE(r.rc == 0);
  CHECK(read_text(dir.file("p.csv")).rfind("rank,slot,dst_rank,dst_slot\n", 0) == 0);
}

TEST_CASE("simulate --workload long-context: per-sample CP beats none and every static size") {
  const auto run = [](const std::string& scenario, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"simulate", "--workload", "long-context",
                                     "--ranks",  "64",         "--gpus-per-node",
                                     "8",        "--scenario", scenario};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_tool(args);
    CAPTURE(r.err);
    REQUIRE(r.rc == 0);
    return scalars(r.out);
  };
  const auto ours = run("cp");
  CHECK(ours.at("simulated").b);
  CHECK(ours.at("workload").text == "long-context");
  CHECK(ours.at("cp_sizes").text == "1,2,4,8");
  CHECK(ours.at("samples").integer() == 64 * 8);
  CHECK(ours.at("compute_seconds").num() >= ours.at("lower_bound_seconds").num() * (1 - 1e-12));
  // A regression guard on this fixed batch, not a bound of the algorithm.
  CHECK(ours.at("ratio").num() <= 1.05);
  const auto none = run("cp-none");
  CHECK(none.at("sharded").integer() == 0);
  CHECK(ours.at("step_seconds").num() < none.at("step_seconds").num());
  // FSDP: four micro-batches that each wait for the slowest rank cost at least the one batch.
  const auto fsdp = run("cp", {"--micro-batches", "4"});
  CHECK(fsdp.at("micro_batches").integer() == 4);
  CHECK(fsdp.at("compute_seconds").num() >= ours.at("compute_seconds").num() * (1 - 1e-12));
  CHECK(fsdp.at("compute_seconds").num() <= 4 * ours.at("compute_seconds").num());
  for (const std::string c : {"2", "4", "8"}) {
    const auto fixed = run("cp-static", {"--cp-size", c});
    CHECK(fixed.at("cp_sizes").text == c);
    CHECK(fixed.at("sharded").integer() == 64 * 8);
    CHECK(ours.at("step_seconds").num() < fixed.at("step_seconds").num());
  }
}

TEST_CASE("workload --name long-context: llm.csv, the simulator's batch") {
  scratch_dir dir;
  const auto r = run_tool({"workload", "--name", "long-context", "--ranks", "5",
                           "--samples-per-rank", "7", "--seed", "4", "--out-dir", dir.file("w")});
  REQUIRE(r.rc == 0);
  const auto j = scalars(r.out);
  CHECK(j.at("samples").integer() == 35);
  const batch_layout read = tool::parse_items(read_text(dir.file("w/llm.csv")), 5, "llm.csv");
  CHECK(read == orchmllm::bench::long_context_layout(5, 7, 4));
  std::int64_t tokens = 0;
  for (std::int64_t g = 0; g < read.num_items(); ++g) {
    CHECK(read.length(g) >= 1024);
    CHECK(read.length(g) <= orchmllm::bench::long_context_max_tokens);
    tokens += read.length(g);
  }
  CHECK(j.at("tokens").integer() == tokens);
}

TEST_CASE("plan and simulate: bad context-parallel flags exit 2 and say why") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  write_text(items, tool::format_items(long_tailed(5, 4, 3)));
  const std::vector<std::string> plan = {"plan",  "--items",        items, "--ranks", "4",
                                         "--out", dir.file("p.csv")};
  const auto expect = [](std::vector<std::string> args, const std::vector<std::string>& extra,
                         const std::string& needle) {
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_tool(args);
    CAPTURE(r.err);
    CHECK(r.rc == 2);
    CHECK(r.err.find(needle) != std::string::npos);
  };
  expect(plan, {"--cp-sizes", "1,2", "--cost", "linear"}, "--cost does not apply");
  expect(plan, {"--cp-sizes", "1,2", "--sync", "step"}, "--sync does not apply");
  expect(plan, {"--cp-sizes", "1,2", "--micro-batches", "auto"}, "give a count");
  expect(plan, {"--cp-sizes", "1,2", "--micro-batches", "2", "--micro-batch-tokens", "9"},
         "token cap 18 in all");
  expect(plan, {"--cp-sizes", "2,1"}, "sizes must increase");
  expect(plan, {"--cp-sizes", "1,x"}, "'x'");
  expect(plan, {"--cp-sizes", "0,2"}, "must be in [1");
  expect(plan, {"--cp-model", "7b"}, "--cp-model needs --cp-sizes");
  expect(plan, {"--cp-token-cap", "5"}, "--cp-token-cap needs --cp-sizes");
  expect(plan, {"--cp-sizes", "1,2", "--cp-model", "13b"}, "expected 7b or 72b");
  expect(plan, {"--cp-sizes", "1,2", "--cp-token-cap", "10"}, "token cap 10");
  const std::vector<std::string> sim = {"simulate", "--ranks", "8", "--gpus-per-node", "8"};
  expect(sim, {"--workload", "long-context", "--scenario", "full"}, "cp-none, cp-static or cp");
  expect(sim, {"--workload", "long-context", "--scenario", "cp", "--cp-size", "4"},
         "--cp-size needs --scenario cp-static");
  expect(sim, {"--workload", "long-context", "--scenario", "cp-static", "--cp-sizes", "1,2"},
         "--cp-sizes needs --scenario cp");
  expect(sim, {"--workload", "long-context", "--scenario", "cp", "--trace", "x.csv"},
         "--trace does not apply");
  expect(sim, {"--workload", "vl-sft", "--scenario", "full", "--cp-sizes", "1,2"},
         "--cp-sizes needs --workload long-context");
}

TEST_CASE("plan --cp-sizes --micro-batches: the sample's micro-batch in a last column") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  const batch_layout layout = long_tailed(9, 8, 6);
  write_text(items, tool::format_items(layout));
  const auto r = run_tool({"plan", "--items", items, "--ranks", "8", "--gpus-per-node", "4",
                           "--cp-sizes", "1,2,4", "--micro-batches", "3", "--out", out});
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const auto j = scalars(r.out);
  CHECK(j.at("micro_batches").integer() == 3);
  CHECK(j.at("micro_batch_tokens").k == json_value::kind::null);
  CHECK(j.at("objective").num() >= j.at("makespan").num() * (1 - 1e-12));
  orchmllm::cp_options o;
  o.sizes = {1, 2, 4};
  o.micro_batches = 3;
  const auto lib = orchmllm::balance_context_parallel(
      layout, orchmllm::cp_cost::from_transformer(orchmllm::bench::llm_7b(), 989e12 * 0.5),
      orchmllm::topology::uniform(8, 4), o);
  const std::string text = read_text(out);
  CHECK(text.rfind("rank,slot,dst_rank,dst_slot,token_begin,token_end,dst_micro_batch\n", 0) == 0);
  CHECK(text == tool::format_cp_plan(layout, lib, true));
  CHECK(j.at("objective").num() == doctest::Approx(lib.objective).epsilon(1e-12));
}
