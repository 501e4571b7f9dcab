#pragma once
// Shared by the tests of include/orchmllm/comm/dispatch.hpp on the in-process backend
// (tests/comm/dispatch_*_test.cpp): payloads whose content derives from (source rank, slot, byte
// of the item, which encodes the row) and what each rank must hold after a dispatch, a group run
// with a timeout that records each rank's error, random lengths and plans, the small case of the
// fault tests, and the check that a failure is collective (every rank gets communication_error,
// the group stays usable).
//
// doctest macros are not thread-safe: rank functions only record results (one slot per rank)
// and every CHECK runs on the main thread after `run` returns.

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/local.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "support/test_support.hpp"

namespace orchmllm::test::dispatch_fixtures {

using orchmllm::local::communicator;
using vec = std::vector<std::int64_t>;
using ranks = std::vector<rank_t>;
using namespace std::chrono_literals;

constexpr schedule all_schedules[] = {schedule::direct, schedule::node_wise, schedule::automatic};

// Rank `r`'s payload: rows[j] rows of `row_bytes` bytes for slot j; byte b of item j is
// content_byte(r + salt, j, b).
inline ragged_payload make_payload(rank_t r, const vec& rows, std::int64_t row_bytes,
                                   std::int64_t salt = 0) {
  ragged_payload p;
  p.rows = rows;
  p.row_bytes = row_bytes;
  for (std::size_t j = 0; j < rows.size(); ++j)
    for (std::int64_t b = 0; b < rows[j] * row_bytes; ++b)
      p.data.push_back(content_byte(r + salt, static_cast<std::int64_t>(j), b));
  return p;
}

// What rank t must hold after dispatch: its destination items in slot order, each with the
// rows and content of its source (rank, slot). `rows` per source item in global-id order.
inline ragged_payload expected_at(const rearrangement& plan, const vec& rows,
                                  std::int64_t row_bytes, rank_t t, std::int64_t salt = 0) {
  ragged_payload p;
  p.row_bytes = row_bytes;
  const auto off = plan.src_offsets();
  const auto doff = plan.dst_offsets();
  for (auto h = doff[static_cast<std::size_t>(t)]; h < doff[static_cast<std::size_t>(t) + 1]; ++h) {
    const auto g = plan.source_of(h);
    const rank_t s = owner(off, g);
    const auto slot = g - off[static_cast<std::size_t>(s)];
    p.rows.push_back(rows[static_cast<std::size_t>(g)]);
    for (std::int64_t b = 0; b < rows[static_cast<std::size_t>(g)] * row_bytes; ++b)
      p.data.push_back(content_byte(s + salt, slot, b));
  }
  return p;
}

inline vec rows_of_rank(const vec& rows, std::span<const std::int64_t> off, rank_t r) {
  return vec(rows.begin() + off[static_cast<std::size_t>(r)],
             rows.begin() + off[static_cast<std::size_t>(r) + 1]);
}

inline bool same_payload(const ragged_payload& a, const ragged_payload& b) {
  return a.rows == b.rows && a.row_bytes == b.row_bytes && a.data == b.data;
}

// Runs body(comm, slot) on d ranks (nodes of rpn ranks) with a timeout, so a hang fails the
// test instead of blocking it. An exception escaping a rank is recorded in slot.error as
// "<kind>: <message>", where kind is communication_error, invalid_argument_error or other.
template <class Slot, class F>
std::vector<Slot> run_group(rank_t d, rank_t rpn, F&& body) {
  std::vector<Slot> out(static_cast<std::size_t>(d));
  orchmllm::local::run(d,
                       [&](communicator& comm) {
                         auto& slot = out[static_cast<std::size_t>(comm.rank())];
                         try {
                           body(comm, slot);
                         } catch (const communication_error& e) {
                           slot.error = std::string("communication_error: ") + e.what();
                         } catch (const invalid_argument_error& e) {
                           slot.error = std::string("invalid_argument_error: ") + e.what();
                         } catch (const std::exception& e) {
                           slot.error = std::string("other: ") + e.what();
                         }
                       },
                       {.ranks_per_node = rpn, .timeout = 60s});
  return out;
}

// Random lengths on d ranks: empty ranks and zero-length items included.
inline std::vector<vec> random_lengths(std::mt19937_64& rng, rank_t d, std::int64_t max_items) {
  std::vector<vec> out(static_cast<std::size_t>(d));
  for (auto& r : out) {
    const auto n = uniform(rng, 0, 4) == 0 ? 0 : uniform(rng, 0, max_items);
    for (std::int64_t i = 0; i < n; ++i)
      r.push_back(uniform(rng, 0, 5) == 0 ? 0 : uniform(rng, 1, 12));
  }
  return out;
}

inline vec flatten(const std::vector<vec>& v) {
  vec out;
  for (const auto& r : v) out.insert(out.end(), r.begin(), r.end());
  return out;
}

// A random case of the route tests: min_d..8 ranks in nodes of rpn (0..3; 0: one node), up to 6
// items per rank (empty ranks and zero-row items included), a shuffled random plan.
struct random_case {
  rank_t d = 0, rpn = 0;
  vec rows;  // per item, global id order
  rearrangement plan;

  static random_case make(std::mt19937_64& rng, rank_t min_d) {
    random_case c;
    c.d = static_cast<rank_t>(uniform(rng, min_d, 8));
    c.rpn = static_cast<rank_t>(uniform(rng, 0, 3));
    const auto lengths = random_lengths(rng, c.d, 6);
    const auto layout = orchmllm::batch_layout::from_ranks(lengths);
    c.plan = orchmllm::test::random_rearrangement(rng, layout.offsets(), c.d, true, 20);
    c.rows = flatten(lengths);
    return c;
  }
};

// The small case of the fault tests: 4 ranks, a balanced plan and another plan of the same
// items (a stale one, for the tests).
struct fault_case {
  static constexpr rank_t d = 4;
  vec rows;
  rearrangement plan, other;

  static fault_case make() {
    const auto lengths = std::vector<vec>{{3, 0, 5}, {2}, {}, {7, 1, 1, 4}};
    const auto layout = orchmllm::batch_layout::from_ranks(lengths);
    fault_case c{flatten(lengths),
                 orchmllm::balance(layout, orchmllm::linear_cost{}, orchmllm::packed).plan,
                 {}};
    std::mt19937_64 rng(5);
    c.other = orchmllm::test::random_rearrangement(rng, c.plan.src_offsets(), d, true);
    REQUIRE(orchmllm::fingerprint(c.other) != orchmllm::fingerprint(c.plan));
    return c;
  }
};

struct agreement_slot {
  std::string error;  // the failing call's outcome
  std::string after;  // outcome of a correct dispatch afterwards ("" = ok)
  bool after_intact = false;
};

// Runs `bad(comm)` (expected to fail collectively), then a correct dispatch of `plan` on every
// rank, and checks: every rank got communication_error containing every needle, and the group
// was still usable afterwards (the correct dispatch succeeded with intact content).
template <class Bad>
void expect_collective_failure(rank_t d, rank_t rpn, const rearrangement& plan, const vec& rows,
                               Bad&& bad, const std::vector<std::string>& needles) {
  const auto off = plan.src_offsets();
  const auto res = run_group<agreement_slot>(d, rpn, [&](communicator& comm, agreement_slot& slot) {
    try {
      bad(comm);
      slot.error = "ok";
    } catch (const communication_error& e) {
      slot.error = std::string("communication_error: ") + e.what();
    } catch (const std::exception& e) {
      slot.error = std::string("other: ") + e.what();
    }
    try {
      const auto mine = make_payload(comm.rank(), rows_of_rank(rows, off, comm.rank()), 4);
      const auto moved = orchmllm::dispatch(comm, plan, mine);
      slot.after_intact = same_payload(moved, expected_at(plan, rows, 4, comm.rank()));
    } catch (const std::exception& e) {
      slot.after = e.what();
    }
  });
  for (rank_t r = 0; r < d; ++r) {
    const auto& slot = res[static_cast<std::size_t>(r)];
    INFO("rank ", r, ": ", slot.error, "; afterwards: ", slot.after);
    CHECK(slot.error.rfind("communication_error: ", 0) == 0);
    for (const auto& n : needles) {
      INFO("expected to contain: ", n);
      CHECK(slot.error.find(n) != std::string::npos);
    }
    CHECK(slot.after.empty());
    CHECK(slot.after_intact);
  }
  // Every rank reports the same verdict (the text before "(seen on", if a backend adds it).
  for (rank_t r = 1; r < d; ++r) CHECK(res[static_cast<std::size_t>(r)].error == res[0].error);
}

}  // namespace orchmllm::test::dispatch_fixtures
