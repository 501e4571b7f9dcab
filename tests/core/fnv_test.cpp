// Tests for include/orchmllm/detail/core/fnv.hpp: the published FNV-1a 64-bit test vectors
// (Fowler/Noll/Vo reference suite, test_fnv.c), and words as their little-endian bytes.

#include "orchmllm/detail/core/fnv.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string_view>

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
