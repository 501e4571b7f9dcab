// orchmllm-bench: the subcommand table and the dispatch to one subcommand (tool.hpp).
#include "bench/cli/tool.hpp"

#include <algorithm>
#include <orchmllm/version.hpp>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/compare.hpp"
#include "bench/cli/demo.hpp"
#include "bench/cli/dispatch.hpp"
#include "bench/cli/generate.hpp"
#include "bench/cli/plan.hpp"
#include "bench/cli/simulate.hpp"
#include "bench/cli/workload.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

const std::vector<const command*>& commands() {
  static const std::vector<const command*> all = {
      &generate_command(), &workload_command(), &plan_command(), &compare_command(),
      &dispatch_command(), &simulate_command(), &demo_command()};
  return all;
}

const command* find_command(std::string_view name) {
  for (const auto* c : commands())
    if (c->name == name) return c;
  return nullptr;
}

std::string general_help() {
  std::string s = "usage: " + std::string(program_name) +
                  " SUBCOMMAND [FLAGS]\n"
                  "       " +
                  std::string(program_name) +
                  " help [SUBCOMMAND]\n\n"
                  "Batch post-balancing for data-parallel training, on files (orchmllm " +
                  std::string(version_string()) + ").\n\nsubcommands:\n";
  std::size_t width = 4;
  for (const auto* c : commands()) width = std::max(width, c->name.size());
  for (const auto* c : commands()) {
    std::string n = c->name;
    n.resize(width, ' ');
    s += "  " + n + "  " + c->summary + "\n";
  }
  std::string h = "help";
  h.resize(width, ' ');
  s += "  " + h + "  Show this text, or the flags of one subcommand.\n";
  s += "\nExit status: 0 ok, 2 bad usage or input (one-line message on stderr), 1 internal "
       "error.\n";
  return s;
}

int run(std::span<const std::string> args, std::ostream& out, std::ostream& err) {
  const std::string prefix = std::string(program_name) + ": ";
  const std::string usage = "usage: " + std::string(program_name) +
                            " generate|workload|plan|compare|dispatch|simulate|help"
                            " [FLAGS] (see '" +
                            std::string(program_name) + " help')";
  if (args.empty()) {
    err << prefix << "missing subcommand\n" << usage << "\n";
    return exit_error;
  }
  const std::string& name = args[0];
  if (name == "help" || name == "--help" || name == "-h") {
    if (args.size() == 1) {
      out << general_help();
      return exit_ok;
    }
    const command* c = args.size() == 2 ? find_command(args[1]) : nullptr;
    if (!c) {
      err << prefix << "no help for '" << args[1] << (args.size() > 2 ? " ..." : "") << "'\n"
          << usage << "\n";
      return exit_error;
    }
    out << command_help(*c);
    return exit_ok;
  }
  if (name == "--version") {
    out << program_name << " " << version_string() << "\n";
    return exit_ok;
  }
  const command* cmd = find_command(name);
  if (!cmd) {
    err << prefix << "unknown subcommand '" << name << "'\n" << usage << "\n";
    return exit_error;
  }
  const auto rest = args.subspan(1);
  for (const auto& a : rest) {
    if (a == "--help" || a == "-h") {
      out << command_help(*cmd);
      return exit_ok;
    }
  }
  return guarded(*cmd, err, [&] { return cmd->run(parse_flags(cmd->flags, rest), out, err); });
}

int run(int argc, char** argv, std::ostream& out, std::ostream& err) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return run(std::span<const std::string>(args), out, err);
}

}  // namespace orchmllm::tool
