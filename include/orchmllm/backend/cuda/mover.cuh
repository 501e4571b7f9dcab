#pragma once
/// @file mover.cuh
/// CUDA backend of the `byte_mover` concept (comm/mover.hpp): `orchmllm::cuda::device_mover`
/// packs and unpacks byte segments in device memory on a CUDA stream, with the chunked Thrust
/// gather (backend/thrust/gather.hpp; the default) or CUB's batched memcpy. Also the CUDA
/// error type `orchmllm::cuda::cuda_error` and the check macro ORCHMLLM_CUDA_CHECK.
///
/// Needs nvcc (C++20) and the CUDA runtime: CMake target orchmllm::cuda (option
/// ORCHMLLM_ENABLE_CUDA, macro ORCHMLLM_HAS_CUDA).

#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system_error.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cub/device/device_memcpy.cuh>
#include <string>
#include <utility>

#include "orchmllm/backend/thrust/gather.hpp"
#include "orchmllm/comm/mover.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/segments.hpp"

namespace orchmllm::cuda {

/// A CUDA runtime call failed. A `communication_error` (a failed device copy leaves the data
/// movement of a collective unfinished); `code()` is the runtime's error code and the message
/// names the call, cudaGetErrorName and cudaGetErrorString.
class cuda_error : public communication_error {
 public:
  cuda_error(cudaError_t code, const std::string& message,
             detail::source_location where = detail::source_location::current())
      : communication_error(message, where), code_(code) {}
  /// The CUDA runtime error code.
  [[nodiscard]] cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

namespace detail {
/// Throws cuda_error for a failed runtime call `what` (the caller's location is recorded).
inline void cuda_check(
    cudaError_t code, const char* what,
    ::orchmllm::detail::source_location where = ::orchmllm::detail::source_location::current()) {
  if (code != cudaSuccess) [[unlikely]] {
    throw cuda_error(code,
                     ::orchmllm::detail::concat(what, " failed: ", cudaGetErrorName(code), ": ",
                                                cudaGetErrorString(code)),
                     where);
  }
}
}  // namespace detail

}  // namespace orchmllm::cuda

/// Evaluates a CUDA runtime call and throws orchmllm::cuda::cuda_error (naming the call and
/// the CUDA error) unless it returns cudaSuccess.
#define ORCHMLLM_CUDA_CHECK(call) ::orchmllm::cuda::detail::cuda_check((call), #call)

namespace orchmllm::cuda {

/// How `device_mover::gather` copies segments.
enum class gather_method {
  /// cub::DeviceMemcpy::Batched: one batched copy of all segments (CUB balances small and
  /// large buffers across warps and blocks). Measured on an H200 (docs/results.md, "GPU
  /// gather"), it only wins for rows of arbitrary byte lengths above ~0.5 GB.
  cub_batched,
  /// orchmllm::gather_segments' chunked kernel (thrust::for_each over chunks of
  /// `chunk_bytes`), on the same stream without synchronisation. The default: 1.7-3.2x
  /// cub_batched on an H200 for rows of 16-byte multiples (every bf16/fp32 activation row).
  thrust_chunked,
};

namespace detail {

// Per-segment source / destination pointers for CUB's batched memcpy: the i-th buffer of the
// batch is base + offset[i].
struct source_pointer {
  const std::byte* base;
  const std::int64_t* offset;
  __host__ __device__ void* operator()(std::int64_t i) const {
    return const_cast<std::byte*>(base + offset[i]);  // CUB wants void*; it only reads sources
  }
};
struct destination_pointer {
  std::byte* base;
  const std::int64_t* offset;
  __host__ __device__ void* operator()(std::int64_t i) const { return base + offset[i]; }
};

// A device allocation that grows on demand (cudaMalloc; freed in the destructor).
class device_buffer {
 public:
  device_buffer() = default;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~device_buffer() { release(); }

  // At least `bytes` bytes. Growing first waits for `stream` (work queued there may still use
  // the old allocation), then frees and allocates: the old contents are not kept.
  std::byte* reserve(std::int64_t bytes, cudaStream_t stream) {
    if (bytes > bytes_) {
      if (ptr_ != nullptr) {
        ORCHMLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
        release();
      }
      void* p = nullptr;
      ORCHMLLM_CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(bytes)));
      ptr_ = static_cast<std::byte*>(p);
      bytes_ = bytes;
    }
    return ptr_;
  }
  [[nodiscard]] std::byte* data() const noexcept { return ptr_; }

 private:
  void release() noexcept {
    if (ptr_ != nullptr) cudaFree(ptr_);  // errors here can only be reported by later calls
    ptr_ = nullptr;
    bytes_ = 0;
  }
  std::byte* ptr_ = nullptr;
  std::int64_t bytes_ = 0;
};

}  // namespace detail

/// `byte_mover` over device memory on one CUDA stream.
///
/// - `scratch(slot, bytes)`: device buffers (cudaMalloc), grown on demand and kept until the
///   destructor; growing waits for the stream first (the old buffer may still be in use).
/// - `gather(in, out, segments)`: copies the host segment list into a pinned staging buffer,
///   uploads it with one cudaMemcpyAsync on the stream, then enqueues the copy on the same
///   stream: the chunked Thrust kernel (gather_method::thrust_chunked), or
///   `cub::DeviceMemcpy::Batched` over iterators that produce in + src[i], out + dst[i] and
///   bytes[i] (gather_method::cub_batched). It returns without waiting for the copy: work queued on
///   the stream afterwards (the NCCL communicator's all_to_allv) sees its result. Before the
///   pinned staging buffer is reused, the previous upload is awaited (an event), so the host
///   list may be changed or destroyed as soon as gather returns.
///
/// Complexity per gather: O(segments) host work and upload, plus the device copy (O(total
/// bytes) spread over the GPU). Steady-state gathers allocate nothing. Deterministic: every
/// destination byte is written once from its source byte. Not thread-safe; the stream must
/// outlive the mover, and the current device must be the stream's device in every call.
/// Throws `invalid_argument_error` for a malformed segment list (naming the segment) or bad
/// sizes, `cuda_error` (a communication_error) when a CUDA call fails — errors of earlier
/// asynchronous work on the stream can surface there too.
class device_mover {
 public:
  /// Work is enqueued on `stream` (may be the legacy default stream 0). `chunk_bytes` is the
  /// chunk size of gather_method::thrust_chunked (a positive multiple of 16, else
  /// invalid_argument_error). Allocates nothing until first used.
  explicit device_mover(cudaStream_t stream, gather_method method = gather_method::thrust_chunked,
                        std::int64_t chunk_bytes = default_gather_chunk_bytes)
      : stream_(stream), method_(method), chunk_bytes_(chunk_bytes) {
    ::orchmllm::detail::thrust_gather::check_chunk(chunk_bytes);
  }

  device_mover(const device_mover&) = delete;
  device_mover& operator=(const device_mover&) = delete;
  device_mover(device_mover&& o) noexcept { swap(o); }
  device_mover& operator=(device_mover&& o) noexcept {
    if (this != &o) {
      device_mover tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }

  /// Waits for this mover's last upload and frees every buffer (device buffers with cudaFree,
  /// which also waits for the device). Never throws.
  ~device_mover() {
    if (upload_done_ != nullptr) {
      cudaEventSynchronize(upload_done_);
      cudaEventDestroy(upload_done_);
    }
    if (staging_ != nullptr) cudaFreeHost(staging_);
  }

  /// A device buffer of at least `bytes` bytes, valid until the next scratch call with the
  /// same slot (0 or 1; any other value means 1). O(1) when the current allocation suffices.
  /// Throws invalid_argument_error if bytes < 0, cuda_error when allocation fails.
  std::byte* scratch(int slot, std::int64_t bytes) {
    ORCHMLLM_REQUIRE(bytes >= 0, invalid_argument_error, "device_mover::scratch: bytes = ", bytes,
                     " must be >= 0");
    return scratch_[slot == 0 ? 0 : 1].reserve(bytes, stream_);
  }

  /// Enqueues the gather of `segments` from `in` to `out` (device memory) on the stream; see
  /// the class comment. Nothing is enqueued for an empty list or one of zero-byte segments.
  void gather(const std::byte* in, std::byte* out,
              const ::orchmllm::detail::segment_list& segments) {
    ::orchmllm::detail::thrust_gather::check_segment_list(segments, "device_mover::gather");
    const auto n = static_cast<std::int64_t>(segments.size());
    if (n == 0) return;
    const bool use_thrust = method_ == gather_method::thrust_chunked;
    const std::int64_t columns = use_thrust ? 4 : 3;  // src | dst | bytes [| chunk ends]
    std::int64_t* host = stage(columns * n);
    const ::orchmllm::detail::thrust_gather::chunk_count count{chunk_bytes_};
    std::int64_t total_bytes = 0;
    std::int64_t total_chunks = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      host[i] = segments.src[k];
      host[n + i] = segments.dst[k];
      host[2 * n + i] = segments.bytes[k];
      total_bytes += segments.bytes[k];
      if (use_thrust) {
        total_chunks += count(segments.bytes[k]);
        host[3 * n + i] = total_chunks;
      }
    }
    if (total_bytes == 0) return;
    const auto table_bytes = static_cast<std::int64_t>(sizeof(std::int64_t)) * columns * n;
    auto* table = reinterpret_cast<std::int64_t*>(table_.reserve(table_bytes, stream_));
    ORCHMLLM_CUDA_CHECK(cudaMemcpyAsync(table, host, static_cast<std::size_t>(table_bytes),
                                        cudaMemcpyHostToDevice, stream_));
    ORCHMLLM_CUDA_CHECK(cudaEventRecord(upload_done_, stream_));
    const std::int64_t* src = table;
    const std::int64_t* dst = table + n;
    const std::int64_t* bytes = table + 2 * n;

    if (use_thrust) {
      try {
        ::orchmllm::detail::thrust_gather::gather_with_ends(thrust::cuda::par_nosync.on(stream_),
                                                            in, out, src, dst, bytes, table + 3 * n,
                                                            n, total_chunks, chunk_bytes_);
      } catch (const thrust::system_error& e) {
        throw cuda_error(static_cast<cudaError_t>(e.code().value()),
                         ::orchmllm::detail::concat("device_mover::gather (thrust): ", e.what()));
      }
      return;
    }
    const auto first = thrust::counting_iterator<std::int64_t>(0);
    const auto sources = thrust::make_transform_iterator(first, detail::source_pointer{in, src});
    const auto destinations =
        thrust::make_transform_iterator(first, detail::destination_pointer{out, dst});
    std::size_t temp_bytes = 0;
    ORCHMLLM_CUDA_CHECK(
        cub::DeviceMemcpy::Batched(nullptr, temp_bytes, sources, destinations, bytes, n, stream_));
    std::byte* temp = temp_.reserve(static_cast<std::int64_t>(temp_bytes), stream_);
    ORCHMLLM_CUDA_CHECK(
        cub::DeviceMemcpy::Batched(temp, temp_bytes, sources, destinations, bytes, n, stream_));
  }

  /// Blocks until all work queued on the stream so far is complete. Throws cuda_error.
  void synchronize() { ORCHMLLM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  /// The stream every operation is enqueued on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  /// The copy method `gather` uses.
  [[nodiscard]] gather_method method() const noexcept { return method_; }
  /// Selects the copy method for later gathers (benchmarks compare both).
  void set_method(gather_method m) noexcept { method_ = m; }
  /// Chunk size of gather_method::thrust_chunked.
  [[nodiscard]] std::int64_t chunk_bytes() const noexcept { return chunk_bytes_; }

 private:
  // Pinned host memory for `count` int64 values. The previous upload from it must have
  // finished before it is overwritten (or freed to grow).
  std::int64_t* stage(std::int64_t count) {
    if (upload_done_ == nullptr) {
      ORCHMLLM_CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
    } else {
      ORCHMLLM_CUDA_CHECK(cudaEventSynchronize(upload_done_));
    }
    if (count > staging_count_) {
      if (staging_ != nullptr) {
        ORCHMLLM_CUDA_CHECK(cudaFreeHost(staging_));
        staging_ = nullptr;
        staging_count_ = 0;
      }
      void* p = nullptr;
      // Grow geometrically: segment counts vary from step to step.
      const std::int64_t want = count < 1024 ? 1024 : count + count / 2;
      ORCHMLLM_CUDA_CHECK(
          cudaMallocHost(&p, static_cast<std::size_t>(want) * sizeof(std::int64_t)));
      staging_ = static_cast<std::int64_t*>(p);
      staging_count_ = want;
    }
    return staging_;
  }

  void swap(device_mover& o) noexcept {
    std::swap(stream_, o.stream_);
    std::swap(method_, o.method_);
    std::swap(chunk_bytes_, o.chunk_bytes_);
    std::swap(scratch_[0], o.scratch_[0]);
    std::swap(scratch_[1], o.scratch_[1]);
    std::swap(table_, o.table_);
    std::swap(temp_, o.temp_);
    std::swap(staging_, o.staging_);
    std::swap(staging_count_, o.staging_count_);
    std::swap(upload_done_, o.upload_done_);
  }

  cudaStream_t stream_ = nullptr;
  gather_method method_ = gather_method::thrust_chunked;
  std::int64_t chunk_bytes_ = default_gather_chunk_bytes;
  detail::device_buffer scratch_[2];
  detail::device_buffer table_;      // segment table on the device
  detail::device_buffer temp_;       // CUB temporary storage
  std::int64_t* staging_ = nullptr;  // pinned host copy of the segment table
  std::int64_t staging_count_ = 0;
  cudaEvent_t upload_done_ = nullptr;  // recorded after each upload from staging_
};

static_assert(byte_mover<device_mover>);

}  // namespace orchmllm::cuda
