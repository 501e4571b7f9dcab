#pragma once
// Internals of the Thrust backend (backend/thrust/gather.hpp): the chunked, word-wide segment
// copy every Thrust system runs, its chunk arithmetic and checks, and the vector type of each
// system. Not API. See docs/communication.md, "Host and device use".

#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/memory.h>
#include <thrust/system/cpp/vector.h>
#include <thrust/transform_reduce.h>
#include <thrust/transform_scan.h>

#if defined(_OPENMP)
#include <thrust/system/omp/vector.h>
#endif
#if defined(__CUDACC__)
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system/cuda/vector.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "orchmllm/comm/mover.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/segments.hpp"

#if !defined(ORCHMLLM_HOST_DEVICE)
#if defined(__CUDACC__)
#define ORCHMLLM_HOST_DEVICE __host__ __device__
#else
#define ORCHMLLM_HOST_DEVICE
#endif
#endif

namespace orchmllm::detail::thrust_backend {

// Words the copy moves; memcpy on the host (no aliasing questions; compilers emit one move),
// a direct vector load/store on the device (ld/st.global.v2.u64 for 16 bytes).
struct alignas(16) word16 {
  std::uint64_t lo, hi;
};

template <class Word>
ORCHMLLM_HOST_DEVICE inline void copy_word(std::byte* d, const std::byte* s) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<Word*>(d) = *reinterpret_cast<const Word*>(s);
#else
  std::memcpy(d, s, sizeof(Word));
#endif
}

// Lane `lane` of `lanes` copies its share of [s, s + n) to d: bytes lane, lane + lanes, ... of
// the head (up to the first Word boundary of s), words lane, lane + lanes, ... of the body, bytes
// likewise of the tail. Requires s and d to have the same address modulo sizeof(Word).
template <class Word>
ORCHMLLM_HOST_DEVICE inline void copy_lane_words(std::byte* d, const std::byte* s, std::int64_t n,
                                                 std::int64_t lane, std::int64_t lanes) {
  constexpr std::int64_t w = sizeof(Word);
  const auto mis = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(s) & (w - 1));
  std::int64_t head = (w - mis) & (w - 1);
  if (head > n) head = n;
  for (std::int64_t i = lane; i < head; i += lanes) d[i] = s[i];
  const std::int64_t words = (n - head) / w;
  std::byte* dw = d + head;
  const std::byte* sw = s + head;
  for (std::int64_t k = lane; k < words; k += lanes) copy_word<Word>(dw + k * w, sw + k * w);
  for (std::int64_t i = head + words * w + lane; i < n; i += lanes) d[i] = s[i];
}

/// Copies lane `lane`'s share (of `lanes`) of n bytes from s to d with the widest word both
/// addresses allow. All lanes together copy every byte exactly once. O(n / lanes) per lane.
ORCHMLLM_HOST_DEVICE inline void copy_lane(std::byte* d, const std::byte* s, std::int64_t n,
                                           std::int64_t lane, std::int64_t lanes) {
  const auto diff = reinterpret_cast<std::uintptr_t>(s) ^ reinterpret_cast<std::uintptr_t>(d);
  if ((diff & 15u) == 0) {
    copy_lane_words<word16>(d, s, n, lane, lanes);
  } else if ((diff & 7u) == 0) {
    copy_lane_words<std::uint64_t>(d, s, n, lane, lanes);
  } else if ((diff & 3u) == 0) {
    copy_lane_words<std::uint32_t>(d, s, n, lane, lanes);
  } else {
    for (std::int64_t i = lane; i < n; i += lanes) d[i] = s[i];
  }
}

// ceil(bytes / chunk): the number of chunks of one segment (0 for an empty segment).
struct chunk_count {
  std::int64_t chunk;
  ORCHMLLM_HOST_DEVICE std::int64_t operator()(std::int64_t bytes) const {
    return bytes <= 0 ? 0 : (bytes + chunk - 1) / chunk;
  }
};

// One work item: lane (item % lanes) of chunk (item / lanes). `ends` is the inclusive scan of
// the per-segment chunk counts, so chunk c belongs to the first segment whose end exceeds c.
struct copy_chunk {
  const std::byte* in;
  std::byte* out;
  const std::int64_t* src;
  const std::int64_t* dst;
  const std::int64_t* bytes;
  const std::int64_t* ends;
  std::int64_t num_segments;
  std::int64_t chunk;
  std::int64_t lanes;

  ORCHMLLM_HOST_DEVICE void operator()(std::int64_t item) const {
    const std::int64_t c = item / lanes;
    const std::int64_t lane = item - c * lanes;
    std::int64_t lo = 0, hi = num_segments;  // upper_bound(ends, c)
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (ends[mid] <= c) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    const std::int64_t seg = lo;
    const std::int64_t first = seg == 0 ? 0 : ends[seg - 1];
    const std::int64_t offset = (c - first) * chunk;
    std::int64_t n = bytes[seg] - offset;
    if (n > chunk) n = chunk;
    copy_lane(out + dst[seg] + offset, in + src[seg] + offset, n, lane, lanes);
  }
};

/// Work items per chunk for a policy: 32 (a warp) on the CUDA system, 1 on host systems (every
/// other system: CPP, OMP, TBB, whose memory the host reads directly).
template <class ExecutionPolicy>
constexpr std::int64_t lanes_for() {
#if defined(__CUDACC__)
  if constexpr (std::is_base_of_v<thrust::cuda_cub::execution_policy<ExecutionPolicy>,
                                  ExecutionPolicy>) {
    return 32;
  }
#endif
  return 1;
}

// Checks a host segment list before a mover stages it: the three arrays of one size, every
// entry >= 0; else invalid_argument_error naming `who` and the first bad segment. O(n).
inline void check_segment_list(const segment_list& segments, const char* who) {
  ORCHMLLM_REQUIRE(
      segments.dst.size() == segments.src.size() && segments.bytes.size() == segments.src.size(),
      invalid_argument_error, who, ": segment arrays differ in size (src ", segments.src.size(),
      ", dst ", segments.dst.size(), ", bytes ", segments.bytes.size(), ")");
  for (std::size_t k = 0; k < segments.size(); ++k)
    ORCHMLLM_REQUIRE(segments.src[k] >= 0 && segments.dst[k] >= 0 && segments.bytes[k] >= 0,
                     invalid_argument_error, who, ": segment ", k, " has src ", segments.src[k],
                     ", dst ", segments.dst[k], ", bytes ", segments.bytes[k],
                     " (all must be >= 0)");
}

inline void check_chunk(std::int64_t chunk_bytes) {
  ORCHMLLM_REQUIRE(chunk_bytes >= 16 && chunk_bytes % 16 == 0, invalid_argument_error,
                   "gather_segments: chunk_bytes = ", chunk_bytes,
                   " must be a positive multiple of 16 (so chunks keep 16-byte alignment)");
}

/// The gather once the chunk scan `ends` (in the policy's system) and its last value
/// `total_chunks` are known: one for_each over total_chunks * lanes work items.
template <class ExecutionPolicy>
void gather_with_ends(const ExecutionPolicy& policy, const std::byte* in, std::byte* out,
                      const std::int64_t* src, const std::int64_t* dst, const std::int64_t* bytes,
                      const std::int64_t* ends, std::int64_t num_segments,
                      std::int64_t total_chunks, std::int64_t chunk_bytes) {
  if (total_chunks <= 0) return;
  constexpr std::int64_t lanes = lanes_for<ExecutionPolicy>();
  thrust::for_each_n(policy, thrust::counting_iterator<std::int64_t>(0), total_chunks * lanes,
                     copy_chunk{in, out, src, dst, bytes, ends, num_segments, chunk_bytes, lanes});
}

// Returns a temporary buffer to its system on scope exit (also when an algorithm throws).
template <class ExecutionPolicy, class Pointer>
struct temporary_guard {
  const ExecutionPolicy& policy;
  Pointer ptr;
  std::ptrdiff_t n;
  temporary_guard(const ExecutionPolicy& p, Pointer q, std::ptrdiff_t m)
      : policy(p), ptr(q), n(m) {}
  temporary_guard(const temporary_guard&) = delete;
  temporary_guard& operator=(const temporary_guard&) = delete;
  ~temporary_guard() { thrust::return_temporary_buffer(policy, ptr, n); }
};

/// Vector type of a Thrust system tag: thrust::cpp::tag; thrust::omp::tag when compiling with
/// OpenMP (Thrust's OMP algorithms refuse to build without it); thrust::cuda::tag under nvcc.
/// The device system's tag (thrust::device_system_tag) is one of these.
template <class System>
struct thrust_system_traits;  // unsupported system: no definition

template <>
struct thrust_system_traits<thrust::system::cpp::tag> {
  template <class T>
  using vector = thrust::system::cpp::vector<T>;
};

#if defined(_OPENMP)
template <>
struct thrust_system_traits<thrust::system::omp::tag> {
  template <class T>
  using vector = thrust::system::omp::vector<T>;
};
#endif

#if defined(__CUDACC__)
template <>
struct thrust_system_traits<thrust::system::cuda::tag> {
  template <class T>
  using vector = thrust::system::cuda::vector<T>;
};
#endif

/// gather_segments (backend/thrust/gather.hpp): checks, the chunk scan, then the gather.
template <class ExecutionPolicy>
void gather_chunked(const ExecutionPolicy& policy, const std::byte* in, std::byte* out,
                    const std::int64_t* src, const std::int64_t* dst, const std::int64_t* bytes,
                    std::int64_t num_segments, std::int64_t chunk_bytes) {
  ORCHMLLM_REQUIRE(num_segments >= 0, invalid_argument_error,
                   "gather_segments: num_segments = ", num_segments, " must be >= 0");
  check_chunk(chunk_bytes);
  if (num_segments == 0) return;
  const chunk_count count{chunk_bytes};
  constexpr bool host_memory = lanes_for<ExecutionPolicy>() == 1;
  std::int64_t total_chunks = 0;
  if constexpr (!host_memory) {
    // Device memory: the total comes back to the host through a reduction, before anything is
    // allocated (an all-empty gather allocates nothing).
    total_chunks = thrust::transform_reduce(policy, bytes, bytes + num_segments, count,
                                            std::int64_t{0}, thrust::plus<std::int64_t>());
    if (total_chunks == 0) return;
  }
  auto buffer = thrust::get_temporary_buffer<std::int64_t>(policy, num_segments);
  const temporary_guard<ExecutionPolicy, decltype(buffer.first)> guard(policy, buffer.first,
                                                                       buffer.second);
  std::int64_t* ends = thrust::raw_pointer_cast(buffer.first);
  thrust::transform_inclusive_scan(policy, bytes, bytes + num_segments, ends, count,
                                   thrust::plus<std::int64_t>());
  if constexpr (host_memory) {
    // Host systems: the scan's last value is readable directly (and OMP's reduce trips UBSan
    // inside Thrust: a null-reference idiom in thrust::reference).
    total_chunks = ends[num_segments - 1];
    if (total_chunks == 0) return;
  }
  gather_with_ends(policy, in, out, src, dst, bytes, ends, num_segments, total_chunks, chunk_bytes);
}

}  // namespace orchmllm::detail::thrust_backend
