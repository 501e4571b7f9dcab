// orchmllm-bench: the micro-batch flags of `plan` and `compare` (micro_batch_flags.hpp).
#include "bench/cli/micro_batch_flags.hpp"

#include <cstdint>
#include <optional>
#include <orchmllm/balance/micro_batches.hpp>
#include <orchmllm/core/error.hpp>
#include <orchmllm/core/rank_load.hpp>
#include <orchmllm/core/rearrangement.hpp>
#include <span>
#include <string>
#include <vector>

#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

std::vector<flag_spec> micro_batch_flags() {
  return {{"micro-batches", "auto|M",
           "split every rank's items into M micro-batches (the same M on every rank); auto: the "
           "smallest M that fits the limits; default auto when another micro-batch flag is given",
           false},
          {"micro-batch-tokens", "T",
           "physical tokens per micro-batch after the policy's padding (never exceeded)", false},
          {"micro-batch-multiple", "K",
           "M a multiple of K (a pipeline's virtual stages); default 1", false},
          {"min-micro-batches", "M", "M at least this; default 1", false},
          {"sync", "step|micro-batch",
           "what the plan minimises: step (DDP with local accumulation: max over ranks of the "
           "sum over micro-batches) or micro-batch (FSDP, ZeRO-3, tensor or pipeline "
           "parallelism: the sum over micro-batches of the max over ranks); default micro-batch",
           false}};
}

std::optional<micro_batching> parse_micro_batch_flags(const parsed_args& args) {
  bool any = false;
  for (const auto& f : micro_batch_flags()) any = any || args.has(f.name);
  if (!any) return std::nullopt;
  micro_batching micro;
  if (const auto m = args.get("micro-batches"); m && *m != "auto")
    micro.count = parsed_args::to_int("micro-batches", *m, 1, INT32_MAX);
  micro.limits.tokens =
      args.get_int("micro-batch-tokens", micro.limits.tokens, 1, micro.limits.tokens);
  micro.multiple_of = args.get_int("micro-batch-multiple", 1, 1, INT32_MAX);
  micro.min_count = args.get_int("min-micro-batches", 1, 1, INT32_MAX);
  if (const auto s = args.get("sync")) {
    try {
      micro.sync = parse_sync_model(*s);
    } catch (const invalid_argument_error& e) {
      throw usage_error("--sync: " + e.message());
    }
  }
  if (micro.count > 0 && micro.count % micro.multiple_of != 0)
    throw usage_error("--micro-batches " + std::to_string(micro.count) +
                      " is not a multiple of --micro-batch-multiple " +
                      std::to_string(micro.multiple_of));
  return micro;
}

void check_micro_batch_items(const problem& p, const micro_batching& micro) {
  const std::int64_t limit = micro.limits.tokens;
  for (std::int64_t g = 0; g < p.layout.num_items(); ++g) {
    const item_shape s = item_shape_of(p.layout, g);
    const std::int64_t row = p.policy.padded_length(s.row_length);
    const bool over = p.policy.is_padded() ? row > 0 && s.rows > limit / row : s.length > limit;
    if (!over) continue;
    ::orchmllm::detail::raise<invalid_argument_error>(
        item_where(p, g) + " alone needs " +
        (p.policy.is_padded() ? std::to_string(s.rows) + " × " + std::to_string(row)
                              : std::to_string(s.length)) +
        " tokens, above the micro-batch limit of " + std::to_string(limit) +
        " (--micro-batch-tokens)");
  }
}

}  // namespace orchmllm::tool
