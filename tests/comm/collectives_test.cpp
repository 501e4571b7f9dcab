// Tests for include/orchmllm/comm/collectives.hpp on the in-process backend: the typed
// all_gather (one value, a fixed-size span), all_gatherv (known counts and exchanged counts,
// empty ranks) against the values each rank passed, on 1..7 ranks; bad arguments raise
// invalid_argument_error before anything is sent; exchange_checked raises the same error on
// every rank, after which the group is still usable.
//
// doctest macros are not thread-safe: rank functions only record results; CHECKs run on the
// main thread after `run` returns.

#include "orchmllm/comm/collectives.hpp"

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "orchmllm/comm/local.hpp"
#include "orchmllm/core/error.hpp"

namespace {

using orchmllm::rank_t;
using orchmllm::local::communicator;
using namespace std::chrono_literals;

struct record {
  std::int32_t rank;
  double weight;  // padding between the fields: only the value matters
  std::int64_t items;
  friend bool operator==(const record&, const record&) = default;
};

static_assert(orchmllm::wire_value<record>);
static_assert(orchmllm::wire_value<std::array<std::int64_t, 4>>);
static_assert(!orchmllm::wire_value<int*>);
static_assert(!orchmllm::wire_value<std::vector<int>>);
static_assert(!orchmllm::wire_value<std::string>);

// Rank r's values for the ragged gathers: r values (rank 0 none), value = 100·r + i.
std::vector<std::int64_t> values_of(rank_t r) {
  std::vector<std::int64_t> v;
  for (rank_t i = 0; i < r; ++i) v.push_back(100 * r + i);
  return v;
}

}  // namespace

TEST_CASE("collectives: all_gather and all_gatherv deliver every rank's values in rank order") {
  for (rank_t d = 1; d <= 7; ++d) {
    CAPTURE(d);
    struct result {
      std::vector<record> records;
      std::vector<std::int32_t> pairs;
      orchmllm::gathered_values<std::int64_t> exchanged, known;
    };
    std::vector<result> out(static_cast<std::size_t>(d));
    orchmllm::local::run(
        d,
        [&](communicator& comm) {
          const rank_t r = comm.rank();
          auto& o = out[static_cast<std::size_t>(r)];
          o.records = orchmllm::all_gather(comm, record{r, 0.5 * r, 3LL * r});
          const std::array<std::int32_t, 2> pair{r, -r};
          o.pairs = orchmllm::all_gather(comm, std::span<const std::int32_t>(pair));
          const auto mine = values_of(r);
          o.exchanged = orchmllm::all_gatherv(comm, std::span<const std::int64_t>(mine));
          std::vector<std::int64_t> counts;
          for (rank_t q = 0; q < comm.size(); ++q) counts.push_back(q);
          o.known = orchmllm::all_gatherv(comm, std::span<const std::int64_t>(mine),
                                          std::span<const std::int64_t>(counts));
        },
        {.ranks_per_node = 2, .timeout = 30s});
    for (const auto& o : out) {
      REQUIRE(o.records.size() == static_cast<std::size_t>(d));
      REQUIRE(o.pairs.size() == 2 * static_cast<std::size_t>(d));
      for (rank_t q = 0; q < d; ++q) {
        CHECK(o.records[static_cast<std::size_t>(q)] == record{q, 0.5 * q, 3LL * q});
        CHECK(o.pairs[2 * static_cast<std::size_t>(q)] == q);
        CHECK(o.pairs[2 * static_cast<std::size_t>(q) + 1] == -q);
        const auto expect = values_of(q);
        const auto a = o.exchanged.of(q);
        const auto b = o.known.of(q);
        CHECK(std::vector<std::int64_t>(a.begin(), a.end()) == expect);
        CHECK(std::vector<std::int64_t>(b.begin(), b.end()) == expect);
      }
      CHECK(o.exchanged.offsets == o.known.offsets);
      CHECK(o.exchanged.values.size() == static_cast<std::size_t>(d * (d - 1) / 2));
    }
  }
}

TEST_CASE("collectives: wrong counts are invalid_argument_error before anything is sent") {
  std::vector<std::string> errors(3);
  std::vector<int> after(3, 0);
  orchmllm::local::run(3,
                       [&](communicator& comm) {
                         const auto r = static_cast<std::size_t>(comm.rank());
                         const std::vector<std::int64_t> mine{1, 2};
                         // Every rank passes the same wrong arguments, so every rank throws and
                         // none waits.
                         try {
                           const std::vector<std::int64_t> two{2, 2};
                           (void)orchmllm::all_gatherv(comm, std::span<const std::int64_t>(mine),
                                                       std::span<const std::int64_t>(two));
                         } catch (const orchmllm::invalid_argument_error& e) {
                           errors[r] += e.what();
                         }
                         try {
                           const std::vector<std::int64_t> wrong{1, 1, 1};
                           (void)orchmllm::all_gatherv(comm, std::span<const std::int64_t>(mine),
                                                       std::span<const std::int64_t>(wrong));
                         } catch (const orchmllm::invalid_argument_error& e) {
                           errors[r] += e.what();
                         }
                         try {
                           const std::vector<std::int64_t> negative{2, -1, 2};
                           (void)orchmllm::all_gatherv(comm, std::span<const std::int64_t>(mine),
                                                       std::span<const std::int64_t>(negative));
                         } catch (const orchmllm::invalid_argument_error& e) {
                           errors[r] += e.what();
                         }
                         after[r] =
                             static_cast<int>(orchmllm::all_gather(comm, comm.rank()).size());
                       },
                       {.timeout = 30s});
  for (std::size_t r = 0; r < 3; ++r) {
    CHECK(errors[r].find("2 counts for a group of 3") != std::string::npos);
    CHECK(errors[r].find("passes 2 values but counts say 1") != std::string::npos);
    CHECK(errors[r].find("count -1 of rank 1") != std::string::npos);
    CHECK(after[r] == 3);
  }
}

TEST_CASE("collectives: exchange_checked raises the same error on every rank") {
  const rank_t d = 4;
  std::vector<std::string> errors(static_cast<std::size_t>(d));
  std::vector<std::vector<std::int64_t>> passed(static_cast<std::size_t>(d));
  orchmllm::local::run(d,
                       [&](communicator& comm) {
                         const auto r = static_cast<std::size_t>(comm.rank());
                         auto check = [](std::span<const std::int64_t> all) {
                           for (std::size_t q = 0; q < all.size(); ++q)
                             ORCHMLLM_REQUIRE(all[q] >= 0, orchmllm::communication_error, "rank ",
                                              q, " reports fault ", all[q]);
                         };
                         // Rank 2 alone has a local fault: every rank raises its error.
                         try {
                           (void)orchmllm::exchange_checked(
                               comm, r == 2 ? std::int64_t{-7} : std::int64_t{1}, check);
                         } catch (const orchmllm::communication_error& e) {
                           errors[r] = e.what();
                         }
                         // The group is still usable, and a passing check returns every record.
                         passed[r] = orchmllm::exchange_checked(
                             comm, static_cast<std::int64_t>(10 * r), check);
                       },
                       {.timeout = 30s});
  for (std::size_t r = 0; r < errors.size(); ++r) {
    CHECK(errors[r] == errors[0]);
    CHECK(errors[r].find("rank 2 reports fault -7") != std::string::npos);
    CHECK(passed[r] == std::vector<std::int64_t>{0, 10, 20, 30});
  }
}
