// orchmllm-bench dispatch, its input files (dispatch_inputs.hpp).
#include "bench/cli/dispatch_inputs.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <orchmllm/core/error.hpp>
#include <string>
#include <string_view>
#include <system_error>

#include "bench/cli/items_csv.hpp"
#include "bench/cli/plan_csv.hpp"
#include "bench/cli/problem.hpp"

namespace orchmllm::tool {

rank_t infer_rank_count(std::string_view items_text, std::string_view plan_text,
                        std::string_view items_file, std::string_view plan_file,
                        std::int64_t limit) {
  std::int64_t highest = 0;
  auto scan = [&](std::string_view text, std::string_view file, std::initializer_list<int> cols) {
    detail::line_reader lines(text);
    std::string_view line;
    std::int64_t number = 0;
    bool header = true;
    while (lines.next(line, number)) {
      if (detail::trim(line).empty()) continue;
      if (header) {  // the first non-blank line is the header
        header = false;
        continue;
      }
      const auto fields = detail::split_fields(line);
      for (const int c : cols) {
        if (static_cast<std::size_t>(c) >= fields.size()) continue;
        const auto f = fields[static_cast<std::size_t>(c)];
        std::int64_t v = 0;
        const auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
        if (ec != std::errc{} || p != f.data() + f.size() || v < 0) continue;
        if (v >= limit)
          ::orchmllm::detail::raise<parse_error>(
              std::string(file) + ":" + std::to_string(number) + ": rank " + std::to_string(v) +
              " is not below the largest rank count " + std::to_string(limit));
        highest = std::max(highest, v + 1);
      }
    }
  };
  scan(items_text, items_file, {0});
  scan(plan_text, plan_file, {0, 2});
  return static_cast<rank_t>(std::max<std::int64_t>(highest, 1));
}

dispatch_inputs parse_dispatch_inputs(std::string_view items_text, std::string_view plan_text,
                                      std::string_view items_file, std::string_view plan_file,
                                      std::optional<rank_t> ranks) {
  dispatch_inputs in;
  in.ranks = ranks ? *ranks : infer_rank_count(items_text, plan_text, items_file, plan_file);
  in.layout = parse_items(items_text, in.ranks, items_file);
  in.plan = parse_plan(plan_text, in.layout.offsets(), in.ranks, plan_file);
  return in;
}

}  // namespace orchmllm::tool
