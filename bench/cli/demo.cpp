// orchmllm-bench demo: one synthetic multimodal batch balanced per stage (demo.hpp).
#include "bench/cli/demo.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <orchmllm/orchmllm.hpp>
#include <ostream>
#include <string>

#include "bench/cli/command.hpp"
#include "bench/support/args.hpp"
#include "bench/support/models.hpp"
#include "bench/support/workload.hpp"

namespace orchmllm::tool {

const command& demo_command() {
  static const command cmd = [] {
    command c;
    c.name = "demo";
    c.summary = "Balance one synthetic multimodal batch per stage and print the table.";
    c.flags = {
        {"ranks", "D", "data-parallel ranks; default 2560", false},
        {"samples-per-rank", "K", "samples every rank draws; default 8", false},
        {"seed", "S", "random seed; default 1", false},
    };
    c.details =
        "Stages: vision (ViT-600M FLOPs, packed), audio (linear, padded), llm (7B FLOPs,\n"
        "packed), each balanced with `automatic`. stdout: a table of the imbalance (max/mean rank\n"
        "load) before and after, makespan / lower bound, speed-up, algorithm and plan time.\n";
    c.run = &run_demo;
    return c;
  }();
  return cmd;
}

namespace detail {
namespace {

// Balances one stage with `automatic` and returns its table row.
template <class Cost>
std::string demo_row(const char* stage, const char* cost_name, const batch_layout& layout,
                     const Cost& cost, padding_policy policy) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto r = balance(layout, cost, policy);
  const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  const auto s = compute_statistics(layout, r.plan, cost, policy);
  // An empty stage (no item anywhere) has makespan 0 before and after: call that 1×.
  const double speedup =
      s.makespan > 0 ? static_cast<double>(s.makespan_before) / static_cast<double>(s.makespan)
                     : 1.0;
  char line[160];
  std::snprintf(line, sizeof line, "%-7s %-6s %-11s %8lld %9.3f %9.4f %10.6f %7.2fx %-20s %8.1f\n",
                stage, policy.is_padded() ? "padded" : "packed", cost_name,
                static_cast<long long>(layout.num_items()), s.imbalance_before, s.imbalance_after,
                s.ratio, speedup, std::string(r.used).c_str(), ms);
  return line;
}

}  // namespace
}  // namespace detail

int run_demo(const parsed_args& args, std::ostream& out, std::ostream& err) {
  return guarded(demo_command(), err, [&] {
    bench::multimodal_spec spec;
    spec.ranks = args.get_int("ranks", 2560, 1, 1'000'000);
    spec.samples_per_rank = args.get_int("samples-per-rank", 8, 1, 100'000);
    spec.seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0));
    if (spec.ranks * spec.samples_per_rank > demo_max_samples)
      throw usage_error("--ranks x --samples-per-rank above " + std::to_string(demo_max_samples));
    const auto batch = bench::make_multimodal_batch(spec);

    // Qwen2-VL ViT-600M-like: width 1280, 32 blocks, 16 heads, MLP 5120 (not gated), full
    // attention over the patches of one image, forward + backward (bench/support/models.hpp).
    const transformer_flops_cost vit_cost(bench::vit_600m());
    // LLaMA-7B-like backbone: the transformer_config defaults (4096, 32 layers, 32 heads,
    // SwiGLU 11008, causal).
    const transformer_flops_cost llm_cost(transformer_config{});
    // Whisper encoder on 30 s windows: every position costs the same.
    const linear_cost audio_cost{};

    std::int64_t tokens = 0;
    for (const auto l : batch.llm.lengths()) tokens += l;
    char head[400];
    std::snprintf(
        head, sizeof head,
        "OrchMLLM demo: batch post-balancing of one synthetic multimodal global batch\n"
        "%lld DP ranks x %lld samples = %lld samples (seed %llu): %lld images, "
        "%lld audio clips, %.2fM LLM tokens\n\n"
        "%-7s %-6s %-11s %8s %9s %9s %10s %8s %-20s %8s\n",
        static_cast<long long>(spec.ranks), static_cast<long long>(spec.samples_per_rank),
        static_cast<long long>(batch.samples.size()), static_cast<unsigned long long>(spec.seed),
        static_cast<long long>(batch.vision.num_items()),
        static_cast<long long>(batch.audio.num_items()), static_cast<double>(tokens) / 1e6, "stage",
        "policy", "cost", "items", "imb.bef", "imb.aft", "ratio/LB", "speedup", "algo", "plan ms");
    out << head << detail::demo_row("vision", "ViT FLOPs", batch.vision, vit_cost, packed)
        << detail::demo_row("audio", "linear", batch.audio, audio_cost, padded)
        << detail::demo_row("llm", "7B FLOPs", batch.llm, llm_cost, packed)
        << "\nimb. = max/mean rank load; ratio/LB = planned makespan / lower bound (1 = "
           "optimal);\nspeedup = stage makespan before / after; plan ms = one "
           "orchmllm::balance call (automatic).\n";
    return exit_ok;
  });
}

}  // namespace orchmllm::tool
