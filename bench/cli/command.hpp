#pragma once
// orchmllm-bench: what a subcommand is, and the one place errors become exit codes.
//
// Each subcommand lives in its own header (plan.hpp, compare.hpp, generate.hpp, ...) and
// provides a `command` value: its name, a one-line summary, its flags and its entry point
// `int run_<name>(const parsed_args&, std::ostream& out, std::ostream& err)`. tool.hpp lists
// them. Entry points wrap their body in `guarded`, so they can be called directly (tests do)
// and still honour the exit-code contract:
//
//   0  success
//   2  usage error (message + usage line), unreadable or malformed input, infeasible plan,
//      any orchmllm::error, an output path that is not a regular file, out of memory: a
//      one-line message on stderr (printable, echoed fields cut; quote.hpp), nothing on
//      stdout, no output file
//   1  anything unexpected (a bug): "internal error" and the exception text

#include <algorithm>
#include <exception>
#include <new>
#include <orchmllm/core/error.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cli/file_io.hpp"
#include "bench/support/args.hpp"
#include "bench/support/quote.hpp"

namespace orchmllm::tool {

/// Name of the executable, as shown in messages.
inline constexpr std::string_view program_name = "orchmllm-bench";

/// Exit codes of the tool.
inline constexpr int exit_ok = 0;
inline constexpr int exit_internal = 1;
inline constexpr int exit_error = 2;

/// A subcommand.
struct command {
  std::string name;              ///< as typed after the program name
  std::string summary;           ///< one line for the command list
  std::vector<flag_spec> flags;  ///< every flag it accepts
  std::string details;           ///< further help text (may be empty; lines end in '\n')
  int (*run)(const parsed_args&, std::ostream&, std::ostream&) = nullptr;
};

/// "usage: orchmllm-bench NAME --flag V [--opt V] ..." (one line).
std::string usage_line(const command& cmd);

/// Full help text of one subcommand.
std::string command_help(const command& cmd);

namespace detail {
/// Messages go on one line of printable text: embedded line breaks (which would split a log
/// record) become spaces, other control and non-ASCII bytes \xNN, and a message longer than
/// 1000 bytes is cut (the fields it echoes are already cut by `quote_text`).
std::string one_line(std::string_view text);
}  // namespace detail

/// Runs `body` (returning an exit code) and maps every exception to the exit-code contract
/// above, writing the message to `err` prefixed with "orchmllm-bench NAME: ".
template <class Body>
int guarded(const command& cmd, std::ostream& err, Body&& body) {
  const std::string prefix = std::string(program_name) + " " + cmd.name + ": ";
  try {
    return body();
  } catch (const usage_error& e) {
    err << prefix << detail::one_line(e.what()) << "\n" << usage_line(cmd) << "\n";
  } catch (const orchmllm::error& e) {
    // message() without the "[file:line]" of the detecting check: the messages name the value
    // at fault (and, from the file readers, FILE:LINE of the input), which is what a user of
    // the tool needs; the source location of a library check is in what() for debugging.
    err << prefix << detail::one_line(e.message()) << "\n";
  } catch (const io_error& e) {
    err << prefix << detail::one_line(e.what()) << "\n";
  } catch (const std::bad_alloc&) {
    // An input too large for this machine's memory is the input's problem, not a tool bug.
    err << prefix
        << "out of memory: the input (ranks, items or nodes) is too large for this "
           "machine\n";
  } catch (const std::exception& e) {
    err << prefix << "internal error: " << detail::one_line(e.what()) << "\n";
    return exit_internal;
  }
  return exit_error;
}

}  // namespace orchmllm::tool
