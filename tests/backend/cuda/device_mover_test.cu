// GPU runtime test of the device gathers: cuda::device_mover (CUB batched and Thrust chunked),
// thrust_mover<thrust::cuda::tag> and orchmllm::gather_segments on a CUDA policy, each bit-
// identical to the host reference gather_segments_host on random seeded segment lists (empty,
// zero-byte segments, unaligned offsets, segments above one chunk, one of several MB).
// Exits with 77 (ctest: skipped) when no CUDA device is present.
#include <doctest/doctest.h>
#include <thrust/device_vector.h>
#include <thrust/system/cuda/execution_policy.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda_support.hpp"
#include "gather_problems.hpp"
#include "orchmllm/backend/cuda/mover.cuh"
#include "orchmllm/backend/thrust/gather.hpp"

namespace {

using namespace orchmllm::test::gather;
using orchmllm::cuda::device_mover;
using orchmllm::cuda::gather_method;
using orchmllm::test::download;
using orchmllm::test::test_stream;
using orchmllm::test::upload;

// The warp-interleaved path must be chosen for every CUDA policy the library passes.
static_assert(orchmllm::detail::thrust_backend::lanes_for<
                  std::decay_t<decltype(thrust::cuda::par_nosync.on(cudaStream_t{}))>>() == 32);
static_assert(orchmllm::detail::thrust_backend::lanes_for<
                  std::decay_t<decltype(thrust::cuda::par.on(cudaStream_t{}))>>() == 32);
static_assert(orchmllm::detail::thrust_backend::lanes_for<thrust::cuda::tag>() == 32);
static_assert(
    orchmllm::detail::thrust_backend::lanes_for<std::decay_t<decltype(thrust::device)>>() == 32);
static_assert(orchmllm::detail::thrust_backend::lanes_for<std::decay_t<decltype(thrust::host)>>() ==
              1);
static_assert(orchmllm::byte_mover<orchmllm::thrust_mover<thrust::cuda::tag>>);

problem problem_for(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t num =
      seed % 10 == 0 ? 0 : orchmllm::test::uniform(rng, 1, seed % 3 == 0 ? 3000 : 80);
  return random_problem(rng, num, seed % 7 == 0 ? 3 << 20 : 0);
}

// Input and output in the mover's scratch buffers; the result is read back on the mover's
// stream (ordered after the gather without an explicit synchronisation in between).
std::vector<std::byte> run_device_mover(device_mover& mover, const problem& p) {
  const auto in_n = static_cast<std::int64_t>(p.in.size());
  const auto out_n = static_cast<std::int64_t>(p.out_init.size());
  std::byte* in = mover.scratch(0, in_n);
  std::byte* out = mover.scratch(1, out_n);
  upload(in, p.in, mover.stream());
  upload(out, p.out_init, mover.stream());
  mover.gather(in, out, p.segments);
  return download(out, out_n, mover.stream());
}

}  // namespace

TEST_CASE("device_mover: CUB batched and Thrust chunked match the host reference") {
  CHECK(orchmllm::test::cuda_device_count > 0);
  test_stream stream;
  device_mover cub(stream.get(), gather_method::cub_batched);
  device_mover chunked(stream.get());  // the default method
  device_mover chunked_small(stream.get(), gather_method::thrust_chunked, 256);
  CHECK(cub.method() == gather_method::cub_batched);
  CHECK(chunked.method() == gather_method::thrust_chunked);
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const problem p = problem_for(seed);
    const auto want = reference(p);
    INFO("seed ", seed, ", segments ", p.segments.size());
    for (device_mover* m : {&cub, &chunked, &chunked_small}) {
      const auto got = run_device_mover(*m, p);
      CHECK(got == want);
      CHECK(changed_outside_segments(p, got) == 0);
    }
  }
}

TEST_CASE("device_mover: one segment of several MB, every relative alignment") {
  test_stream stream;
  std::mt19937_64 rng(5);
  for (gather_method method : {gather_method::cub_batched, gather_method::thrust_chunked}) {
    device_mover mover(stream.get(), method);
    problem big;
    const std::int64_t n = (6 << 20) + 5;
    big.in = random_bytes(rng, n + 64);
    big.out_init = random_bytes(rng, n + 64);
    big.segments.src = {3};
    big.segments.dst = {17};
    big.segments.bytes = {n};
    CHECK(run_device_mover(mover, big) == reference(big));
    for (std::int64_t s = 0; s < 16; ++s)
      for (std::int64_t d = 0; d < 16; ++d) {
        problem p;
        p.in = random_bytes(rng, 9000);
        p.out_init = random_bytes(rng, 9000);
        p.segments.src = {s, 4200 + s};
        p.segments.dst = {d, 4300 + d};
        p.segments.bytes = {4096 + 33, 100};
        INFO("method ", static_cast<int>(method), ", src ", s, ", dst ", d);
        CHECK(run_device_mover(mover, p) == reference(p));
      }
  }
}

TEST_CASE("device_mover: empty and zero-byte lists enqueue nothing; bad lists throw") {
  test_stream stream;
  device_mover mover(stream.get());
  problem p;
  std::mt19937_64 rng(9);
  p.in = random_bytes(rng, 64);
  p.out_init = random_bytes(rng, 64);
  CHECK(run_device_mover(mover, p) == p.out_init);
  p.segments.src = {0, 8};
  p.segments.dst = {0, 8};
  p.segments.bytes = {0, 0};
  CHECK(run_device_mover(mover, p) == p.out_init);
  p.segments.bytes = {4, -1};
  std::byte* b = mover.scratch(0, 64);
  orchmllm::test::expect_invalid([&] { mover.gather(b, b + 32, p.segments); },
                                 {"segment 1", "bytes -1"});
  orchmllm::test::expect_invalid([&] { (void)mover.scratch(1, -3); }, {"bytes = -3"});
  orchmllm::test::expect_invalid(
      [&] { device_mover bad(stream.get(), gather_method::thrust_chunked, 40); },
      {"chunk_bytes = 40"});
  // A CUDA failure becomes cuda_error, a communication_error naming the call.
  orchmllm::test::expect_error<orchmllm::communication_error>(
      [] { orchmllm::detail::cuda_backend::cuda_check(cudaErrorInvalidValue, "cudaFake(1)"); },
      {"cudaFake(1) failed", "cudaErrorInvalidValue"});
}

TEST_CASE("device_mover: moves keep buffers and stream") {
  test_stream stream;
  device_mover a(stream.get(), gather_method::thrust_chunked);
  std::byte* s0 = a.scratch(0, 1000);
  device_mover b(std::move(a));
  CHECK(b.scratch(0, 500) == s0);
  CHECK(b.stream() == stream.get());
  CHECK(b.method() == gather_method::thrust_chunked);
  device_mover c(stream.get());
  c = std::move(b);
  CHECK(c.scratch(0, 10) == s0);
}

TEST_CASE("gather_segments and thrust_mover on the CUDA system match the host reference") {
  test_stream stream;
  orchmllm::thrust_mover<thrust::cuda::tag> mover;
  for (std::uint64_t seed = 100; seed < 130; ++seed) {
    const problem p = problem_for(seed);
    const auto want = reference(p);
    INFO("seed ", seed);
    // Public entry point with device arrays: scan, reduction and copy on the stream.
    // device_vector construction copies synchronously on the default stream (blocking for
    // the host until the data is on the device); the gather then runs on `stream`.
    thrust::device_vector<std::byte> in(p.in.begin(), p.in.end());
    thrust::device_vector<std::byte> out(p.out_init.begin(), p.out_init.end());
    thrust::device_vector<std::int64_t> src(p.segments.src.begin(), p.segments.src.end());
    thrust::device_vector<std::int64_t> dst(p.segments.dst.begin(), p.segments.dst.end());
    thrust::device_vector<std::int64_t> bytes(p.segments.bytes.begin(), p.segments.bytes.end());
    orchmllm::gather_segments(
        thrust::cuda::par.on(stream.get()), thrust::raw_pointer_cast(in.data()),
        thrust::raw_pointer_cast(out.data()), thrust::raw_pointer_cast(src.data()),
        thrust::raw_pointer_cast(dst.data()), thrust::raw_pointer_cast(bytes.data()),
        static_cast<std::int64_t>(p.segments.size()));
    ORCHMLLM_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    CHECK(download(thrust::raw_pointer_cast(out.data()),
                   static_cast<std::int64_t>(p.out_init.size()), stream.get()) == want);

    // The mover over thrust::cuda vectors.
    std::byte* min = mover.scratch(0, static_cast<std::int64_t>(p.in.size()));
    std::byte* mout = mover.scratch(1, static_cast<std::int64_t>(p.out_init.size()));
    // thrust::cuda::tag runs on the legacy default stream and synchronises before returning.
    upload(min, p.in, cudaStreamLegacy);
    upload(mout, p.out_init, cudaStreamLegacy);
    mover.gather(min, mout, p.segments);
    CHECK(download(mout, static_cast<std::int64_t>(p.out_init.size()), cudaStreamLegacy) == want);
  }
}
