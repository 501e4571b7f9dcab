#pragma once
// orchmllm-bench: the context-parallel flags shared by `plan` and `simulate` (--cp-sizes,
// --cp-token-cap, --min-shard-tokens) and the text of a size list. See docs/algorithms.md,
// "Context parallelism".

#include <cstdint>
#include <optional>
#include <orchmllm/balance/context_parallel.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// The context-parallel flags, in usage order.
std::vector<flag_spec> cp_flags();

/// "1,2,4,8" as sizes: integers ≥ 1, strictly increasing. Throws usage_error naming `flag` and
/// the text otherwise.
std::vector<std::int64_t> parse_cp_sizes(std::string_view flag, std::string_view text);

/// "1,2,4,8" from sizes.
std::string cp_sizes_text(const std::vector<std::int64_t>& sizes);

/// The sharding the flags ask for: nullopt without --cp-sizes (and then neither of the other
/// two may be given). Throws usage_error for a bad value.
std::optional<cp_options> parse_cp_flags(const parsed_args& args);

}  // namespace orchmllm::tool
