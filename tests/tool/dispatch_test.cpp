// Tests of `orchmllm-bench dispatch` (bench/cli/dispatch*.hpp): flag parsing, rank-count
// inference; of the dispatch measurement it shares with the benchmarks (bench/support/:
// payload.hpp, collectives.hpp, dispatch_driver.hpp): the payload content and its checks, the
// direct byte matrix, the collective helpers and the per-rank driver on the local backend
// (including a transport that corrupts a byte, which must turn into verified = false); and the
// subcommand end to end in-process.
// tests/tool/cli_check.cmake (ctest tool.cli_dispatch, tool.cli_dispatch_mpi) drives the real
// binary, MPI included.

#include "bench/cli/dispatch.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <orchmllm/orchmllm.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cli/tool.hpp"
#include "bench/support/collectives.hpp"
#include "bench/support/dispatch_driver.hpp"
#include "bench/support/payload.hpp"
#include "support/scratch_dir.hpp"
#include "support/test_support.hpp"
#include "support/tool_fixtures.hpp"

namespace fs = std::filesystem;
namespace tool = orchmllm::tool;
namespace bench = orchmllm::bench;
using orchmllm::batch_layout;
using orchmllm::ragged_payload;
using orchmllm::rank_t;
using orchmllm::rearrangement;

namespace {

// A fresh directory per test case, named after this test.
struct dispatch_scratch_dir : orchmllm::test::scratch_dir {
  dispatch_scratch_dir() : orchmllm::test::scratch_dir("orchmllm_dispatch_test_") {}
};

using orchmllm::test::tool_fixtures::run_tool;  // support/tool_fixtures.hpp
using orchmllm::test::tool_fixtures::write_text;

/// The raw text of one value of the flat JSON object `json` ("" when absent).
std::string json_field(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const auto at = json.find(k);
  if (at == std::string::npos) return "";
  auto start = at + k.size();
  auto end = start;
  if (json[start] == '"') {
    end = json.find('"', start + 1) + 1;
  } else {
    while (end < json.size() && json[end] != ',' && json[end] != '}') ++end;
  }
  return json.substr(start, end - start);
}

std::int64_t json_int(const std::string& json, const std::string& key) {
  const auto t = json_field(json, key);
  REQUIRE_MESSAGE(!t.empty(), key, " missing in ", json);
  return std::stoll(t);
}

tool::parsed_args parse(const std::vector<std::string>& args) {
  return tool::parse_flags(tool::dispatch_command().flags, args);
}

/// Host reference of dispatch: what `plan` delivers to rank r (source payloads of every rank).
ragged_payload reference_delivery(const batch_layout& layout, const rearrangement& plan, rank_t r) {
  ragged_payload out;
  const auto doff = plan.dst_offsets();
  for (auto h = doff[static_cast<std::size_t>(r)]; h < doff[static_cast<std::size_t>(r) + 1]; ++h) {
    const auto g = plan.source_of(h);
    const rank_t src = layout.rank_of(g);
    std::vector<std::byte> item(static_cast<std::size_t>(layout.bytes(g)));
    bench::fill_content(src, g - layout.offset(src), item);
    out.rows.push_back(layout.bytes(g));
    out.data.insert(out.data.end(), item.begin(), item.end());
  }
  return out;
}

/// 6 ranks, rank 2 empty, zero-length items, bytes column; balanced plan over 6 ranks.
struct small_case {
  batch_layout layout =
      batch_layout(std::vector<std::int64_t>{0, 3, 5, 5, 9, 10, 13},
                   std::vector<std::int64_t>{5, 0, 7, 9, 1, 4, 4, 3, 0, 8, 2, 6, 1},
                   std::vector<std::int64_t>{50, 0, 71, 90, 13, 40, 41, 30, 0, 80, 22, 60, 9});
  rearrangement plan = orchmllm::balance(layout, orchmllm::linear_cost{}).plan;
};

/// Wraps a local communicator and flips one byte that `victim` receives in its first
/// all_to_allv carrying data: the driver must notice.
class corrupting_communicator {
 public:
  static constexpr orchmllm::memory_kind payload_memory = orchmllm::memory_kind::host;
  corrupting_communicator(orchmllm::local::communicator& c, rank_t victim)
      : c_(c), victim_(victim) {}
  [[nodiscard]] rank_t rank() const { return c_.rank(); }
  [[nodiscard]] rank_t size() const { return c_.size(); }
  [[nodiscard]] rank_t node() const { return c_.node(); }
  [[nodiscard]] rank_t num_nodes() const { return c_.num_nodes(); }
  [[nodiscard]] rank_t local_rank() const { return c_.local_rank(); }
  [[nodiscard]] rank_t local_size() const { return c_.local_size(); }
  void barrier() { c_.barrier(); }
  void all_gather(const std::byte* s, std::int64_t b, std::byte* r) { c_.all_gather(s, b, r); }
  void all_gatherv(const std::byte* s, std::int64_t b, std::byte* r,
                   std::span<const std::int64_t> c, std::span<const std::int64_t> d) {
    c_.all_gatherv(s, b, r, c, d);
  }
  void all_to_allv(const std::byte* s, std::span<const std::int64_t> sc,
                   std::span<const std::int64_t> sd, std::byte* r, std::span<const std::int64_t> rc,
                   std::span<const std::int64_t> rd) {
    c_.all_to_allv(s, sc, sd, r, rc, rd);
    std::int64_t total = 0;
    for (const auto x : rc) total += x;
    if (!done_ && rank() == victim_ && total > 0) {
      r[total / 2] ^= std::byte{0x40};
      done_ = true;
    }
  }

 private:
  orchmllm::local::communicator& c_;
  rank_t victim_;
  bool done_ = false;
};
static_assert(orchmllm::communicator<corrupting_communicator>);

}  // namespace

TEST_CASE("dispatch flags: defaults, every value, and mistakes named by flag") {
  const auto s = tool::parse_dispatch_settings(
      parse({"--backend", "local", "--items", "i.csv", "--plan", "p.csv"}));
  CHECK(s.backend == tool::dispatch_backend::local);
  CHECK(s.items_path == "i.csv");
  CHECK(s.plan_path == "p.csv");
  CHECK_FALSE(s.ranks.has_value());
  CHECK(s.gpus_per_node == 0);
  CHECK(s.sched == orchmllm::schedule::automatic);
  CHECK(s.repeat == 5);

  const auto t = tool::parse_dispatch_settings(
      parse({"--backend=mpi", "--items", "i.csv", "--plan", "p.csv", "--ranks", "16",
             "--gpus-per-node", "4", "--schedule", "node-wise", "--repeat", "9"}));
  CHECK(t.backend == tool::dispatch_backend::mpi);
  CHECK(t.ranks == std::optional<rank_t>(16));
  CHECK(t.gpus_per_node == 4);
  CHECK(t.sched == orchmllm::schedule::node_wise);
  CHECK(t.repeat == 9);
  CHECK(tool::parse_dispatch_settings(
            parse({"--backend", "local", "--items", "i", "--plan", "p", "--schedule", "direct"}))
            .sched == orchmllm::schedule::direct);

  auto bad = [](const std::vector<std::string>& extra, const std::string& needle) {
    std::vector<std::string> a = {"--items", "i.csv", "--plan", "p.csv"};
    a.insert(a.end(), extra.begin(), extra.end());
    try {
      (void)tool::parse_dispatch_settings(parse(a));
      FAIL("no error for ", needle);
    } catch (const tool::usage_error& e) {
      INFO("message: ", e.what());
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  bad({"--backend", "nccl"}, "--backend is 'nccl', expected 'local' or 'mpi'");
  bad({"--backend", "local", "--schedule", "ring"},
      "--schedule is 'ring', expected direct, node-wise or auto");
  bad({"--backend", "local", "--repeat", "0"}, "--repeat is 0, must be in [1, 1000]");
  bad({"--backend", "local", "--repeat", "1001"}, "--repeat is 1001");
  bad({"--backend", "local", "--ranks", "0"}, "--ranks is 0");
  bad({"--backend", "local", "--ranks", "5000"}, "--ranks is 5000, must be in [1, 4096]");
  bad({"--backend", "local", "--gpus-per-node", "0"}, "--gpus-per-node is 0");
  bad({"--backend", "local", "--gpus-per-node", "x"}, "--gpus-per-node expects an integer");
  bad({}, "missing required flag --backend");
  // mpi ranks are not limited by the thread count.
  CHECK(tool::parse_dispatch_settings(
            parse({"--backend", "mpi", "--items", "i", "--plan", "p", "--ranks", "5000"}))
            .ranks == std::optional<rank_t>(5000));
}

TEST_CASE("rank count inferred from both files") {
  const std::string items = "rank,slot,length\n0,0,5\n2,0,7\n\n";
  const std::string plan = "rank,slot,dst_rank,dst_slot\n0,0,4,0\n2,0,0,0\n";
  CHECK(tool::infer_rank_count(items, plan, "i", "p") == 5);
  CHECK(tool::infer_rank_count(items, "rank,slot,dst_rank,dst_slot\n", "i", "p") == 3);
  CHECK(tool::infer_rank_count("", "", "i", "p") == 1);
  CHECK(tool::infer_rank_count("rank,slot,length\n", "", "i", "p") == 1);
  // Malformed fields are left to the parsers.
  CHECK(tool::infer_rank_count("rank,slot,length\nx,0,5\n-3,0,1\n1,0\n", "", "i", "p") == 2);
  orchmllm::test::expect_error<orchmllm::parse_error>(
      [&] { (void)tool::infer_rank_count(items, "h\n0,0,99,0\n", "i.csv", "p.csv", 50); },
      {"p.csv:2: rank 99 is not below the largest rank count 50"});

  const auto in =
      tool::parse_dispatch_inputs(items + "4,0,1\n", plan + "4,0,2,0\n", "i", "p", std::nullopt);
  CHECK(in.ranks == 5);
  CHECK(in.layout.num_ranks() == 5);
  CHECK(in.plan.num_dst_ranks() == 5);
  CHECK(in.plan.num_items() == 3);
  // Explicit ranks: trailing empty ranks.
  CHECK(tool::parse_dispatch_inputs(items + "4,0,1\n", plan + "4,0,2,0\n", "i", "p", 7).ranks == 7);
  orchmllm::test::expect_error<orchmllm::parse_error>(
      [&] {
        (void)tool::parse_dispatch_inputs(items, plan, "i.csv", "p.csv", std::optional<rank_t>(2));
      },
      {"i.csv:3: rank 2 is not below the rank count 2"});
}

TEST_CASE("payload content: fill, byte function and mismatch finder agree") {
  for (const std::int64_t n : {0, 1, 7, 8, 9, 64, 1000}) {
    std::vector<std::byte> a(static_cast<std::size_t>(n));
    bench::fill_content(3, 11, a);
    for (std::int64_t i = 0; i < n; ++i)
      REQUIRE(a[static_cast<std::size_t>(i)] == bench::content_byte(3, 11, i));
    CHECK(bench::first_wrong_byte(3, 11, a) == -1);
    if (n == 0) continue;
    // Another item's content is detected at once (for all but astronomically rare ties).
    if (n >= 8) {
      CHECK(bench::first_wrong_byte(3, 12, a) >= 0);
      CHECK(bench::first_wrong_byte(4, 11, a) >= 0);
    }
    const auto flip = static_cast<std::size_t>(n / 2);
    a[flip] ^= std::byte{1};
    CHECK(bench::first_wrong_byte(3, 11, a) == static_cast<std::int64_t>(flip));
  }
  // Pinned values: the content is a fixed function (portable across platforms and runs).
  std::vector<std::byte> a(4), b(4);
  bench::fill_content(0, 0, a);
  bench::fill_content(0, 0, b);
  CHECK(a == b);
  CHECK(bench::content_key(0, 1) != bench::content_key(1, 0));
}

TEST_CASE("source payloads and the delivery checks") {
  const small_case c;
  const auto& L = c.layout;
  for (rank_t r = 0; r < L.num_ranks(); ++r) {
    const auto p = bench::make_source_payload(L, r);
    CHECK_NOTHROW(p.validate());
    CHECK(p.row_bytes == 1);
    REQUIRE(p.num_items() == L.rank_size(r));
    std::int64_t at = 0;
    for (std::int64_t s = 0; s < p.num_items(); ++s) {
      CHECK(p.rows[static_cast<std::size_t>(s)] == L.bytes(L.offset(r) + s));
      CHECK(bench::first_wrong_byte(
                r, s,
                std::span<const std::byte>(p.data).subspan(
                    static_cast<std::size_t>(at),
                    static_cast<std::size_t>(p.rows[static_cast<std::size_t>(s)]))) == -1);
      at += p.rows[static_cast<std::size_t>(s)];
    }
    // The identity plan delivers the source payload itself.
    CHECK_FALSE(bench::check_delivered(p, L, rearrangement::identity(L), r, "x").has_value());
    CHECK_FALSE(bench::check_same_payload(p, p, "x").has_value());
  }

  for (rank_t r = 0; r < L.num_ranks(); ++r) {
    const ragged_payload good = reference_delivery(L, c.plan, r);
    CHECK_FALSE(bench::check_delivered(good, L, c.plan, r, "dispatch").has_value());
    if (good.data.empty()) continue;

    auto msg = [&](const ragged_payload& p) {
      const auto m = bench::check_delivered(p, L, c.plan, r, "dispatch");
      REQUIRE(m.has_value());
      return *m;
    };
    // One flipped byte: named by slot, source item and byte index.
    ragged_payload flipped = good;
    std::int64_t slot = 0, at = 0;
    while (good.rows[static_cast<std::size_t>(slot)] == 0)
      at += good.rows[static_cast<std::size_t>(slot++)];
    flipped.data[static_cast<std::size_t>(at + 0)] ^= std::byte{0x80};
    const auto g = c.plan.source_of(c.plan.dst_offsets()[static_cast<std::size_t>(r)] + slot);
    const rank_t src = L.rank_of(g);
    const std::string where = "dispatch: slot " + std::to_string(slot) + " (item rank " +
                              std::to_string(src) + " slot " + std::to_string(g - L.offset(src)) +
                              "): byte 0 of";
    CHECK(msg(flipped).find(where) == 0);

    // A missing item, an extra byte, a wrong size, a wrong row width.
    ragged_payload fewer = good;
    fewer.rows.pop_back();
    CHECK(msg(fewer).find("items, the plan sends") != std::string::npos);
    ragged_payload longer = good;
    longer.data.push_back(std::byte{0});
    CHECK(msg(longer).find("bytes, its items") != std::string::npos);
    ragged_payload resized = good;
    resized.rows[static_cast<std::size_t>(slot)] += 1;
    CHECK(msg(resized).find("expected " +
                            std::to_string(good.rows[static_cast<std::size_t>(slot)])) !=
          std::string::npos);
    ragged_payload wide = good;
    wide.row_bytes = 2;
    CHECK(msg(wide).find("row width 2") != std::string::npos);

    // Compared with the original: sizes and bytes.
    CHECK(bench::check_same_payload(flipped, good, "combine").value().find("combine: byte 0 of") ==
          0);
    CHECK(bench::check_same_payload(fewer, good, "combine").has_value());
  }

  // Two items of equal size swapped on one rank: the content gives it away.
  const batch_layout twins(std::vector<std::int64_t>{0, 2, 2}, std::vector<std::int64_t>{16, 16});
  const auto id = rearrangement::identity(twins);
  ragged_payload swapped = bench::make_source_payload(twins, 0);
  std::swap_ranges(swapped.data.begin(), swapped.data.begin() + 16, swapped.data.begin() + 16);
  const auto m = bench::check_delivered(swapped, twins, id, 0, "dispatch");
  REQUIRE(m.has_value());
  CHECK(m->find("slot 0 (item rank 0 slot 0): byte") != std::string::npos);
}

TEST_CASE("direct byte matrix: rows and columns agree and match a direct route") {
  const small_case c;
  const auto d = c.layout.num_ranks();
  std::vector<std::vector<std::int64_t>> send, recv;
  for (rank_t r = 0; r < d; ++r) {
    auto [s, v] = bench::direct_byte_counts(c.layout, c.plan, r);
    send.push_back(s);
    recv.push_back(v);
  }
  const auto bytes = c.layout.item_bytes();
  const auto topo = orchmllm::topology::uniform(d, 2);
  std::int64_t total = 0;
  for (rank_t r = 0; r < d; ++r) {
    for (rank_t p = 0; p < d; ++p) {
      CHECK(send[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)] ==
            recv[static_cast<std::size_t>(p)][static_cast<std::size_t>(r)]);
      total += send[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
    }
    const auto route = orchmllm::route::build(c.plan, bytes, topo, r, orchmllm::schedule::direct);
    REQUIRE(route.hops().size() == 1);
    CHECK(route.hops()[0].send_counts == send[static_cast<std::size_t>(r)]);
    CHECK(route.hops()[0].recv_counts == recv[static_cast<std::size_t>(r)]);
  }
  CHECK(total == c.layout.total_bytes());
}

TEST_CASE("median") {
  CHECK(std::isnan(bench::median({})));
  CHECK(bench::median({3.0}) == 3.0);
  CHECK(bench::median({5.0, 1.0, 3.0}) == 3.0);
  CHECK(bench::median({4.0, 1.0, 3.0, 2.0}) == 2.5);
}

TEST_CASE("collective helpers on the local backend: problems, shared files, maxima") {
  dispatch_scratch_dir dir;
  write_text(dir.file("f.txt"), "hello, ranks");
  constexpr rank_t d = 5;
  std::vector<std::vector<std::pair<rank_t, std::string>>> problems(d), none(d);
  std::vector<std::string> text(d), missing(d);
  std::vector<std::vector<double>> maxima(d);
  orchmllm::local::run(d, [&](orchmllm::local::communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    none[r] = bench::gather_problems(comm, std::nullopt);
    problems[r] = bench::gather_problems(
        comm, comm.rank() % 2 == 1 ? std::optional<std::string>("bad " + std::to_string(r))
                                   : std::nullopt);
    text[r] = tool::share_file(comm, dir.file("f.txt"));
    try {
      (void)tool::share_file(comm, dir.file("nope.txt"));
    } catch (const tool::io_error& e) {
      missing[r] = e.what();
    }
    maxima[r] = bench::max_over_ranks(comm, {static_cast<double>(r), -static_cast<double>(r)});
  });
  for (std::size_t r = 0; r < d; ++r) {
    CHECK(none[r].empty());
    REQUIRE(problems[r].size() == 2);
    CHECK(problems[r][0] == std::pair<rank_t, std::string>(1, "bad 1"));
    CHECK(problems[r][1] == std::pair<rank_t, std::string>(3, "bad 3"));
    CHECK(text[r] == "hello, ranks");
    CHECK(missing[r].find("cannot open") != std::string::npos);
    CHECK(missing[r].find("nope.txt") != std::string::npos);
    CHECK(maxima[r] == std::vector<double>{4.0, 0.0});
  }
}

TEST_CASE("driver on the local backend: every schedule verifies; accounting matches the plan") {
  const small_case c;
  const rank_t d = c.layout.num_ranks();
  const auto stats =
      orchmllm::compute_statistics(c.layout, c.plan, orchmllm::linear_cost{}, orchmllm::packed);
  for (const auto sched :
       {orchmllm::schedule::direct, orchmllm::schedule::node_wise, orchmllm::schedule::automatic}) {
    for (const rank_t g : {rank_t{1}, rank_t{2}, rank_t{4}, d}) {
      CAPTURE(orchmllm::to_string(sched));
      CAPTURE(g);
      bench::dispatch_run_settings rs;
      rs.sched = sched;
      rs.repeat = 2;
      std::vector<bench::dispatch_summary> got(static_cast<std::size_t>(d));
      orchmllm::local::run(d,
                           [&](orchmllm::local::communicator& comm) {
                             bench::no_alltoallv_baseline none;
                             got[static_cast<std::size_t>(comm.rank())] =
                                 bench::run_dispatch_rank(comm, c.layout, c.plan, rs, none);
                           },
                           {.ranks_per_node = g});
      const auto& s = got[0];
      CHECK(s.verified);
      CHECK(s.failures.empty());
      CHECK(s.ranks == d);
      CHECK(s.nodes == (d + g - 1) / g);
      CHECK(s.gpus_per_node == std::min(g, d));
      CHECK(s.items == c.layout.num_items());
      CHECK(s.total_bytes == c.layout.total_bytes());
      CHECK(s.planned.moved_bytes() == stats.bytes_moved);
      CHECK(s.planned.total_bytes() == c.layout.total_bytes());
      if (g == d) CHECK(s.planned.inter_node_bytes == 0);
      if (g == 1) CHECK(s.planned.intra_node_bytes == 0);
      if (sched != orchmllm::schedule::automatic) CHECK(s.used == sched);
      // Direct sends exactly the planned bytes; node-wise forwards but never adds inter-node.
      CHECK(s.sent.inter_node_bytes == s.planned.inter_node_bytes);
      if (s.used == orchmllm::schedule::direct)
        CHECK(s.sent.intra_node_bytes == s.planned.intra_node_bytes);
      CHECK(s.predicted_seconds == (s.used == orchmllm::schedule::direct
                                        ? s.predicted_direct_seconds
                                        : s.predicted_node_wise_seconds));
      CHECK(s.dispatch_seconds >= 0);
      CHECK(s.execute_seconds >= 0);
      CHECK(s.route_seconds >= 0);
      CHECK(s.combine_seconds >= 0);
      CHECK_FALSE(s.alltoallv_seconds.has_value());
      for (const auto& other : got) {
        CHECK(other.verified == s.verified);
        CHECK(other.dispatch_seconds == s.dispatch_seconds);
        CHECK(other.sent == s.sent);
      }
    }
  }
}

TEST_CASE("driver: a transport that corrupts one byte on one rank fails verification everywhere") {
  const small_case c;
  const rank_t d = c.layout.num_ranks();
  // Rank 3 receives data in every exchange of this plan.
  REQUIRE(c.plan.dst_offsets()[4] > c.plan.dst_offsets()[3]);
  bench::dispatch_run_settings rs;
  rs.sched = orchmllm::schedule::direct;
  rs.repeat = 1;
  std::vector<bench::dispatch_summary> got(static_cast<std::size_t>(d));
  orchmllm::local::run(d, [&](orchmllm::local::communicator& inner) {
    corrupting_communicator comm(inner, 3);
    bench::no_alltoallv_baseline none;
    got[static_cast<std::size_t>(comm.rank())] =
        bench::run_dispatch_rank(comm, c.layout, c.plan, rs, none);
  });
  for (const auto& s : got) {
    CHECK_FALSE(s.verified);
    // Rank 3 sees the bad byte after dispatch; combine then carries it back to the item's
    // source rank, which (unless it is rank 3 itself) sees it too.
    REQUIRE(s.failures.size() >= 1);
    REQUIRE(s.failures.size() <= 2);
    CHECK(s.failures == got[0].failures);
    bool rank3 = false;
    for (const auto& [r, what] : s.failures) {
      if (r == 3) {
        rank3 = true;
        CHECK(what.find("dispatch: slot") == 0);
      } else {
        CHECK(what.find("combine: byte") == 0);
      }
    }
    CHECK(rank3);
  }
  std::ostringstream err;
  tool::report_failures(got[0], err);
  CHECK(err.str().find("orchmllm-bench dispatch: rank 3: dispatch: slot") != std::string::npos);
  const auto json = tool::dispatch_json(got[0], "local", "i.csv", "p.csv");
  CHECK(json.find("{\"verified\":false,\"backend\":\"local\"") == 0);
}

TEST_CASE("driver: empty batches and plans that move nothing") {
  for (const auto& layout : {batch_layout(std::vector<std::int64_t>{0, 0, 0, 0}, {}),
                             batch_layout(std::vector<std::int64_t>{0, 2, 2, 3}, {0, 0, 0}),
                             batch_layout(std::vector<std::int64_t>{0, 1, 2, 3}, {5, 6, 7})}) {
    const auto plan = rearrangement::identity(layout);
    std::vector<bench::dispatch_summary> got(3);
    orchmllm::local::run(3, [&](orchmllm::local::communicator& comm) {
      bench::dispatch_run_settings rs;
      rs.repeat = 1;
      bench::no_alltoallv_baseline none;
      got[static_cast<std::size_t>(comm.rank())] =
          bench::run_dispatch_rank(comm, layout, plan, rs, none);
    });
    CHECK(got[0].verified);
    CHECK(got[0].planned.moved_bytes() == 0);
    CHECK(got[0].planned.local_bytes == layout.total_bytes());
  }
}

TEST_CASE("dispatch subcommand in-process: JSON, exit codes, no MPI in this build") {
  dispatch_scratch_dir dir;
  const auto layout = orchmllm::bench::lognormal_layout(6, 7, {}, 3);
  const auto plan = orchmllm::balance(layout, orchmllm::linear_cost{}).plan;
  write_text(dir.file("items.csv"), tool::format_items(layout));
  write_text(dir.file("plan.csv"), tool::format_plan(plan));
  const auto stats =
      orchmllm::compute_statistics(layout, plan, orchmllm::linear_cost{}, orchmllm::packed);

  const auto r =
      run_tool({"dispatch", "--backend", "local", "--items", dir.file("items.csv"), "--plan",
                dir.file("plan.csv"), "--gpus-per-node", "2", "--repeat", "3"});
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.empty());
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  CHECK(r.out.find("{\"verified\":true,\"backend\":\"local\",\"ranks\":6,\"nodes\":3,"
                   "\"gpus_per_node\":2,") == 0);
  CHECK(json_int(r.out, "moved_bytes") == stats.bytes_moved);
  CHECK(json_int(r.out, "intra_node_bytes") + json_int(r.out, "inter_node_bytes") ==
        stats.bytes_moved);
  CHECK(json_int(r.out, "total_bytes") == layout.total_bytes());
  CHECK(json_int(r.out, "repeat") == 3);
  CHECK(json_field(r.out, "alltoallv_seconds") == "null");
  CHECK(json_field(r.out, "dispatch_vs_alltoallv") == "null");
  CHECK(json_field(r.out, "route_vs_alltoallv") == "null");
  for (const char* key :
       {"predicted_seconds", "dispatch_seconds", "execute_seconds", "route_seconds",
        "combine_seconds", "predicted_direct_seconds", "predicted_node_wise_seconds"})
    CHECK_MESSAGE(std::stod(json_field(r.out, key)) >= 0, key);

  // --ranks larger than the files: trailing empty ranks take part.
  const auto more = run_tool({"dispatch", "--backend", "local", "--items", dir.file("items.csv"),
                              "--plan", dir.file("plan.csv"), "--ranks", "8", "--repeat", "1"});
  CHECK(more.rc == 0);
  CHECK(more.out.find("{\"verified\":true,\"backend\":\"local\",\"ranks\":8,") == 0);
  // A plan made for other items: exit 2, one line naming the file and the row.
  write_text(dir.file("other.csv"), tool::format_items(orchmllm::bench::lognormal_layout(6, 5)));
  const auto wrong = run_tool({"dispatch", "--backend", "local", "--items", dir.file("other.csv"),
                               "--plan", dir.file("plan.csv")});
  CHECK(wrong.rc == 2);
  CHECK(wrong.out.empty());
  CHECK(wrong.err.find("orchmllm-bench dispatch: ") == 0);
  CHECK(wrong.err.find("no source item (rank 0, slot 5)") != std::string::npos);
  CHECK(std::count(wrong.err.begin(), wrong.err.end(), '\n') == 1);

  const auto mpi = run_tool({"dispatch", "--backend", "mpi", "--items", dir.file("items.csv"),
                             "--plan", dir.file("plan.csv")});
  if (!tool::dispatch_has_mpi) {
    CHECK(mpi.rc == 2);
    CHECK(mpi.out.empty());
    CHECK(mpi.err ==
          "orchmllm-bench dispatch: --backend mpi: this orchmllm-bench was built without MPI "
          "support (configure with -DORCHMLLM_ENABLE_MPI=ON and an MPI installation)\n");
  }

  const auto help = run_tool({"help", "dispatch"});
  CHECK(help.rc == 0);
  CHECK(help.out.find("usage: orchmllm-bench dispatch --backend local|mpi --items ITEMS.csv "
                      "--plan PLAN.csv [--ranks D] [--gpus-per-node G] "
                      "[--schedule direct|node-wise|auto] [--repeat K]") == 0);
  const auto list = run_tool({"--help"});
  CHECK(list.out.find("\n  dispatch ") != std::string::npos);
}
