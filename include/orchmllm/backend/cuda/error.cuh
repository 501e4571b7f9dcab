#pragma once
/// @file error.cuh
/// The CUDA backend's error: `orchmllm::cuda::cuda_error` (a `communication_error` carrying the
/// runtime's error code) and ORCHMLLM_CUDA_CHECK, which turns a failed runtime call into one.
/// Needs the CUDA runtime (target orchmllm::cuda). See docs/communication.md.

#include <cuda_runtime.h>

#include <string>

#include "orchmllm/core/error.hpp"

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

}  // namespace orchmllm::cuda

namespace orchmllm::detail::cuda_backend {
/// Throws cuda_error for a failed runtime call `what` (the caller's location is recorded).
inline void cuda_check(
    cudaError_t code, const char* what,
    ::orchmllm::detail::source_location where = ::orchmllm::detail::source_location::current()) {
  if (code != cudaSuccess) [[unlikely]] {
    throw ::orchmllm::cuda::cuda_error(
        code,
        ::orchmllm::detail::concat(what, " failed: ", cudaGetErrorName(code), ": ",
                                   cudaGetErrorString(code)),
        where);
  }
}
}  // namespace orchmllm::detail::cuda_backend

/// Evaluates a CUDA runtime call and throws orchmllm::cuda::cuda_error (naming the call and
/// the CUDA error) unless it returns cudaSuccess.
#define ORCHMLLM_CUDA_CHECK(call) ::orchmllm::detail::cuda_backend::cuda_check((call), #call)
