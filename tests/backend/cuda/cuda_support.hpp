#pragma once
// Helpers of the GPU tests (tests/backend/cuda/*.cu):
//  - a static initialiser that ends the process with exit code 77 when no CUDA device is
//    present (ctest: SKIP_RETURN_CODE 77), before doctest or MPI start;
//  - cuda_staging: the `Staging` of the communicator conformance suite over device memory;
//  - upload / download of host vectors.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "orchmllm/backend/cuda/mover.cuh"

namespace orchmllm::test {

// Exits with 77 (skipped) when cudaGetDeviceCount reports no usable device. Runs during static
// initialisation of every test binary that includes this header.
inline const int cuda_device_count = [] {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess || n == 0) {
    std::printf("no CUDA device (%s): skipping the GPU tests\n",
                rc != cudaSuccess ? cudaGetErrorString(rc) : "device count 0");
    std::fflush(stdout);
    std::exit(77);
  }
  return n;
}();

/// Staging over device memory: cudaMalloc / cudaFree, and copies on the communicator's stream
/// that complete before they return (a plain cudaMemcpy runs on the legacy default stream,
/// which a non-blocking stream does not wait for); `sync` waits for that stream.
struct cuda_staging {
  cudaStream_t stream = nullptr;
  std::byte* alloc(std::int64_t bytes) {
    if (bytes <= 0) return nullptr;
    void* p = nullptr;
    ORCHMLLM_CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(bytes)));
    return static_cast<std::byte*>(p);
  }
  void free(std::byte* p) {
    if (p != nullptr) cudaFree(p);
  }
  void upload(std::byte* dst, const std::byte* host_src, std::int64_t bytes) {
    if (bytes <= 0) return;
    ORCHMLLM_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, static_cast<std::size_t>(bytes),
                                        cudaMemcpyHostToDevice, stream));
    sync();
  }
  void download(std::byte* host_dst, const std::byte* src, std::int64_t bytes) {
    if (bytes <= 0) return;
    ORCHMLLM_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, static_cast<std::size_t>(bytes),
                                        cudaMemcpyDeviceToHost, stream));
    sync();
  }
  void sync() { ORCHMLLM_CUDA_CHECK(cudaStreamSynchronize(stream)); }
};

/// Copies `host` into device memory at `dst` on `stream`, complete on return.
inline void upload(std::byte* dst, const std::vector<std::byte>& host, cudaStream_t stream) {
  cuda_staging{stream}.upload(dst, host.data(), static_cast<std::int64_t>(host.size()));
}

/// Copies n bytes of device memory at `src` to a host vector on `stream` (after the work
/// queued there), complete on return.
inline std::vector<std::byte> download(const std::byte* src, std::int64_t n, cudaStream_t stream) {
  std::vector<std::byte> host(static_cast<std::size_t>(n));
  cuda_staging{stream}.download(host.data(), src, n);
  return host;
}

/// A CUDA stream created for one test and destroyed with it.
class test_stream {
 public:
  test_stream() { ORCHMLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  test_stream(const test_stream&) = delete;
  test_stream& operator=(const test_stream&) = delete;
  ~test_stream() { cudaStreamDestroy(s_); }
  [[nodiscard]] cudaStream_t get() const noexcept { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace orchmllm::test
