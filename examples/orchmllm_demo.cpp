// OrchMLLM demo: batch post-balancing of a synthetic multimodal global batch.
//
// Every DP rank samples a few training samples (text, 0..8 images, or one audio clip; lengths
// from bench/common/workload.hpp, modelled on public dataset statistics). Each training stage
// sees a different per-rank load, so each stage is balanced on its own:
//   vision  one item per image (ViT patches), packed, ViT FLOPs with full (non-causal)
//           attention inside each image: a quadratic cost (Qwen2-VL ViT-600M-like config);
//   audio   one item per clip (Whisper positions: 1500 per 30 s window), padded policy
//           (rectangular encoder batches), linear cost;
//   llm     one item per sample (text + image + audio tokens), packed (varlen), causal
//           transformer FLOPs of a 7B-like model.
// The table shows, per stage, the imbalance (max/mean rank load) before and after, the
// planned makespan over its lower bound, the speed-up of the stage (old/new makespan), the
// algorithm `auto` picked and the planning time.
//
// Usage: orchmllm_demo [--ranks D] [--samples-per-rank K] [--seed S]

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "bench/support/models.hpp"
#include "bench/support/workload.hpp"
#include "orchmllm/orchmllm.hpp"

namespace {

struct args {
  std::int64_t ranks = 2560;
  std::int64_t samples_per_rank = 8;
  std::uint64_t seed = 1;
};

[[noreturn]] void usage(const char* what) {
  std::fprintf(stderr,
               "orchmllm_demo: %s\nusage: orchmllm_demo [--ranks D] [--samples-per-rank K] "
               "[--seed S]\n",
               what);
  std::exit(2);
}

std::int64_t parse_int(std::string_view flag, const char* text, std::int64_t lo, std::int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi)
    usage((std::string(flag) + " needs an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "], got '" + text + "'")
              .c_str());
  return v;
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::printf("usage: orchmllm_demo [--ranks D] [--samples-per-rank K] [--seed S]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) usage(("missing value after " + std::string(flag)).c_str());
    const char* value = argv[++i];
    if (flag == "--ranks") {
      a.ranks = parse_int(flag, value, 1, 1'000'000);
    } else if (flag == "--samples-per-rank") {
      a.samples_per_rank = parse_int(flag, value, 1, 100'000);
    } else if (flag == "--seed") {
      a.seed = static_cast<std::uint64_t>(parse_int(flag, value, 0, INT64_MAX));
    } else {
      usage(("unknown option " + std::string(flag)).c_str());
    }
  }
  if (a.ranks * a.samples_per_rank > 20'000'000) usage("ranks × samples-per-rank above 2·10^7");
  return a;
}

/// Balances one stage with `auto` and prints its row.
template <class Cost>
void stage_row(const char* stage, const char* cost_name, const orchmllm::batch_layout& layout,
               const Cost& cost, orchmllm::padding_policy policy) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto r = orchmllm::balance(layout, cost, policy);
  const auto t1 = clock::now();
  const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const auto s = orchmllm::compute_statistics(layout, r.plan, cost, policy);
  // An empty stage (no item anywhere) has makespan 0 before and after: call that 1×.
  const double speedup =
      s.makespan > 0 ? static_cast<double>(s.makespan_before) / static_cast<double>(s.makespan)
                     : 1.0;
  std::printf("%-7s %-6s %-11s %8lld %9.3f %9.4f %10.6f %7.2fx %-7s %8.1f\n", stage,
              policy.is_padded() ? "padded" : "packed", cost_name,
              static_cast<long long>(layout.num_items()), s.imbalance_before, s.imbalance_after,
              s.ratio, speedup, std::string(orchmllm::to_string(r.used)).c_str(), ms);
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  try {
    orchmllm::bench::multimodal_spec spec;
    spec.ranks = a.ranks;
    spec.samples_per_rank = a.samples_per_rank;
    spec.seed = a.seed;
    const auto batch = orchmllm::bench::make_multimodal_batch(spec);

    // Qwen2-VL ViT-600M-like: width 1280, 32 blocks, 16 heads, MLP 5120 (not gated), full
    // attention over the patches of one image, forward + backward (bench/common/models.hpp).
    const orchmllm::transformer_flops_cost vit_cost(orchmllm::bench::vit_600m());
    // LLaMA-7B-like backbone: the transformer_config defaults (4096, 32 layers, 32 heads,
    // SwiGLU 11008, causal).
    const orchmllm::transformer_flops_cost llm_cost(orchmllm::transformer_config{});
    // Whisper encoder on 30 s windows: every position costs the same.
    const orchmllm::linear_cost audio_cost{};

    std::int64_t tokens = 0;
    for (const auto l : batch.llm.lengths()) tokens += l;
    std::printf("OrchMLLM demo: batch post-balancing of one synthetic multimodal global batch\n");
    std::printf(
        "%lld DP ranks x %lld samples = %lld samples (seed %llu): %lld images, "
        "%lld audio clips, %.2fM LLM tokens\n\n",
        static_cast<long long>(a.ranks), static_cast<long long>(a.samples_per_rank),
        static_cast<long long>(batch.samples.size()), static_cast<unsigned long long>(a.seed),
        static_cast<long long>(batch.vision.num_items()),
        static_cast<long long>(batch.audio.num_items()), static_cast<double>(tokens) / 1e6);
    std::printf("%-7s %-6s %-11s %8s %9s %9s %10s %8s %-7s %8s\n", "stage", "policy", "cost",
                "items", "imb.bef", "imb.aft", "ratio/LB", "speedup", "algo", "plan ms");
    stage_row("vision", "ViT FLOPs", batch.vision, vit_cost, orchmllm::packed);
    stage_row("audio", "linear", batch.audio, audio_cost, orchmllm::padded);
    stage_row("llm", "7B FLOPs", batch.llm, llm_cost, orchmllm::packed);
    std::printf(
        "\nimb. = max/mean rank load; ratio/LB = planned makespan / lower bound (1 = "
        "optimal);\nspeedup = stage makespan before / after; plan ms = one "
        "orchmllm::balance call (auto).\n");
  } catch (const orchmllm::error& e) {
    std::fprintf(stderr, "orchmllm_demo: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orchmllm_demo: unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}
