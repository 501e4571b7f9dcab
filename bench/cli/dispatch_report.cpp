// orchmllm-bench dispatch, its output (dispatch_report.hpp).
#include "bench/cli/dispatch_report.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <orchmllm/comm/route.hpp>
#include <ostream>
#include <string>
#include <string_view>

#include "bench/cli/command.hpp"
#include "bench/cli/json.hpp"

namespace orchmllm::tool {

std::string dispatch_json(const dispatch_summary& s, std::string_view backend,
                          std::string_view items_file, std::string_view plan_file) {
  auto ratio = [](double a, const std::optional<double>& b) {
    return b && *b > 0 ? json_number(a / *b) : std::string("null");
  };
  json_object j;
  j.add("verified", s.verified)
      .add("backend", backend)
      .add("ranks", static_cast<std::int64_t>(s.ranks))
      .add("nodes", static_cast<std::int64_t>(s.nodes))
      .add("gpus_per_node", static_cast<std::int64_t>(s.gpus_per_node))
      .add("schedule", to_string(s.used))
      .add("requested_schedule", to_string(s.requested))
      .add("repeat", static_cast<std::int64_t>(s.repeat))
      .add("items", s.items)
      .add("total_bytes", s.total_bytes)
      .add("max_rank_bytes", s.max_rank_bytes)
      .add("local_bytes", s.planned.local_bytes)
      .add("moved_bytes", s.planned.moved_bytes())
      .add("intra_node_bytes", s.planned.intra_node_bytes)
      .add("inter_node_bytes", s.planned.inter_node_bytes)
      .add("sent_intra_node_bytes", s.sent.intra_node_bytes)
      .add("sent_inter_node_bytes", s.sent.inter_node_bytes)
      .add("predicted_seconds", s.predicted_seconds)
      .add("predicted_direct_seconds", s.predicted_direct_seconds)
      .add("predicted_node_wise_seconds", s.predicted_node_wise_seconds)
      .add("dispatch_seconds", s.dispatch_seconds)
      .add("execute_seconds", s.execute_seconds)
      .add("route_seconds", s.route_seconds)
      .add("combine_seconds", s.combine_seconds)
      .raw("alltoallv_seconds", s.alltoallv_seconds ? json_number(*s.alltoallv_seconds) : "null")
      .raw("dispatch_vs_alltoallv", ratio(s.dispatch_seconds, s.alltoallv_seconds))
      .raw("execute_vs_alltoallv", ratio(s.execute_seconds, s.alltoallv_seconds))
      .raw("route_vs_alltoallv", ratio(s.route_seconds, s.alltoallv_seconds))
      .add("items_file", items_file)
      .add("plan_file", plan_file);
  return j.str();
}

void report_failures(const dispatch_summary& s, std::ostream& err, std::size_t limit) {
  const std::string prefix = std::string(program_name) + " dispatch: ";
  for (std::size_t i = 0; i < s.failures.size() && i < limit; ++i)
    err << prefix << "rank " << s.failures[i].first << ": "
        << detail::one_line(s.failures[i].second) << "\n";
  if (s.failures.size() > limit)
    err << prefix << "... and " << (s.failures.size() - limit) << " more ranks\n";
}

}  // namespace orchmllm::tool
