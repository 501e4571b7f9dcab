#pragma once
// FNV-1a, 64 bits (the standard offset basis and prime), fed bytes or little-endian 64-bit
// words: the one digest behind every fingerprint that ranks compare (plans, stage
// declarations, routes, argument keys, the CLI's settings). Equal inputs give equal digests on
// every platform and build; it is not a cryptographic hash.

#include <bit>
#include <cstdint>
#include <span>
#include <string_view>

namespace orchmllm::detail {

struct fnv {
  std::uint64_t h = 14695981039346656037ULL;  // the 64-bit offset basis

  /// One step of FNV-1a: mixes one byte.
  void mix_byte(std::uint8_t b) noexcept {
    h ^= b;
    h *= 1099511628211ULL;  // the 64-bit FNV prime
  }
  /// Mixes the 8 bytes of `v`, lowest first (FNV-1a of its little-endian bytes).
  void mix(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) mix_byte(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  /// Mixes the length, then every character.
  void mix(std::string_view s) noexcept {
    mix(static_cast<std::uint64_t>(s.size()));
    for (char c : s) mix(static_cast<std::uint64_t>(static_cast<unsigned char>(c)));
  }
  void mix_signed(std::int64_t v) noexcept { mix(static_cast<std::uint64_t>(v)); }
  void mix_double(double v) noexcept { mix(std::bit_cast<std::uint64_t>(v)); }
  /// Mixes every value (not the count).
  void mix_all(std::span<const std::int64_t> values) noexcept {
    for (const auto v : values) mix_signed(v);
  }
};

}  // namespace orchmllm::detail
