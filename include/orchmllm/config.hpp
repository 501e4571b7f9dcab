#pragma once
/// @file config.hpp
/// Build mode: header-only (the default, target `orchmllm::orchmllm`) or compiled (target
/// `orchmllm::compiled`, a static library that holds the heavy code once). `ORCHMLLM_COMPILED`
/// is defined by the `orchmllm::compiled` target for every translation unit that links it; in
/// such a unit `balance` and the statistics forward the cost model, type-erased, to entry
/// points in the library, the heavy non-template functions (`ORCHMLLM_FUNC`) are declarations
/// only and the algorithm headers are not included. Plans are the same in both modes; every
/// translation unit of one program must use the same mode (mixing them fails to link).
/// `ORCHMLLM_COMPILED_BUILD` is defined only inside the library's own translation unit. See
/// docs/design.md, "Build targets".

#if defined(ORCHMLLM_COMPILED) && !defined(ORCHMLLM_COMPILED_BUILD)
/// 1 when this unit uses the compiled library (declarations only for what it holds).
#define ORCHMLLM_USE_COMPILED 1
#else
#define ORCHMLLM_USE_COMPILED 0
#endif

/// Specifier of the heavy non-template functions: `inline` in header-only mode, nothing (one
/// external definition, in the library) in compiled mode.
#if defined(ORCHMLLM_COMPILED) || defined(ORCHMLLM_COMPILED_BUILD)
#define ORCHMLLM_FUNC
#else
#define ORCHMLLM_FUNC inline
#endif

/// Opens and closes the namespace of the mode-dependent entry templates (`balance`, the
/// statistics): `orchmllm::compiled_mode` (inline) in compiled mode, plain `orchmllm` otherwise.
#if ORCHMLLM_USE_COMPILED
#define ORCHMLLM_MODE_NAMESPACE_BEGIN inline namespace compiled_mode {
#define ORCHMLLM_MODE_NAMESPACE_END }
#else
#define ORCHMLLM_MODE_NAMESPACE_BEGIN
#define ORCHMLLM_MODE_NAMESPACE_END
#endif

/// Expands `X(T)` for the three computation types of the compiled library's entry points.
#define ORCHMLLM_DETAIL_FOR_COST_TYPES(X) \
  X(std::int64_t)                         \
  X(double)                               \
  X(long double)
