// Tests for include/orchmllm/detail/core/fnv.hpp: the published FNV-1a 64-bit test vectors
// (Fowler/Noll/Vo reference suite, test_fnv.c), and words as their little-endian bytes.

#include "orchmllm/detail/core/fnv.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>
#include <vector>

namespace {

std::uint64_t fnv1a(std::string_view bytes) {
  orchmllm::detail::fnv f;
  for (const char c : bytes) f.mix_byte(static_cast<std::uint8_t>(c));
  return f.h;
}

}  // namespace

TEST_CASE("fnv: published FNV-1a 64-bit vectors") {
  CHECK(fnv1a("") == 0xcbf29ce484222325ULL);
  CHECK(fnv1a("a") == 0xaf63dc4c8601ec8cULL);
  CHECK(fnv1a("foobar") == 0x85944171f73967e8ULL);
}

TEST_CASE("fnv: a word is its eight little-endian bytes; strings mix their length first") {
  orchmllm::detail::fnv w;
  w.mix(0x0807060504030201ULL);
  CHECK(w.h == fnv1a(std::string_view("\x01\x02\x03\x04\x05\x06\x07\x08", 8)));
  orchmllm::detail::fnv a, b;
  a.mix(std::string_view("ab"));
  b.mix(std::uint64_t{2});
  b.mix(std::uint64_t{'a'});
  b.mix(std::uint64_t{'b'});
  CHECK(a.h == b.h);
  orchmllm::detail::fnv x, y;
  x.mix_signed(-1);
  y.mix(~std::uint64_t{0});
  CHECK(x.h == y.h);
}

namespace {

std::uint64_t digest_one_by_one(std::initializer_list<std::uint64_t> words) {
  orchmllm::detail::word_digest w;
  for (const auto x : words) w.add(x);
  return w.finish();
}

}  // namespace

TEST_CASE("word_digest: every way of feeding the same words gives the same digest") {
  std::vector<std::int64_t> v;
  std::uint64_t x = 88172645463325252ULL;  // xorshift64
  for (int i = 0; i < 37; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v.push_back(static_cast<std::int64_t>(x));
  }
  for (std::size_t n = 0; n <= v.size(); ++n) {
    const std::span<const std::int64_t> s(v.data(), n);
    orchmllm::detail::word_digest single, bulk, mixed;
    for (const auto y : s) single.add(static_cast<std::uint64_t>(y));
    bulk.add_all(s);
    // add4 for every whole group of four, then single words (as `fingerprint` does).
    std::size_t i = 0;
    for (; i + 4 <= n; i += 4)
      mixed.add4(static_cast<std::uint64_t>(s[i]), static_cast<std::uint64_t>(s[i + 1]),
                 static_cast<std::uint64_t>(s[i + 2]), static_cast<std::uint64_t>(s[i + 3]));
    for (; i < n; ++i) mixed.add(static_cast<std::uint64_t>(s[i]));
    CHECK(bulk.finish() == single.finish());
    CHECK(mixed.finish() == single.finish());
    // Bulk after a pending single word (not a multiple of four fed yet).
    orchmllm::detail::word_digest late, late_single;
    late.add(7);
    late.add_all(s);
    late_single.add(7);
    for (const auto y : s) late_single.add(static_cast<std::uint64_t>(y));
    CHECK(late.finish() == late_single.finish());
  }
}

TEST_CASE("word_digest: order, values and length all change it") {
  const auto base = digest_one_by_one({1, 2, 3, 4, 5});
  CHECK(digest_one_by_one({1, 2, 3, 4, 5}) == base);
  CHECK(digest_one_by_one({2, 1, 3, 4, 5}) != base);     // a swap inside the first four
  CHECK(digest_one_by_one({1, 2, 3, 4, 6}) != base);     // a pending word
  CHECK(digest_one_by_one({1, 2, 3, 4, 5, 0}) != base);  // one more (zero) word
  CHECK(digest_one_by_one({1, 2, 3, 4}) != digest_one_by_one({1, 2, 3, 4, 0}));
  CHECK(digest_one_by_one({}) != digest_one_by_one({0}));
  CHECK(digest_one_by_one({1ULL << 63}) != digest_one_by_one({0}));  // the top bit counts
  // Every single-bit change of one word in a block of eight changes the digest.
  for (int w = 0; w < 8; ++w)
    for (int bit = 0; bit < 64; ++bit) {
      orchmllm::detail::word_digest a;
      for (int i = 0; i < 8; ++i) a.add(i == w ? (std::uint64_t{1} << bit) : 0);
      CHECK(a.finish() != digest_one_by_one({0, 0, 0, 0, 0, 0, 0, 0}));
    }
}

TEST_CASE("word_digest: the same digest on every platform and build (regression value)") {
  // Computed by this implementation (xxHash64's round and final mix over the lanes): a change
  // here changes every fingerprint ranks compare, so builds of two versions would disagree.
  // The same values with g++ -O0, g++ -O3 -march=native and clang++-19 -O2.
  CHECK(digest_one_by_one({1, 2, 3, 4, 5}) == 0x13724504ae8f35f0ULL);
  CHECK(digest_one_by_one({}) == 0x3fdf455f9dcf1e62ULL);
  orchmllm::detail::fnv f, g;
  const std::vector<std::int64_t> a{1, 2, 3}, b{1, 2, 4};
  f.mix_all(a);
  g.mix_all(b);
  CHECK(f.h != g.h);
}
