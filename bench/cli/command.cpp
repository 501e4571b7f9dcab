// orchmllm-bench: what a subcommand is, and the messages of its errors (command.hpp).
#include "bench/cli/command.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include "bench/support/args.hpp"
#include "bench/support/quote.hpp"

namespace orchmllm::tool {

std::string usage_line(const command& cmd) {
  // Appends rather than chains operator+ (which trips GCC 12's false -Wrestrict, PR 105329).
  std::string program(program_name);
  program.append(" ").append(cmd.name);
  return usage_text(program, cmd.flags);
}

std::string command_help(const command& cmd) {
  std::string s = usage_line(cmd) + "\n\n" + cmd.summary + "\n\nflags:\n";
  std::size_t width = 0;
  for (const auto& f : cmd.flags) {
    const std::string t = "--" + f.name + (f.value_name.empty() ? "" : " " + f.value_name);
    width = std::max(width, t.size());
  }
  for (const auto& f : cmd.flags) {
    std::string t = "--" + f.name + (f.value_name.empty() ? "" : " " + f.value_name);
    t.resize(width, ' ');
    s += "  " + t + "  " + f.help + (f.required ? " (required)" : "") + "\n";
  }
  if (!cmd.details.empty()) s += "\n" + cmd.details;
  return s;
}

namespace detail {
std::string one_line(std::string_view text) {
  std::string s(text);
  for (auto& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return printable(s, 1000);
}
}  // namespace detail

}  // namespace orchmllm::tool
