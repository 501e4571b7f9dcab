// Tests for include/orchmllm/comm/dispatch.hpp on the in-process backend (comm/local.hpp):
// transfers along prebuilt routes.
//
// `execute` reserves every scratch buffer before the exchange starts; along a prebuilt route one
// agreement per step, then one all-to-all(v) per hop and nothing else (counted), delivering the
// same bytes as the plan dispatches (span and payload overloads, with and without a mover,
// verify's extra collective).
//
// doctest macros are not thread-safe: rank functions only record results (one slot per rank)
// and every CHECK runs on the main thread after `run` returns.

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/local.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/counting_communicator.hpp"
#include "support/dispatch_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::route;
using orchmllm::topology;
using orchmllm::local::communicator;
using orchmllm::test::uniform;
using namespace orchmllm::test::dispatch_fixtures;  // support/dispatch_fixtures.hpp

}  // namespace

namespace {

// A local communicator that counts its collective calls, and a mover that records every
// scratch request with the count at that moment: `execute` must reserve all scratch before
// its agreement (a collective) and never grow a slot afterwards.
using counting_comm = orchmllm::test::counting_communicator<communicator>;
static_assert(orchmllm::communicator<counting_comm>);

struct recording_mover {
  const counting_comm& comm;
  orchmllm::host_mover inner;
  std::vector<std::array<std::int64_t, 3>> requests;  // slot, bytes, collective calls so far
  std::byte* scratch(int slot, std::int64_t bytes) {
    requests.push_back({slot, bytes, comm.total()});
    return inner.scratch(slot, bytes);
  }
  void gather(const std::byte* in, std::byte* out, const orchmllm::detail::segment_list& s) {
    inner.gather(in, out, s);
  }
};

}  // namespace

TEST_CASE("execute: every scratch buffer is reserved before the exchange starts") {
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 12; ++trial) {
    const auto c = random_case::make(rng, 2);
    const rank_t d = c.d, rpn = c.rpn;
    const auto& plan = c.plan;
    const auto& rows = c.rows;
    const auto off = plan.src_offsets();
    for (const auto s : all_schedules) {
      INFO("trial ", trial, ", d = ", d, ", rpn = ", rpn, ", ", std::string(to_string(s)));
      struct slot_t {
        std::string error;
        std::vector<std::array<std::int64_t, 3>> requests;
        std::int64_t calls_before = 0;
        bool intact = false;
      };
      const auto res = run_group<slot_t>(d, rpn, [&](communicator& comm, slot_t& slot) {
        const auto mine = make_payload(comm.rank(), rows_of_rank(rows, off, comm.rank()), 3);
        vec b;
        for (std::size_t j = 0; j < mine.rows.size(); ++j) b.push_back(mine.item_bytes(j));
        const route r = orchmllm::build_route(comm, plan, b, {.sched = s});
        counting_comm counted{comm};
        recording_mover mover{counted, {}, {}};
        std::vector<std::byte> out(static_cast<std::size_t>(r.output_bytes()));
        orchmllm::execute(counted, r, mine.data.data(), out.data(), mover);
        slot.requests = mover.requests;
        slot.intact = out == expected_at(plan, rows, 3, comm.rank()).data;
      });
      for (const auto& slot : res) {
        REQUIRE(slot.error.empty());
        CHECK(slot.intact);
        std::int64_t reserved[2] = {0, 0};
        for (const auto& q : slot.requests) {
          if (q[2] == 0) {  // before the agreement
            reserved[q[0]] = std::max(reserved[q[0]], q[1]);
          } else {
            INFO("slot ", q[0], ": ", q[1], " bytes after the agreement, ", reserved[q[0]],
                 " reserved");
            CHECK(q[1] <= reserved[q[0]]);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dispatch along prebuilt routes: one agreement per step, then only the hops' all-to-alls.

TEST_CASE("dispatch along a prebuilt route: one all-to-all(v) per hop and nothing else") {
  std::mt19937_64 rng(4242);
  int hops_seen[4] = {0, 0, 0, 0};
  for (int trial = 0; trial < 16; ++trial) {
    const auto c = random_case::make(rng, 1);
    const rank_t d = c.d, rpn = c.rpn;
    const auto& plan = c.plan;
    const auto& rows = c.rows;
    const auto off = plan.src_offsets();
    const std::int64_t row_bytes = uniform(rng, 1, 9);
    vec bytes(rows.size());
    for (std::size_t g = 0; g < rows.size(); ++g) bytes[g] = rows[g] * row_bytes;
    const auto back_bytes = orchmllm::apply(plan, bytes);
    const auto inverse = plan.inverse();
    const auto topo = topology::uniform(d, rpn);  // the local backend's nodes
    for (const auto s : all_schedules) {
      INFO("trial ", trial, ", d = ", d, ", rpn = ", rpn, ", ", std::string(to_string(s)));
      struct slot_t {
        std::string error;
        std::int64_t agreement_calls = -1;
        std::int64_t hops = -1;
        std::int64_t forward_calls = -1, forward_all_to_allvs = -1;
        std::int64_t back_calls = -1, verified_calls = -1;
        bool forward_intact = false, back_intact = false, span_intact = false;
        bool scratch_reserved = true;
      };
      const auto res = run_group<slot_t>(d, rpn, [&](communicator& comm, slot_t& slot) {
        const auto me = comm.rank();
        const auto mine = make_payload(me, rows_of_rank(rows, off, me), row_bytes);
        // Built from shared data, no communication; one agreement for both routes.
        const std::vector<route> routes{route::build(plan, bytes, topo, me, s),
                                        route::build(inverse, back_bytes, topo, me, s)};
        counting_comm counted{comm};
        recording_mover mover{counted, {}, {}};
        orchmllm::agree_on_routes(counted, std::span<const route>(routes), mover);
        slot.agreement_calls = counted.total();
        const auto reserved_at = mover.requests.size();

        counted.reset();
        std::vector<std::byte> out(static_cast<std::size_t>(routes[0].output_bytes()));
        orchmllm::dispatch(counted, routes[0], std::span<const std::byte>(mine.data),
                           std::span<std::byte>(out), mover);
        slot.hops = static_cast<std::int64_t>(routes[0].hops().size());
        slot.forward_calls = counted.total();
        slot.forward_all_to_allvs = counted.all_to_allvs;
        const auto want = expected_at(plan, rows, row_bytes, me);
        slot.span_intact = out == want.data;
        // No scratch request after the agreement asks for more than it reserved.
        std::int64_t reserved[2] = {0, 0};
        for (std::size_t i = 0; i < mover.requests.size(); ++i) {
          const auto& q = mover.requests[i];
          if (i < reserved_at)
            reserved[q[0]] = std::max(reserved[q[0]], q[1]);
          else if (q[1] > reserved[q[0]])
            slot.scratch_reserved = false;
        }

        // Without a mover: the call's own host mover (host memory), the same bytes.
        std::vector<std::byte> out2(out.size());
        orchmllm::dispatch(comm, routes[0], std::span<const std::byte>(mine.data),
                           std::span<std::byte>(out2));
        slot.span_intact = slot.span_intact && out2 == want.data;

        // The host payload overload: rows from the route, storage reused, back again.
        counted.reset();
        const auto moved = orchmllm::dispatch(counted, routes[0], mine);
        slot.forward_intact = same_payload(moved, want);
        const auto back = orchmllm::dispatch(counted, routes[1], moved);
        slot.back_calls = counted.total();
        slot.back_intact = same_payload(back, mine);
        // verify: the per-transfer agreement back on, one small collective more.
        counted.reset();
        (void)orchmllm::dispatch(counted, routes[0], mine, {.verify = true});
        slot.verified_calls = counted.total();
      });
      for (const auto& slot : res) {
        REQUIRE(slot.error.empty());
        CHECK(slot.agreement_calls == 1);
        CHECK(slot.forward_calls == slot.hops);
        CHECK(slot.forward_all_to_allvs == slot.hops);
        CHECK(slot.verified_calls == slot.hops + 1);
        CHECK(slot.back_calls >= 0);
        CHECK(slot.span_intact);
        CHECK(slot.forward_intact);
        CHECK(slot.back_intact);
        CHECK(slot.scratch_reserved);
        ++hops_seen[std::clamp<std::int64_t>(slot.hops, 0, 3)];
      }
    }
  }
  // The trials cover routes of 0, 1 and 3 hops.
  CHECK(hops_seen[0] > 0);
  CHECK(hops_seen[1] > 0);
  CHECK(hops_seen[3] > 0);
}
