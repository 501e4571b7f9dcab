#pragma once
/// @file gather.hpp
/// Byte-segment gather with Thrust: `gather_segments`, one source for every Thrust system (CPP
/// and OMP on the host with any C++20 compiler; CUDA with nvcc), and `thrust_mover`, the
/// `byte_mover` built on it.
///
/// A gather copies segment i from in + src[i] to out + dst[i], bytes[i] bytes
/// (`detail::gather_segments_host` is the reference). Segments are cut into chunks so that skewed
/// sizes spread over all workers; each chunk copies with the widest aligned word.
///
/// Requirements: C++20; the CCCL headers (Thrust 2.x or newer; target orchmllm::thrust puts them
/// on the include path). Compiles as plain .hpp: the CUDA-only parts are behind __CUDACC__.
/// Macro ORCHMLLM_HOST_DEVICE expands to `__host__ __device__` under nvcc, to nothing elsewhere.
/// The algorithm: docs/communication.md, "The chunked gather".

#include <cstddef>
#include <cstdint>
#include <vector>

#include "orchmllm/backend/thrust/detail/gather.hpp"
#include "orchmllm/comm/mover.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/segments.hpp"

namespace orchmllm {

/// Default chunk size of the Thrust gather: large enough that the per-chunk binary search is
/// noise, small enough that a multi-megabyte segment spreads over many workers.
inline constexpr std::int64_t default_gather_chunk_bytes = 4096;

/// Gathers `num_segments` byte segments: for every i, copies bytes[i] bytes from in + src[i] to
/// out + dst[i]. `in`, `out` and the three int64 arrays must be accessible in the policy's
/// system (host memory for thrust::cpp / thrust::omp, device memory for thrust::cuda / device).
///
/// Load-balanced: segments are cut into chunks of at most `chunk_bytes` bytes (a transform scan
/// of per-segment chunk counts, in a temporary buffer of the policy's system), and every chunk
/// is one work item that finds its segment by binary search; copies use 16-byte words where the
/// source and destination are 16-byte aligned relative to each other (else 8, 4 or 1).
///
/// Preconditions (not checked: the arrays may live in device memory): bytes[i] >= 0; every
/// segment inside its buffer; destination segments pairwise disjoint and not overlapping any
/// source segment. Zero-byte segments and num_segments == 0 are fine (nothing is copied).
///
/// Complexity: O(num_segments) for the scan (and, on CUDA, a reduction), plus
/// O(total_chunks · log(num_segments) + total bytes) for the copy, spread over the system's
/// workers. Returns when the copy is complete for synchronous policies (thrust::cuda::par,
/// thrust::device); with thrust::cuda::par_nosync it is only enqueued after the scan.
/// Deterministic: every output byte is written exactly once with the value of its source byte.
/// Throws `invalid_argument_error` if num_segments < 0 or chunk_bytes is not a positive
/// multiple of 16; whatever the system throws on allocation or launch failure
/// (thrust::system_error, std::bad_alloc).
template <class ExecutionPolicy>
void gather_segments(const ExecutionPolicy& policy, const std::byte* in, std::byte* out,
                     const std::int64_t* src, const std::int64_t* dst, const std::int64_t* bytes,
                     std::int64_t num_segments,
                     std::int64_t chunk_bytes = default_gather_chunk_bytes) {
  detail::thrust_backend::gather_chunked(policy, in, out, src, dst, bytes, num_segments,
                                         chunk_bytes);
}

/// `byte_mover` for any Thrust system `System` (a system tag: thrust::cpp::tag,
/// thrust::omp::tag with OpenMP, thrust::cuda::tag with nvcc, or thrust::device_system_tag).
/// Scratch buffers are vectors of that system; `gather` computes the chunk scan of the host segment
/// list on the host, uploads src | dst | bytes | ends into one vector of the system (one transfer)
/// and runs the chunked gather with the system's tag as the execution policy.
///
/// For CUDA with an explicit stream and CUB's batched memcpy use `cuda::device_mover`
/// (backend/cuda/mover.cuh). Not thread-safe (one mover per rank / thread). Deterministic.
template <class System>
class thrust_mover {
 public:
  /// The vector type of the system, e.g. thrust::cpp::vector<T>.
  template <class T>
  using vector = typename detail::thrust_backend::thrust_system_traits<System>::template vector<T>;

  /// Throws `invalid_argument_error` if chunk_bytes is not a positive multiple of 16.
  explicit thrust_mover(std::int64_t chunk_bytes = default_gather_chunk_bytes)
      : chunk_bytes_(chunk_bytes) {
    detail::thrust_backend::check_chunk(chunk_bytes);
  }

  /// A buffer of at least `bytes` bytes in the system's memory, valid until the next scratch
  /// call with the same slot (0 or 1; any other value means 1). Reuses the allocation when it
  /// is large enough; otherwise frees it and allocates `bytes` (old contents are not kept).
  /// O(1) when reused, O(bytes) when it grows (the system value-initialises new vectors).
  /// Throws `invalid_argument_error` if bytes < 0; the system's allocation errors.
  std::byte* scratch(int slot, std::int64_t bytes) {
    ORCHMLLM_REQUIRE(bytes >= 0, invalid_argument_error, "thrust_mover::scratch: bytes = ", bytes,
                     " must be >= 0");
    auto& b = buffers_[slot == 0 ? 0 : 1];
    if (static_cast<std::int64_t>(b.size()) < bytes) {
      b = vector<std::byte>();  // free first: peak memory is the new buffer, not both
      b.resize(static_cast<std::size_t>(bytes));
    }
    return thrust::raw_pointer_cast(b.data());
  }

  /// Gathers `segments` from `in` to `out` (both in the system's memory). O(segments) on the
  /// host plus the chunked gather (see gather_segments). Returns when the copy is complete.
  /// Throws `invalid_argument_error` for a malformed list (arrays of different sizes, a
  /// negative offset or size), naming the segment; the system's errors.
  void gather(const std::byte* in, std::byte* out, const detail::segment_list& segments) {
    detail::thrust_backend::check_segment_list(segments, "thrust_mover::gather");
    const auto n = static_cast<std::int64_t>(segments.size());
    if (n == 0) return;
    const detail::thrust_backend::chunk_count count{chunk_bytes_};
    host_.resize(static_cast<std::size_t>(4 * n));
    std::int64_t total = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      host_[k] = segments.src[k];
      host_[static_cast<std::size_t>(n) + k] = segments.dst[k];
      host_[static_cast<std::size_t>(2 * n) + k] = segments.bytes[k];
      total += count(segments.bytes[k]);
      host_[static_cast<std::size_t>(3 * n) + k] = total;
    }
    if (total == 0) return;
    table_.resize(host_.size());
    thrust::copy(host_.begin(), host_.end(), table_.begin());
    const std::int64_t* t = thrust::raw_pointer_cast(table_.data());
    detail::thrust_backend::gather_with_ends(System{}, in, out, t, t + n, t + 2 * n, t + 3 * n, n,
                                             total, chunk_bytes_);
  }

  /// The chunk size this mover gathers with.
  [[nodiscard]] std::int64_t chunk_bytes() const noexcept { return chunk_bytes_; }

 private:
  std::int64_t chunk_bytes_;
  vector<std::byte> buffers_[2];
  vector<std::int64_t> table_;      // src | dst | bytes | ends in the system's memory
  std::vector<std::int64_t> host_;  // the same, staged on the host
};

static_assert(byte_mover<thrust_mover<thrust::system::cpp::tag>>);

}  // namespace orchmllm
