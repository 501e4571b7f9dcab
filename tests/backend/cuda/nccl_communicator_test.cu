// GPU runtime test of nccl::communicator and nccl::communicator_ref (over an ncclComm_t the
// test creates itself, as a trainer's framework would), run under mpiexec (one rank in ctest;
// the device check script also runs it on one GPU). The conformance suite of the communicator
// concept runs with device payload buffers (cuda_staging): self send/recv, zero counts, gapped
// displacements, 1 MiB, bad spans. Exits with 77 (ctest: skipped) when no CUDA device is
// present. Uses the MPI doctest main (tests/backend/mpi/mpi_main.cpp).
#include <doctest/doctest.h>
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cuda_support.hpp"
#include "orchmllm/backend/cuda/mover.cuh"
#include "orchmllm/backend/nccl/communicator.cuh"
#include "orchmllm/backend/nccl/communicator_ref.cuh"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/metadata.hpp"
#include "support/communicator_conformance.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::rank_t;
using orchmllm::test::test_stream;

// One GPU per rank of a node (ranks beyond the device count share devices round-robin).
void select_device() {
  int local = 0;
  MPI_Comm node_comm = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_comm);
  MPI_Comm_rank(node_comm, &local);
  MPI_Comm_free(&node_comm);
  ORCHMLLM_CUDA_CHECK(cudaSetDevice(local % orchmllm::test::cuda_device_count));
}

}  // namespace

TEST_CASE("nccl communicator: library version") {
  const int v = orchmllm::nccl::communicator::library_version();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::printf("NCCL library %d.%d.%d (headers %d.%d.%d)\n", v / 10000, (v / 100) % 100, v % 100,
                NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  }
  CHECK(v >= NCCL_VERSION(2, 14, 0));
}

TEST_CASE("nccl communicator: conformance suite with device payloads") {
  select_device();
  test_stream stream;
  orchmllm::nccl::communicator comm(MPI_COMM_WORLD, stream.get());
  CHECK(comm.size() >= 1);
  CHECK(comm.stream() == stream.get());
  CHECK(comm.native_handle() != nullptr);
  CHECK_NOTHROW(orchmllm::test::check_communicator_conformance(
      comm, orchmllm::test::cuda_staging{stream.get()}));
  CHECK_FALSE(comm.aborted());
}

TEST_CASE("nccl communicator: verify_counts catches a count mismatch before sending") {
  select_device();
  test_stream stream;
  orchmllm::nccl::communicator::options opts;
  opts.verify_counts = true;
  opts.timeout = std::chrono::seconds(60);
  orchmllm::nccl::communicator comm(MPI_COMM_WORLD, stream.get(), opts);
  CHECK_NOTHROW(orchmllm::test::check_communicator_conformance(
      comm, orchmllm::test::cuda_staging{stream.get()}));
  // Every rank expects one byte more from rank 0 than rank 0 sends: each one sees the mismatch
  // in the count exchange itself and names it.
  const auto n = static_cast<std::size_t>(comm.size());
  orchmllm::test::cuda_staging staging{stream.get()};
  std::byte* buf = staging.alloc(1024);
  std::vector<std::int64_t> send_counts(n, 0), recv_counts(n, 0), displs(n, 0);
  if (comm.rank() == 0) std::fill(send_counts.begin(), send_counts.end(), 5);
  recv_counts[0] = 6;
  orchmllm::test::expect_error<orchmllm::communication_error>(
      [&] { comm.all_to_allv(buf, send_counts, displs, buf + 512, recv_counts, displs); },
      {"expects recv_counts[0] = 6 bytes but rank 0 sends 5", "nothing was sent"});
  CHECK_FALSE(comm.aborted());  // nothing was posted: still usable
  CHECK_NOTHROW(orchmllm::test::check_communicator_conformance(comm, staging));
  staging.free(buf);
}

TEST_CASE("nccl communicator: invalid options raise on every rank") {
  select_device();
  test_stream stream;
  orchmllm::nccl::communicator::options opts;
  opts.timeout = std::chrono::milliseconds(-1);
  orchmllm::test::expect_invalid(
      [&] { orchmllm::nccl::communicator comm(MPI_COMM_WORLD, stream.get(), opts); },
      {"timeout = -1 ms"});
}

namespace {

// Sets ORCHMLLM_TIMEOUT_MS (nullptr: unsets it) for its lifetime, then restores it.
struct timeout_env {
  explicit timeout_env(const char* value) {
    if (const char* old = std::getenv("ORCHMLLM_TIMEOUT_MS")) before = old;
    if (value)
      setenv("ORCHMLLM_TIMEOUT_MS", value, 1);
    else
      unsetenv("ORCHMLLM_TIMEOUT_MS");
  }
  ~timeout_env() {
    if (before)
      setenv("ORCHMLLM_TIMEOUT_MS", before->c_str(), 1);
    else
      unsetenv("ORCHMLLM_TIMEOUT_MS");
  }
  timeout_env(const timeout_env&) = delete;
  timeout_env& operator=(const timeout_env&) = delete;
  std::optional<std::string> before;
};

}  // namespace

TEST_CASE("nccl communicator: the deadline is ORCHMLLM_TIMEOUT_MS, else 5 minutes; 0 is none") {
  using namespace std::chrono_literals;
  select_device();
  test_stream stream;
  {
    timeout_env env(nullptr);
    orchmllm::nccl::communicator comm(MPI_COMM_WORLD, stream.get());
    CHECK(comm.settings().timeout == orchmllm::nccl::default_timeout);
    CHECK(comm.bootstrap().timeout() == orchmllm::nccl::default_timeout);
  }
  {
    timeout_env env("2500");
    orchmllm::nccl::communicator comm(MPI_COMM_WORLD, stream.get());
    CHECK(comm.settings().timeout == 2500ms);
    orchmllm::nccl::communicator::options opts;
    opts.timeout = 60s;  // code wins over the environment
    orchmllm::nccl::communicator explicit_one(MPI_COMM_WORLD, stream.get(), opts);
    CHECK(explicit_one.settings().timeout == 60s);
    CHECK(explicit_one.bootstrap().timeout() == 60s);
  }
  {
    timeout_env env("0");  // no deadline: every wait unbounded, everything still works
    orchmllm::nccl::communicator comm(MPI_COMM_WORLD, stream.get());
    CHECK(comm.settings().timeout == 0ms);
    CHECK_NOTHROW(orchmllm::test::check_communicator_conformance(
        comm, orchmllm::test::cuda_staging{stream.get()}));
  }
  {
    timeout_env env("5 min");
    orchmllm::test::expect_invalid(
        [&] { orchmllm::nccl::communicator comm(MPI_COMM_WORLD, stream.get()); },
        {"ORCHMLLM_TIMEOUT_MS='5 min'"});
  }
}

TEST_CASE("nccl communicator: device_mover packs on the stream before the exchange") {
  // Pack (gather) -> all_to_allv -> unpack, all queued on one stream: every rank sends each peer
  // q a block of (q + 1) * 1000 + rank bytes cut from its input in reverse segment order.
  select_device();
  test_stream stream;
  orchmllm::nccl::communicator comm(MPI_COMM_WORLD, stream.get());
  for (auto method : {orchmllm::cuda::gather_method::cub_batched,
                      orchmllm::cuda::gather_method::thrust_chunked}) {
    orchmllm::cuda::device_mover mover(stream.get(), method);
    const rank_t n = comm.size();
    const rank_t me = comm.rank();
    std::vector<std::int64_t> send_counts(static_cast<std::size_t>(n)),
        recv_counts(static_cast<std::size_t>(n)), send_displs(static_cast<std::size_t>(n)),
        recv_displs(static_cast<std::size_t>(n));
    std::int64_t send_total = 0, recv_total = 0;
    for (rank_t q = 0; q < n; ++q) {
      const auto k = static_cast<std::size_t>(q);
      send_counts[k] = (q + 1) * 1000 + me;
      recv_counts[k] = (me + 1) * 1000 + q;
      send_displs[k] = send_total;
      recv_displs[k] = recv_total;
      send_total += send_counts[k];
      recv_total += recv_counts[k];
    }
    // Input: the send blocks stored in reverse peer order; packing restores peer order.
    std::vector<std::byte> input(static_cast<std::size_t>(send_total));
    orchmllm::detail::segment_list pack;
    std::int64_t pos = 0;
    for (rank_t q = n - 1; q >= 0; --q) {
      const auto k = static_cast<std::size_t>(q);
      orchmllm::test::fill_block(input.data() + pos, send_counts[k], 900, me, q);
      pack.push(pos, send_displs[k], send_counts[k]);
      pos += send_counts[k];
    }
    std::byte* in = mover.scratch(0, send_total);
    orchmllm::test::upload(in, input, stream.get());
    std::byte* send = mover.scratch(1, send_total);
    mover.gather(in, send, pack);  // queued; the exchange below is ordered after it
    orchmllm::test::cuda_staging staging{stream.get()};
    std::byte* recv = staging.alloc(recv_total);
    comm.all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs);
    const auto got = orchmllm::test::download(recv, recv_total, stream.get());
    for (rank_t q = 0; q < n; ++q) {
      const auto k = static_cast<std::size_t>(q);
      CHECK(orchmllm::test::first_block_mismatch(got.data() + recv_displs[k], recv_counts[k], 900,
                                                 q, me) == -1);
    }
    staging.free(recv);
  }
}

namespace {

// The trainer's own NCCL communicator: rank 0's id over MPI, ncclCommInitRank (blocking).
struct trainer_nccl_comm {
  ncclComm_t comm = nullptr;
  trainer_nccl_comm() {
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ncclUniqueId id{};
    if (rank == 0) REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    REQUIRE(ncclCommInitRank(&comm, size, id, rank) == ncclSuccess);
  }
  ~trainer_nccl_comm() {
    if (comm != nullptr) ncclCommDestroy(comm);
  }
  trainer_nccl_comm(const trainer_nccl_comm&) = delete;
  trainer_nccl_comm& operator=(const trainer_nccl_comm&) = delete;
};

}  // namespace

TEST_CASE("nccl communicator_ref: the trainer's ncclComm_t, conformance, no MPI inside") {
  select_device();
  test_stream stream;
  trainer_nccl_comm mine;
  {
    orchmllm::nccl::communicator_ref comm(mine.comm, stream.get(), {.ranks_per_node = 0});
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(comm.size() == size);
    CHECK(comm.native_handle() == mine.comm);
    CHECK(comm.num_nodes() >= 1);
    CHECK_NOTHROW(orchmllm::test::check_communicator_conformance(
        comm, orchmllm::test::cuda_staging{stream.get()}));
    std::int64_t v[3] = {comm.rank(), -comm.rank(), 7};
    comm.all_max(std::span<std::int64_t>(v));
    CHECK(v[0] == comm.size() - 1);
    CHECK(v[1] == 0);
    CHECK(v[2] == 7);
    CHECK_FALSE(comm.aborted());
  }
  // Destroyed without destroying the adopted communicator: it still works.
  orchmllm::nccl::communicator_ref again(mine.comm, stream.get(), {.ranks_per_node = 1});
  CHECK(again.num_nodes() == again.size());
  CHECK(again.settings().timeout == orchmllm::nccl::default_timeout);
  CHECK_NOTHROW(orchmllm::test::check_communicator_conformance(
      again, orchmllm::test::cuda_staging{stream.get()}));
  {
    timeout_env env("0");  // no deadline
    orchmllm::nccl::communicator_ref none(mine.comm, stream.get(), {.ranks_per_node = 1});
    CHECK(none.settings().timeout == std::chrono::milliseconds(0));
    CHECK_NOTHROW(orchmllm::test::check_communicator_conformance(
        none, orchmllm::test::cuda_staging{stream.get()}));
  }
  {
    timeout_env env("-3");
    orchmllm::test::expect_invalid(
        [&] { orchmllm::nccl::communicator_ref bad(mine.comm, stream.get()); },
        {"ORCHMLLM_TIMEOUT_MS='-3'"});
  }
}

static_assert(orchmllm::mover_providing_communicator<orchmllm::nccl::communicator>);
static_assert(orchmllm::mover_providing_communicator<orchmllm::nccl::communicator_ref>);

TEST_CASE("prebuilt routes on the GPU: agree once, dispatch device bytes with the device mover") {
  select_device();
  test_stream stream;
  trainer_nccl_comm mine;
  orchmllm::nccl::communicator_ref comm(mine.comm, stream.get());
  orchmllm::nccl::communicator owning(MPI_COMM_WORLD, stream.get());
  const rank_t d = comm.size();
  const rank_t me = comm.rank();
  std::mt19937_64 rng(11);  // the same plan on every rank
  const auto n = orchmllm::test::uniform(rng, 0, 8 * d);
  const auto off = orchmllm::test::random_offsets(rng, d, n);
  const auto plan = orchmllm::test::random_rearrangement(rng, off, d, true, 20);
  std::vector<std::int64_t> bytes(static_cast<std::size_t>(n));
  for (auto& b : bytes) b = orchmllm::test::uniform(rng, 0, 5000);
  std::vector<std::byte> input, expected;
  for (auto g = off[static_cast<std::size_t>(me)]; g < off[static_cast<std::size_t>(me) + 1]; ++g)
    for (std::int64_t k = 0; k < bytes[static_cast<std::size_t>(g)]; ++k)
      input.push_back(orchmllm::test::content_byte(g, k, 3));
  const auto doff = plan.dst_offsets();
  for (auto h = doff[static_cast<std::size_t>(me)]; h < doff[static_cast<std::size_t>(me) + 1]; ++h)
    for (std::int64_t k = 0; k < bytes[static_cast<std::size_t>(plan.source_of(h))]; ++k)
      expected.push_back(orchmllm::test::content_byte(plan.source_of(h), k, 3));
  const auto topo = orchmllm::gather_topology(comm);
  for (const auto s : {orchmllm::schedule::direct, orchmllm::schedule::node_wise}) {
    const std::vector<orchmllm::route> routes{orchmllm::route::build(plan, bytes, topo, me, s)};
    orchmllm::cuda::device_mover mover(stream.get());
    orchmllm::test::cuda_staging staging{stream.get()};
    std::byte* in = staging.alloc(routes[0].input_bytes());
    std::byte* out = staging.alloc(routes[0].output_bytes());
    orchmllm::test::upload(in, input, stream.get());
    const std::span<const std::byte> in_bytes(in,
                                              static_cast<std::size_t>(routes[0].input_bytes()));
    const std::span<std::byte> out_bytes(out, static_cast<std::size_t>(routes[0].output_bytes()));
    // With a mover of the caller's ...
    orchmllm::agree_on_routes(comm, routes, mover);
    orchmllm::dispatch(comm, routes[0], in_bytes, out_bytes, mover);
    CHECK(orchmllm::test::download(out, routes[0].output_bytes(), stream.get()) == expected);
    // ... and with the communicator's own (the one API for host and device payloads).
    staging.upload(out, std::vector<std::byte>(expected.size()).data(),
                   static_cast<std::int64_t>(expected.size()));
    orchmllm::agree_on_routes(owning, routes);
    orchmllm::dispatch(owning, routes[0], in_bytes, out_bytes);
    CHECK(orchmllm::test::download(out, routes[0].output_bytes(), stream.get()) == expected);
    staging.free(in);
    staging.free(out);
  }
}
