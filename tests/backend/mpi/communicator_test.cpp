// orchmllm::mpi::communicator under mpiexec (ctest backend.mpi.communicator, 8 ranks).
//
// Every test case is collective: all ranks run the same statements in the same order. Checks
// whose outcome may differ between ranks are agreed with MPI before anything branches on them,
// and CHECK (not REQUIRE) is used around collectives so one failing rank never strands the
// others.

#include "orchmllm/backend/mpi/communicator.hpp"

#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "support/communicator_conformance.hpp"

namespace {

using orchmllm::rank_t;
using orchmllm::mpi::communicator;
using options = communicator::options;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Runs the shared conformance suite; its failure (the same on every rank) becomes a CHECK.
void conformance(communicator& comm) {
  std::string failure;
  try {
    orchmllm::test::check_communicator_conformance(comm);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  CHECK_MESSAGE(failure.empty(), failure);
}

// What an operation threw on this rank: "" (nothing), "invalid", "communication" or "other".
template <class F>
std::string outcome_of(F&& f, std::string* message = nullptr) {
  try {
    f();
    return "";
  } catch (const orchmllm::invalid_argument_error& e) {
    if (message) *message = e.what();
    return "invalid";
  } catch (const orchmllm::communication_error& e) {
    if (message) *message = e.what();
    return "communication";
  } catch (const std::exception& e) {
    if (message) *message = e.what();
    return "other";
  }
}

// A small all_to_allv whose content is checked: proves the communicator still works.
bool small_exchange_works(communicator& comm, std::int64_t per_peer = 13) {
  const auto p = static_cast<std::size_t>(comm.size());
  const rank_t me = comm.rank();
  std::vector<std::int64_t> counts(p, per_peer);
  std::vector<std::int64_t> displs(p);
  for (std::size_t q = 0; q < p; ++q) displs[q] = static_cast<std::int64_t>(q) * per_peer;
  std::vector<std::byte> send(p * static_cast<std::size_t>(per_peer));
  std::vector<std::byte> recv(send.size(), std::byte{0xee});
  for (std::size_t q = 0; q < p; ++q)
    orchmllm::test::fill_block(send.data() + displs[q], per_peer, 77, me, static_cast<rank_t>(q));
  comm.all_to_allv(send.data(), counts, displs, recv.data(), counts, displs);
  bool ok = true;
  for (std::size_t q = 0; q < p; ++q) {
    ok = ok && orchmllm::test::first_block_mismatch(recv.data() + displs[q], per_peer, 77,
                                                    static_cast<rank_t>(q), me) < 0;
  }
  return ok;
}

// Checks the fake layout of blocks of g ranks.
void check_fake_layout(const communicator& comm, rank_t g) {
  const rank_t n = comm.size();
  const rank_t r = comm.rank();
  CHECK(comm.node() == r / g);
  CHECK(comm.local_rank() == r % g);
  CHECK(comm.num_nodes() == (n + g - 1) / g);
  CHECK(comm.local_size() == std::min(g, n - (r / g) * g));
  for (rank_t q = 0; q < n; ++q) CHECK(comm.node_of(q) == q / g);
  CHECK(comm.settings().ranks_per_node == g);
}

// Sets (or, for nullptr, unsets) an environment variable for its lifetime, then restores the
// value it had (ctest may set ORCHMLLM_TIMEOUT_MS for the whole run).
struct env_guard {
  explicit env_guard(const char* value, const char* name = "ORCHMLLM_RANKS_PER_NODE")
      : name_(name) {
    if (const char* old = std::getenv(name)) before_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~env_guard() {
    if (before_)
      setenv(name_, before_->c_str(), 1);
    else
      unsetenv(name_);
  }
  env_guard(const env_guard&) = delete;
  env_guard& operator=(const env_guard&) = delete;

 private:
  const char* name_;
  std::optional<std::string> before_;
};

}  // namespace

TEST_CASE("real nodes: MPI_Comm_split_type groups, numbered by lowest rank") {
  env_guard env(nullptr);
  communicator comm;
  CHECK(comm.rank() == world_rank());
  CHECK(comm.size() == world_size());
  CHECK(comm.settings().ranks_per_node == 0);
  CHECK(comm.native_handle() != MPI_COMM_WORLD);
  // Independent oracle: ranks on one node share a processor name (true for the usual
  // launchers and for CI's single machine).
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> names(static_cast<std::size_t>(world_size()) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, MPI_COMM_WORLD);
  std::set<std::string> distinct;
  for (int q = 0; q < world_size(); ++q)
    distinct.insert(std::string(names.data() + q * MPI_MAX_PROCESSOR_NAME));
  CHECK(comm.num_nodes() == static_cast<rank_t>(distinct.size()));
  if (distinct.size() == 1) {
    CHECK(comm.node() == 0);
    CHECK(comm.local_rank() == comm.rank());
    CHECK(comm.local_size() == comm.size());
  }
  conformance(comm);
  CHECK(comm.chunked_calls() == 0);  // every conformance transfer fits in one MPI call
}

TEST_CASE("fake nodes: 2x4, 4x2 and uneven 3+3+2") {
  for (const rank_t g : {4, 2, 3}) {
    CAPTURE(g);
    communicator comm(MPI_COMM_WORLD, options{.ranks_per_node = g});
    check_fake_layout(comm, g);
    if (world_size() == 8) {
      if (g == 3) {  // 3 + 3 + 2
        CHECK(comm.num_nodes() == 3);
        CHECK(comm.local_size() == (comm.rank() < 6 ? 3 : 2));
      } else {
        CHECK(comm.num_nodes() == 8 / g);
        CHECK(comm.local_size() == g);
      }
    }
    conformance(comm);
  }
}

TEST_CASE("fake nodes: one rank per node, and one node larger than the group") {
  communicator single(MPI_COMM_WORLD, options{.ranks_per_node = 1});
  check_fake_layout(single, 1);
  communicator big(MPI_COMM_WORLD, options{.ranks_per_node = 1000});
  CHECK(big.num_nodes() == 1);
  CHECK(big.node() == 0);
  CHECK(big.local_rank() == big.rank());
  CHECK(big.local_size() == big.size());
  CHECK(small_exchange_works(big));
}

TEST_CASE("ORCHMLLM_RANKS_PER_NODE overrides real nodes, not explicit options") {
  {
    env_guard env("2");
    communicator comm;
    check_fake_layout(comm, 2);
    communicator explicit_g(MPI_COMM_WORLD, options{.ranks_per_node = 4});
    check_fake_layout(explicit_g, 4);
  }
  {
    env_guard env("0");  // "0": real nodes
    communicator comm;
    CHECK(comm.settings().ranks_per_node == 0);
  }
  {
    env_guard env("two");
    std::string message;
    const std::string what = outcome_of([] { communicator comm; }, &message);
    CHECK(what == "invalid");
    CHECK(message.find("ORCHMLLM_RANKS_PER_NODE='two'") != std::string::npos);
  }
  if (world_size() > 1) {
    // Ranks that see different values must all fail instead of building inconsistent nodes.
    env_guard env(world_rank() == 0 ? "2" : "4");
    std::string message;
    CHECK(outcome_of([] { communicator comm; }, &message) == "invalid");
    CHECK(message.find("ranks_per_node") != std::string::npos);
  }
  communicator after;  // the world is still usable
  CHECK(small_exchange_works(after));
}

TEST_CASE("max_chunk_bytes = 7 forces the chunked point-to-point path") {
  communicator comm(MPI_COMM_WORLD, options{.max_chunk_bytes = 7});
  CHECK(comm.settings().max_chunk_bytes == 7);
  conformance(comm);
  CHECK(comm.chunked_calls() > 0);
  // Also on faked nodes (the path does not depend on them, the conformance identity case does).
  communicator fake(MPI_COMM_WORLD, options{.ranks_per_node = 3, .max_chunk_bytes = 7});
  const std::int64_t before = fake.chunked_calls();
  CHECK(small_exchange_works(fake, 30));  // 30 = 4 messages of 7 + one of 2 per peer
  CHECK(fake.chunked_calls() == before + 1);
}

TEST_CASE("one rank above the limit moves every rank to the chunked path") {
  communicator comm(MPI_COMM_WORLD, options{.max_chunk_bytes = 64});
  const rank_t n = comm.size();
  const rank_t me = comm.rank();
  // Rank 0 sends 1000 bytes to the last rank (> 64), everything else is 10 bytes.
  auto count = [n](rank_t s, rank_t t) -> std::int64_t { return s == 0 && t == n - 1 ? 1000 : 10; };
  const auto p = static_cast<std::size_t>(n);
  std::vector<std::int64_t> sc(p), sd(p), rc(p), rd(p);
  std::int64_t st = 0;
  std::int64_t rt = 0;
  for (rank_t q = 0; q < n; ++q) {
    const auto qi = static_cast<std::size_t>(q);
    sc[qi] = count(me, q);
    sd[qi] = st;
    st += sc[qi];
    rc[qi] = count(q, me);
    rd[qi] = rt;
    rt += rc[qi];
  }
  std::vector<std::byte> send(static_cast<std::size_t>(st)), recv(static_cast<std::size_t>(rt));
  for (rank_t q = 0; q < n; ++q) {
    const auto qi = static_cast<std::size_t>(q);
    orchmllm::test::fill_block(send.data() + sd[qi], sc[qi], 5, me, q);
  }
  comm.all_to_allv(send.data(), sc, sd, recv.data(), rc, rd);
  CHECK(comm.chunked_calls() == 1);
  for (rank_t q = 0; q < n; ++q) {
    const auto qi = static_cast<std::size_t>(q);
    CHECK(orchmllm::test::first_block_mismatch(recv.data() + rd[qi], rc[qi], 5, q, me) < 0);
  }
  // all_gather above the limit: chunked too.
  std::vector<std::byte> mine(200);
  orchmllm::test::fill_block(mine.data(), 200, 6, me, -1);
  std::vector<std::byte> all(200 * p);
  comm.all_gather(mine.data(), 200, all.data());
  CHECK(comm.chunked_calls() == 2);
  for (rank_t q = 0; q < n; ++q)
    CHECK(orchmllm::test::first_block_mismatch(all.data() + 200 * q, 200, 6, q, -1) < 0);
  // all_gatherv where only the last rank's contribution exceeds the limit.
  std::vector<std::int64_t> counts(p, 3), displs(p);
  counts[p - 1] = 100;
  std::int64_t pos = 0;
  for (std::size_t q = p; q-- > 0;) {  // reversed layout
    displs[q] = pos;
    pos += counts[q];
  }
  std::vector<std::byte> contribution(
      static_cast<std::size_t>(counts[static_cast<std::size_t>(me)]));
  orchmllm::test::fill_block(contribution.data(), counts[static_cast<std::size_t>(me)], 8, me, -1);
  std::vector<std::byte> gathered(static_cast<std::size_t>(pos));
  comm.all_gatherv(contribution.data(), counts[static_cast<std::size_t>(me)], gathered.data(),
                   counts, displs);
  CHECK(comm.chunked_calls() == (n > 1 ? 3 : 2));
  for (rank_t q = 0; q < n; ++q) {
    const auto qi = static_cast<std::size_t>(q);
    CHECK(orchmllm::test::first_block_mismatch(gathered.data() + displs[qi], counts[qi], 8, q, -1) <
          0);
  }
}

TEST_CASE("bad arguments on one rank raise invalid_argument_error on every rank") {
  communicator comm;
  const rank_t n = comm.size();
  const rank_t me = comm.rank();
  const auto p = static_cast<std::size_t>(n);
  const rank_t culprit = n > 1 ? 1 : 0;
  std::vector<std::int64_t> counts(p, 2), displs(p);
  for (std::size_t q = 0; q < p; ++q) displs[q] = 2 * static_cast<std::int64_t>(q);
  std::vector<std::byte> send(2 * p), recv(2 * p);

  SUBCASE("all_to_allv: recv_counts one entry short on one rank") {
    const std::span<const std::int64_t> rc =
        me == culprit ? std::span<const std::int64_t>(counts).first(p - 1)
                      : std::span<const std::int64_t>(counts);
    std::string message;
    CHECK(
        outcome_of([&] { comm.all_to_allv(send.data(), counts, displs, recv.data(), rc, displs); },
                   &message) == "invalid");
    if (me == culprit) {
      CHECK(message.find("recv_counts has " + std::to_string(p - 1) + " entries") !=
            std::string::npos);
    } else {
      CHECK(message.find("rank " + std::to_string(culprit) + " passed invalid arguments") !=
            std::string::npos);
    }
  }
  SUBCASE("all_to_allv: a negative count on one rank") {
    std::vector<std::int64_t> bad = counts;
    if (me == culprit) bad[0] = -3;
    std::string message;
    CHECK(
        outcome_of([&] { comm.all_to_allv(send.data(), bad, displs, recv.data(), counts, displs); },
                   &message) == "invalid");
    if (me == culprit) CHECK(message.find("send_counts[0] = -3 is negative") != std::string::npos);
  }
  SUBCASE("all_gather: bytes differ between ranks") {
    const std::int64_t bytes = me == culprit ? 1 : 2;
    std::vector<std::byte> out(2 * p);
    std::string message;
    CHECK(outcome_of([&] { comm.all_gather(send.data(), bytes, out.data()); }, &message) ==
          "invalid");
    if (n > 1) CHECK(message.find("different byte counts, from 1 to 2") != std::string::npos);
  }
  SUBCASE("all_gather: negative bytes on one rank") {
    std::vector<std::byte> out(2 * p);
    CHECK(outcome_of([&] { comm.all_gather(send.data(), me == culprit ? -1 : 2, out.data()); }) ==
          "invalid");
  }
  SUBCASE("all_gatherv: counts differ between ranks") {
    std::vector<std::int64_t> c = counts;
    if (me == culprit) c[0] = 1;  // not its own entry when culprit == 1
    const std::int64_t bytes = c[static_cast<std::size_t>(me)];
    std::string message;
    CHECK(outcome_of([&] { comm.all_gatherv(send.data(), bytes, recv.data(), c, displs); },
                     &message) == "invalid");
    if (n > 1) CHECK(message.find("ranks pass different counts") != std::string::npos);
  }
  SUBCASE("all_gatherv: bytes != counts[rank] on one rank") {
    const std::int64_t bytes = me == culprit ? 1 : 2;
    CHECK(outcome_of([&] { comm.all_gatherv(send.data(), bytes, recv.data(), counts, displs); }) ==
          "invalid");
  }
  SUBCASE("every rank: displs one entry too long") {
    std::vector<std::int64_t> long_displs = displs;
    long_displs.push_back(0);
    CHECK(outcome_of([&] { comm.all_gatherv(send.data(), 2, recv.data(), counts, long_displs); }) ==
          "invalid");
  }
  // Whatever failed above, the communicator is still in step on every rank.
  CHECK(small_exchange_works(comm));
}

TEST_CASE("all_max: the element-wise maximum; bad counts are agreed errors") {
  static_assert(orchmllm::max_reducing_communicator<communicator>);
  for (const auto timeout : {std::chrono::milliseconds(0), std::chrono::milliseconds(20000)}) {
    communicator comm(MPI_COMM_WORLD, options{.timeout = timeout});
    const rank_t n = comm.size();
    const rank_t me = comm.rank();
    // values: rank, -rank, a huge key that only the last rank has, the extremes.
    std::vector<std::int64_t> v{me, -me, me == n - 1 ? INT64_MAX - 1 : 7, INT64_MIN, INT64_MAX};
    comm.all_max(v);
    CHECK(v == std::vector<std::int64_t>{n - 1, 0, INT64_MAX - 1, INT64_MIN, INT64_MAX});
    std::vector<std::int64_t> none;
    CHECK_NOTHROW(comm.all_max(none));
    std::vector<std::int64_t> eight(8, me);
    comm.all_max(eight);
    CHECK(eight == std::vector<std::int64_t>(8, n - 1));
    const rank_t culprit = n > 1 ? 1 : 0;
    std::string message;
    std::vector<std::int64_t> nine(me == culprit ? 9 : 3, 0);
    CHECK(outcome_of([&] { comm.all_max(nine); }, &message) == "invalid");
    CHECK(message.find("more than 8 values") != std::string::npos);
    if (n > 1) {
      std::vector<std::int64_t> uneven(me == culprit ? 2 : 3, 0);
      CHECK(outcome_of([&] { comm.all_max(uneven); }, &message) == "invalid");
      CHECK(message.find("ranks pass different counts (between 2 and 3)") != std::string::npos);
    }
    CHECK(small_exchange_works(comm));
  }
}

TEST_CASE("count mismatches become communication_error on every rank") {
  const rank_t n = world_size();
  if (n < 2) return;
  const auto p = static_cast<std::size_t>(n);
  const rank_t me = world_rank();
  std::vector<std::int64_t> sc(p, 0), sd(p, 0), rc(p, 0), rd(p, 0);
  std::vector<std::byte> send(8), recv(8);

  SUBCASE("verify_counts: detected before anything moves") {
    // Rank 1 believes rank 0 sends it 5 bytes; rank 0 sends 3.
    if (me == 0) sc[1] = 3;
    if (me == 1) rc[0] = 5;
    communicator comm(MPI_COMM_WORLD, options{.verify_counts = true});
    std::string message;
    CHECK(outcome_of([&] { comm.all_to_allv(send.data(), sc, sd, recv.data(), rc, rd); },
                     &message) == "communication");
    if (me == 1) {
      CHECK(message.find("expects recv_counts[0] = 5 bytes but rank 0 sends 3") !=
            std::string::npos);
    } else {
      CHECK(message.find("rank 1 detected it") != std::string::npos);
    }
    CHECK(small_exchange_works(comm));
  }
  SUBCASE("chunked path: a short message is detected after the transfer") {
    // Rank 0 sends 3 bytes as messages of 2 + 1; rank 1 expects 4 as 2 + 2. Both post two
    // messages (a mismatch in the number of messages would be undetectable without
    // verify_counts), and the second arrives short.
    if (me == 0) sc[1] = 3;
    if (me == 1) rc[0] = 4;
    communicator comm(MPI_COMM_WORLD, options{.max_chunk_bytes = 2});
    std::string message;
    CHECK(outcome_of([&] { comm.all_to_allv(send.data(), sc, sd, recv.data(), rc, rd); },
                     &message) == "communication");
    CHECK(comm.chunked_calls() == 1);
    if (me == 1) {
      CHECK(message.find("received a message of 1 bytes from rank 0 where 2 were expected") !=
            std::string::npos);
    } else {
      CHECK(message.find("failed on rank 1") != std::string::npos);
    }
    CHECK(small_exchange_works(comm));
  }
}

TEST_CASE("invalid options raise invalid_argument_error on every rank") {
  CHECK(outcome_of([] { communicator c(MPI_COMM_WORLD, options{.ranks_per_node = -1}); }) ==
        "invalid");
  CHECK(outcome_of([] { communicator c(MPI_COMM_WORLD, options{.max_chunk_bytes = 0}); }) ==
        "invalid");
  CHECK(outcome_of([] {
          communicator c(MPI_COMM_WORLD, options{.max_chunk_bytes = std::int64_t{INT_MAX} + 1});
        }) == "invalid");
  if (world_size() > 1) {
    const bool odd = world_rank() % 2 == 1;
    std::string message;
    CHECK(
        outcome_of([&] { communicator c(MPI_COMM_WORLD, options{.ranks_per_node = odd ? 2 : 4}); },
                   &message) == "invalid");
    CHECK(message.find("ranks_per_node") != std::string::npos);
    CHECK(outcome_of(
              [&] { communicator c(MPI_COMM_WORLD, options{.max_chunk_bytes = odd ? 100 : 7}); },
              &message) == "invalid");
    CHECK(message.find("max_chunk_bytes: from 7 to 100") != std::string::npos);
    // Only rank 1 passes a bad value: the others report rank 1.
    CHECK(outcome_of(
              [&] {
                communicator c(MPI_COMM_WORLD,
                               options{.ranks_per_node = world_rank() == 1 ? -5 : 2});
              },
              &message) == "invalid");
    if (world_rank() != 1)
      CHECK(message.find("rank 1 passed invalid arguments") != std::string::npos);
    else
      CHECK(message.find("ranks_per_node = -5") != std::string::npos);
  }
  communicator ok;
  CHECK(small_exchange_works(ok));
}

TEST_CASE("a timeout: every operation works as without one; bad timeouts are agreed errors") {
  using namespace std::chrono_literals;
  // Blocking collectives under the watchdog: the conformance suite, on the fast path and on
  // the chunked one (max_chunk_bytes = 7), with verify_counts.
  communicator fast(MPI_COMM_WORLD, options{.verify_counts = true, .timeout = 60s});
  CHECK(fast.settings().timeout == 60s);
  conformance(fast);
  fast.barrier();
  communicator chunked(MPI_COMM_WORLD, options{.max_chunk_bytes = 7, .timeout = 60s});
  conformance(chunked);
  CHECK(chunked.chunked_calls() > 0);
  // The deadline bounds each wait, not the communicator's life: 2.5 s of punctual barriers
  // under a 2 s deadline.
  communicator brisk(MPI_COMM_WORLD, options{.timeout = 2000ms});
  for (int i = 0; i < 25; ++i) {
    std::this_thread::sleep_for(100ms);
    brisk.barrier();
  }
  CHECK(small_exchange_works(brisk));
  std::string message;
  CHECK(outcome_of([] { communicator c(MPI_COMM_WORLD, options{.timeout = -1ms}); }, &message) ==
        "invalid");
  CHECK(message.find("timeout = -1 ms is outside [0, ") != std::string::npos);
  CHECK(outcome_of([] {
          communicator c(MPI_COMM_WORLD,
                         options{.timeout = orchmllm::detail::max_comm_timeout + 1ms});
        }) == "invalid");
  if (world_size() > 1) {
    CHECK(outcome_of(
              [&] {
                communicator c(MPI_COMM_WORLD,
                               options{.timeout = world_rank() == 0 ? 1000ms : 2000ms});
              },
              &message) == "invalid");
    CHECK(message.find("timeout (ms, after ORCHMLLM_TIMEOUT_MS): from 1000 to 2000") !=
          std::string::npos);
  }
}

TEST_CASE("the default deadline: 5 minutes, ORCHMLLM_TIMEOUT_MS, and code over environment") {
  using namespace std::chrono_literals;
  using orchmllm::mpi::default_timeout;
  static_assert(default_timeout == std::chrono::minutes(5));
  const auto timeout_env = [](const char* value) {
    return env_guard(value, "ORCHMLLM_TIMEOUT_MS");
  };
  {
    // Nothing set anywhere: a finite deadline.
    const auto env = timeout_env(nullptr);
    communicator comm;
    CHECK(comm.timeout() == default_timeout);
    CHECK(comm.settings().timeout == default_timeout);
    CHECK(small_exchange_works(comm));
    // The caller's own MPI calls under the same deadline (nested: the barrier arms inside).
    CHECK(comm.with_deadline("test barrier", [&] {
      comm.barrier();
      return MPI_Barrier(comm.native_handle());
    }) == MPI_SUCCESS);
    communicator none(MPI_COMM_WORLD, options{.timeout = 0ms});  // explicit: no deadline
    CHECK(none.timeout() == 0ms);
    CHECK(small_exchange_works(none));
  }
  {
    const auto env = timeout_env("");  // empty: unset
    communicator comm;
    CHECK(comm.timeout() == default_timeout);
  }
  {
    const auto env = timeout_env("2500");
    communicator comm;
    CHECK(comm.timeout() == 2500ms);
    CHECK(comm.settings().timeout == 2500ms);
    conformance(comm);
    communicator in_code(MPI_COMM_WORLD, options{.timeout = 60s});  // code wins
    CHECK(in_code.timeout() == 60s);
    communicator none(MPI_COMM_WORLD, options{.timeout = 0ms});
    CHECK(none.timeout() == 0ms);
    orchmllm::mpi::communicator_ref ref(MPI_COMM_WORLD);
    CHECK(ref.timeout() == 2500ms);
  }
  {
    const auto env = timeout_env("0");  // no deadline, no watchdog
    communicator comm;
    CHECK(comm.timeout() == 0ms);
    CHECK(comm.settings().timeout == 0ms);
    conformance(comm);
  }
  for (const char* bad : {"1.5s", "-1", "abc", " 100", "100 ", "1e3", "+5", "0x10",
                          "99999999999999999999", "31536000001"}) {
    const auto env = timeout_env(bad);
    std::string message;
    CHECK_MESSAGE(outcome_of([] { communicator comm; }, &message) == "invalid", bad);
    CHECK_MESSAGE(
        message.find(std::string("ORCHMLLM_TIMEOUT_MS='") + bad + "'") != std::string::npos,
        message);
    // An explicit value in code: the environment is not read.
    CHECK(outcome_of([] { communicator comm(MPI_COMM_WORLD, options{.timeout = 30s}); }) == "");
  }
  {
    const auto env = timeout_env("31536000000");  // the largest: 365 days
    communicator comm;
    CHECK(comm.timeout() == orchmllm::detail::max_comm_timeout);
  }
  if (world_size() > 1) {
    std::string message;
    {
      // Ranks that resolve different deadlines all fail.
      const auto env = timeout_env(world_rank() == 0 ? "1000" : "2000");
      CHECK(outcome_of([] { communicator comm; }, &message) == "invalid");
      CHECK(message.find("timeout (ms, after ORCHMLLM_TIMEOUT_MS): from 1000 to 2000") !=
            std::string::npos);
      // The same through the environment on some ranks and in code on the others.
      CHECK(outcome_of(
                [] {
                  communicator comm(MPI_COMM_WORLD,
                                    world_rank() == 1 ? options{.timeout = 1000ms} : options{});
                },
                &message) == "invalid");
    }
    {
      // One rank's value is malformed: it names it, the others name that rank.
      const auto env = timeout_env(world_rank() == 1 ? "ten" : "1000");
      CHECK(outcome_of([] { communicator comm; }, &message) == "invalid");
      if (world_rank() == 1)
        CHECK(message.find("ORCHMLLM_TIMEOUT_MS='ten'") != std::string::npos);
      else
        CHECK(message.find("rank 1 passed invalid arguments") != std::string::npos);
    }
  }
  communicator after;  // the world is still usable
  CHECK(small_exchange_works(after));
}

TEST_CASE("mpi::environment over an initialised MPI changes nothing") {
  orchmllm::mpi::environment env;  // the test main initialised MPI
  CHECK_FALSE(env.initialised_here());
  CHECK(env.finalize_timeout() == std::chrono::milliseconds(0));
  CHECK(outcome_of([] {
          orchmllm::mpi::environment e(nullptr, nullptr, MPI_THREAD_FUNNELED,
                                       std::chrono::milliseconds(-1));
        }) == "invalid");
}

TEST_CASE("communicator is movable; the moved-to object owns the duplicate") {
  communicator a(MPI_COMM_WORLD, options{.ranks_per_node = 2});
  const MPI_Comm handle = a.native_handle();
  communicator b(std::move(a));
  CHECK(b.native_handle() == handle);
  CHECK(a.native_handle() == MPI_COMM_NULL);  // NOLINT(bugprone-use-after-move): documented
  CHECK(outcome_of([&] { a.barrier(); }) == "invalid");
  check_fake_layout(b, 2);
  CHECK(small_exchange_works(b));
  communicator c(MPI_COMM_WORLD, options{.ranks_per_node = 4});
  c = std::move(b);  // frees c's own duplicate (collective on every rank)
  check_fake_layout(c, 2);
  CHECK(c.native_handle() == handle);
  CHECK(small_exchange_works(c));
}

TEST_CASE("larger chunked transfer: several full chunks plus a remainder per peer") {
  communicator comm(MPI_COMM_WORLD, options{.max_chunk_bytes = 4096});
  const rank_t n = comm.size();
  const rank_t me = comm.rank();
  const auto p = static_cast<std::size_t>(n);
  auto count = [](rank_t s, rank_t t) -> std::int64_t {
    return (s + t) % 3 == 0 ? 0 : 3 * 4096 + 17 * s + t;  // zero-count peers included
  };
  std::vector<std::int64_t> sc(p), sd(p), rc(p), rd(p);
  std::int64_t st = 0;
  std::int64_t rt = 0;
  for (rank_t q = 0; q < n; ++q) {  // receive blocks in reverse order with 1-byte gaps
    const auto qi = static_cast<std::size_t>(q);
    sc[qi] = count(me, q);
    sd[qi] = st;
    st += sc[qi];
  }
  for (std::size_t q = p; q-- > 0;) {
    rc[q] = count(static_cast<rank_t>(q), me);
    rd[q] = rt + 1;
    rt += rc[q] + 1;
  }
  std::vector<std::byte> send(static_cast<std::size_t>(st));
  std::vector<std::byte> recv(static_cast<std::size_t>(rt), std::byte{0x5a});
  for (rank_t q = 0; q < n; ++q) {
    const auto qi = static_cast<std::size_t>(q);
    orchmllm::test::fill_block(send.data() + sd[qi], sc[qi], 9, me, q);
  }
  comm.all_to_allv(send.data(), sc, sd, recv.data(), rc, rd);
  CHECK(comm.chunked_calls() == 1);
  for (rank_t q = 0; q < n; ++q) {
    const auto qi = static_cast<std::size_t>(q);
    CHECK(orchmllm::test::first_block_mismatch(recv.data() + rd[qi], rc[qi], 9, q, me) < 0);
    CHECK(recv[static_cast<std::size_t>(rd[qi] - 1)] == std::byte{0x5a});  // gap untouched
  }
}

TEST_CASE("communicator_ref adopts the caller's MPI communicator: same behaviour, nothing owned") {
  // The trainer's own communicator: the world split in two halves (ranks 0..n/2-1 and the rest),
  // with MPI_ERRORS_RETURN as a trainer that wants exceptions sets it.
  MPI_Comm mine = MPI_COMM_NULL;
  REQUIRE(MPI_Comm_split(MPI_COMM_WORLD, world_rank() < world_size() / 2 ? 0 : 1, world_rank(),
                         &mine) == MPI_SUCCESS);
  REQUIRE(MPI_Comm_set_errhandler(mine, MPI_ERRORS_RETURN) == MPI_SUCCESS);
  int mine_size = 0;
  MPI_Comm_size(mine, &mine_size);
  {
    orchmllm::mpi::communicator_ref ref(mine, options{.ranks_per_node = 2});
    CHECK(ref.native_handle() == mine);  // no duplicate
    CHECK(ref.size() == mine_size);
    check_fake_layout(ref, 2);
    conformance(ref);
    CHECK(small_exchange_works(ref));
    // Bad arguments on one rank are still agreed errors on every rank of the group.
    std::vector<std::int64_t> counts(static_cast<std::size_t>(ref.size()) + (ref.rank() == 0), 0);
    std::vector<std::byte> buf(1);
    CHECK(outcome_of([&] {
            ref.all_to_allv(buf.data(), counts, counts, buf.data(), counts, counts);
          }) == "invalid");
    CHECK(small_exchange_works(ref));
    // Moving keeps it non-owning.
    orchmllm::mpi::communicator_ref moved(std::move(ref));
    CHECK(moved.native_handle() == mine);
    CHECK(small_exchange_works(moved));
  }
  // Destroyed without freeing: the caller's communicator still works and is the caller's to free.
  int still = 0;
  CHECK(MPI_Comm_size(mine, &still) == MPI_SUCCESS);
  CHECK(still == mine_size);
  CHECK(MPI_Barrier(mine) == MPI_SUCCESS);
  CHECK(MPI_Comm_free(&mine) == MPI_SUCCESS);
}
