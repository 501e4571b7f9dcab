#pragma once
// The out-of-class members of core/cost_model.hpp, included by it at its end: the validation of
// a transformer configuration and its FLOP factors.

#include <cmath>
#include <cstdint>

namespace orchmllm {

inline transformer_flops_cost::transformer_flops_cost(const transformer_config& config)
    : config_(config) {
  auto& c = config_;
  if (c.kv_heads == 0) c.kv_heads = c.heads;
  ORCHMLLM_REQUIRE(c.hidden > 0 && c.layers > 0 && c.heads > 0 && c.ffn_hidden >= 0 &&
                       c.kv_heads > 0 && c.vocab >= 0,
                   invalid_argument_error, "transformer_config needs positive sizes (hidden ",
                   c.hidden, ", layers ", c.layers, ", heads ", c.heads, ", kv_heads ", c.kv_heads,
                   ", ffn_hidden ", c.ffn_hidden, ", vocab ", c.vocab, ")");
  ORCHMLLM_REQUIRE(c.hidden % c.heads == 0, invalid_argument_error, "hidden ", c.hidden,
                   " is not a multiple of heads ", c.heads);
  ORCHMLLM_REQUIRE(c.heads % c.kv_heads == 0, invalid_argument_error, "heads ", c.heads,
                   " is not a multiple of kv_heads ", c.kv_heads);
  ORCHMLLM_REQUIRE(std::isfinite(c.passes) && c.passes > 0, invalid_argument_error, "passes is ",
                   c.passes, ", must be > 0");
  const double h = static_cast<double>(c.hidden);
  const double h_kv = static_cast<double>(c.kv_heads * (c.hidden / c.heads));
  const double f = static_cast<double>(c.ffn_hidden);
  const double L = static_cast<double>(c.layers);
  // Every product rounded before it is added (rounded_mul): the same figures on every build.
  const auto mul = [](double x, double y) { return rounded_mul(x, y); };
  const double per_layer = mul(mul(2.0, h), h + mul(2.0, h_kv)) + mul(mul(2.0, h), h) +
                           mul(mul(mul(2.0, h), f), c.gated_ffn ? 3.0 : 2.0);
  linear_ = mul(c.passes, mul(L, per_layer) + mul(mul(2.0, h), static_cast<double>(c.vocab)));
  attention_ = c.passes * L * (c.causal ? 2.0 * h : 4.0 * h);
  // Infinite factors would make cost(0) NaN (inf · 0): a configuration error, named here.
  ORCHMLLM_REQUIRE(std::isfinite(linear_) && std::isfinite(attention_), invalid_argument_error,
                   "transformer_config: FLOPs per token (", linear_, ") or per attention entry (",
                   attention_, ") overflow double (hidden ", c.hidden, ", layers ", c.layers,
                   ", ffn_hidden ", c.ffn_hidden, ", vocab ", c.vocab, ", passes ", c.passes, ")");
}

}  // namespace orchmllm
