// orchmllm-bench: the context-parallel flags of `plan` and `simulate` (cp_flags.hpp).
#include "bench/cli/cp_flags.hpp"

#include <cstdint>
#include <optional>
#include <orchmllm/balance/context_parallel.hpp>
#include <orchmllm/core/error.hpp>
#include <orchmllm/core/text_forms.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

std::vector<flag_spec> cp_flags() {
  return {
      {"cp-sizes", "C1,C2,...",
       "shard samples over context-parallel groups of these sizes (strictly increasing, "
       ">= 1; 1 keeps a sample whole), chosen per sample; groups are aligned blocks of "
       "ranks inside one node (--gpus-per-node)",
       false},
      {"cp-token-cap", "T", "most tokens a rank holds, its shards counted; default none", false},
      {"min-shard-tokens", "T",
       "shard a sample over C ranks only if it has at least C x T tokens; default 0", false}};
}

std::vector<std::int64_t> parse_cp_sizes(std::string_view flag, std::string_view text) {
  std::vector<std::int64_t> sizes;
  std::string_view rest = text;
  try {
    while (true) {
      const auto comma = rest.find(',');
      sizes.push_back(
          ::orchmllm::detail::text_to_int("a group size", rest.substr(0, comma), 1, text));
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  } catch (const invalid_argument_error& e) {
    throw usage_error("--" + std::string(flag) + ": " + e.message());
  }
  for (std::size_t i = 1; i < sizes.size(); ++i)
    if (sizes[i] <= sizes[i - 1])
      throw usage_error("--" + std::string(flag) + " is '" + std::string(text) +
                        "', sizes must increase");
  return sizes;
}

std::string cp_sizes_text(const std::vector<std::int64_t>& sizes) {
  std::string out;
  for (const auto c : sizes) {
    if (!out.empty()) out += ',';
    out += std::to_string(c);
  }
  return out;
}

std::optional<cp_options> parse_cp_flags(const parsed_args& args) {
  const auto sizes = args.get("cp-sizes");
  if (!sizes) {
    for (const char* f : {"cp-token-cap", "min-shard-tokens"})
      if (args.has(f)) throw usage_error("--" + std::string(f) + " needs --cp-sizes");
    return std::nullopt;
  }
  cp_options o;
  o.sizes = parse_cp_sizes("cp-sizes", *sizes);
  o.token_cap = args.get_int("cp-token-cap", o.token_cap, 1);
  o.min_shard_tokens = args.get_int("min-shard-tokens", 0, 0);
  return o;
}

}  // namespace orchmllm::tool
