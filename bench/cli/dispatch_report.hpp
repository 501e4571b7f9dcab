#pragma once
// orchmllm-bench dispatch, its output: the JSON line of a measurement (`dispatch_json`) and the
// failures it found (`report_failures`).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <orchmllm/comm/route.hpp>
#include <ostream>
#include <string>
#include <string_view>

#include "bench/cli/command.hpp"
#include "bench/cli/json.hpp"
#include "bench/support/dispatch_driver.hpp"

namespace orchmllm::tool {

using bench::dispatch_summary;

/// The JSON line of a summary (keys in the order of `dispatch_command().details`).
std::string dispatch_json(const dispatch_summary& s, std::string_view backend,
                          std::string_view items_file, std::string_view plan_file);

/// Writes the failures of a summary to `err`, one line each (at most `limit`, then a count).
void report_failures(const dispatch_summary& s, std::ostream& err, std::size_t limit = 8);

}  // namespace orchmllm::tool
