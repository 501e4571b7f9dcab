#pragma once
// Byte-segment gathers: the one data-movement primitive behind packing and unpacking.
//
// A gather copies segment i from in + src[i] to out + dst[i], bytes[i] bytes. Segments never
// overlap in `out`. Every pack (local items -> send buffer grouped by peer) and unpack
// (receive buffer -> destination slot order) of a route is one gather. The same segment
// arrays drive the host loop below, the Thrust version (backend/thrust/gather.hpp, CPU or GPU)
// and CUB's batched memcpy (backend/cuda).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace orchmllm::detail {

/// Structure-of-arrays segment list (device-friendly: three flat int64 arrays).
struct segment_list {
  std::vector<std::int64_t> src;    // byte offset in the input buffer
  std::vector<std::int64_t> dst;    // byte offset in the output buffer
  std::vector<std::int64_t> bytes;  // segment size

  [[nodiscard]] std::size_t size() const noexcept { return src.size(); }
  [[nodiscard]] bool empty() const noexcept { return src.empty(); }

  // Appends a segment, merging it into the previous one when both are contiguous (so a gather
  // that keeps order collapses to a handful of large copies). Zero-byte segments are dropped.
  void push(std::int64_t s, std::int64_t d, std::int64_t n) {
    if (n == 0) return;
    if (!src.empty() && src.back() + bytes.back() == s && dst.back() + bytes.back() == d) {
      bytes.back() += n;
      return;
    }
    src.push_back(s);
    dst.push_back(d);
    bytes.push_back(n);
  }

  // True when the gather is the identity on `total` bytes (out == in byte for byte).
  [[nodiscard]] bool is_identity(std::int64_t total) const noexcept {
    if (total == 0) return src.empty();
    return src.size() == 1 && src[0] == 0 && dst[0] == 0 && bytes[0] == total;
  }

  friend bool operator==(const segment_list&, const segment_list&) = default;
};

// Host gather with memcpy; the reference every other implementation is tested against.
inline void gather_segments_host(const std::byte* in, std::byte* out, const segment_list& s) {
  for (std::size_t i = 0; i < s.size(); ++i)
    std::memcpy(out + s.dst[i], in + s.src[i], static_cast<std::size_t>(s.bytes[i]));
}

}  // namespace orchmllm::detail
