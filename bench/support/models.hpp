#pragma once
/// @file models.hpp
/// The model configurations the benchmarks, the simulator and the examples cost stages with
/// (`orchmllm::transformer_config`, forward + backward: passes = 3). Not part of the library.
///
///  * `vit_600m`: Qwen2-VL ViT-600M-like vision encoder: hidden 1280, 32 blocks, 16 heads, MLP
///    5120 (not gated), full (bidirectional) attention over the patches of one image.
///  * `whisper_encoder`: Whisper-large-v3-encoder-like: hidden 1280, 32 blocks, 20 heads, MLP
///    5120 (not gated), bidirectional.
///  * `llm_7b`: LLaMA-7B-like (the transformer_config defaults: 4096, 32 blocks, 32 heads,
///    SwiGLU 11008, causal) with a 32,000-token output head.
///  * `llm_72b`: Qwen2-72B-like: hidden 8192, 80 blocks, 64 heads, 8 KV heads, SwiGLU 29568,
///    causal, 152,064-token head.

#include "orchmllm/core/cost_model.hpp"

namespace orchmllm::bench {

inline transformer_config vit_600m() {
  transformer_config c;
  c.hidden = 1280;
  c.layers = 32;
  c.heads = 16;
  c.ffn_hidden = 5120;
  c.gated_ffn = false;
  c.causal = false;
  return c;
}

inline transformer_config whisper_encoder() {
  transformer_config c = vit_600m();
  c.heads = 20;
  return c;
}

inline transformer_config llm_7b() {
  transformer_config c;
  c.vocab = 32000;
  return c;
}

inline transformer_config llm_72b() {
  transformer_config c;
  c.hidden = 8192;
  c.layers = 80;
  c.heads = 64;
  c.kv_heads = 8;
  c.ffn_hidden = 29568;
  c.vocab = 152064;
  return c;
}

}  // namespace orchmllm::bench
