#pragma once
/// @file config.hpp
/// Build mode: header-only (the default, target `orchmllm::orchmllm`) or compiled (target
/// `orchmllm::compiled`, a static library that holds the heavy code once).
///
/// `ORCHMLLM_COMPILED` is defined by the `orchmllm::compiled` target for every translation unit
/// that links it. In such a unit
///   * `balance` and the statistics (`rank_loads`, `makespan_lower_bound`,
///     `compute_statistics`) are thin templates that pass the cost model, type-erased
///     (`detail::cost_ref`), to entry points in the library, one per computation type
///     (std::int64_t, double, long double): no algorithm is instantiated in the unit, for the
///     shipped cost models and the trainer's own alike;
///   * `map_bins`, `plan_step`, `route::build`, `batch_layout::from_ranks`, the built-in
///     mappers' calls, `bin_mapping_problem::evaluate` and the error message formatting are
///     declarations only; `map_bins` with the trainer's own mapper passes it to the library
///     behind a std::function;
///   * the algorithm headers (detail/balance/, detail/topology/) are not included.
/// Plans are the same in both modes: the library runs the same code on the same values in the
/// same computation type. Every translation unit of one program must use the same mode (link
/// `orchmllm::compiled` to all targets that include the library, or to none); the thin
/// templates live in an inline namespace of their own, so mixing modes fails to link rather than
/// silently breaking the one-definition rule.
///
/// `ORCHMLLM_COMPILED_BUILD` is defined only inside the library's own translation unit.

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

