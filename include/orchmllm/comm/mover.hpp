#pragma once
/// @file mover.hpp
/// The `byte_mover` concept: scratch buffers and the segment gather in a payload memory space,
/// what a route's pack and unpack run on. Models: `host_mover` (below, memcpy), `thrust_mover`
/// (backend/thrust/gather.hpp: any Thrust system, CPU or GPU), `cuda::device_mover`
/// (backend/cuda/mover.cuh: CUB batched memcpy on a stream). See docs/communication.md,
/// "Routes".

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "orchmllm/detail/comm/segments.hpp"

namespace orchmllm {

/// Routes (comm/route.hpp) pack items into send buffers grouped by peer and unpack received
/// bytes into destination slot order; both are gathers of byte segments
/// (`detail::segment_list`: copy bytes[i] bytes from in + src[i] to out + dst[i]). A mover does
/// those gathers where the payload lives, and owns the scratch buffers between hops:
/// - `scratch(slot, bytes)`: a buffer of at least `bytes` bytes in the payload memory, valid
///   until the next `scratch` call with the same slot (slots 0 and 1 alternate between hops).
///   Reuses its allocation when large enough, so steady-state steps allocate nothing. Growing a
///   slot must not disturb work already enqueued that reads the old buffer (device movers free
///   stream-ordered, e.g. `cudaFreeAsync` on their stream).
/// - `gather(in, out, segments)`: performs the copies. It may run asynchronously to the host
///   as long as it is ordered before the next communicator operation that reads `out` (device
///   movers enqueue on the stream the communicator uses).
template <class M>
concept byte_mover = requires(M& m, const std::byte* in, std::byte* out,
                              const detail::segment_list& segments, std::int64_t bytes, int slot) {
  { m.scratch(slot, bytes) } -> std::same_as<std::byte*>;
  m.gather(in, out, segments);
};

/// Host memory mover: `std::vector` scratch buffers and `std::memcpy` per segment (segments
/// that are contiguous in both buffers are merged when the route is built, so a gather that
/// keeps order is one large memcpy). Deterministic; not thread-safe (one per rank).
class host_mover {
 public:
  /// O(1) amortised; grows the buffer of `slot` (0 or 1) to at least `bytes`.
  std::byte* scratch(int slot, std::int64_t bytes) {
    auto& b = buffers_[slot == 0 ? 0 : 1];
    if (static_cast<std::int64_t>(b.size()) < bytes) b.resize(static_cast<std::size_t>(bytes));
    return b.data();
  }
  /// O(total bytes + segments).
  void gather(const std::byte* in, std::byte* out, const detail::segment_list& segments) {
    detail::gather_segments_host(in, out, segments);
  }

 private:
  std::vector<std::byte> buffers_[2];
};

static_assert(byte_mover<host_mover>);

}  // namespace orchmllm
