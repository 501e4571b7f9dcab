#pragma once
// FNV-1a, 64 bits (the standard offset basis and prime), fed bytes or little-endian 64-bit
// words, and `word_digest` for long arrays: the digests behind every fingerprint that ranks
// compare (plans, stage declarations, routes, argument keys, the CLI's settings). Equal inputs
// give equal digests on every platform and build; neither is a cryptographic hash.

#include <bit>
#include <cstddef>
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
  /// Mixes a digest of every value (`word_digest`; with the count): equal arrays mix equally.
  void mix_all(std::span<const std::int64_t> values) noexcept;
};

/// A digest of a long run of 64-bit words, for the arrays that fingerprints cover (a plan's
/// destinations, item sizes, counts): four independent multiply-rotate lanes (xxHash64's round
/// and final mix, with its constants), so a word costs about one cycle where FNV-1a's chain of
/// eight dependent multiplies costs some thirty. Equal word sequences give equal digests on
/// every platform and build; not a cryptographic hash. Feed words with `add`, then `finish`.
class word_digest {
 public:
  /// Feeds one word.
  void add(std::uint64_t w) noexcept {
    buf_[count_ & 3] = w;
    if ((++count_ & 3) == 0) rounds(buf_[0], buf_[1], buf_[2], buf_[3]);
  }
  /// Feeds four words (the fast path); the same as four `add`s. Requires no single words
  /// pending (a multiple of four fed so far).
  void add4(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) noexcept {
    rounds(a, b, c, d);
    count_ += 4;
  }
  /// Feeds every value of `values`.
  void add_all(std::span<const std::int64_t> values) noexcept {
    std::size_t i = 0;
    if ((count_ & 3) == 0)
      for (; i + 4 <= values.size(); i += 4)
        add4(static_cast<std::uint64_t>(values[i]), static_cast<std::uint64_t>(values[i + 1]),
             static_cast<std::uint64_t>(values[i + 2]), static_cast<std::uint64_t>(values[i + 3]));
    for (; i < values.size(); ++i) add(static_cast<std::uint64_t>(values[i]));
  }
  /// The digest of every word fed, and how many.
  [[nodiscard]] std::uint64_t finish() const noexcept {
    std::uint64_t h = std::rotl(acc_[0], 1) + std::rotl(acc_[1], 7) + std::rotl(acc_[2], 12) +
                      std::rotl(acc_[3], 18);
    for (const auto a : acc_) {
      h ^= round(0, a);
      h = h * p1 + p4;
    }
    for (std::uint64_t i = 0; i < (count_ & 3); ++i) {  // the pending words
      h ^= round(0, buf_[i]);
      h = std::rotl(h, 27) * p1 + p4;
    }
    h += count_;
    h ^= h >> 33;
    h *= p2;
    h ^= h >> 29;
    h *= p3;
    h ^= h >> 32;
    return h;
  }

 private:
  static constexpr std::uint64_t p1 = 0x9E3779B185EBCA87ULL, p2 = 0xC2B2AE3D27D4EB4FULL,
                                 p3 = 0x165667B19E3779F9ULL, p4 = 0x85EBCA77C2B2AE63ULL;
  static constexpr std::uint64_t round(std::uint64_t acc, std::uint64_t w) noexcept {
    return std::rotl(acc + w * p2, 31) * p1;
  }
  void rounds(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) noexcept {
    acc_[0] = round(acc_[0], a);
    acc_[1] = round(acc_[1], b);
    acc_[2] = round(acc_[2], c);
    acc_[3] = round(acc_[3], d);
  }
  std::uint64_t acc_[4] = {p1 + p2, p2, 0, 0 - p1};
  std::uint64_t buf_[4] = {};
  std::uint64_t count_ = 0;
};

inline void fnv::mix_all(std::span<const std::int64_t> values) noexcept {
  word_digest w;
  w.add_all(values);
  mix(w.finish());
}

}  // namespace orchmllm::detail
