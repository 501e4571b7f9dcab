#pragma once
// orchmllm-bench demo: batch post-balancing of one synthetic multimodal global batch.
//
// Every DP rank samples a few training samples (text, 0..8 images, or one audio clip; lengths
// from bench/support/workload.hpp, modelled on public dataset statistics). Each training stage
// sees a different per-rank load, so each stage is balanced on its own:
//   vision  one item per image (ViT patches), packed, ViT FLOPs with full (non-causal)
//           attention inside each image: a quadratic cost (Qwen2-VL ViT-600M-like config);
//   audio   one item per clip (Whisper positions: 1500 per 30 s window), padded policy
//           (rectangular encoder batches), linear cost;
//   llm     one item per sample (text + image + audio tokens), packed (varlen), causal
//           transformer FLOPs of a 7B-like model.
// The table shows, per stage, the imbalance (max/mean rank load) before and after, the
// planned makespan over its lower bound, the speed-up of the stage (old/new makespan), the
// balancer `automatic` picked and the planning time.

#include <cstdint>
#include <ostream>

#include "bench/cli/command.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// Largest batch the demo draws (ranks × samples per rank).
inline constexpr std::int64_t demo_max_samples = 20'000'000;

/// The `demo` subcommand.
const command& demo_command();

/// Runs `demo`. Returns the exit code (see command.hpp).
int run_demo(const parsed_args& args, std::ostream& out, std::ostream& err);

}  // namespace orchmllm::tool
