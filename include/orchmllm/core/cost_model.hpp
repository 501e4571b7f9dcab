#pragma once
/// @file cost_model.hpp
/// Cost models: how long an item of a given length takes in a stage.
///
/// A cost model is any copyable callable `c(std::int64_t length)` returning an arithmetic value
/// (integral or floating point) that is non-negative and non-decreasing in the length. Balancers
/// compute in that value type: integral costs give exact arithmetic and integer lower bounds,
/// floating costs are evaluated once per item and combined in a fixed order, with every product
/// rounded before it is added (`rounded_mul`), so every rank gets bit-identical plans whatever
/// its compiler flags. Provided models:
///   linear_cost            c(l) = w·l (integral; a product past 2^63 - 1 is an error)
///   quadratic_cost         c(l) = a + b·l + c·l² (attention-aware)
///   transformer_flops_cost FLOPs of a decoder/encoder stack from its configuration
///
/// Fitting a model to measured times is in core/cost_fit.hpp. See docs/cost_models.md, "The
/// `cost_model` concept" and "Provided models".

#include <cmath>
#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/core/checked.hpp"

namespace orchmllm {

/// Any copyable callable mapping an `std::int64_t` length to an arithmetic (non-bool) cost.
///
/// Every type this accepts works in every algorithm, with the same plan as the same values in
/// the computation type `cost_type_t<C>`: integral costs of any width and signedness are
/// computed in `std::int64_t` (an unsigned cost above 2^63 − 1 is rejected with
/// `invalid_argument_error` when it is evaluated), `float` in `double`, `double` and
/// `long double` as they are. So a model returning `unsigned` gives exactly the plan of the same
/// model returning `int`.
template <class C>
concept cost_model =
    std::is_object_v<C> && std::copy_constructible<C> && std::invocable<const C&, std::int64_t> &&
    std::is_arithmetic_v<std::remove_cvref_t<std::invoke_result_t<const C&, std::int64_t>>> &&
    !std::same_as<std::remove_cvref_t<std::invoke_result_t<const C&, std::int64_t>>, bool>;

/// The value type a cost model returns, as it returns it. (Unconstrained, as is `cost_type_t`:
/// GCC 12 re-checks an alias template's constraint while printing a diagnostic's template
/// context and can fail the build on it; the functions that take models are constrained.)
template <class C>
using cost_result_t = std::remove_cvref_t<std::invoke_result_t<const C&, std::int64_t>>;

/// The value type the library computes a cost model's loads, bounds and makespans in:
/// `std::int64_t` for integral results, `double` for `float`, otherwise the result type.
template <class C>
using cost_type_t = std::conditional_t<
    std::is_integral_v<cost_result_t<C>>, std::int64_t,
    std::conditional_t<std::is_same_v<cost_result_t<C>, float>, double, cost_result_t<C>>>;

namespace detail {

/// True when a model already returns its computation type (no conversion needed).
template <class C>
inline constexpr bool is_normal_cost_v = std::is_same_v<cost_result_t<C>, cost_type_t<C>>;

/// `c(l)` converted to the model's computation type `cost_type_t<C>`. Throws
/// `invalid_argument_error` for an unsigned cost that does not fit in std::int64_t.
template <cost_model C>
cost_type_t<C> cost_value(const C& c, std::int64_t l) {
  const auto v = c(l);
  if constexpr (std::is_integral_v<cost_result_t<C>> && std::is_unsigned_v<cost_result_t<C>> &&
                sizeof(cost_result_t<C>) >= sizeof(std::int64_t)) {
    ORCHMLLM_REQUIRE(v <= static_cast<cost_result_t<C>>(INT64_MAX), invalid_argument_error,
                     "cost of length ", l, " is ", v, ", above the largest cost 2^63 - 1");
  }
  return static_cast<cost_type_t<C>>(v);
}

/// A cost model's values in its computation type `cost_type_t<C>`: what every public entry
/// point wraps a model that does not return it in, so the algorithms see one of three value
/// types. Holds a copy of the model.
template <cost_model C>
struct normalized_cost {
  C model;
  cost_type_t<C> operator()(std::int64_t l) const { return cost_value(model, l); }
};

/// A non-owning, type-erased cost model with value type `Cost` (`std::int64_t`, `double` or
/// `long double`): one indirect call per evaluation. What the compiled library's entry points
/// take (orchmllm/config.hpp), so a trainer's own cost model needs no algorithm instantiated
/// in its translation unit. The referenced model must outlive it.
template <class Cost>
class cost_ref {
 public:
  // The self-type test comes first: checking `cost_model<cost_ref>` asks whether cost_ref is
  // copy-constructible, which must not recurse into this constructor's own constraint.
  template <class C>
  requires(!std::is_same_v<std::remove_cvref_t<C>, cost_ref> && cost_model<C> &&
           std::is_same_v<cost_type_t<C>, Cost>) explicit cost_ref(const C& model) noexcept
      : model_(&model), call_([](const void* m, std::int64_t l) -> Cost {
          return cost_value(*static_cast<const C*>(m), l);
        }) {}
  Cost operator()(std::int64_t l) const { return call_(model_, l); }

 private:
  const void* model_;
  Cost (*call_)(const void*, std::int64_t);
};

/// Calls `f` with `c` as the algorithms take it: the model itself when it returns its
/// computation type, else wrapped in `normalized_cost`.
template <cost_model C, class F>
decltype(auto) with_normal_cost(const C& c, F&& f) {
  if constexpr (is_normal_cost_v<C>) {
    return std::forward<F>(f)(c);
  } else {
    return std::forward<F>(f)(normalized_cost<C>{c});
  }
}

}  // namespace detail

/// x · y rounded to `double` where it is written: the product cannot be fused with a later
/// addition into one FMA, whatever the build's `-ffp-contract` (g++ in GNU mode and nvcc fuse by
/// default, `-O3 -march=native` finds FMA instructions to fuse into). A fused `a + x·y` rounds
/// once instead of twice, so the same model would give different costs, and ranks built with
/// different flags different plans. Every floating model and computation of the library that
/// feeds a plan multiplies through this; a cost model of your own that adds products should too
/// (or be compiled with `-ffp-contract=off`). O(1): an empty asm barrier on the host (no
/// instruction), `__dmul_rn` in CUDA device code; `constexpr`, noexcept.
[[nodiscard]] constexpr double rounded_mul(double x, double y) noexcept {
  double p = x * y;
  if (std::is_constant_evaluated()) return p;
#if defined(__CUDA_ARCH__)
  p = __dmul_rn(x, y);
#elif defined(__GNUC__) || defined(__clang__)
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(p));  // p is an opaque SSE value: nothing can be fused into its product
#elif defined(__aarch64__) || defined(__arm__)
  __asm__("" : "+w"(p));
#else
  __asm__("" : "+m"(p));
#endif
#else
  volatile double rounded = p;  // other compilers: a volatile store forces the rounding
  p = rounded;
#endif
  return p;
}

namespace detail {

// The error of a linear cost whose product leaves std::int64_t (out of line: the call operator
// stays one multiply and a flag test).
[[noreturn]] inline void linear_cost_overflow(std::int64_t weight, std::int64_t length) {
  raise<invalid_argument_error>(
      concat("linear_cost: weight ", weight, " × length ", length,
             (weight < 0) != (length < 0) ? " overflows -2^63" : " overflows 2^63 - 1"));
}

}  // namespace detail

/// c(l) = weight · l, in exact 64-bit integers (tokens, or tokens × a fixed integer weight).
/// O(1): one multiply and an overflow test. Deterministic. Throws `invalid_argument_error`
/// "linear_cost: weight W × length L overflows 2^63 - 1" when the product does not fit in
/// std::int64_t: a cost is exact or an error, never a wrapped value (the balancers evaluate it
/// once per item and length, so every entry point raises it before it plans).
struct linear_cost {
  std::int64_t weight = 1;
  [[nodiscard]] constexpr std::int64_t operator()(std::int64_t length) const {
    std::int64_t cost = 0;
    if (detail::mul_overflows(weight, length, cost)) [[unlikely]]
      detail::linear_cost_overflow(weight, length);
    return cost;
  }
  friend constexpr bool operator==(const linear_cost&, const linear_cost&) = default;
};

/// c(l) = constant + linear · l + quadratic · l². The usual model of a transformer layer under
/// variable-length attention: linear layers grow with l, attention with l². Coefficients must be
/// finite and non-negative (checked by `validated()`; the call operator itself does not check).
/// O(1), deterministic, noexcept. With such coefficients a value is never NaN: one past the
/// double range is +inf, which every entry point that computes loads rejects
/// (`invalid_argument_error` "... is inf, must be finite ...: the cost overflows double").
struct quadratic_cost {
  double constant = 0.0;
  double linear = 1.0;
  double quadratic = 0.0;

  [[nodiscard]] constexpr double operator()(std::int64_t length) const noexcept {
    const double l = static_cast<double>(length);
    return constant + rounded_mul(l, linear + rounded_mul(quadratic, l));
  }

  /// Returns *this after checking the coefficients are finite and non-negative (so the model is
  /// non-decreasing). Throws `invalid_argument_error` naming the bad coefficient.
  [[nodiscard]] quadratic_cost validated() const {
    check(constant, "constant");
    check(linear, "linear");
    check(quadratic, "quadratic");
    return *this;
  }

  friend constexpr bool operator==(const quadratic_cost&, const quadratic_cost&) = default;

 private:
  static void check(double v, const char* name) {
    ORCHMLLM_REQUIRE(std::isfinite(v) && v >= 0.0, invalid_argument_error, "quadratic_cost ", name,
                     " coefficient is ", v, ", must be finite and >= 0");
  }
};

/// Shape of a transformer stack, for `transformer_flops_cost`.
struct transformer_config {
  std::int64_t hidden = 4096;       ///< model width h
  std::int64_t layers = 32;         ///< number of transformer blocks L
  std::int64_t heads = 32;          ///< attention heads (head_dim = h / heads)
  std::int64_t kv_heads = 0;        ///< key/value heads for GQA; 0 means = heads
  std::int64_t ffn_hidden = 11008;  ///< FFN inner width f
  bool gated_ffn = true;            ///< SwiGLU-style FFN with 3 matrices (else 2)
  bool causal = true;               ///< causal attention (only the lower triangle is computed)
  std::int64_t vocab = 0;           ///< vocabulary for the output head; 0 = no head
  double passes = 3.0;              ///< 1 = forward only, 3 = forward + backward
};

/// Matrix-multiply FLOPs of a transformer stack on one sequence of length l (documented in
/// docs/cost_models.md):
///
///   per layer  2·l·h·(h + 2·h_kv)           Q, K, V projections (h_kv = kv_heads · h / heads)
///            + 2·l·h²                       output projection
///            + 2·l·h·f·(gated ? 3 : 2)      FFN
///            + attention: causal 2·h·l·(l+1) (QKᵀ and AV over the l(l+1)/2 lower triangle),
///                         full   4·h·l²
///   total = passes · (layers · per-layer + 2·l·h·vocab)
///
/// O(1), deterministic. Construct through `transformer_flops_cost(config)`, which validates the
/// configuration (positive sizes, heads dividing hidden, kv_heads dividing heads, per-token and
/// per-attention-entry FLOPs within the double range) and throws `invalid_argument_error`
/// otherwise ("... overflow double" for the last). A value past the double range is +inf, which
/// every entry point that computes loads rejects, as for `quadratic_cost`.
class transformer_flops_cost {
 public:
  /// Validates `config` (resolving kv_heads = 0 to heads) and precomputes the per-token and
  /// per-attention-entry FLOPs. O(1). Throws `invalid_argument_error` as the class says.
  explicit transformer_flops_cost(const transformer_config& config);

  /// FLOPs for one sequence of `length` tokens.
  [[nodiscard]] double operator()(std::int64_t length) const noexcept {
    const double l = static_cast<double>(length);
    const double attn = config_.causal ? l * (l + 1.0) : l * l;
    return rounded_mul(linear_, l) + rounded_mul(attention_, attn);
  }

  /// The configuration (with kv_heads resolved).
  [[nodiscard]] const transformer_config& config() const noexcept { return config_; }

 private:
  transformer_config config_;
  double linear_ = 0;     // FLOPs per token that do not depend on the sequence length
  double attention_ = 0;  // FLOPs per attention-matrix entry
};

}  // namespace orchmllm

// The definitions of the members declared only above.
#include "orchmllm/detail/core/cost_model.inl"  // IWYU pragma: export
