// Tests for include/orchmllm/comm/metadata.hpp on the in-process backend: gather_layout gives
// every rank the layout built directly from all ranks' lists (1..16 ranks, several node shapes,
// empty ranks, with and without byte sizes), and malformed or disagreeing input fails with
// communication_error on every rank, after which the group is still usable; through a
// projection of the trainer's own items it equals make_layout.
//
// doctest macros are not thread-safe: rank functions only record results; CHECKs run on the
// main thread after `run` returns.

#include "orchmllm/comm/metadata.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "orchmllm/comm/local.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/projection.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::batch_layout;
using orchmllm::communication_error;
using orchmllm::rank_t;
using orchmllm::local::communicator;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;
using namespace std::chrono_literals;

vec non_negative(vec v) {
  for (auto& x : v) x = std::max<std::int64_t>(x, 0);
  return v;
}

struct slot_t {
  std::optional<batch_layout> layout;
  std::string error;
  std::optional<batch_layout> after;  // a correct gather after a failing one
};

// Runs gather_layout on d ranks with rank r's lengths[r] / bytes[r] (bytes empty: none given),
// then, when `retry` is set, a second gather of the lengths alone with negative values replaced
// by 0 (a correct call).
std::vector<slot_t> gather_all(const std::vector<vec>& lengths, const std::vector<vec>& bytes,
                               rank_t rpn, bool retry = false) {
  const auto d = static_cast<rank_t>(lengths.size());
  std::vector<slot_t> out(lengths.size());
  orchmllm::local::run(d,
                       [&](communicator& comm) {
                         const auto r = static_cast<std::size_t>(comm.rank());
                         auto& slot = out[r];
                         try {
                           slot.layout = orchmllm::gather_layout(comm, lengths[r],
                                                                 bytes.empty() ? vec{} : bytes[r]);
                         } catch (const communication_error& e) {
                           slot.error = std::string("communication_error: ") + e.what();
                         } catch (const std::exception& e) {
                           slot.error = std::string("other: ") + e.what();
                         }
                         if (retry)
                           slot.after = orchmllm::gather_layout(comm, non_negative(lengths[r]));
                       },
                       {.ranks_per_node = rpn, .timeout = 60s});
  return out;
}

bool same_layout(const batch_layout& a, const batch_layout& b) {
  auto eq = [](auto x, auto y) { return std::equal(x.begin(), x.end(), y.begin(), y.end()); };
  return a.num_ranks() == b.num_ranks() && eq(a.offsets(), b.offsets()) &&
         eq(a.lengths(), b.lengths()) && eq(a.explicit_bytes(), b.explicit_bytes()) &&
         a.has_bytes() == b.has_bytes();
}

void expect_failure_everywhere(const std::vector<vec>& lengths, const std::vector<vec>& bytes,
                               const std::vector<std::string>& needles) {
  const auto res = gather_all(lengths, bytes, 2, true);
  std::vector<vec> fixed;
  for (const auto& l : lengths) fixed.push_back(non_negative(l));
  const auto direct = batch_layout::from_ranks(fixed);
  for (std::size_t r = 0; r < res.size(); ++r) {
    INFO("rank ", r, ": ", res[r].error);
    CHECK_FALSE(res[r].layout.has_value());
    CHECK(res[r].error.rfind("communication_error: ", 0) == 0);
    for (const auto& n : needles) {
      INFO("expected to contain: ", n);
      CHECK(res[r].error.find(n) != std::string::npos);
    }
    REQUIRE(res[r].after.has_value());
    CHECK(same_layout(*res[r].after, direct));
  }
}

}  // namespace

TEST_CASE("gather_layout equals the layout built directly") {
  std::mt19937_64 rng(5);
  for (rank_t d = 1; d <= 16; ++d) {
    for (const rank_t rpn : {0, 2, 3, 4}) {
      std::vector<vec> lengths(static_cast<std::size_t>(d)), bytes(static_cast<std::size_t>(d));
      for (rank_t r = 0; r < d; ++r) {
        const auto n = uniform(rng, 0, 3) == 0 ? 0 : uniform(rng, 1, 7);
        for (std::int64_t i = 0; i < n; ++i) {
          lengths[static_cast<std::size_t>(r)].push_back(uniform(rng, 0, 1000));
          // Byte sizes above 2^32: 64-bit values travel intact.
          bytes[static_cast<std::size_t>(r)].push_back(uniform(rng, 0, std::int64_t{1} << 40));
        }
      }
      INFO("d = ", d, ", rpn = ", rpn);
      for (const bool with_bytes : {false, true}) {
        INFO("with bytes: ", with_bytes);
        const auto direct = with_bytes ? batch_layout::from_ranks(lengths, bytes)
                                       : batch_layout::from_ranks(lengths);
        const auto res = gather_all(lengths, with_bytes ? bytes : std::vector<vec>{}, rpn);
        for (rank_t r = 0; r < d; ++r) {
          const auto& slot = res[static_cast<std::size_t>(r)];
          INFO("rank ", r, ": ", slot.error);
          REQUIRE(slot.layout.has_value());
          CHECK(same_layout(*slot.layout, direct));
        }
      }
    }
  }
}

TEST_CASE("gather_layout: empty ranks and empty groups") {
  // Ranks without items give byte sizes for none of them: they follow the ranks that have items.
  const std::vector<vec> lengths{{}, {4, 5}, {}, {6}};
  const std::vector<vec> bytes{{}, {40, 50}, {}, {60}};
  const auto res = gather_all(lengths, bytes, 2);
  for (const auto& slot : res) {
    INFO(slot.error);
    REQUIRE(slot.layout.has_value());
    CHECK(same_layout(*slot.layout, batch_layout::from_ranks(lengths, bytes)));
    CHECK(slot.layout->has_bytes());
  }
  // Nobody holds anything.
  const auto none = gather_all(std::vector<vec>(5), {}, 0);
  for (const auto& slot : none) {
    REQUIRE(slot.layout.has_value());
    CHECK(slot.layout->num_ranks() == 5);
    CHECK(slot.layout->num_items() == 0);
  }
}

TEST_CASE("gather_layout: malformed or disagreeing input fails on every rank") {
  expect_failure_everywhere({{1, 2}, {3}, {4, 5, 6}}, {{10, 20}, {30, 31}, {40, 50, 60}},
                            {"rank 1 gave payload bytes for another number of items"});
  expect_failure_everywhere({{1, 2}, {3}, {4, -5, 6}}, {}, {"rank 2 gave a negative"});
  expect_failure_everywhere({{1, 2}, {3}, {4, 5, 6}}, {{10, 20}, {-30}, {40, 50, 60}},
                            {"rank 1 gave a negative"});
  // Rank 2 has items but gives no byte sizes while rank 0 does.
  expect_failure_everywhere({{1, 2}, {3}, {4, 5, 6}}, {{10, 20}, {30}, {}},
                            {"disagree on whether payload bytes are given", "rank 2"});
}

TEST_CASE("gather_layout through a projection equals make_layout of every rank's items") {
  struct clip {
    std::int64_t frames;
    std::int64_t bytes;
  };
  std::mt19937_64 rng(17);
  for (rank_t d = 1; d <= 6; ++d) {
    std::vector<std::vector<clip>> items(static_cast<std::size_t>(d));
    for (auto& r : items)
      for (auto n = uniform(rng, 0, 4); n > 0; --n)
        r.push_back({uniform(rng, 0, 3000), uniform(rng, 0, 1 << 20)});
    const auto by_length = orchmllm::make_layout(items, &clip::frames);
    const auto sized = [](const clip& c) { return orchmllm::item_size{c.frames, c.bytes}; };
    const auto by_size = orchmllm::make_layout(items, sized);
    std::vector<std::optional<batch_layout>> lengths_only(items.size()), with_bytes(items.size());
    orchmllm::local::run(d, [&](communicator& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      lengths_only[r] = orchmllm::gather_layout(comm, items[r], &clip::frames);
      with_bytes[r] = orchmllm::gather_layout(comm, items[r], sized);
    });
    for (std::size_t r = 0; r < items.size(); ++r) {
      INFO("d = ", d, ", rank ", r);
      REQUIRE(lengths_only[r].has_value());
      REQUIRE(with_bytes[r].has_value());
      CHECK(same_layout(*lengths_only[r], by_length));
      CHECK(same_layout(*with_bytes[r], by_size));
    }
  }
}

TEST_CASE("gather_topology: the communicator's nodes, the same topology on every rank") {
  for (const rank_t rpn : {0, 1, 2, 3}) {
    const rank_t d = 7;
    std::vector<std::optional<orchmllm::topology>> got(static_cast<std::size_t>(d));
    const orchmllm::link_params links{.inter_bandwidth = 25e9};
    orchmllm::local::run(d,
                         [&](communicator& comm) {
                           got[static_cast<std::size_t>(comm.rank())] =
                               orchmllm::gather_topology(comm, links);
                         },
                         {.ranks_per_node = rpn, .timeout = 60s});
    const auto want = orchmllm::topology::uniform(d, rpn, links);
    for (const auto& t : got) {
      REQUIRE(t.has_value());
      CHECK(*t == want);
      CHECK(orchmllm::fingerprint(*t) == orchmllm::fingerprint(want));
    }
  }
  // The fingerprint sees the node map and the link figures.
  const auto a = orchmllm::topology::uniform(8, 4);
  CHECK(orchmllm::fingerprint(a) != orchmllm::fingerprint(orchmllm::topology::uniform(8, 2)));
  auto b = a;
  b.links.inter_latency = 11e-6;
  CHECK(orchmllm::fingerprint(a) != orchmllm::fingerprint(b));
}
