#pragma once
/// @file version.hpp
/// Library version. Header-only: the macros and the function are all there is. See
/// docs/design.md, "Build targets".

#define ORCHMLLM_VERSION_MAJOR 0
#define ORCHMLLM_VERSION_MINOR 1
#define ORCHMLLM_VERSION_PATCH 0

namespace orchmllm {

/// The library version as "MAJOR.MINOR.PATCH". O(1), never throws.
inline constexpr const char* version_string() noexcept { return "0.1.0"; }

}  // namespace orchmllm
