// Tests for include/orchmllm/comm/local.hpp: the in-process communicator backend.
//  - the conformance suite (tests/support/communicator_conformance.hpp) for 1..16 ranks and
//    several node shapes, and proof that the suite fails on faulty communicators;
//  - failure propagation: a throwing rank, a rank that returns early, a timeout;
//  - disagreements that must fail on every rank (pairwise counts, sizes, collective kinds) and
//    local argument checks; invalid `run` arguments.
// doctest macros are not thread-safe: rank functions only record outcomes (one slot per rank),
// and every CHECK runs on the main thread after `run` returns.

#include "orchmllm/comm/local.hpp"

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/communicator_conformance.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::communication_error;
using orchmllm::invalid_argument_error;
using orchmllm::rank_t;
using orchmllm::local::communicator;
using orchmllm::local::run;
using orchmllm::local::run_options;
using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// What a call did, as text: "ok", or the exception kind followed by its message.
template <class F>
std::string outcome_of(F&& f) {
  try {
    f();
    return "ok";
  } catch (const communication_error& e) {
    return std::string("communication_error: ") + e.what();
  } catch (const invalid_argument_error& e) {
    return std::string("invalid_argument_error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("other: ") + e.what();
  }
}

// Checks that outcome `o` (of rank r) starts with `kind` and contains every needle.
void check_outcome(const std::string& o, rank_t r, const std::string& kind,
                   const std::vector<std::string>& needles) {
  INFO("rank ", r, ": ", o);
  CHECK(o.rfind(kind, 0) == 0);
  for (const auto& n : needles) {
    INFO("expected to contain: ", n);
    CHECK(contains(o, n));
  }
}

std::span<const std::byte> bytes_of(const std::vector<std::int64_t>& v) {
  return std::as_bytes(std::span(v));
}

// All ranks send `each` bytes to every peer; returns the recv buffer.
std::vector<std::byte> uniform_exchange(communicator& c, std::int64_t each) {
  const auto n = static_cast<std::size_t>(c.size());
  std::vector<std::int64_t> counts(n, each), displs(n);
  for (std::size_t p = 0; p < n; ++p) displs[p] = static_cast<std::int64_t>(p) * each;
  std::vector<std::byte> send(n * static_cast<std::size_t>(each), std::byte{0x11});
  std::vector<std::byte> recv(send.size());
  c.all_to_allv(send.data(), counts, displs, recv.data(), counts, displs);
  return recv;
}

// A communicator wrapper that misbehaves on purpose, to prove the suite can fail.
enum class fault { corrupt_all_to_allv, wrong_local_rank, drop_all_gather_block };

class faulty {
 public:
  static constexpr orchmllm::memory_kind payload_memory = orchmllm::memory_kind::host;
  faulty(communicator& c, fault f) : c_(&c), f_(f) {}
  [[nodiscard]] rank_t rank() const { return c_->rank(); }
  [[nodiscard]] rank_t size() const { return c_->size(); }
  [[nodiscard]] rank_t node() const { return c_->node(); }
  [[nodiscard]] rank_t num_nodes() const { return c_->num_nodes(); }
  [[nodiscard]] rank_t local_rank() const {
    return f_ == fault::wrong_local_rank && rank() == 1 ? 5 : c_->local_rank();
  }
  [[nodiscard]] rank_t local_size() const { return c_->local_size(); }
  void barrier() { c_->barrier(); }
  void all_gather(const std::byte* s, std::int64_t b, std::byte* r) {
    c_->all_gather(s, b, r);
    // Rank 2 loses the last byte of rank 0's block, for the 7-byte case only.
    if (f_ == fault::drop_all_gather_block && rank() == 2 && b == 7) r[6] ^= std::byte{0x40};
  }
  void all_gatherv(const std::byte* s, std::int64_t b, std::byte* r,
                   std::span<const std::int64_t> c, std::span<const std::int64_t> d) {
    c_->all_gatherv(s, b, r, c, d);
  }
  void all_to_allv(const std::byte* s, std::span<const std::int64_t> sc,
                   std::span<const std::int64_t> sd, std::byte* r, std::span<const std::int64_t> rc,
                   std::span<const std::int64_t> rd) {
    c_->all_to_allv(s, sc, sd, r, rc, rd);
    if (f_ != fault::corrupt_all_to_allv || rank() != 1) return;
    for (std::size_t p = 0; p < rc.size(); ++p) {
      if (rc[p] > 0) {
        r[rd[p] + rc[p] - 1] ^= std::byte{1};  // last byte of the first non-empty block
        return;
      }
    }
  }

 private:
  communicator* c_;
  fault f_;
};
static_assert(orchmllm::communicator<faulty>);

}  // namespace

TEST_CASE("local: node shape from ranks_per_node") {
  struct shape {
    rank_t node, num_nodes, local_rank, local_size;
  };
  auto shapes_of = [](rank_t ranks, rank_t rpn) {
    std::vector<shape> out(static_cast<std::size_t>(ranks));
    run(ranks,
        [&](communicator& c) {
          out[static_cast<std::size_t>(c.rank())] = {c.node(), c.num_nodes(), c.local_rank(),
                                                     c.local_size()};
        },
        {.ranks_per_node = rpn});
    return out;
  };
  // 8 ranks, 3 per node: nodes {0,1,2} {3,4,5} {6,7}.
  const auto s = shapes_of(8, 3);
  const rank_t node[] = {0, 0, 0, 1, 1, 1, 2, 2};
  const rank_t local[] = {0, 1, 2, 0, 1, 2, 0, 1};
  const rank_t local_size[] = {3, 3, 3, 3, 3, 3, 2, 2};
  for (std::size_t r = 0; r < 8; ++r) {
    INFO("rank ", r);
    CHECK(s[r].node == node[r]);
    CHECK(s[r].num_nodes == 3);
    CHECK(s[r].local_rank == local[r]);
    CHECK(s[r].local_size == local_size[r]);
  }
  for (const rank_t rpn : {0, 5, 100}) {  // 0 and >= ranks: one node
    for (const auto& x : shapes_of(5, rpn)) {
      CHECK(x.node == 0);
      CHECK(x.num_nodes == 1);
      CHECK(x.local_size == 5);
    }
  }
  const auto ones = shapes_of(4, 1);
  for (std::size_t r = 0; r < 4; ++r) {
    CHECK(ones[r].node == static_cast<rank_t>(r));
    CHECK(ones[r].num_nodes == 4);
    CHECK(ones[r].local_rank == 0);
    CHECK(ones[r].local_size == 1);
  }
}

TEST_CASE("local: conformance suite") {
  for (const rank_t ranks : {1, 2, 3, 8, 16}) {
    for (const rank_t rpn : {0, 1, 3, 4}) {
      INFO("ranks = ", ranks, ", ranks_per_node = ", rpn);
      std::vector<std::string> errors(static_cast<std::size_t>(ranks));
      run(ranks,
          [&](communicator& c) {
            errors[static_cast<std::size_t>(c.rank())] =
                outcome_of([&] { orchmllm::test::check_communicator_conformance(c); });
          },
          {.ranks_per_node = rpn});
      for (rank_t r = 0; r < ranks; ++r) {
        INFO("rank ", r);
        CHECK(errors[static_cast<std::size_t>(r)] == "ok");
      }
    }
  }
}

TEST_CASE("local: conformance suite with a timeout that does not fire") {
  std::vector<std::string> errors(4);
  run(4,
      [&](communicator& c) {
        errors[static_cast<std::size_t>(c.rank())] =
            outcome_of([&] { orchmllm::test::check_communicator_conformance(c); });
      },
      {.ranks_per_node = 2, .timeout = 20s});
  for (const auto& e : errors) CHECK(e == "ok");
}

TEST_CASE("local: the conformance suite fails on faulty communicators, on every rank") {
  struct expectation {
    fault f;
    std::vector<std::string> needles;
  };
  const expectation cases[] = {
      {fault::corrupt_all_to_allv, {"conformance: all_to_allv random matrix: rank 1: block"}},
      // Every rank sees rank 1's bad local rank in the gathered table, so rank 0 reports it.
      {fault::wrong_local_rank, {"conformance: identity: rank 0:", "local_rank 5"}},
      {fault::drop_all_gather_block,
       {"conformance: all_gather 7 bytes: rank 2: block of rank 0 byte 6"}},
  };
  for (const auto& x : cases) {
    INFO("fault ", static_cast<int>(x.f));
    constexpr rank_t ranks = 4;
    std::vector<std::string> errors(ranks);
    run(ranks,
        [&](communicator& c) {
          faulty w(c, x.f);
          errors[static_cast<std::size_t>(c.rank())] =
              outcome_of([&] { orchmllm::test::check_communicator_conformance(w); });
        },
        {.ranks_per_node = 2});
    for (rank_t r = 0; r < ranks; ++r) {
      check_outcome(errors[static_cast<std::size_t>(r)], r, "other: conformance: ", x.needles);
    }
  }
}

TEST_CASE("local: a throwing rank aborts the group and run rethrows its exception") {
  constexpr rank_t ranks = 5;
  // where: 0 = others blocked in barrier, 1 = others blocked in all_to_allv,
  //        2 = others enter the barrier after the failure.
  for (int where = 0; where < 3; ++where) {
    INFO("where = ", where);
    std::vector<std::string> outcomes(ranks);
    std::string rethrown;
    try {
      run(ranks, [&](communicator& c) {
        auto& out = outcomes[static_cast<std::size_t>(c.rank())];
        if (c.rank() == 2) {
          if (where != 2) std::this_thread::sleep_for(30ms);
          throw std::logic_error("boom on 2");
        }
        if (where == 2) std::this_thread::sleep_for(30ms);
        out = outcome_of([&] {
          if (where == 1) {
            (void)uniform_exchange(c, 64);
          } else {
            c.barrier();
          }
        });
        if (out != "ok") throw communication_error("secondary");  // must not win
      });
    } catch (const std::logic_error& e) {
      rethrown = e.what();
    } catch (const std::exception& e) {
      rethrown = std::string("wrong type: ") + e.what();
    }
    CHECK(rethrown == "boom on 2");
    for (rank_t r = 0; r < ranks; ++r) {
      if (r == 2) continue;
      check_outcome(outcomes[static_cast<std::size_t>(r)], r, "communication_error",
                    {"rank 2 failed: boom on 2", "group aborted"});
    }
  }
}

TEST_CASE("local: run rethrows the first failure, whatever its type") {
  SUBCASE("the original beats the secondary failures it causes") {
    std::string rethrown;
    try {
      run(3, [](communicator& c) {
        if (c.rank() == 0) throw std::runtime_error("first");
        try {
          c.barrier();
        } catch (const communication_error&) {
          throw std::logic_error("second");
        }
      });
    } catch (const std::runtime_error& e) {
      rethrown = e.what();
    } catch (const std::logic_error& e) {
      rethrown = std::string("wrong: ") + e.what();
    }
    CHECK(rethrown == "first");
  }
  SUBCASE("a non-standard exception") {
    std::string seen;
    int value = 0;
    try {
      run(2, [&](communicator& c) {
        if (c.rank() == 1) throw 42;
        seen = outcome_of([&] { c.barrier(); });
      });
    } catch (int v) {
      value = v;
    }
    CHECK(value == 42);
    check_outcome(seen, 0, "communication_error", {"rank 1 failed: unknown exception"});
  }
}

TEST_CASE("local: a rank that returns early has left the group") {
  constexpr rank_t ranks = 4;
  SUBCASE("before any collective") {
    std::vector<std::string> outcomes(ranks, "not run");
    run(ranks, [&](communicator& c) {
      if (c.rank() == 3) return;
      outcomes[static_cast<std::size_t>(c.rank())] = outcome_of([&] { c.barrier(); });
    });
    for (rank_t r = 0; r < 3; ++r) {
      check_outcome(outcomes[static_cast<std::size_t>(r)], r, "communication_error",
                    {"rank 3 left the group"});
    }
  }
  SUBCASE("after one barrier; the error propagates out of run") {
    std::vector<std::string> first(ranks), second(ranks);
    std::string rethrown;
    try {
      run(ranks, [&](communicator& c) {
        const auto me = static_cast<std::size_t>(c.rank());
        first[me] = outcome_of([&] { (void)uniform_exchange(c, 16); });
        if (c.rank() == 3) return;
        second[me] = outcome_of([&] { c.barrier(); });
        c.barrier();  // throws again: run must rethrow a communication_error
      });
    } catch (const communication_error& e) {
      rethrown = e.what();
    }
    CHECK(contains(rethrown, "rank 3 left the group"));
    for (rank_t r = 0; r < ranks; ++r) CHECK(first[static_cast<std::size_t>(r)] == "ok");
    for (rank_t r = 0; r < 3; ++r) {
      check_outcome(second[static_cast<std::size_t>(r)], r, "communication_error",
                    {"rank 3 left the group"});
    }
  }
}

TEST_CASE("local: mismatched pairwise counts fail on every rank and move nothing") {
  constexpr rank_t ranks = 4;
  std::vector<std::string> bad(ranks), after(ranks);
  std::vector<int> untouched(ranks, 0);
  run(ranks, [&](communicator& c) {
    const auto me = static_cast<std::size_t>(c.rank());
    std::vector<std::int64_t> send_counts(ranks, 8), recv_counts(ranks, 8), displs(ranks);
    std::iota(displs.begin(), displs.end(), std::int64_t{0});
    for (auto& d : displs) d *= 8;
    if (c.rank() == 1) send_counts[2] = 5;  // rank 2 expects 8 from rank 1
    std::vector<std::byte> send(8 * ranks, std::byte{0x22}), recv(8 * ranks, std::byte{0xee});
    bad[me] = outcome_of(
        [&] { c.all_to_allv(send.data(), send_counts, displs, recv.data(), recv_counts, displs); });
    untouched[me] = recv == std::vector<std::byte>(8 * ranks, std::byte{0xee});
    after[me] = outcome_of([&] { (void)uniform_exchange(c, 3); });
  });
  for (rank_t r = 0; r < ranks; ++r) {
    const auto i = static_cast<std::size_t>(r);
    check_outcome(bad[i], r, "communication_error",
                  {"rank 1 sends 5 bytes to rank 2 but rank 2 expects 8 bytes from rank 1"});
    CHECK(untouched[i] == 1);
    CHECK(after[i] == "ok");  // the group is still usable
  }
}

TEST_CASE("local: other disagreements fail on every rank, and the group stays usable") {
  constexpr rank_t ranks = 4;
  struct scenario {
    const char* name;
    void (*call)(communicator&);
    std::vector<std::string> needles;
  };
  const scenario scenarios[] = {
      {"all_gather sizes differ",
       [](communicator& c) {
         std::array<std::byte, 8> send{};
         std::array<std::byte, 8 * ranks> recv{};
         c.all_gather(send.data(), c.rank() == 2 ? 5 : 4, recv.data());
       },
       {"rank 0 contributes 4 bytes but rank 2 contributes 5"}},
      {"all_gatherv counts disagree",
       [](communicator& c) {
         std::vector<std::int64_t> counts{1, 2, 3, 4}, displs{0, 1, 3, 6};
         if (c.rank() == 0) counts[1] = 3;  // rank 1 contributes 2
         std::array<std::byte, 8> send{};
         std::array<std::byte, 16> recv{};
         c.all_gatherv(send.data(), c.rank() + 1, recv.data(), counts, displs);
       },
       {"rank 0 expects counts[1] = 3 bytes but rank 1 contributes 2"}},
      {"different collectives",
       [](communicator& c) {
         if (c.rank() == 1) {
           c.barrier();
         } else {
           std::int64_t x = 0;
           std::array<std::int64_t, ranks> all{};
           c.all_gather(reinterpret_cast<const std::byte*>(&x), 8,
                        reinterpret_cast<std::byte*>(all.data()));
         }
       },
       {"collective mismatch: rank 0 called all_gather but rank 1 called barrier"}},
  };
  for (const auto& s : scenarios) {
    INFO(s.name);
    std::vector<std::string> bad(ranks), after(ranks);
    run(ranks, [&](communicator& c) {
      const auto me = static_cast<std::size_t>(c.rank());
      bad[me] = outcome_of([&] { s.call(c); });
      after[me] = outcome_of([&] {
        c.barrier();
        (void)uniform_exchange(c, 5);
      });
    });
    for (rank_t r = 0; r < ranks; ++r) {
      check_outcome(bad[static_cast<std::size_t>(r)], r, "communication_error", s.needles);
      CHECK(after[static_cast<std::size_t>(r)] == "ok");
    }
  }
}

TEST_CASE(
    "local: invalid arguments on one rank: invalid_argument_error there, "
    "communication_error elsewhere") {
  constexpr rank_t ranks = 4;
  std::vector<std::string> bad(ranks), after(ranks);
  run(ranks, [&](communicator& c) {
    const auto me = static_cast<std::size_t>(c.rank());
    std::vector<std::int64_t> counts(ranks, 0), displs(ranks, 0);
    std::vector<std::int64_t> short_counts(ranks - 1, 0);
    const std::span<const std::int64_t> sc =
        c.rank() == 1 ? std::span<const std::int64_t>(short_counts) : counts;
    bad[me] = outcome_of([&] { c.all_to_allv(nullptr, sc, displs, nullptr, counts, displs); });
    after[me] = outcome_of([&] { (void)uniform_exchange(c, 2); });
  });
  check_outcome(bad[1], 1, "invalid_argument_error",
                {"send_counts has 3 entries, expected size() = 4"});
  for (rank_t r : {0, 2, 3}) {
    check_outcome(bad[static_cast<std::size_t>(r)], r, "communication_error",
                  {"all_to_allv: rank 1 passed invalid arguments"});
  }
  for (const auto& a : after) CHECK(a == "ok");
}

TEST_CASE("local: local argument checks name the value") {
  struct scenario {
    const char* name;
    void (*call)(communicator&);
    std::vector<std::string> needles;
  };
  // Two ranks; both make the same mistake.
  const scenario scenarios[] = {
      {"negative count",
       [](communicator& c) {
         std::vector<std::int64_t> counts{-1, 0}, displs{0, 0};
         std::array<std::byte, 4> buf{}, out{};
         c.all_to_allv(buf.data(), counts, displs, out.data(), counts, displs);
       },
       {"send_counts[0] = -1 < 0"}},
      {"negative displacement",
       [](communicator& c) {
         std::vector<std::int64_t> counts{0, 0}, displs{0, -7};
         std::array<std::byte, 4> buf{}, out{};
         c.all_to_allv(buf.data(), counts, displs, out.data(), counts, displs);
       },
       {"send_displs[1] = -7 < 0"}},
      {"displacement + count overflows",
       [](communicator& c) {
         const std::int64_t big = std::numeric_limits<std::int64_t>::max() - 1;
         std::vector<std::int64_t> counts{0, 2}, displs{0, big}, ok{0, 0};
         std::array<std::byte, 4> buf{}, out{};
         c.all_to_allv(buf.data(), counts, displs, out.data(), ok, ok);
       },
       {"overflows 64 bits"}},
      {"null send buffer",
       [](communicator& c) {
         std::vector<std::int64_t> counts{1, 1}, displs{0, 1};
         std::array<std::byte, 4> out{};
         c.all_to_allv(nullptr, counts, displs, out.data(), counts, displs);
       },
       {"null send buffer with 2 bytes to send"}},
      {"overlapping buffers",
       [](communicator& c) {
         std::vector<std::int64_t> counts{2, 2}, displs{0, 2};
         std::array<std::byte, 6> buf{};
         c.all_to_allv(buf.data(), counts, displs, buf.data() + 2, counts, displs);
       },
       {"send extent (4 bytes) overlaps recv extent (4 bytes)"}},
      {"wrong displs length",
       [](communicator& c) {
         std::vector<std::int64_t> counts{0, 0}, displs{0, 0, 0};
         c.all_to_allv(nullptr, counts, counts, nullptr, counts, displs);
       },
       {"recv_displs has 3 entries, expected size() = 2"}},
      {"all_gather negative bytes",
       [](communicator& c) { c.all_gather(nullptr, -3, nullptr); },
       {"all_gather: bytes = -3 is negative"}},
      {"all_gather overflow",
       [](communicator& c) {
         // volatile: a constant would let the compiler warn about the (unreachable) copy.
         volatile std::int64_t huge = std::numeric_limits<std::int64_t>::max() / 2 + 1;
         c.all_gather(nullptr, huge, nullptr);
       },
       {"does not fit in 64 bits"}},
      {"all_gatherv bytes differ from counts[rank]",
       [](communicator& c) {
         std::vector<std::int64_t> counts{1, 1}, displs{0, 1};
         std::array<std::byte, 4> buf{}, out{};
         c.all_gatherv(buf.data(), 2, out.data(), counts, displs);
       },
       {"bytes = 2 but counts[", "] = 1 (must be equal)"}},
  };
  for (const auto& s : scenarios) {
    INFO(s.name);
    std::vector<std::string> bad(2), after(2);
    run(2, [&](communicator& c) {
      const auto me = static_cast<std::size_t>(c.rank());
      bad[me] = outcome_of([&] { s.call(c); });
      after[me] = outcome_of([&] { (void)uniform_exchange(c, 9); });
    });
    for (rank_t r = 0; r < 2; ++r) {
      check_outcome(bad[static_cast<std::size_t>(r)], r, "invalid_argument_error", s.needles);
      CHECK(after[static_cast<std::size_t>(r)] == "ok");
    }
  }
}

TEST_CASE("local: null buffers are fine when nothing moves") {
  std::vector<std::string> outcomes(3);
  run(3, [&](communicator& c) {
    std::vector<std::int64_t> zeros(3, 0), displs{5, 0, 1000};  // any displacement when empty
    outcomes[static_cast<std::size_t>(c.rank())] = outcome_of([&] {
      c.all_to_allv(nullptr, zeros, displs, nullptr, zeros, displs);
      c.all_gather(nullptr, 0, nullptr);
      c.all_gatherv(nullptr, 0, nullptr, zeros, displs);
    });
  });
  for (const auto& o : outcomes) CHECK(o == "ok");
}

TEST_CASE("local: timeout") {
  constexpr rank_t ranks = 3;
  SUBCASE("a late rank makes every rank fail") {
    std::vector<std::string> outcomes(ranks);
    const auto t0 = std::chrono::steady_clock::now();
    run(ranks,
        [&](communicator& c) {
          if (c.rank() == 1) std::this_thread::sleep_for(300ms);
          outcomes[static_cast<std::size_t>(c.rank())] = outcome_of([&] { c.barrier(); });
        },
        {.timeout = 50ms});
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    for (rank_t r : {0, 2}) {
      check_outcome(outcomes[static_cast<std::size_t>(r)], r, "communication_error",
                    {"timed out after 50 ms in barrier waiting for rank(s)"});
    }
    check_outcome(outcomes[1], 1, "communication_error", {"group aborted", "timed out"});
    CHECK(elapsed < 5s);
  }
  SUBCASE("run rethrows the timeout") {
    std::string rethrown;
    try {
      run(ranks,
          [&](communicator& c) {
            if (c.rank() == 0) std::this_thread::sleep_for(200ms);
            (void)uniform_exchange(c, 4);
          },
          {.timeout = 20ms});
    } catch (const communication_error& e) {
      rethrown = e.what();
    }
    CHECK(contains(rethrown, "timed out after 20 ms in all_to_allv"));
  }
}

TEST_CASE("local: invalid run arguments") {
  using orchmllm::test::expect_invalid;
  auto noop = [](communicator&) {};
  expect_invalid([&] { run(0, noop); }, {"ranks = 0", "at least 1"});
  expect_invalid([&] { run(-3, noop); }, {"ranks = -3"});
  expect_invalid([&] { run(2, noop, {.ranks_per_node = -1}); }, {"ranks_per_node = -1"});
  expect_invalid([&] { run(2, noop, {.timeout = std::chrono::milliseconds(-5)}); },
                 {"timeout = -5 ms"});
}

TEST_CASE("local: all_gather and all_gatherv with large metadata, deterministic") {
  // 16 ranks each contributing its id 512 times; results identical across repeated runs.
  constexpr rank_t ranks = 16;
  auto once = [] {
    std::vector<std::vector<std::int64_t>> got(ranks);
    run(ranks,
        [&](communicator& c) {
          const std::vector<std::int64_t> mine(512, c.rank());
          std::vector<std::int64_t> all(512 * ranks);
          c.all_gather(bytes_of(mine).data(), 512 * 8, reinterpret_cast<std::byte*>(all.data()));
          got[static_cast<std::size_t>(c.rank())] = std::move(all);
        },
        {.ranks_per_node = 4});
    return got;
  };
  const auto a = once();
  const auto b = once();
  CHECK(a == b);
  for (rank_t r = 0; r < ranks; ++r) {
    for (std::size_t i = 0; i < a[0].size(); ++i) {
      if (a[static_cast<std::size_t>(r)][i] != static_cast<std::int64_t>(i / 512)) {
        FAIL("rank ", r, " entry ", i);
      }
    }
  }
}
