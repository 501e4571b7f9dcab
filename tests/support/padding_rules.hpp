#pragma once
// Padding rules as a trainer writes them (core/padding.hpp, `padding_rule`), shared by the
// padding and balancer tests: the next power of two (CUDA-graph shapes, named), a minimum tile
// (parametrised, unnamed) and non-uniform steps.

#include <algorithm>
#include <cstdint>

namespace orchmllm::test {

struct next_pow2 {
  [[nodiscard]] std::int64_t padded_length(std::int64_t l) const {
    std::int64_t p = 1;
    while (p < l) p *= 2;
    return l == 0 ? 0 : p;
  }
  bool operator==(const next_pow2&) const = default;
  [[nodiscard]] const char* name() const { return "next_pow2"; }
};

struct at_least {
  std::int64_t floor = 0;
  [[nodiscard]] std::int64_t padded_length(std::int64_t l) const { return std::max(l, floor); }
  bool operator==(const at_least&) const = default;
};

struct steps {
  [[nodiscard]] std::int64_t padded_length(std::int64_t l) const {
    return l <= 3 ? 3 : l <= 10 ? 12 : l <= 40 ? l + (l % 2) : 5 * ((l + 4) / 5);
  }
  bool operator==(const steps&) const = default;
};

}  // namespace orchmllm::test
