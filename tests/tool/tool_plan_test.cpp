// Tests of `orchmllm-bench plan` (bench/cli/), end to end through orchmllm::tool::run: PLAN.csv
// and the JSON line are the library's plan and figures for every policy, cost, algorithm and
// constraint (recomputed independently), --gpus-per-node and --mapping, segments, bucketed
// policies exact against brute force, an input without items; every bad input and infeasible
// constraint exits 2 with a one-line message and leaves no output file.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <orchmllm/orchmllm.hpp>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bench/cli/tool.hpp"
#include "support/test_support.hpp"
#include "support/tool_fixtures.hpp"

namespace tool = orchmllm::tool;
using orchmllm::batch_layout;
using orchmllm::rank_t;
using namespace orchmllm::test::tool_fixtures;  // support/tool_fixtures.hpp

TEST_CASE("plan: a segments column balances segments, and all-1 segments change nothing") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  std::mt19937_64 rng(1404);
  std::string with_col = "rank,slot,length,segments\n";
  std::string ones_col = "rank,slot,length,segments\n";
  std::string without = "rank,slot,length\n";
  std::vector<std::int64_t> offsets{0}, lengths, counts;
  for (int r = 0; r < 4; ++r) {
    for (int k = 0; k < 6; ++k) {
      const auto s = static_cast<std::int64_t>(1 + rng() % 4);
      const auto len = s * static_cast<std::int64_t>(1 + rng() % 300);
      const std::string head =
          std::to_string(r) + "," + std::to_string(k) + "," + std::to_string(len);
      with_col += head + "," + std::to_string(s) + "\n";
      ones_col += head + ",1\n";
      without += head + "\n";
      lengths.push_back(len);
      counts.push_back(s);
    }
    offsets.push_back(static_cast<std::int64_t>(lengths.size()));
  }
  const auto layout = batch_layout(offsets, lengths).with_equal_segments(counts);
  auto plan_of = [&](const std::string& text, const std::vector<std::string>& flags) {
    write_text(items, text);
    std::vector<std::string> args = {"plan", "--items", items, "--ranks", "4", "--out", out};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_tool(args);
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    return read_text(out);
  };
  const std::vector<std::vector<std::string>> flag_sets = {
      {},
      {"--policy", "padded"},
      {"--policy", "bucketed:64,128,512,2048"},
      {"--policy", "padded", "--cost", "quadratic:1,0.01", "--algorithm", "lpt"}};
  for (const auto& flags : flag_sets) {
    CAPTURE(flags.size());
    // All-1 segments: the PLAN.csv of the file without the column, byte for byte.
    CHECK(plan_of(ones_col, flags) == plan_of(without, flags));
    // Segments: the library's plan on the segmented layout.
    const auto text = plan_of(with_col, flags);
    const auto parsed = tool::parse_plan(text, layout.offsets(), 4, "plan.csv");
    orchmllm::padding_policy policy = orchmllm::packed;
    if (flags.size() >= 2) {
      policy = flags[1] == "padded" ? orchmllm::padded : orchmllm::bucketed({64, 128, 512, 2048});
    }
    if (flags.size() == 6) {
      CHECK(parsed == orchmllm::balance(layout, orchmllm::quadratic_cost{0.0, 1.0, 0.01}, policy,
                                        orchmllm::balancers::lpt{})
                          .plan);
    } else {
      CHECK(parsed == orchmllm::balance(layout, orchmllm::linear_cost{}, policy).plan);
    }
  }
}

TEST_CASE("plan: every bad input exits 2 with a one-line message and leaves no output file") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  for (const auto& c : bad_items_cases()) {
    CAPTURE(c.what);
    write_text(items, c.text);
    const auto r = run_tool({"plan", "--items", items, "--ranks", "4", "--out", out});
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.rfind("orchmllm-bench plan: ", 0) == 0);
    for (const auto& n : c.needles) {
      const std::string needle = n.rfind("items.csv", 0) == 0 ? items + n.substr(9) : n;
      CHECK_MESSAGE(r.err.find(needle) != std::string::npos, r.err, " lacks ", needle);
    }
    CHECK(dir.entries() == std::set<std::string>{"items.csv"});
  }
}

TEST_CASE("plan: infeasible constraints exit 2, name the value, leave no file; old file kept") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  // Rows shuffled: item (rank 0, slot 0) is on line 4, (rank 0, slot 1) on line 3.
  write_text(items, "rank,slot,length,bytes\n1,0,30,300\n0,1,40,600\n0,0,50,500\n");

  auto expect_fail = [&](std::vector<std::string> extra, std::vector<std::string> needles) {
    std::vector<std::string> args = {"plan", "--items", items, "--ranks", "2", "--out", out};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_tool(args);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK(count_lines(r.err) == 1);
    for (const auto& n : needles)
      CHECK_MESSAGE(r.err.find(n) != std::string::npos, r.err, " lacks ", n);
    CHECK(dir.entries() == std::set<std::string>{"items.csv"});
  };
  // One item above the cap: named by line, rank, slot and value.
  expect_fail({"--cap", "45"}, {items + ":4:", "(rank 0, slot 0)", "50 tokens", "cap of 45"});
  expect_fail({"--cap-bytes", "550"},
              {items + ":3:", "(rank 0, slot 1)", "600 bytes", "cap of 550"});
  // Padded policy: the footprint is the padded length.
  expect_fail({"--policy", "padded", "--pad-multiple", "64", "--cap", "63"},
              {items + ":4:", "64 tokens", "cap of 63"});
  // Bucketed policy: an item longer than the largest bucket, named by line, rank and slot.
  expect_fail({"--policy", "bucketed:8,40"},
              {items + ":4:", "(rank 0, slot 0)", "length 50", "largest bucket 40"});
  // The total does not fit: the balancer's message names the total and the cap.
  expect_fail({"--cap", "55"}, {"120", "55"});
  // Item counts.
  expect_fail({"--min-items", "2"}, {"3 items", "2 ranks", "at least 2"});
  expect_fail({"--max-items", "1"}, {"3 items", "2 ranks", "at most 1"});
  // The identity plan cannot meet the cap.
  expect_fail({"--algorithm", "identity", "--cap", "60"}, {"identity"});

  // A failing run never touches an existing output file.
  write_text(out, "previous content\n");
  const auto r = run_tool({"plan", "--items", items, "--ranks", "2", "--cap", "45", "--out", out});
  CHECK(r.rc == 2);
  CHECK(read_text(out) == "previous content\n");
  CHECK(dir.entries() == std::set<std::string>{"items.csv", "plan.csv"});
}

// =============================================================================================
// plan
// =============================================================================================

namespace {
struct plan_config {
  std::vector<std::string> flags;
  bool quadratic = false;
  orchmllm::padding_policy policy = orchmllm::packed;
  orchmllm::any_balancer balancer{};  ///< what --algorithm selects (default automatic)
  orchmllm::constraints limits{};
};

template <class C>
void check_plan_run(const plan_config& cfg, const batch_layout& layout, const C& cost,
                    const scratch_dir& dir) {
  const rank_t d = layout.num_ranks();
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  write_text(items, shuffled_items(layout, 99));
  std::vector<std::string> args = {"plan",  "--items", items, "--ranks", std::to_string(d),
                                   "--out", out};
  args.insert(args.end(), cfg.flags.begin(), cfg.flags.end());
  const auto r = run_tool(args);
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(r.err.empty());
  REQUIRE(count_lines(r.out) == 1);
  CHECK(dir.entries() == std::set<std::string>{"items.csv", "plan.csv"});

  // JSON: one object on one line with every documented key.
  const auto j = parse_flat_json(r.out.substr(0, r.out.size() - 1));
  for (const char* k : plan_keys) CHECK_MESSAGE(j.count(k) == 1, "missing key ", k);

  // PLAN.csv: one row per item in (rank, slot) order.
  const auto rows = parse_plan_rows(read_text(out));
  REQUIRE(static_cast<std::int64_t>(rows.size()) == layout.num_items());
  for (std::int64_t g = 0; g < layout.num_items(); ++g) {
    const auto& row = rows[static_cast<std::size_t>(g)];
    CHECK(row.rank == layout.rank_of(g));
    CHECK(row.slot == g - layout.offset(layout.rank_of(g)));
    CHECK((row.dst_rank >= 0 && row.dst_rank < d));
  }
  // Destination slots dense from 0 on every destination rank, in source order.
  std::vector<std::vector<std::int64_t>> slots(static_cast<std::size_t>(d));
  for (const auto& row : rows)
    slots[static_cast<std::size_t>(row.dst_rank)].push_back(row.dst_slot);
  for (const auto& s : slots)
    for (std::size_t i = 0; i < s.size(); ++i) CHECK(s[i] == static_cast<std::int64_t>(i));
  // A rearrangement built from the rows is valid and is exactly the library's plan.
  std::vector<orchmllm::placement> dest;
  for (const auto& row : rows) dest.push_back({static_cast<rank_t>(row.dst_rank), row.dst_slot});
  const auto plan = orchmllm::rearrangement::from_placements(layout.offsets(), dest, d);
  plan.validate();
  CHECK(tool::parse_plan(read_text(out), layout.offsets(), d, "plan.csv") == plan);
  const auto direct = orchmllm::balance(layout, cost, cfg.policy, cfg.balancer, cfg.limits);
  CHECK(direct.plan == plan);
  CHECK(j.at("algorithm").text == direct.used);
  CHECK(j.at("requested").text == cfg.balancer.name());
  CHECK(j.at("proven_optimal").b == direct.proven_optimal);

  // Figures recomputed independently.
  const auto makespan = recompute_makespan(layout, rows, d, cost, cfg.policy);
  std::int64_t moved = 0, moved_bytes = 0, max_count = 0, min_count = INT64_MAX;
  for (std::int64_t g = 0; g < layout.num_items(); ++g)
    if (rows[static_cast<std::size_t>(g)].dst_rank != rows[static_cast<std::size_t>(g)].rank) {
      ++moved;
      moved_bytes += layout.bytes(g);
    }
  for (const auto& s : slots) {
    max_count = std::max<std::int64_t>(max_count, static_cast<std::int64_t>(s.size()));
    min_count = std::min<std::int64_t>(min_count, static_cast<std::int64_t>(s.size()));
  }
  const auto lower = orchmllm::makespan_lower_bound(layout, d, cost, cfg.policy, cfg.limits);
  if constexpr (std::is_integral_v<decltype(makespan)>) {
    CHECK(j.at("makespan").integer() == makespan);
    CHECK(j.at("lower_bound").integer() == lower);
  } else {
    CHECK(j.at("makespan").num() == makespan);  // %.17g round-trips: bit-exact
    CHECK(j.at("lower_bound").num() == lower);
  }
  CHECK(j.at("makespan").num() == direct.makespan);
  CHECK(j.at("ratio").num() ==
        doctest::Approx(lower > 0 ? static_cast<double>(makespan) / static_cast<double>(lower)
                                  : 1.0));
  CHECK(j.at("items").integer() == layout.num_items());
  CHECK(j.at("ranks").integer() == d);
  CHECK(j.at("items_moved").integer() == moved);
  CHECK(j.at("bytes_moved").integer() == moved_bytes);
  CHECK(j.at("max_items_per_rank").integer() == max_count);
  CHECK(j.at("min_items_per_rank").integer() == min_count);
  CHECK(j.at("plan_seconds").num() >= 0.0);
  CHECK(j.at("imbalance_after").num() <= j.at("imbalance_before").num() + 1e-12);
  std::string policy_text = cfg.policy.is_padded() ? "padded" : "packed";
  if (cfg.policy.policy_kind() == orchmllm::padding_policy::kind::bucketed) {
    policy_text = "bucketed";
    for (const auto b : cfg.policy.buckets()) {
      policy_text += policy_text.size() == 8 ? ':' : ',';
      policy_text += std::to_string(b);
    }
  }
  CHECK(j.at("policy").text == policy_text);
  if (cfg.limits.cap) {
    CHECK((cfg.limits.cap->what == orchmllm::capacity::measure::tokens
               ? j.at("max_tokens").integer()
               : j.at("max_bytes").integer()) <= cfg.limits.cap->limit);
  }

  // Same input, same bytes.
  const std::string first = read_text(out);
  const auto again = run_tool(args);
  REQUIRE(again.rc == 0);
  CHECK(read_text(out) == first);
}
}  // namespace

TEST_CASE("plan: PLAN.csv and JSON are correct for every policy, cost and constraint") {
  scratch_dir dir;
  const auto layout = random_layout(7, 9, 6, true);
  REQUIRE(layout.num_items() > 10);
  const orchmllm::quadratic_cost quad{0.0, 1.0, 0.001};

  SUBCASE("packed, linear, each algorithm") {
    for (const char* alg :
         {"automatic", "identity", "lpt", "karmarkar_karp", "karmarkar_karp_equal"}) {
      CAPTURE(alg);
      plan_config cfg;
      cfg.flags = {"--algorithm", alg};
      cfg.balancer = orchmllm::parse_balancer(alg);
      check_plan_run(cfg, layout, orchmllm::linear_cost{}, dir);
    }
  }
  SUBCASE("packed, quadratic") {
    plan_config cfg;
    cfg.flags = {"--cost", "quadratic:1,0.001"};
    check_plan_run(cfg, layout, quad, dir);
  }
  SUBCASE("padded to a multiple, quadratic and linear") {
    plan_config cfg;
    cfg.flags = {"--policy", "padded", "--pad-multiple", "16", "--cost", "quadratic:1,0.001"};
    cfg.policy = orchmllm::padding_policy::padded(16);
    check_plan_run(cfg, layout, quad, dir);
    cfg.flags = {"--policy", "padded", "--algorithm", "padded_exact"};
    cfg.policy = orchmllm::padded;
    cfg.balancer = orchmllm::balancers::padded_exact{};
    check_plan_run(cfg, layout, orchmllm::linear_cost{}, dir);
  }
  SUBCASE("bucketed, quadratic, automatic and lpt") {
    plan_config cfg;
    cfg.flags = {"--policy", "bucketed:256,1024,2048,3000", "--cost", "quadratic:1,0.001"};
    cfg.policy = orchmllm::bucketed({256, 1024, 2048, 3000});
    check_plan_run(cfg, layout, quad, dir);
    cfg.flags.insert(cfg.flags.end(), {"--algorithm", "lpt"});
    cfg.balancer = orchmllm::balancers::lpt{};
    check_plan_run(cfg, layout, quad, dir);
  }
  SUBCASE("token cap, byte cap, item counts") {
    const auto total = layout.total_length();
    const std::int64_t cap = (total + 8) / 9 + 3100;  // feasible: above the mean and every item
    plan_config cfg;
    cfg.flags = {"--cap", std::to_string(cap), "--min-items", "1", "--max-items", "8"};
    cfg.limits.cap = orchmllm::capacity{orchmllm::capacity::measure::tokens, cap};
    cfg.limits.min_items = 1;
    cfg.limits.max_items = 8;
    check_plan_run(cfg, layout, orchmllm::linear_cost{}, dir);
    const std::int64_t cap_bytes = (layout.total_bytes() + 8) / 9 + 6500;
    cfg.flags = {"--cap-bytes", std::to_string(cap_bytes)};
    cfg.limits = {};
    cfg.limits.cap = orchmllm::capacity{orchmllm::capacity::measure::bytes, cap_bytes};
    check_plan_run(cfg, layout, orchmllm::linear_cost{}, dir);
  }
  SUBCASE("small input, exact") {
    const auto small = random_layout(3, 3, 3, false);
    REQUIRE(small.num_items() <= 10);
    plan_config cfg;
    cfg.flags = {"--algorithm", "exact"};
    cfg.balancer = orchmllm::balancers::exact{};
    check_plan_run(cfg, small, orchmllm::linear_cost{}, dir);
  }
}

namespace {
/// Runs `plan` on `layout` with --gpus-per-node G (0: flag omitted) and the given --mapping
/// (empty: flag omitted), checks PLAN.csv and the mapping figures against the library and an
/// independent recount, and returns the JSON.
std::map<std::string, json_value> check_mapped_plan(const batch_layout& layout, rank_t g,
                                                    const std::string& mapping_flag,
                                                    const orchmllm::any_mapper& expected,
                                                    const scratch_dir& dir) {
  const rank_t d = layout.num_ranks();
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  write_text(items, shuffled_items(layout, 5));
  std::vector<std::string> args = {"plan",  "--items", items, "--ranks", std::to_string(d),
                                   "--out", out};
  if (g > 0) args.insert(args.end(), {"--gpus-per-node", std::to_string(g)});
  if (!mapping_flag.empty()) args.insert(args.end(), {"--mapping", mapping_flag});
  const auto r = run_tool(args);
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(r.err.empty());
  REQUIRE(count_lines(r.out) == 1);
  const auto j = parse_flat_json(r.out.substr(0, r.out.size() - 1));
  for (const char* k : plan_keys) CHECK_MESSAGE(j.count(k) == 1, "missing key ", k);
  CHECK(j.at("gpus_per_node").integer() == g);
  CHECK(j.at("mapping").text == expected.name());

  // PLAN.csv is a valid plan and exactly the library's mapped plan.
  const std::string text = read_text(out);
  const auto plan = tool::parse_plan(text, layout.offsets(), d, "plan.csv");
  plan.validate();
  std::vector<std::int64_t> bytes(static_cast<std::size_t>(layout.num_items()));
  for (std::int64_t i = 0; i < layout.num_items(); ++i)
    bytes[static_cast<std::size_t>(i)] = layout.bytes(i);
  const auto topo = orchmllm::topology::uniform(d, g);
  const auto balanced = orchmllm::balance(layout, orchmllm::linear_cost{}, orchmllm::packed);
  const auto mapped = orchmllm::map_bins(balanced.plan, bytes, topo, expected);
  CHECK(plan == mapped.plan);
  if (expected.get_if<orchmllm::mappers::identity>()) CHECK(plan == balanced.plan);
  CHECK(j.at("moved_bytes").integer() == mapped.moved_bytes);
  CHECK(j.at("inter_node_bytes").integer() == mapped.inter_node_bytes);
  CHECK(j.at("inter_node_bytes_lower_bound").integer() == mapped.inter_node_bytes_lower_bound);
  CHECK(j.at("predicted_comm_seconds").num() ==
        orchmllm::route::build(plan, bytes, topo, 0, orchmllm::schedule::automatic)
            .predicted_seconds());
  CHECK(j.at("makespan").num() == balanced.makespan);  // mapping keeps the balance

  // Independent recount from the rows: consecutive blocks of g ranks per node.
  const auto rows = parse_plan_rows(text);
  REQUIRE(static_cast<std::int64_t>(rows.size()) == layout.num_items());
  auto node = [&](std::int64_t rank) { return g == 0 ? std::int64_t{0} : rank / g; };
  const std::int64_t nodes = g == 0 ? 1 : (d + g - 1) / g;
  std::vector<std::int64_t> egress(static_cast<std::size_t>(nodes), 0), ingress = egress;
  std::int64_t moved = 0, inter = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto b = layout.bytes(static_cast<std::int64_t>(i));
    if (rows[i].dst_rank != rows[i].rank) moved += b;
    if (node(rows[i].dst_rank) != node(rows[i].rank)) {
      inter += b;
      egress[static_cast<std::size_t>(node(rows[i].rank))] += b;
      ingress[static_cast<std::size_t>(node(rows[i].dst_rank))] += b;
    }
  }
  CHECK(j.at("moved_bytes").integer() == moved);
  CHECK(j.at("bytes_moved").integer() == moved);
  CHECK(j.at("inter_node_bytes").integer() == inter);
  CHECK(j.at("max_node_egress_bytes").integer() == *std::max_element(egress.begin(), egress.end()));
  CHECK(j.at("max_node_ingress_bytes").integer() ==
        *std::max_element(ingress.begin(), ingress.end()));
  CHECK(j.at("inter_node_bytes_lower_bound").integer() <= inter);
  return j;
}
}  // namespace

TEST_CASE("plan: --gpus-per-node and --mapping map the balanced bins onto nodes") {
  scratch_dir dir;
  SUBCASE("without --gpus-per-node: one node, identity") {
    const auto layout = random_layout(11, 8, 6, true);
    const auto j = check_mapped_plan(layout, 0, "", orchmllm::mappers::identity{}, dir);
    CHECK(j.at("inter_node_bytes").integer() == 0);
    CHECK(j.at("inter_node_bytes_lower_bound").integer() == 0);
    CHECK(j.at("max_node_egress_bytes").integer() == 0);
    CHECK(j.at("max_node_ingress_bytes").integer() == 0);
    check_mapped_plan(layout, 0, "identity", orchmllm::mappers::identity{}, dir);
  }
  SUBCASE("transport never sends more bytes across nodes than identity") {
    int strictly_better = 0;
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      for (auto [d, g] : {std::pair<rank_t, rank_t>{8, 2}, {12, 4}, {10, 4}, {9, 3}}) {
        CAPTURE(seed);
        CAPTURE(d);
        CAPTURE(g);
        const auto layout =
            random_layout(seed * 101 + static_cast<std::uint64_t>(d), d, 8, seed % 2 == 0);
        const auto t = check_mapped_plan(layout, g, "", orchmllm::mappers::transport{}, dir);
        const auto t2 =
            check_mapped_plan(layout, g, "transport", orchmllm::mappers::transport{}, dir);
        const auto i = check_mapped_plan(layout, g, "identity", orchmllm::mappers::identity{}, dir);
        const auto b =
            check_mapped_plan(layout, g, "bottleneck", orchmllm::mappers::bottleneck{}, dir);
        CHECK(t.at("mapping_solver").text == "flow");
        CHECK(b.at("mapping_solver").text == "local-search");
        CHECK(std::max(b.at("max_node_egress_bytes").integer(),
                       b.at("max_node_ingress_bytes").integer()) <=
              std::max(t.at("max_node_egress_bytes").integer(),
                       t.at("max_node_ingress_bytes").integer()));
        CHECK(b.at("inter_node_bytes").integer() >= t.at("inter_node_bytes").integer());
        CHECK(t2.at("inter_node_bytes").integer() == t.at("inter_node_bytes").integer());
        CHECK(t.at("inter_node_bytes").integer() <= i.at("inter_node_bytes").integer());
        CHECK(t.at("inter_node_bytes_lower_bound").integer() ==
              i.at("inter_node_bytes_lower_bound").integer());
        CHECK(t.at("makespan").integer() == i.at("makespan").integer());
        CHECK(t.at("max_items_per_rank").integer() == i.at("max_items_per_rank").integer());
        if (t.at("inter_node_bytes").integer() < i.at("inter_node_bytes").integer())
          ++strictly_better;
      }
    }
    CHECK(strictly_better > 0);  // the inputs exercise the mapping, not only ties
  }
  SUBCASE("usage errors exit 2, name the flag and leave no file") {
    const auto layout = random_layout(4, 4, 4, false);
    write_text(dir.file("items.csv"), tool::format_items(layout));
    const std::vector<std::string> base = {"plan", "--items", dir.file("items.csv"), "--ranks",
                                           "4",    "--out",   dir.file("plan.csv")};
    const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
        {{"--mapping", "transport"}, "--mapping transport needs --gpus-per-node"},
        {{"--mapping", "bottleneck"}, "--mapping bottleneck needs --gpus-per-node"},
        {{"--gpus-per-node", "2", "--mapping-time-limit", "0"}, "--mapping-time-limit"},
        {{"--gpus-per-node", "2", "--locality-tolerance", "-1"}, "--locality-tolerance"},
        {{"--mapping", "greedy"},
         "--mapping: unknown mapper 'greedy'; expected one of: identity, transport, bottleneck, "
         "auction"},
        {{"--gpus-per-node", "0"}, "--gpus-per-node is 0"},
        {{"--gpus-per-node", "-2", "--mapping", "identity"}, "--gpus-per-node is -2"},
        {{"--gpus-per-node", "two"}, "--gpus-per-node expects an integer"},
    };
    for (const auto& [extra, msg] : bad) {
      CAPTURE(msg);
      auto args = base;
      args.insert(args.end(), extra.begin(), extra.end());
      const auto r = run_tool(args);
      CHECK(r.rc == 2);
      CHECK(r.out.empty());
      CHECK(r.err.find(msg) != std::string::npos);
      CHECK(r.err.find("usage: orchmllm-bench plan") != std::string::npos);
      CHECK(dir.entries() == std::set<std::string>{"items.csv"});
    }
  }
  SUBCASE("a node size above the rank count is one node") {
    const auto layout = random_layout(21, 6, 5, true);
    const auto j = check_mapped_plan(layout, 64, "", orchmllm::mappers::transport{}, dir);
    CHECK(j.at("inter_node_bytes").integer() == 0);
  }
}

TEST_CASE("plan: auto is exact for bucketed policies (brute force on small inputs)") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  std::mt19937_64 rng(0xb0c4e7);
  for (int inst = 0; inst < 40; ++inst) {
    CAPTURE(inst);
    const auto d = static_cast<rank_t>(1 + rng() % 3);
    std::vector<std::vector<std::int64_t>> lengths(static_cast<std::size_t>(d));
    for (auto n = rng() % 9; n > 0; --n)
      lengths[rng() % lengths.size()].push_back(static_cast<std::int64_t>(rng() % 60));
    const auto layout = batch_layout::from_ranks(lengths);
    // Buckets: 1..3 increasing lengths, the last one covering every item.
    std::vector<std::int64_t> buckets{60 + static_cast<std::int64_t>(rng() % 4)};
    for (auto m = rng() % 3; m > 0; --m)
      buckets.insert(
          buckets.begin(),
          1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(buckets.front() - 1)));
    std::string flag = "bucketed";
    for (const auto b : buckets) {
      flag += flag.size() == 8 ? ':' : ',';
      flag += std::to_string(b);
    }
    CAPTURE(flag);
    const auto policy = orchmllm::bucketed(buckets);
    const orchmllm::quadratic_cost quad{0.0, 1.0, 0.01};
    write_text(items, tool::format_items(layout));
    const auto r = run_tool({"plan", "--items", items, "--ranks", std::to_string(d), "--policy",
                             flag, "--cost", "quadratic:1,0.01", "--out", out});
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    const auto j = parse_flat_json(r.out.substr(0, r.out.size() - 1));
    const auto best = orchmllm::test::brute_force(layout, d, quad, policy);
    REQUIRE(best.has_value());
    CHECK(j.at("makespan").num() == *best);  // one product per rank: exact
    CHECK(j.at("proven_optimal").b);
    CHECK(j.at("policy").text == flag);
  }
}

TEST_CASE("plan: an input without items gives an empty plan") {
  scratch_dir dir;
  write_text(dir.file("items.csv"), "rank,slot,length\n");
  const auto r = run_tool(
      {"plan", "--items", dir.file("items.csv"), "--ranks", "3", "--out", dir.file("plan.csv")});
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(read_text(dir.file("plan.csv")) == "rank,slot,dst_rank,dst_slot\n");
  const auto j = parse_flat_json(r.out.substr(0, r.out.size() - 1));
  CHECK(j.at("items").integer() == 0);
  CHECK(j.at("makespan").integer() == 0);
}

TEST_CASE("plan: karmarkar_karp above n*d = 2^21 runs the equal-count method and says so") {
  // 4,096 items on 1,024 ranks: n * d = 2^22, past the complete method's memory guard.
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  const std::string out = dir.file("plan.csv");
  std::string text = "rank,slot,length\n";
  for (int r = 0; r < 1024; ++r)
    for (int k = 0; k < 4; ++k)
      text += std::to_string(r) + "," + std::to_string(k) + "," +
              std::to_string(1 + (r * 7 + k) % 50) + "\n";
  write_text(items, text);
  const auto r = run_tool(
      {"plan", "--items", items, "--ranks", "1024", "--algorithm", "karmarkar_karp", "--out", out});
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(r.out.find("\"algorithm\":\"karmarkar_karp_equal\"") != std::string::npos);
  CHECK(count_lines(r.err) == 1);
  CHECK(r.err.rfind("orchmllm-bench plan: warning: karmarkar_karp ran the equal-count", 0) == 0);
  CHECK(r.err.find("4096*1024") != std::string::npos);
  // Within the guard (the first 64 ranks: n * d = 2^14): the complete method, no warning.
  write_text(items, text.substr(0, text.find("\n64,") + 1));
  const auto small = run_tool(
      {"plan", "--items", items, "--ranks", "64", "--algorithm", "karmarkar_karp", "--out", out});
  REQUIRE_MESSAGE(small.rc == 0, small.err);
  CHECK(small.out.find("\"algorithm\":\"karmarkar_karp\"") != std::string::npos);
  CHECK(small.err.empty());
}
