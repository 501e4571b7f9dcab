#pragma once
/// @file mover.cuh
/// CUDA backend of the `byte_mover` concept (comm/mover.hpp): `orchmllm::cuda::device_mover`
/// packs and unpacks byte segments in device memory on a CUDA stream, with the chunked Thrust
/// gather (backend/thrust/gather.hpp; the default) or CUB's batched memcpy. Includes the CUDA
/// error type `orchmllm::cuda::cuda_error` and the check macro ORCHMLLM_CUDA_CHECK
/// (backend/cuda/error.cuh).
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
#include <utility>

#include "orchmllm/backend/cuda/detail/mover.cuh"
#include "orchmllm/backend/cuda/error.cuh"
#include "orchmllm/backend/thrust/gather.hpp"
#include "orchmllm/comm/mover.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/segments.hpp"

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
    ::orchmllm::detail::thrust_backend::check_chunk(chunk_bytes);
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
              const ::orchmllm::detail::segment_list& segments);

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
  detail::cuda_backend::device_buffer scratch_[2];
  detail::cuda_backend::device_buffer table_;  // segment table on the device
  detail::cuda_backend::device_buffer temp_;   // CUB temporary storage
  std::int64_t* staging_ = nullptr;            // pinned host copy of the segment table
  std::int64_t staging_count_ = 0;
  cudaEvent_t upload_done_ = nullptr;  // recorded after each upload from staging_
};

static_assert(byte_mover<device_mover>);

}  // namespace orchmllm::cuda

// The out-of-line members.
#include "orchmllm/backend/cuda/detail/mover.inl"  // IWYU pragma: export
