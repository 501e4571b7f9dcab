#pragma once
// Internals of the CUDA mover (backend/cuda/mover.cuh): the per-segment pointers CUB's batched
// memcpy reads and a device allocation that grows on demand. Not API. See
// docs/communication.md, "Host and device use".

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "orchmllm/backend/cuda/error.cuh"

namespace orchmllm::detail::cuda_backend {

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

}  // namespace orchmllm::detail::cuda_backend
