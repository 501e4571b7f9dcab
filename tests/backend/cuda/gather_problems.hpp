#pragma once
// Random gather problems shared by the Thrust (CPU) and CUDA gather tests: segment lists with
// empty and zero-byte segments, unaligned offsets, segments around and above one chunk,
// occasionally large ones; destinations disjoint (in random order, with gaps), sources
// anywhere (they may overlap: a gather only reads them).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "orchmllm/detail/comm/segments.hpp"
#include "support/test_support.hpp"

namespace orchmllm::test::gather {

using orchmllm::detail::segment_list;

// n random bytes.
inline std::vector<std::byte> random_bytes(std::mt19937_64& rng, std::int64_t n) {
  std::vector<std::byte> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); i += 8) {  // 8 bytes per draw: fast in sanitizer builds
    const std::uint64_t w = rng();
    for (std::size_t j = 0; j < 8 && i + j < v.size(); ++j)
      v[i + j] = static_cast<std::byte>(w >> (8 * j));
  }
  return v;
}

// A gather problem: input bytes, the output's initial bytes (a pattern the segments overwrite
// in part) and segments whose destinations are disjoint. Sources may overlap (a gather reads).
struct problem {
  std::vector<std::byte> in;
  std::vector<std::byte> out_init;
  segment_list segments;
};

// Segment sizes: zero, tiny, unaligned, around one chunk, several chunks, occasionally large.
inline std::int64_t random_size(std::mt19937_64& rng, std::int64_t large) {
  switch (uniform(rng, 0, 9)) {
    case 0:
      return 0;
    case 1:
      return uniform(rng, 1, 15);
    case 2:
      return uniform(rng, 16, 64);
    case 3:
      return uniform(rng, 4090, 4100);
    case 4:
      return uniform(rng, 4097, 3 * 4096 + 17);
    case 5:
      return large > 0 ? uniform(rng, large / 2, large) : uniform(rng, 0, 300);
    default:
      return uniform(rng, 0, 600);
  }
}

// num segments with destinations in random order (a permutation of output slots, with random
// gaps between them) and random source offsets (aligned and unaligned alike). Zero-byte segments
// are kept in the list: segment_list::push would drop them, so the arrays are filled directly.
inline problem random_problem(std::mt19937_64& rng, std::int64_t num, std::int64_t large) {
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(num));
  for (auto& s : sizes) s = random_size(rng, large);
  std::int64_t in_size = 64;
  for (auto s : sizes) in_size = std::max(in_size, s + 64);
  in_size += uniform(rng, 0, 4096);

  std::vector<std::int64_t> order(static_cast<std::size_t>(num));
  for (std::int64_t i = 0; i < num; ++i) order[static_cast<std::size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::int64_t> dst(static_cast<std::size_t>(num));
  std::int64_t pos = uniform(rng, 0, 31);
  for (auto i : order) {
    dst[static_cast<std::size_t>(i)] = pos;
    pos += sizes[static_cast<std::size_t>(i)] + (uniform(rng, 0, 3) == 0 ? uniform(rng, 1, 40) : 0);
  }
  problem p;
  p.in = random_bytes(rng, in_size);
  p.out_init = random_bytes(rng, pos + uniform(rng, 0, 64));
  for (std::int64_t i = 0; i < num; ++i) {
    const auto k = static_cast<std::size_t>(i);
    p.segments.src.push_back(uniform(rng, 0, in_size - sizes[k]));
    p.segments.dst.push_back(dst[k]);
    p.segments.bytes.push_back(sizes[k]);
  }
  return p;
}

// The expected output: the host reference gather applied to the initial output.
inline std::vector<std::byte> reference(const problem& p) {
  auto out = p.out_init;
  orchmllm::detail::gather_segments_host(p.in.data(), out.data(), p.segments);
  return out;
}

// Number of bytes not covered by any segment whose value differs from the initial output
// (checked independently of the reference, which could share a bug with the gather).
inline std::int64_t changed_outside_segments(const problem& p, const std::vector<std::byte>& out) {
  std::vector<char> covered(out.size(), 0);
  for (std::size_t i = 0; i < p.segments.size(); ++i)
    std::fill_n(covered.begin() + p.segments.dst[i], p.segments.bytes[i], char{1});
  std::int64_t changed = 0;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!covered[i] && out[i] != p.out_init[i]) ++changed;
  return changed;
}

}  // namespace orchmllm::test::gather
