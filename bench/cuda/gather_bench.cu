// Device gather throughput: the unpack of ~10k rows of skewed (lognormal) lengths into a random
// destination order, as a dispatch does after the all-to-all.
//
//   BM_cub_batched       cuda::device_mover, gather_method::cub_batched (host staging of the
//                        segment table + upload + cub::DeviceMemcpy::Batched)
//   BM_cub_kernel        cub::DeviceMemcpy::Batched alone, segment table already on the device
//   BM_thrust_chunked    cuda::device_mover, gather_method::thrust_chunked (chunk size: arg 3)
//   BM_memcpy_batch      cudaMemcpyBatchAsync of the same segments (CUDA >= 13)
//   BM_d2d_copy          one cudaMemcpyAsync device-to-device of the same total bytes: the
//                        ceiling a gather can approach
//
// Times are CUDA event times on one stream (manual time). Counters: GBps = payload bytes / time
// (each byte counted once, 1e9), rows, MiB, verified (1 when the output matched the host
// reference after the timed loop; D2D: 1 when the copy matched its input). Without a CUDA
// device every benchmark is skipped with an error message and the program exits 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_memcpy.cuh>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "orchmllm/backend/cuda/mover.cuh"
#include "orchmllm/detail/comm/segments.hpp"

namespace {

using orchmllm::cuda::device_mover;
using orchmllm::cuda::gather_method;

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// rows lognormal(0, 1.25) lengths scaled to about `total` bytes, each a multiple of `unit` bytes
// (1: any length, so sources and destinations have unrelated alignments, the worst case; 16:
// rows of 16-byte multiples, as every bf16/fp32 activation row of a real model is); segment i
// reads row i of a row-ordered input and writes it to a shuffled position of the output.
struct workload {
  std::int64_t rows = 0;
  std::int64_t bytes = 0;
  orchmllm::detail::segment_list segments;
  std::vector<std::byte> input;     // host copy of the input
  std::vector<std::byte> expected;  // host reference output
  std::byte* d_in = nullptr;
  std::byte* d_out = nullptr;
  std::int64_t* d_table = nullptr;  // src | dst | bytes on the device (BM_cub_kernel)
  workload() = default;
  workload(const workload&) = delete;
  workload& operator=(const workload&) = delete;
  ~workload() {
    cudaFree(d_in);
    cudaFree(d_out);
    cudaFree(d_table);
  }
};

workload& get_workload(std::int64_t rows, std::int64_t total, std::int64_t unit) {
  static std::map<std::array<std::int64_t, 3>, std::unique_ptr<workload>> cache;
  auto& slot = cache[{rows, total, unit}];
  if (slot) return *slot;
  slot = std::make_unique<workload>();
  workload& w = *slot;
  std::mt19937_64 rng(20240601);
  std::lognormal_distribution<double> dist(0.0, 1.25);
  std::vector<double> raw(static_cast<std::size_t>(rows));
  double sum = 0;
  for (auto& x : raw) sum += (x = dist(rng));
  std::vector<std::int64_t> len(static_cast<std::size_t>(rows));
  const double units = static_cast<double>(total) / static_cast<double>(unit);
  for (std::size_t i = 0; i < raw.size(); ++i) {
    len[i] = unit * std::max<std::int64_t>(1, std::llround(raw[i] / sum * units));
    w.bytes += len[i];
  }
  std::vector<std::int64_t> src(len.size()), order(len.size()), dst(len.size());
  std::int64_t pos = 0;
  for (std::size_t i = 0; i < len.size(); ++i) {
    src[i] = pos;
    pos += len[i];
    order[i] = static_cast<std::int64_t>(i);
  }
  std::shuffle(order.begin(), order.end(), rng);
  pos = 0;
  for (auto i : order) {
    dst[static_cast<std::size_t>(i)] = pos;
    pos += len[static_cast<std::size_t>(i)];
  }
  for (std::size_t i = 0; i < len.size(); ++i) w.segments.push(src[i], dst[i], len[i]);
  w.rows = rows;
  w.input.resize(static_cast<std::size_t>(w.bytes));
  for (std::size_t i = 0; i < w.input.size(); i += 8) {
    const std::uint64_t v = rng();
    for (std::size_t j = 0; j < 8 && i + j < w.input.size(); ++j)
      w.input[i + j] = static_cast<std::byte>(v >> (8 * j));
  }
  w.expected.assign(w.input.size(), std::byte{0});
  orchmllm::detail::gather_segments_host(w.input.data(), w.expected.data(), w.segments);

  const auto n = static_cast<std::int64_t>(w.segments.size());
  std::vector<std::int64_t> table;
  table.insert(table.end(), w.segments.src.begin(), w.segments.src.end());
  table.insert(table.end(), w.segments.dst.begin(), w.segments.dst.end());
  table.insert(table.end(), w.segments.bytes.begin(), w.segments.bytes.end());
  ORCHMLLM_CUDA_CHECK(cudaMalloc(&w.d_in, static_cast<std::size_t>(w.bytes)));
  ORCHMLLM_CUDA_CHECK(cudaMalloc(&w.d_out, static_cast<std::size_t>(w.bytes)));
  ORCHMLLM_CUDA_CHECK(
      cudaMalloc(&w.d_table, static_cast<std::size_t>(3 * n) * sizeof(std::int64_t)));
  ORCHMLLM_CUDA_CHECK(cudaMemcpy(w.d_in, w.input.data(), w.input.size(), cudaMemcpyHostToDevice));
  ORCHMLLM_CUDA_CHECK(cudaMemcpy(w.d_table, table.data(), table.size() * sizeof(std::int64_t),
                                 cudaMemcpyHostToDevice));
  return w;
}

// A stream and two events for timing; one per process.
struct timing {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  timing() {
    ORCHMLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ORCHMLLM_CUDA_CHECK(cudaEventCreate(&start));
    ORCHMLLM_CUDA_CHECK(cudaEventCreate(&stop));
  }
};
timing& get_timing() {
  static timing t;
  return t;
}

// Runs `op` once untimed (warm-up, lazy allocations), then timed per iteration with events;
// reports GBps and checks `d_out` (or `d_check` against `check`) afterwards.
template <class Op>
void run(benchmark::State& state, workload& w, Op&& op,
         const std::vector<std::byte>* check = nullptr) {
  timing& t = get_timing();
  ORCHMLLM_CUDA_CHECK(cudaMemsetAsync(w.d_out, 0, static_cast<std::size_t>(w.bytes), t.stream));
  op(t.stream);
  ORCHMLLM_CUDA_CHECK(cudaStreamSynchronize(t.stream));
  double seconds = 0;
  for (auto _ : state) {
    ORCHMLLM_CUDA_CHECK(cudaEventRecord(t.start, t.stream));
    op(t.stream);
    ORCHMLLM_CUDA_CHECK(cudaEventRecord(t.stop, t.stream));
    ORCHMLLM_CUDA_CHECK(cudaEventSynchronize(t.stop));
    float ms = 0;
    ORCHMLLM_CUDA_CHECK(cudaEventElapsedTime(&ms, t.start, t.stop));
    state.SetIterationTime(ms / 1e3);
    seconds += ms / 1e3;
  }
  std::vector<std::byte> out(static_cast<std::size_t>(w.bytes));
  ORCHMLLM_CUDA_CHECK(cudaMemcpy(out.data(), w.d_out, out.size(), cudaMemcpyDeviceToHost));
  const auto& want = check != nullptr ? *check : w.expected;
  state.counters["verified"] = out == want ? 1.0 : 0.0;
  state.counters["GBps"] = seconds > 0 ? static_cast<double>(w.bytes) *
                                             static_cast<double>(state.iterations()) / seconds / 1e9
                                       : 0.0;
  state.counters["rows"] = static_cast<double>(w.rows);
  state.counters["segments"] = static_cast<double>(w.segments.size());
  state.counters["MiB"] = static_cast<double>(w.bytes) / (1 << 20);
  state.counters["unit"] = static_cast<double>(state.range(2));
  state.SetBytesProcessed(w.bytes * state.iterations());
}

void BM_cub_batched(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  workload& w = get_workload(state.range(0), state.range(1), state.range(2));
  device_mover mover(get_timing().stream, gather_method::cub_batched);
  run(state, w, [&](cudaStream_t) { mover.gather(w.d_in, w.d_out, w.segments); });
}

void BM_cub_kernel(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  workload& w = get_workload(state.range(0), state.range(1), state.range(2));
  const auto n = static_cast<std::int64_t>(w.segments.size());
  const auto first = thrust::counting_iterator<std::int64_t>(0);
  const auto srcs = thrust::make_transform_iterator(
      first, orchmllm::detail::cuda_backend::source_pointer{w.d_in, w.d_table});
  const auto dsts = thrust::make_transform_iterator(
      first, orchmllm::detail::cuda_backend::destination_pointer{w.d_out, w.d_table + n});
  const std::int64_t* sizes = w.d_table + 2 * n;
  std::size_t temp_bytes = 0;
  ORCHMLLM_CUDA_CHECK(cub::DeviceMemcpy::Batched(nullptr, temp_bytes, srcs, dsts, sizes, n));
  void* temp = nullptr;
  ORCHMLLM_CUDA_CHECK(cudaMalloc(&temp, temp_bytes));
  run(state, w, [&](cudaStream_t s) {
    ORCHMLLM_CUDA_CHECK(cub::DeviceMemcpy::Batched(temp, temp_bytes, srcs, dsts, sizes, n, s));
  });
  cudaFree(temp);
}

void BM_thrust_chunked(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  workload& w = get_workload(state.range(0), state.range(1), state.range(2));
  device_mover mover(get_timing().stream, gather_method::thrust_chunked, state.range(3));
  run(state, w, [&](cudaStream_t) { mover.gather(w.d_in, w.d_out, w.segments); });
  state.counters["chunk_bytes"] = static_cast<double>(state.range(3));
}

#if CUDART_VERSION >= 13000
void BM_memcpy_batch(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  workload& w = get_workload(state.range(0), state.range(1), state.range(2));
  const std::size_t n = w.segments.size();
  std::vector<void*> dsts(n);
  std::vector<const void*> srcs(n);
  std::vector<std::size_t> sizes(n);
  for (std::size_t i = 0; i < n; ++i) {
    dsts[i] = w.d_out + w.segments.dst[i];
    srcs[i] = w.d_in + w.segments.src[i];
    sizes[i] = static_cast<std::size_t>(w.segments.bytes[i]);
  }
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::size_t attr_index = 0;
  run(state, w, [&](cudaStream_t s) {
    ORCHMLLM_CUDA_CHECK(
        cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), n, &attr, &attr_index, 1, s));
  });
}
#endif

void BM_d2d_copy(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("no CUDA device");
  workload& w = get_workload(state.range(0), state.range(1), state.range(2));
  run(
      state, w,
      [&](cudaStream_t s) {
        ORCHMLLM_CUDA_CHECK(cudaMemcpyAsync(w.d_out, w.d_in, static_cast<std::size_t>(w.bytes),
                                            cudaMemcpyDeviceToDevice, s));
      },
      &w.input);
}

// {rows, total bytes, unit}: ~6.7 KB and ~54 KB mean rows, of any length (unit 1) or of
// 16-byte multiples (unit 16).
constexpr std::int64_t kSmall = std::int64_t{64} << 20, kLarge = std::int64_t{512} << 20;
void sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t unit : {1, 16})
    for (std::int64_t total : {kSmall, kLarge}) b->Args({10000, total, unit});
}
void sizes_aligned(benchmark::internal::Benchmark* b) {
  for (std::int64_t total : {kSmall, kLarge}) b->Args({10000, total, 16});
}
void sizes_and_chunks(benchmark::internal::Benchmark* b) {
  for (std::int64_t unit : {1, 16})
    for (std::int64_t total : {kSmall, kLarge})
      for (std::int64_t chunk : {std::int64_t{4096}, std::int64_t{16384}, std::int64_t{65536}})
        b->Args({10000, total, unit, chunk});
}

}  // namespace

BENCHMARK(BM_d2d_copy)->Apply(sizes_aligned)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cub_batched)->Apply(sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_cub_kernel)->Apply(sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_thrust_chunked)
    ->Apply(sizes_and_chunks)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
#if CUDART_VERSION >= 13000
BENCHMARK(BM_memcpy_batch)->Apply(sizes_aligned)->UseManualTime()->Unit(benchmark::kMicrosecond);
#endif
