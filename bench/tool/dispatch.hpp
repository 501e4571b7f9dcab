#pragma once
// orchmllm-bench dispatch: move the payload of ITEMS.csv along PLAN.csv over a real transport
// (the in-process `local` backend or MPI), check every byte, time it, print the figures as JSON.
//
//   orchmllm-bench dispatch --backend local|mpi --items ITEMS.csv --plan PLAN.csv [--ranks D]
//                           [--gpus-per-node G] [--schedule direct|node-wise|auto] [--repeat K]
//
// Every item carries `bytes` bytes (the ITEMS.csv bytes column, else its length) whose content
// is a function of (source rank, source slot, byte index) (`content_byte`); rows are bytes
// (row_bytes = 1). Each rank:
//   1. builds its source payload (its items in slot order);
//   2. once untimed (warm-up), then K times, each timed step preceded by a barrier:
//      `orchmllm::dispatch` (the whole call: metadata agreement, route build, all-to-alls),
//      `orchmllm::execute` of a route built once beforehand (the data movement alone),
//      `orchmllm::combine` of what dispatch delivered, and with MPI a plain MPI_Alltoallv of
//      the direct schedule's byte matrix (the baseline);
//   3. checks after every step that it holds exactly its planned items, in dst_slot order, with
//      the right sizes and content, and after combine exactly its original payload.
// A step's time is the slowest rank's; the reported time is the median over the K runs. The
// ranks' verdicts are shared (all-gather), so every rank returns the same exit status and rank
// 0 prints one JSON object (keys: `dispatch_command().details`, docs/tool.md).
//
// MPI: run under `mpirun -np D`. The world size must equal the files' rank count. Rank 0 reads
// both files and shares their text, so the other ranks need not see the same file system; every
// rank parses the same text and so fails (or not) identically. Only rank 0 writes to stdout and
// stderr, except for usage errors found before MPI starts (each process reports those). The
// mpi branch is compiled only where the tool links orchmllm::mpi (ORCHMLLM_HAS_MPI); MPI is
// initialised only when --backend mpi is chosen.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <limits>
#include <new>
#include <optional>
#include <orchmllm/comm/collectives.hpp>
#include <orchmllm/comm/communicator.hpp>
#include <orchmllm/comm/metadata.hpp>
#include <orchmllm/comm/dispatch.hpp>
#include <orchmllm/comm/local.hpp>
#include <orchmllm/comm/mover.hpp>
#include <orchmllm/comm/payload.hpp>
#include <orchmllm/comm/route.hpp>
#include <orchmllm/core/batch_layout.hpp>
#include <orchmllm/core/error.hpp>
#include <orchmllm/core/rearrangement.hpp>
#include <orchmllm/topology/topology.hpp>
#include <ostream>
#include <span>
#include <streambuf>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "bench/support/workload.hpp"
#include "tool/args.hpp"
#include "tool/command.hpp"
#include "tool/file_io.hpp"
#include "tool/items_csv.hpp"
#include "tool/json.hpp"
#include "tool/plan_csv.hpp"
#include "tool/problem.hpp"

#if defined(ORCHMLLM_HAS_MPI) && ORCHMLLM_HAS_MPI
#include <mpi.h>

#include <orchmllm/backend/mpi/communicator.hpp>
#define ORCHMLLM_TOOL_DISPATCH_MPI 1
#else
#define ORCHMLLM_TOOL_DISPATCH_MPI 0
#endif

namespace orchmllm::tool {

int run_dispatch(const parsed_args& args, std::ostream& out, std::ostream& err);

/// Largest rank count of the local backend (one thread per rank).
inline constexpr std::int64_t dispatch_max_local_ranks = 4096;
/// Largest --repeat.
inline constexpr std::int64_t dispatch_max_repeat = 1000;

/// Whether this build of the tool can run `--backend mpi`.
inline constexpr bool dispatch_has_mpi = ORCHMLLM_TOOL_DISPATCH_MPI != 0;

/// The `dispatch` subcommand.
inline const command& dispatch_command() {
  static const command cmd = [] {
    command c;
    c.name = "dispatch";
    c.summary =
        "Move ITEMS.csv's payload along PLAN.csv (local threads or MPI), verify every byte, "
        "time it; print JSON.";
    c.flags = {
        {"backend", "local|mpi",
         "transport: local (one thread per rank, one process) or mpi (run under mpirun -np D)",
         true},
        {"items", "ITEMS.csv", "the items (header rank,slot,length[,bytes]); bytes = payload size",
         true},
        {"plan", "PLAN.csv", "where every item goes (as written by 'plan')", true},
        {"ranks", "D",
         "rank count of the files; default: highest rank in either file + 1 (mpi: must equal "
         "the world size)",
         false},
        {"gpus-per-node", "G",
         "nodes are consecutive blocks of G ranks; default: one node (local), the real nodes "
         "(mpi)",
         false},
        {"schedule", "direct|node-wise|auto", "all-to-all schedule; default auto", false},
        {"repeat", "K", "timed runs (the median is reported); default 5", false},
        {"timeout", "SECONDS",
         "deadline of every wait of the exchange, in (0, 86400]: past it a rank that waits for "
         "a peer fails (local: communication_error, exit 2; mpi: the job aborts naming the "
         "operation and the rank); default: no deadline",
         false},
    };
    c.details =
        "Every item carries `bytes` bytes (the bytes column, else its length) whose content\n"
        "derives from (source rank, slot, byte index). After an untimed warm-up, each of K runs\n"
        "times (barrier first, slowest rank) orchmllm::dispatch, orchmllm::execute of a route\n"
        "built once, orchmllm::combine, then orchmllm::dispatch along that route after one\n"
        "agree_on_routes (its hops' all-to-alls only: what a training step runs) and with mpi a\n"
        "plain MPI_Alltoallv of the same byte matrix, these two in alternating order. Every\n"
        "rank checks after each step that it holds exactly its planned items in dst_slot\n"
        "order, intact, and after combine its original payload. Times are medians.\n"
        "\n"
        "stdout (rank 0): one JSON object on one line: verified, backend, ranks, nodes,\n"
        "gpus_per_node, schedule (the one used), requested_schedule, repeat, items, total_bytes,\n"
        "max_rank_bytes, local_bytes, moved_bytes, intra_node_bytes, inter_node_bytes (by plan\n"
        "placement), sent_intra_node_bytes, sent_inter_node_bytes (what the schedule actually\n"
        "sends, forwarding included), predicted_seconds, predicted_direct_seconds,\n"
        "predicted_node_wise_seconds, dispatch_seconds, execute_seconds, route_seconds,\n"
        "combine_seconds, alltoallv_seconds (mpi; null for local), dispatch_vs_alltoallv,\n"
        "execute_vs_alltoallv, route_vs_alltoallv, items_file, plan_file. stderr names every rank that found a wrong byte.\n"
        "\n"
        "exit status: 0 verified; 1 some rank received wrong data; 2 bad usage, unreadable or\n"
        "malformed files, files that disagree, an MPI world of another size than the files.\n";
    c.run = &run_dispatch;
    return c;
  }();
  return cmd;
}

// ---------------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------------

/// Which transport moves the bytes.
enum class dispatch_backend { local, mpi };

/// The command line of `dispatch`, validated.
struct dispatch_settings {
  dispatch_backend backend = dispatch_backend::local;
  std::string items_path;
  std::string plan_path;
  std::optional<rank_t> ranks;       ///< --ranks; nullopt: inferred from the files
  rank_t gpus_per_node = 0;          ///< --gpus-per-node; 0: default (see the flag)
  schedule sched = schedule::automatic;
  int repeat = 5;
  std::chrono::milliseconds timeout{0};  ///< --timeout; 0: none
};

/// Reads and checks every flag of `dispatch`. Throws usage_error naming the flag and value.
inline dispatch_settings parse_dispatch_settings(const parsed_args& args) {
  dispatch_settings s;
  const std::string backend = args.require("backend");
  if (backend == "local") {
    s.backend = dispatch_backend::local;
  } else if (backend == "mpi") {
    s.backend = dispatch_backend::mpi;
  } else {
    throw usage_error("--backend is '" + backend + "', expected 'local' or 'mpi'");
  }
  s.items_path = args.require("items");
  s.plan_path = args.require("plan");
  const std::int64_t rank_limit =
      s.backend == dispatch_backend::local ? dispatch_max_local_ranks : max_ranks;
  if (args.has("ranks")) s.ranks = static_cast<rank_t>(args.require_int("ranks", 1, rank_limit));
  s.gpus_per_node = static_cast<rank_t>(args.get_int("gpus-per-node", 0, 1, max_ranks));
  if (auto name = args.get("schedule")) {
    try {
      s.sched = parse_schedule(*name);
    } catch (const invalid_argument_error&) {
      throw usage_error("--schedule is '" + *name + "', expected direct, node-wise or auto");
    }
  }
  s.repeat = static_cast<int>(args.get_int("repeat", 5, 1, dispatch_max_repeat));
  if (args.has("timeout")) {
    const double seconds = args.get_double("timeout", 0);
    if (!(seconds > 0 && seconds <= 86400))
      throw usage_error("--timeout is " + std::to_string(seconds) +
                        " seconds, must be in (0, 86400]");
    s.timeout = std::chrono::milliseconds(std::max<long long>(1, std::llround(seconds * 1000)));
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Input files
// ---------------------------------------------------------------------------------------------

/// The smallest rank count that fits both files: 1 + the highest `rank` in ITEMS.csv and the
/// highest `rank` or `dst_rank` in PLAN.csv (at least 1). Only a scan: fields that are not
/// integers are skipped here and reported by the real parsers. O(size of the texts). Throws
/// parse_error naming the file and line when a rank is not below `limit`.
inline rank_t infer_rank_count(std::string_view items_text, std::string_view plan_text,
                               std::string_view items_file, std::string_view plan_file,
                               std::int64_t limit = max_ranks) {
  std::int64_t highest = 0;
  auto scan = [&](std::string_view text, std::string_view file, std::initializer_list<int> cols) {
    detail::line_reader lines(text);
    std::string_view line;
    std::int64_t number = 0;
    bool header = true;
    while (lines.next(line, number)) {
      if (detail::trim(line).empty()) continue;
      if (header) {  // the first non-blank line is the header
        header = false;
        continue;
      }
      const auto fields = detail::split_fields(line);
      for (const int c : cols) {
        if (static_cast<std::size_t>(c) >= fields.size()) continue;
        const auto f = fields[static_cast<std::size_t>(c)];
        std::int64_t v = 0;
        const auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
        if (ec != std::errc{} || p != f.data() + f.size() || v < 0) continue;
        if (v >= limit)
          ::orchmllm::detail::raise<parse_error>(
              std::string(file) + ":" + std::to_string(number) + ": rank " + std::to_string(v) +
              " is not below the largest rank count " + std::to_string(limit));
        highest = std::max(highest, v + 1);
      }
    }
  };
  scan(items_text, items_file, {0});
  scan(plan_text, plan_file, {0, 2});
  return static_cast<rank_t>(std::max<std::int64_t>(highest, 1));
}

/// What `dispatch` moves: the source layout and the plan, over `ranks` ranks.
struct dispatch_inputs {
  batch_layout layout;
  rearrangement plan;
  rank_t ranks = 0;
};

/// The benchmarks' uniform all-to-all: d ranks with 2·d items of bytes_per_rank / (2·d) bytes
/// each (the remainder spread so every rank holds exactly bytes_per_rank); item j of rank r goes
/// to rank (r + j) mod d, so every rank sends the same share to every rank, itself included,
/// and each peer's items are interleaved with the others' (every hop needs a real gather).
inline dispatch_inputs uniform_all_to_all(rank_t d, std::int64_t bytes_per_rank) {
  const std::int64_t k = 2 * static_cast<std::int64_t>(d);
  std::vector<std::int64_t> offsets{0}, lengths;
  std::vector<rank_t> dst;
  for (rank_t r = 0; r < d; ++r) {
    for (std::int64_t j = 0; j < k; ++j) {
      lengths.push_back(bytes_per_rank / k + (j < bytes_per_rank % k ? 1 : 0));
      dst.push_back(static_cast<rank_t>((r + j) % d));
    }
    offsets.push_back(static_cast<std::int64_t>(lengths.size()));
  }
  dispatch_inputs in;
  in.ranks = d;
  in.layout = batch_layout(offsets, std::move(lengths));
  in.plan = rearrangement::from_destinations(offsets, dst, d);
  return in;
}

/// Parses the two files' texts: the rank count is `ranks` or, when absent, inferred
/// (`infer_rank_count`). Throws parse_error ("FILE:LINE: ...") for malformed files and for a
/// plan that does not fit the items; invalid_argument_error for an inconsistent plan.
inline dispatch_inputs parse_dispatch_inputs(std::string_view items_text,
                                             std::string_view plan_text,
                                             std::string_view items_file,
                                             std::string_view plan_file,
                                             std::optional<rank_t> ranks) {
  dispatch_inputs in;
  in.ranks = ranks ? *ranks : infer_rank_count(items_text, plan_text, items_file, plan_file);
  in.layout = parse_items(items_text, in.ranks, items_file);
  in.plan = parse_plan(plan_text, in.layout.offsets(), in.ranks, plan_file);
  return in;
}

// ---------------------------------------------------------------------------------------------
// Payload content and its checks (pure functions; tests/tool/dispatch_test.cpp)
// ---------------------------------------------------------------------------------------------

/// Seed of item (source rank, slot): every item's bytes differ from every other item's.
inline std::uint64_t content_key(rank_t src, std::int64_t slot) noexcept {
  return bench::splitmix64(bench::splitmix64(static_cast<std::uint64_t>(src)) ^
                           (static_cast<std::uint64_t>(slot) * 0x9e3779b97f4a7c15ULL));
}

/// Byte `i` of item (src, slot): byte i % 8 of splitmix64(key + i / 8) (little-endian order,
/// defined by shifts, so the same on every platform). O(1).
inline std::byte content_byte(rank_t src, std::int64_t slot, std::int64_t i) noexcept {
  const std::uint64_t w = bench::splitmix64(content_key(src, slot) + static_cast<std::uint64_t>(i >> 3));
  return static_cast<std::byte>((w >> (8 * (i & 7))) & 0xffu);
}

/// Writes item (src, slot)'s content into `out` (its bytes 0 .. out.size()-1). O(bytes).
inline void fill_content(rank_t src, std::int64_t slot, std::span<std::byte> out) noexcept {
  const std::uint64_t key = content_key(src, slot);
  const std::size_t n = out.size();
  for (std::size_t word = 0; word * 8 < n; ++word) {
    const std::uint64_t w = bench::splitmix64(key + word);
    const std::size_t end = std::min<std::size_t>(8, n - word * 8);
    for (std::size_t b = 0; b < end; ++b)
      out[word * 8 + b] = static_cast<std::byte>((w >> (8 * b)) & 0xffu);
  }
}

/// Index of the first byte of `data` that is not item (src, slot)'s content, or -1. O(bytes).
inline std::int64_t first_wrong_byte(rank_t src, std::int64_t slot,
                                     std::span<const std::byte> data) noexcept {
  const std::uint64_t key = content_key(src, slot);
  const std::size_t n = data.size();
  for (std::size_t word = 0; word * 8 < n; ++word) {
    const std::uint64_t w = bench::splitmix64(key + word);
    const std::size_t end = std::min<std::size_t>(8, n - word * 8);
    for (std::size_t b = 0; b < end; ++b)
      if (data[word * 8 + b] != static_cast<std::byte>((w >> (8 * b)) & 0xffu))
        return static_cast<std::int64_t>(word * 8 + b);
  }
  return -1;
}

/// Rank `rank`'s source payload: its items in slot order, row_bytes = 1, rows = item bytes,
/// content from `fill_content`. O(bytes of the rank). Throws std::bad_alloc.
inline ragged_payload make_source_payload(const batch_layout& layout, rank_t rank) {
  ragged_payload p;
  p.row_bytes = 1;
  std::int64_t total = 0;
  for (auto g = layout.offset(rank); g < layout.offset(rank + 1); ++g) {
    p.rows.push_back(layout.bytes(g));
    total += layout.bytes(g);
  }
  p.data.resize(static_cast<std::size_t>(total));
  std::int64_t at = 0;
  for (auto g = layout.offset(rank); g < layout.offset(rank + 1); ++g) {
    const auto b = layout.bytes(g);
    fill_content(rank, g - layout.offset(rank),
                 std::span<std::byte>(p.data).subspan(static_cast<std::size_t>(at),
                                                      static_cast<std::size_t>(b)));
    at += b;
  }
  return p;
}

/// Checks that `got` is exactly what `plan` delivers to rank `rank`: one item per destination
/// slot in slot order, each with the row count (= bytes) and content of its source item.
/// Returns nullopt when it is, else a one-line description of the first difference, prefixed
/// with `step`. O(bytes of the rank + its items · log d).
inline std::optional<std::string> check_delivered(const ragged_payload& got,
                                                  const batch_layout& layout,
                                                  const rearrangement& plan, rank_t rank,
                                                  std::string_view step) {
  using ::orchmllm::detail::concat;
  const auto doff = plan.dst_offsets();
  const auto first = doff[static_cast<std::size_t>(rank)];
  const auto count = doff[static_cast<std::size_t>(rank) + 1] - first;
  if (got.row_bytes != 1)
    return concat(step, ": row width ", got.row_bytes, " bytes, expected 1");
  if (got.num_items() != count)
    return concat(step, ": received ", got.num_items(), " items, the plan sends ", count);
  std::int64_t at = 0;
  for (std::int64_t s = 0; s < count; ++s) {
    const auto g = plan.source_of(first + s);
    const rank_t src = layout.rank_of(g);
    const auto src_slot = g - layout.offset(src);
    const auto want = layout.bytes(g);
    const auto have = got.rows[static_cast<std::size_t>(s)];
    if (have != want)
      return concat(step, ": slot ", s, " (item rank ", src, " slot ", src_slot, ") has ", have,
                    " bytes, expected ", want);
    if (at + have > static_cast<std::int64_t>(got.data.size()))
      return concat(step, ": payload holds ", got.data.size(), " bytes, fewer than its rows");
    const auto bad = first_wrong_byte(
        src, src_slot,
        std::span<const std::byte>(got.data).subspan(static_cast<std::size_t>(at),
                                                     static_cast<std::size_t>(have)));
    if (bad >= 0)
      return concat(step, ": slot ", s, " (item rank ", src, " slot ", src_slot,
                    "): byte ", bad, " of ", have, " is wrong");
    at += have;
  }
  if (at != static_cast<std::int64_t>(got.data.size()))
    return concat(step, ": payload holds ", got.data.size(), " bytes, its items ", at);
  return std::nullopt;
}

/// Checks that `got` equals `original` (rows, width and bytes). O(bytes).
inline std::optional<std::string> check_same_payload(const ragged_payload& got,
                                                     const ragged_payload& original,
                                                     std::string_view step) {
  using ::orchmllm::detail::concat;
  if (got.row_bytes != original.row_bytes || got.rows != original.rows)
    return concat(step, ": item sizes differ from the original (", got.num_items(),
                  " items vs ", original.num_items(), ")");
  if (got.data.size() != original.data.size())
    return concat(step, ": ", got.data.size(), " bytes instead of ", original.data.size());
  const auto mismatch = std::mismatch(got.data.begin(), got.data.end(), original.data.begin());
  if (mismatch.first != got.data.end())
    return concat(step, ": byte ", mismatch.first - got.data.begin(), " of ", got.data.size(),
                  " differs from the original");
  return std::nullopt;
}

/// Rank `rank`'s row and column of the direct schedule's byte matrix: bytes it sends to and
/// receives from every rank, its own block included (what one MPI_Alltoallv moving the same
/// items would pass). O(items of the rank · log d + d).
inline std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> direct_byte_counts(
    const batch_layout& layout, const rearrangement& plan, rank_t rank) {
  const auto d = static_cast<std::size_t>(plan.num_dst_ranks());
  std::vector<std::int64_t> send(d, 0), recv(d, 0);
  for (auto g = layout.offset(rank); g < layout.offset(rank + 1); ++g)
    send[static_cast<std::size_t>(plan.dst_ranks()[static_cast<std::size_t>(g)])] +=
        layout.bytes(g);
  const auto doff = plan.dst_offsets();
  for (auto h = doff[static_cast<std::size_t>(rank)]; h < doff[static_cast<std::size_t>(rank) + 1];
       ++h) {
    const auto g = plan.source_of(h);
    recv[static_cast<std::size_t>(layout.rank_of(g))] += layout.bytes(g);
  }
  return {std::move(send), std::move(recv)};
}

/// Median of `v` (mean of the two middle values for an even count); NaN when empty. O(k log k).
inline double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const auto m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// ---------------------------------------------------------------------------------------------
// Collective helpers (any orchmllm::communicator)
// ---------------------------------------------------------------------------------------------

/// Collective: every rank's optional problem text, shared with every rank. Returns the
/// (rank, text) pairs of the ranks that reported one, in rank order (the same on every rank).
/// One all-gather of 8 bytes per rank plus one all-gatherv of the texts when any.
template <communicator Comm>
std::vector<std::pair<rank_t, std::string>> gather_problems(
    Comm& comm, const std::optional<std::string>& mine) {
  const auto d = static_cast<std::size_t>(comm.size());
  const auto lens =
      orchmllm::all_gather(comm, mine ? static_cast<std::int64_t>(mine->size()) : std::int64_t{-1});
  std::vector<std::pair<rank_t, std::string>> out;
  std::vector<std::int64_t> counts(d);
  bool any = false;
  for (std::size_t r = 0; r < d; ++r) {
    counts[r] = std::max<std::int64_t>(lens[r], 0);
    any = any || lens[r] >= 0;
  }
  if (!any) return out;
  const auto all = orchmllm::all_gatherv(
      comm, mine ? std::span<const char>(*mine) : std::span<const char>(), counts);
  for (std::size_t r = 0; r < d; ++r)
    if (lens[r] >= 0) {
      const auto text = all.of(static_cast<rank_t>(r));
      out.emplace_back(static_cast<rank_t>(r), std::string(text.begin(), text.end()));
    }
  return out;
}

/// Collective: rank 0 reads `path` and every rank receives its text. When rank 0 cannot read
/// it, every rank throws the same io_error. O(file size) bytes moved.
template <communicator Comm>
std::string share_file(Comm& comm, const std::string& path) {
  std::string text;
  std::optional<std::string> failure;
  if (comm.rank() == 0) {
    try {
      text = read_file(path);
    } catch (const io_error& e) {
      failure = e.what();
    }
  }
  // The failure travels as rank 0's problem; everybody throws it.
  const auto problems = gather_problems(comm, failure);
  if (!problems.empty()) throw io_error(problems.front().second);
  // Only rank 0 contributes: every rank learns its size, then receives its text.
  const auto sizes = orchmllm::all_gather(comm, static_cast<std::int64_t>(text.size()));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(comm.size()), 0);
  counts[0] = sizes[0];
  const auto all = orchmllm::all_gatherv(
      comm, comm.rank() == 0 ? std::span<const char>(text) : std::span<const char>(), counts);
  return std::string(all.values.begin(), all.values.end());
}

/// Collective: every rank's `k` doubles; returns, for each index, the largest value over the
/// ranks (a collective step takes as long as its slowest rank).
template <communicator Comm>
std::vector<double> max_over_ranks(Comm& comm, const std::vector<double>& mine) {
  const auto d = static_cast<std::size_t>(comm.size());
  const auto k = mine.size();
  const auto all = orchmllm::all_gather(comm, std::span<const double>(mine));
  std::vector<double> out(mine);
  for (std::size_t r = 0; r < d; ++r)
    for (std::size_t i = 0; i < k; ++i) out[i] = std::max(out[i], all[r * k + i]);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The per-rank driver
// ---------------------------------------------------------------------------------------------

/// A baseline that is never run (the local backend).
struct no_alltoallv_baseline {
  /// Collective; false: the baseline does not apply.
  template <communicator Comm>
  bool prepare(Comm&, std::span<const std::int64_t>, std::span<const std::int64_t>) {
    return false;
  }
  /// Seconds of one run (never called when prepare returned false).
  double run(const std::byte*, std::byte*) { return 0; }
};

/// What one dispatch run found; identical on every rank.
struct dispatch_summary {
  bool verified = false;
  std::vector<std::pair<rank_t, std::string>> failures;  ///< ranks that found wrong data
  rank_t ranks = 0;
  rank_t nodes = 0;
  rank_t gpus_per_node = 0;  ///< the --gpus-per-node value, else the size of node 0
  schedule requested = schedule::automatic;
  schedule used = schedule::direct;
  int repeat = 0;
  std::int64_t items = 0;
  std::int64_t total_bytes = 0;
  std::int64_t max_rank_bytes = 0;  ///< largest source payload of one rank
  traffic_stats planned{};          ///< Σ plan_traffic over the source ranks
  traffic_stats sent{};             ///< Σ over ranks of what the used schedule sent
  double predicted_seconds = 0;
  double predicted_direct_seconds = 0;
  double predicted_node_wise_seconds = 0;
  double dispatch_seconds = 0;
  double execute_seconds = 0;
  double route_seconds = 0;  ///< dispatch along the prebuilt route, agreed once
  double combine_seconds = 0;
  std::optional<double> alltoallv_seconds;
};

/// Settings of `run_dispatch_rank`.
struct dispatch_run_settings {
  schedule sched = schedule::automatic;
  int repeat = 5;
  rank_t gpus_per_node = 0;  ///< reported as given; 0: report the size of node 0
  link_params links{};
};

/// Collective, on every rank of `comm` (whose size must equal the plan's rank count; callers
/// check, identically on every rank): the measurement and checks described in the file comment.
/// Returns the same summary on every rank. Throws invalid_argument_error on every rank when a
/// rank cannot allocate its buffers; what dispatch/combine/the communicator throw.
template <communicator Comm, class Baseline>
dispatch_summary run_dispatch_rank(Comm& comm, const batch_layout& layout,
                                   const rearrangement& plan, const dispatch_run_settings& s,
                                   Baseline& baseline) {
  using clock = std::chrono::steady_clock;
  const rank_t me = comm.rank();
  const rank_t d = comm.size();

  // Buffers first, agreed: one rank that cannot allocate must not leave the others waiting.
  ragged_payload mine;
  std::optional<std::string> problem;
  try {
    mine = make_source_payload(layout, me);
  } catch (const std::bad_alloc&) {
    std::int64_t b = 0;
    for (auto g = layout.offset(me); g < layout.offset(me + 1); ++g) b += layout.bytes(g);
    problem = ::orchmllm::detail::concat("cannot allocate its ", b, " bytes of payload");
  }
  if (const auto p = gather_problems(comm, problem); !p.empty())
    ::orchmllm::detail::raise<invalid_argument_error>(
        ::orchmllm::detail::concat("rank ", p.front().first, " ", p.front().second));

  dispatch_summary sum;
  sum.ranks = d;
  sum.requested = s.sched;
  sum.repeat = s.repeat;
  sum.items = layout.num_items();
  sum.total_bytes = layout.total_bytes();
  for (rank_t r = 0; r < d; ++r) {
    std::int64_t b = 0;
    for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g) b += layout.bytes(g);
    sum.max_rank_bytes = std::max(sum.max_rank_bytes, b);
  }

  // The node map the routes use (the communicator's), for the byte accounting and the model.
  const topology topo = orchmllm::gather_topology(comm, s.links);
  sum.nodes = topo.num_nodes();
  sum.gpus_per_node = s.gpus_per_node > 0 ? s.gpus_per_node : topo.node_size(0);
  std::vector<std::int64_t> item_bytes(static_cast<std::size_t>(layout.num_items()));
  for (std::int64_t g = 0; g < layout.num_items(); ++g)
    item_bytes[static_cast<std::size_t>(g)] = layout.bytes(g);
  for (const auto& t : plan_traffic(plan, item_bytes, topo)) sum.planned += t;
  {
    const route both = route::build(plan, item_bytes, topo, me, schedule::automatic);
    sum.predicted_direct_seconds = both.predicted_seconds(schedule::direct);
    sum.predicted_node_wise_seconds = both.predicted_seconds(schedule::node_wise);
  }

  host_mover dispatch_scratch;  // reused by dispatch/combine, as a trainer would
  const dispatch_options opts{s.sched, s.links, &dispatch_scratch};
  const auto my_bytes = std::span<const std::int64_t>(item_bytes).subspan(
      static_cast<std::size_t>(layout.offset(me)),
      static_cast<std::size_t>(layout.rank_size(me)));
  const route r = build_route(comm, plan, my_bytes, opts);
  host_mover mover;
  std::vector<std::byte> executed(static_cast<std::size_t>(r.output_bytes()));
  // The training-step path: one agreement (which also reserves the scratch), then each
  // dispatch along the route is its hops' all-to-alls.
  host_mover route_scratch;
  std::vector<std::byte> routed(static_cast<std::size_t>(r.output_bytes()));
  agree_on_routes(comm, std::span<const route>(&r, 1), route_scratch);
  const auto [send_counts, recv_counts] = direct_byte_counts(layout, plan, me);
  const bool with_baseline = baseline.prepare(comm, send_counts, recv_counts);
  std::vector<std::byte> baseline_recv;
  if (with_baseline) {
    std::int64_t total = 0;
    for (const auto c : recv_counts) total += c;
    baseline_recv.resize(static_cast<std::size_t>(total));
  }

  std::optional<std::string> failure;
  auto note = [&failure](std::optional<std::string> f) {
    if (!failure && f) failure = std::move(f);
  };
  auto seconds_since = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<double> t_dispatch, t_execute, t_route, t_combine, t_baseline;
  dispatch_report report;
  ragged_payload moved, back;  // reused across steps, as a trainer would
  for (int k = -1; k < s.repeat; ++k) {  // k = -1: untimed warm-up (first-touch, caches)
    comm.barrier();
    auto t0 = clock::now();
    dispatch(comm, plan, mine, moved, opts, &report);
    const double td = seconds_since(t0);
    note(check_delivered(moved, layout, plan, me, "dispatch"));

    comm.barrier();
    t0 = clock::now();
    execute(comm, r, mine.data.data(), executed.data(), mover);
    const double te = seconds_since(t0);
    if (!std::equal(executed.begin(), executed.end(), moved.data.begin(), moved.data.end()))
      note(std::string("execute: the bytes differ from what dispatch delivered"));

    comm.barrier();
    t0 = clock::now();
    combine(comm, plan, moved, back, opts);
    const double tc = seconds_since(t0);
    note(check_same_payload(back, mine, "combine"));

    // The route and the baseline side by side, in alternating order (what runs first after
    // other work is measurably slower on a shared machine).
    double tr = 0, tb = 0;
    for (int turn = 0; turn < 2; ++turn) {
      comm.barrier();
      if ((turn == 0) == (k % 2 == 0)) {
        t0 = clock::now();
        dispatch(comm, r, std::span<const std::byte>(mine.data), std::span<std::byte>(routed),
                 route_scratch);
        tr = seconds_since(t0);
      } else if (with_baseline) {
        tb = baseline.run(mine.data.data(), baseline_recv.data());
      }
    }
    if (!std::equal(routed.begin(), routed.end(), moved.data.begin(), moved.data.end()))
      note(std::string("route: the bytes differ from what dispatch delivered"));
    if (k >= 0) {
      t_dispatch.push_back(td);
      t_execute.push_back(te);
      t_route.push_back(tr);
      t_combine.push_back(tc);
      t_baseline.push_back(tb);
    }
  }

  sum.used = report.used;
  sum.predicted_seconds = report.predicted_seconds;
  sum.failures = gather_problems(comm, failure);
  sum.verified = sum.failures.empty();
  sum.dispatch_seconds = median(max_over_ranks(comm, t_dispatch));
  sum.execute_seconds = median(max_over_ranks(comm, t_execute));
  sum.route_seconds = median(max_over_ranks(comm, t_route));
  sum.combine_seconds = median(max_over_ranks(comm, t_combine));
  if (with_baseline) sum.alltoallv_seconds = median(max_over_ranks(comm, t_baseline));

  const std::int64_t sent[5] = {report.sent.local_bytes, report.sent.intra_node_bytes,
                                report.sent.inter_node_bytes, report.sent.intra_node_messages,
                                report.sent.inter_node_messages};
  const auto all = orchmllm::all_gather(comm, std::span<const std::int64_t>(sent));
  for (std::size_t q = 0; q < static_cast<std::size_t>(d); ++q)
    sum.sent += traffic_stats{all[q * 5], all[q * 5 + 1], all[q * 5 + 2], all[q * 5 + 3],
                              all[q * 5 + 4]};
  return sum;
}

/// The JSON line of a summary (keys in the order of `dispatch_command().details`).
inline std::string dispatch_json(const dispatch_summary& s, std::string_view backend,
                                 std::string_view items_file, std::string_view plan_file) {
  auto ratio = [](double a, const std::optional<double>& b) {
    return b && *b > 0 ? json_number(a / *b) : std::string("null");
  };
  json_object j;
  j.add("verified", s.verified)
      .add("backend", backend)
      .add("ranks", static_cast<std::int64_t>(s.ranks))
      .add("nodes", static_cast<std::int64_t>(s.nodes))
      .add("gpus_per_node", static_cast<std::int64_t>(s.gpus_per_node))
      .add("schedule", to_string(s.used))
      .add("requested_schedule", to_string(s.requested))
      .add("repeat", static_cast<std::int64_t>(s.repeat))
      .add("items", s.items)
      .add("total_bytes", s.total_bytes)
      .add("max_rank_bytes", s.max_rank_bytes)
      .add("local_bytes", s.planned.local_bytes)
      .add("moved_bytes", s.planned.moved_bytes())
      .add("intra_node_bytes", s.planned.intra_node_bytes)
      .add("inter_node_bytes", s.planned.inter_node_bytes)
      .add("sent_intra_node_bytes", s.sent.intra_node_bytes)
      .add("sent_inter_node_bytes", s.sent.inter_node_bytes)
      .add("predicted_seconds", s.predicted_seconds)
      .add("predicted_direct_seconds", s.predicted_direct_seconds)
      .add("predicted_node_wise_seconds", s.predicted_node_wise_seconds)
      .add("dispatch_seconds", s.dispatch_seconds)
      .add("execute_seconds", s.execute_seconds)
      .add("route_seconds", s.route_seconds)
      .add("combine_seconds", s.combine_seconds)
      .raw("alltoallv_seconds", s.alltoallv_seconds ? json_number(*s.alltoallv_seconds) : "null")
      .raw("dispatch_vs_alltoallv", ratio(s.dispatch_seconds, s.alltoallv_seconds))
      .raw("execute_vs_alltoallv", ratio(s.execute_seconds, s.alltoallv_seconds))
      .raw("route_vs_alltoallv", ratio(s.route_seconds, s.alltoallv_seconds))
      .add("items_file", items_file)
      .add("plan_file", plan_file);
  return j.str();
}

/// Writes the failures of a summary to `err`, one line each (at most `limit`, then a count).
inline void report_failures(const dispatch_summary& s, std::ostream& err, std::size_t limit = 8) {
  const std::string prefix = std::string(program_name) + " dispatch: ";
  for (std::size_t i = 0; i < s.failures.size() && i < limit; ++i)
    err << prefix << "rank " << s.failures[i].first << ": "
        << detail::one_line(s.failures[i].second) << "\n";
  if (s.failures.size() > limit)
    err << prefix << "... and " << (s.failures.size() - limit) << " more ranks\n";
}

// ---------------------------------------------------------------------------------------------
// Backends
// ---------------------------------------------------------------------------------------------

/// The local backend: parse in this thread, one thread per rank, rank 0's summary printed here.
inline int run_dispatch_local(const dispatch_settings& s, std::ostream& out, std::ostream& err) {
  const std::string items_text = read_file(s.items_path);
  const std::string plan_text = read_file(s.plan_path);
  const dispatch_inputs in =
      parse_dispatch_inputs(items_text, plan_text, s.items_path, s.plan_path, s.ranks);
  ORCHMLLM_REQUIRE(in.ranks <= dispatch_max_local_ranks, invalid_argument_error,
                   "the files describe ", in.ranks, " ranks; the local backend runs one thread "
                   "per rank and stops at ", dispatch_max_local_ranks);
  dispatch_run_settings rs;
  rs.sched = s.sched;
  rs.repeat = s.repeat;
  rs.gpus_per_node = s.gpus_per_node > 0 ? s.gpus_per_node : in.ranks;
  dispatch_summary summary;
  local::run(
      in.ranks,
      [&](local::communicator& comm) {
        no_alltoallv_baseline none;
        auto result = run_dispatch_rank(comm, in.layout, in.plan, rs, none);
        if (comm.rank() == 0) summary = std::move(result);  // read after run() joins
      },
      local::run_options{s.gpus_per_node, s.timeout});
  report_failures(summary, err);
  out << dispatch_json(summary, "local", s.items_path, s.plan_path) << "\n";
  return summary.verified ? exit_ok : exit_internal;
}

namespace detail {
/// A stream that discards everything (stdout/stderr of MPI ranks other than 0).
class null_stream : public std::ostream {
 public:
  null_stream() : std::ostream(&buf_) {}

 private:
  struct discard : std::streambuf {
    int overflow(int c) override { return traits_type::not_eof(c); }
    std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
  } buf_;
};
}  // namespace detail

#if ORCHMLLM_TOOL_DISPATCH_MPI

/// MPI_Alltoallv of the direct schedule's byte matrix on the communicator's MPI group.
class mpi_alltoallv_baseline {
 public:
  explicit mpi_alltoallv_baseline(MPI_Comm comm) : comm_(comm) {}

  /// Collective. False on every rank when some rank's counts or displacements do not fit in
  /// `int` (MPI_Alltoallv counts in int; the baseline is then reported as null).
  template <communicator Comm>
  bool prepare(Comm&, std::span<const std::int64_t> send, std::span<const std::int64_t> recv) {
    int fits = convert(send, sc_, sd_) && convert(recv, rc_, rd_) ? 1 : 0;
    int all = 0;
    ::orchmllm::detail::mpi_backend::check(
        MPI_Allreduce(&fits, &all, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    return all == 1;
  }

  /// Seconds of one MPI_Alltoallv. Throws communication_error when it fails.
  double run(const std::byte* send, std::byte* recv) {
    const auto t0 = std::chrono::steady_clock::now();
    ::orchmllm::detail::mpi_backend::check(
        MPI_Alltoallv(send, sc_.data(), sd_.data(), MPI_BYTE, recv, rc_.data(), rd_.data(),
                      MPI_BYTE, comm_),
        "MPI_Alltoallv");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  static bool convert(std::span<const std::int64_t> counts, std::vector<int>& c,
                      std::vector<int>& displs) {
    c.assign(counts.size(), 0);
    displs.assign(counts.size(), 0);
    std::int64_t at = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] > std::numeric_limits<int>::max() || at > std::numeric_limits<int>::max())
        return false;
      c[i] = static_cast<int>(counts[i]);
      displs[i] = static_cast<int>(at);
      at += counts[i];
    }
    return true;
  }

  MPI_Comm comm_;
  std::vector<int> sc_, sd_, rc_, rd_;
};

namespace detail {
/// The settings as the command line spells them (what every rank must agree on).
inline std::string settings_text(const dispatch_settings& s) {
  std::string t = "--items " + s.items_path + " --plan " + s.plan_path;
  if (s.ranks) t += " --ranks " + std::to_string(*s.ranks);
  if (s.gpus_per_node > 0) t += " --gpus-per-node " + std::to_string(s.gpus_per_node);
  t += " --schedule " + std::string(to_string(s.sched)) + " --repeat " + std::to_string(s.repeat);
  if (s.timeout.count() > 0) t += " --timeout " + std::to_string(s.timeout.count()) + "ms";
  return t;
}

/// Collective over `world`, before anything else: every rank must have been started with the
/// same flags, or ranks would take different paths through the collectives that follow and wait
/// for each other forever. Raises the same invalid_argument_error on every rank (naming the
/// first rank that differs and rank 0's flags) when they do not agree.
inline void agree_on_settings(MPI_Comm world, const dispatch_settings& s) {
  const std::string text = settings_text(s);
  ::orchmllm::detail::fnv f;
  f.mix(text);
  const std::uint64_t h = f.h;
  int size = 0;
  ::orchmllm::detail::mpi_backend::check(MPI_Comm_size(world, &size), "MPI_Comm_size");
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
  ::orchmllm::detail::mpi_backend::check(
      MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, world), "MPI_Allgather");
  for (int r = 1; r < size; ++r)
    ORCHMLLM_REQUIRE(all[static_cast<std::size_t>(r)] == all[0], invalid_argument_error, "rank ",
                     r, " was started with other dispatch flags than rank 0 (", text,
                     " on rank 0): every rank must run the same command line");
}

/// Whether every rank reports a failure within `wait`: each rank that failed calls this on
/// `errors` (a duplicate of the world used for nothing else), the healthy ones never do. One
/// MPI_Ibarrier, polled: it completes only when every rank failed alike (the library's
/// agreements raise their errors on every rank, and every rank parses the same shared files);
/// a rank that failed alone is still waiting when `wait` is over.
inline bool every_rank_failed(MPI_Comm errors, std::chrono::milliseconds wait) {
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(errors, &req) != MPI_SUCCESS) return false;
  bool done = false;
  const int rc = ::orchmllm::detail::mpi_backend::poll_until(
      req, std::chrono::steady_clock::now() + wait, done);
  return rc == MPI_SUCCESS && done;
}

/// How long a failed rank waits for the others to report the same failure: half of --timeout
/// (so that a rank failing alone speaks, and aborts, before its peers' deadlines end their
/// waits), else 30 s.
inline std::chrono::milliseconds failure_wait(const dispatch_settings& s) {
  return s.timeout.count() > 0 ? std::max(s.timeout / 2, std::chrono::milliseconds(1))
                               : std::chrono::milliseconds(30000);
}
}  // namespace detail

/// The MPI backend: MPI_Init here, the ranks agree on their flags, rank 0 shares the files,
/// every rank runs the driver, rank 0 reports. An error is reported once, by rank 0, only when
/// it is proven collective: every rank failed (an MPI_Ibarrier on a communicator reserved for
/// failures completes within `failure_wait`). A rank that failed alone prints its own error,
/// names itself, and aborts the job (MPI_Abort with the error's exit code), so no rank is left
/// waiting in a collective for it.
inline int run_dispatch_mpi(const dispatch_settings& s, std::ostream& out, std::ostream& err) {
  mpi::environment env;
  int world_rank = 0;
  ::orchmllm::detail::mpi_backend::check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank),
                                         "MPI_Comm_rank");
  // Never freed: MPI_Comm_free is collective, and a failing rank may be alone; MPI_Finalize
  // releases it.
  MPI_Comm errors = MPI_COMM_NULL;
  ::orchmllm::detail::mpi_backend::check(MPI_Comm_dup(MPI_COMM_WORLD, &errors), "MPI_Comm_dup");
  detail::null_stream quiet;
  std::ostream& my_out = world_rank == 0 ? out : quiet;
  std::ostream& my_err = world_rank == 0 ? err : quiet;
  std::exception_ptr failure;
  try {
    detail::agree_on_settings(MPI_COMM_WORLD, s);
    mpi::communicator::options o;
    o.ranks_per_node = s.gpus_per_node;
    o.timeout = s.timeout;
    mpi::communicator comm(MPI_COMM_WORLD, o);
    const std::string items_text = share_file(comm, s.items_path);
    const std::string plan_text = share_file(comm, s.plan_path);
    const dispatch_inputs in =
        parse_dispatch_inputs(items_text, plan_text, s.items_path, s.plan_path, s.ranks);
    ORCHMLLM_REQUIRE(in.ranks == comm.size(), invalid_argument_error,
                     "the MPI world has ", comm.size(), " ranks but the files describe ",
                     in.ranks, s.ranks ? " (--ranks)" : " (highest rank + 1; or pass --ranks)",
                     ": run it under mpirun -np ", in.ranks);
    dispatch_run_settings rs;
    rs.sched = s.sched;
    rs.repeat = s.repeat;
    rs.gpus_per_node = s.gpus_per_node;
    mpi_alltoallv_baseline baseline(comm.native_handle());
    const dispatch_summary summary = run_dispatch_rank(comm, in.layout, in.plan, rs, baseline);
    report_failures(summary, my_err);
    my_out << dispatch_json(summary, "mpi", s.items_path, s.plan_path) << "\n";
    my_out.flush();
    return summary.verified ? exit_ok : exit_internal;
  } catch (...) {
    failure = std::current_exception();
  }
  const auto rethrow = [&]() -> int { std::rethrow_exception(failure); };
  if (detail::every_rank_failed(errors, detail::failure_wait(s)))
    return guarded(dispatch_command(), my_err, rethrow);
  err << program_name << " dispatch: rank " << world_rank << " failed alone (no other rank "
      << "failed within " << detail::failure_wait(s).count() << " ms); aborting the job\n";
  const int code = guarded(dispatch_command(), err, rethrow);
  err.flush();
  MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}

#endif  // ORCHMLLM_TOOL_DISPATCH_MPI

/// Runs `dispatch`. Returns the exit code (see command.hpp; 1 also when data arrived wrong).
inline int run_dispatch(const parsed_args& args, std::ostream& out, std::ostream& err) {
  return guarded(dispatch_command(), err, [&] {
    const dispatch_settings s = parse_dispatch_settings(args);
    if (s.backend == dispatch_backend::local) return run_dispatch_local(s, out, err);
#if ORCHMLLM_TOOL_DISPATCH_MPI
    return run_dispatch_mpi(s, out, err);
#else
    ::orchmllm::detail::raise<invalid_argument_error>(
        "--backend mpi: this orchmllm-bench was built without MPI support (configure with "
        "-DORCHMLLM_ENABLE_MPI=ON and an MPI installation)");
#endif
  });
}

}  // namespace orchmllm::tool
