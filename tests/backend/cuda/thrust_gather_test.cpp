// Thrust gather (backend/thrust/gather.hpp) against the host reference gather_segments_host.
// One source, built twice with g++: THRUST_DEVICE_SYSTEM = CPP (ctest backend.thrust.gather_cpp)
// and OMP (backend.thrust.gather_omp, several threads). Every check compares whole output buffers
// byte for byte, so bytes outside the segments must also be left untouched.
#include <doctest/doctest.h>
#include <thrust/system/cpp/execution_policy.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#if defined(_OPENMP)
#include <thrust/system/omp/execution_policy.h>
#endif

#include "gather_problems.hpp"
#include "orchmllm/backend/thrust/gather.hpp"
#include "orchmllm/detail/comm/segments.hpp"
#include "support/test_support.hpp"

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_OMP
#define ORCHMLLM_TEST_SYSTEM "omp"
#else
#define ORCHMLLM_TEST_SYSTEM "cpp"
#endif

namespace {

using orchmllm::detail::segment_list;
using orchmllm::test::uniform;
using namespace orchmllm::test::gather;

void check_untouched(const problem& p, const std::vector<std::byte>& out) {
  CHECK(changed_outside_segments(p, out) == 0);
}

template <class Policy>
std::vector<std::byte> run_gather(const Policy& policy, const problem& p, std::int64_t chunk) {
  auto out = p.out_init;
  orchmllm::gather_segments(policy, p.in.data(), out.data(), p.segments.src.data(),
                            p.segments.dst.data(), p.segments.bytes.data(),
                            static_cast<std::int64_t>(p.segments.size()), chunk);
  return out;
}

// Runs the same problem through the mover: input and output live in its scratch buffers.
template <class System>
std::vector<std::byte> run_mover(orchmllm::thrust_mover<System>& mover, const problem& p) {
  const auto in_n = static_cast<std::int64_t>(p.in.size());
  const auto out_n = static_cast<std::int64_t>(p.out_init.size());
  std::byte* in = mover.scratch(0, in_n);
  std::byte* out = mover.scratch(1, out_n);
  std::memcpy(in, p.in.data(), p.in.size());
  std::memcpy(out, p.out_init.data(), p.out_init.size());
  mover.gather(in, out, p.segments);
  return std::vector<std::byte>(out, out + out_n);
}

}  // namespace

TEST_CASE("thrust gather [" ORCHMLLM_TEST_SYSTEM "]: copy_lane covers every byte once") {
  // All relative alignments (source and destination offsets modulo 16) for lengths around the
  // word sizes, some alignments for lengths of many words per lane, and several lane counts:
  // the lanes together must copy exactly [0, n).
  constexpr std::int64_t kBuffer = 4200;
  std::mt19937_64 rng(11);
  const auto src = random_bytes(rng, kBuffer);
  std::vector<std::int64_t> lengths;
  for (std::int64_t n = 0; n <= 80; ++n) lengths.push_back(n);
  for (std::int64_t n : {127, 128, 129, 191, 192, 193, 511, 512, 1000, 2047, 2048, 2049, 4000})
    lengths.push_back(n);
  std::int64_t bad = 0;
  std::int64_t runs = 0;
  for (std::int64_t n : lengths)
    for (std::int64_t so = 0; so < 16; ++so)
      for (std::int64_t dof = 0; dof < 16; ++dof) {
        if (n > 80 && (so % 5 != 0 || dof % 5 != 0)) continue;  // 0, 5, 10, 15
        for (std::int64_t lanes : {1, 3, 32}) {
          // 16-byte aligned backing store, so `so`/`dof` are the true address residues.
          alignas(16) std::byte out[kBuffer];
          std::memset(out, 0xA5, sizeof out);
          alignas(16) std::byte in[kBuffer];
          std::memcpy(in, src.data(), sizeof in);
          for (std::int64_t lane = 0; lane < lanes; ++lane)
            orchmllm::detail::thrust_backend::copy_lane(out + dof, in + so, n, lane, lanes);
          for (std::int64_t i = 0; i < kBuffer; ++i) {
            const bool inside = i >= dof && i < dof + n;
            const std::byte want = inside ? in[so + i - dof] : std::byte{0xA5};
            if (out[i] != want) ++bad;
          }
          ++runs;
        }
      }
  CHECK(bad == 0);
  CHECK(runs == 3 * (81 * 256 + 13 * 16));
}

TEST_CASE("thrust gather [" ORCHMLLM_TEST_SYSTEM
          "]: random segment lists match the host reference") {
  std::int64_t cases = 0;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    const std::int64_t num = seed % 10 == 0 ? 0 : uniform(rng, 1, seed % 3 == 0 ? 1000 : 60);
    const problem p = random_problem(rng, num, seed % 7 == 0 ? 100000 : 0);
    const auto want = reference(p);
    check_untouched(p, want);
    for (std::int64_t chunk :
         {std::int64_t{16}, std::int64_t{48}, std::int64_t{4096}, std::int64_t{1} << 16}) {
      // The smallest chunk (one 16-byte word per chunk, the most binary searches) only on the
      // smaller lists, to keep the test fast.
      if (chunk == 16 && (seed % 3 == 0 || seed % 7 == 0)) continue;
      INFO("seed ", seed, ", segments ", num, ", chunk ", chunk);
      const auto got = run_gather(thrust::device, p, chunk);
      CHECK(got == want);
      check_untouched(p, got);
      ++cases;
    }
  }
  CHECK(cases == 240 - 20 - 8 + 2);  // seeds divisible by 3 or 7 skip chunk 16
}

TEST_CASE("thrust gather [" ORCHMLLM_TEST_SYSTEM
          "]: explicit host policies and the default chunk") {
  std::mt19937_64 rng(7);
  const problem p = random_problem(rng, 500, 50000);
  const auto want = reference(p);
  auto got = p.out_init;
  orchmllm::gather_segments(thrust::cpp::par, p.in.data(), got.data(), p.segments.src.data(),
                            p.segments.dst.data(), p.segments.bytes.data(),
                            static_cast<std::int64_t>(p.segments.size()));
  CHECK(got == want);
#if defined(_OPENMP)
  CHECK(run_gather(thrust::omp::par, p, 4096) == want);
#endif
  CHECK(run_gather(thrust::host, p, 256) == want);
}

TEST_CASE("thrust gather [" ORCHMLLM_TEST_SYSTEM "]: edge cases") {
  std::mt19937_64 rng(3);
  SUBCASE("empty list") {
    problem p;
    p.in = random_bytes(rng, 10);
    p.out_init = random_bytes(rng, 10);
    CHECK(run_gather(thrust::device, p, 4096) == p.out_init);
  }
  SUBCASE("only zero-byte segments") {
    problem p;
    p.in = random_bytes(rng, 10);
    p.out_init = random_bytes(rng, 10);
    p.segments.src = {0, 5, 9};
    p.segments.dst = {1, 1, 3};
    p.segments.bytes = {0, 0, 0};
    CHECK(run_gather(thrust::device, p, 4096) == p.out_init);
  }
  SUBCASE("one segment of several MB, unaligned at both ends") {
    problem p;
    const std::int64_t n = (5 << 20) + 3;
    p.in = random_bytes(rng, n + 100);
    p.out_init = random_bytes(rng, n + 100);
    p.segments.src = {7};
    p.segments.dst = {60};
    p.segments.bytes = {n};
    const auto want = reference(p);
    CHECK(run_gather(thrust::device, p, 4096) == want);
    CHECK(run_gather(thrust::device, p, 16) == want);
  }
  SUBCASE("every relative alignment, segment just above one chunk") {
    for (std::int64_t s = 0; s < 16; ++s)
      for (std::int64_t d = 0; d < 16; ++d) {
        problem p;
        p.in = random_bytes(rng, 4200);
        p.out_init = random_bytes(rng, 4200);
        p.segments.src = {s};
        p.segments.dst = {d};
        p.segments.bytes = {4096 + 21};
        INFO("src ", s, ", dst ", d);
        CHECK(run_gather(thrust::device, p, 4096) == reference(p));
      }
  }
  SUBCASE("zero-byte segments between non-empty ones (binary search must skip them)") {
    problem p;
    p.in = random_bytes(rng, 100);
    p.out_init = random_bytes(rng, 100);
    p.segments.src = {0, 10, 10, 20, 30, 40};
    p.segments.dst = {50, 0, 3, 3, 20, 90};
    p.segments.bytes = {0, 3, 0, 17, 0, 10};
    CHECK(run_gather(thrust::device, p, 16) == reference(p));
  }
}

TEST_CASE("thrust gather [" ORCHMLLM_TEST_SYSTEM "]: bad arguments") {
  std::byte buf[16]{};
  const std::int64_t zero[1] = {0};
  for (std::int64_t chunk :
       {std::int64_t{0}, std::int64_t{8}, std::int64_t{24}, std::int64_t{-16}}) {
    orchmllm::test::expect_invalid(
        [&] { orchmllm::gather_segments(thrust::device, buf, buf, zero, zero, zero, 1, chunk); },
        {"chunk_bytes = " + std::to_string(chunk), "multiple of 16"});
  }
  orchmllm::test::expect_invalid(
      [&] { orchmllm::gather_segments(thrust::device, buf, buf, zero, zero, zero, -1); },
      {"num_segments = -1"});
  orchmllm::test::expect_invalid([] { orchmllm::thrust_mover<thrust::device_system_tag> m(100); },
                                 {"chunk_bytes = 100"});
  orchmllm::thrust_mover<thrust::device_system_tag> mover;
  orchmllm::test::expect_invalid([&] { mover.scratch(0, -5); }, {"bytes = -5"});
  segment_list bad;
  bad.src = {0, 4};
  bad.dst = {0, 8};
  bad.bytes = {4, -2};
  std::byte* b = mover.scratch(0, 64);
  orchmllm::test::expect_invalid([&] { mover.gather(b, b + 32, bad); }, {"segment 1", "bytes -2"});
  bad.bytes = {4};
  orchmllm::test::expect_invalid([&] { mover.gather(b, b + 32, bad); }, {"differ in size"});
}

TEST_CASE("thrust gather [" ORCHMLLM_TEST_SYSTEM "]: thrust_mover matches the reference") {
  static_assert(orchmllm::byte_mover<orchmllm::thrust_mover<thrust::device_system_tag>>);
#if defined(_OPENMP)
  static_assert(orchmllm::byte_mover<orchmllm::thrust_mover<thrust::omp::tag>>);
#endif
  orchmllm::thrust_mover<thrust::device_system_tag> mover;
  orchmllm::thrust_mover<thrust::cpp::tag> cpp_mover(256);
  for (std::uint64_t seed = 200; seed < 240; ++seed) {
    std::mt19937_64 rng(seed);
    const problem p = random_problem(rng, uniform(rng, 0, 400), seed % 5 == 0 ? 100000 : 0);
    const auto want = reference(p);
    INFO("seed ", seed);
    CHECK(run_mover(mover, p) == want);
    CHECK(run_mover(cpp_mover, p) == want);
  }
  // Scratch: large enough, reused when large enough, slots independent.
  std::byte* a = mover.scratch(0, 100);
  std::byte* b = mover.scratch(1, 100);
  CHECK(a != b);
  CHECK(mover.scratch(0, 50) == a);
  CHECK(mover.scratch(7, 10) == b);  // any slot other than 0 is slot 1
  CHECK(mover.chunk_bytes() == orchmllm::default_gather_chunk_bytes);
}
