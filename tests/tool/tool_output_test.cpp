// Tests of what the orchmllm-bench command-line tool writes (bench/cli/): the JSON writer
// (escapes, exact numbers), output files (bench/cli/file_io.hpp: symlinks written through,
// FIFOs and directories refused, all or nothing, no temporary file after a signal) and messages
// that echo user text cut and printable.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <orchmllm/orchmllm.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/cli/tool.hpp"
#include "support/tool_fixtures.hpp"

#if __has_include(<sys/stat.h>) && __has_include(<sys/wait.h>) && __has_include(<unistd.h>)
#include <sys/stat.h>  // chmod, mkfifo
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // fork
#define ORCHMLLM_TEST_POSIX 1
#endif

namespace fs = std::filesystem;
namespace tool = orchmllm::tool;
using namespace orchmllm::test::tool_fixtures;  // support/tool_fixtures.hpp

// =============================================================================================
// JSON writer
// =============================================================================================

TEST_CASE("json writer escapes strings and prints numbers exactly") {
  CHECK(tool::json_quote("plain") == "\"plain\"");
  CHECK(tool::json_quote("a\"b\\c\nd\te\x01") == "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
  CHECK(tool::json_number(std::nan("")) == "null");
  CHECK(tool::json_number(INFINITY) == "null");
  for (double v : {0.1, 1.0 / 3.0, 123456789.123456789, 1e-300, 2.5e17}) {
    CHECK(std::strtod(tool::json_number(v).c_str(), nullptr) == v);  // round trip, bit-exact
  }
  tool::json_object j;
  j.add("s", "x\"y").add("i", INT64_MAX).add("neg", std::int64_t{-3}).add("d", 0.5).add("t", true);
  j.raw("n", "null");
  CHECK(j.str() == R"({"s":"x\"y","i":9223372036854775807,"neg":-3,"d":0.5,"t":true,"n":null})");
  const auto parsed = parse_flat_json(j.str());
  CHECK(parsed.at("s").text == "x\"y");
  CHECK(parsed.at("i").integer() == INT64_MAX);
  CHECK(parsed.at("n").k == json_value::kind::null);
}

// ---------------------------------------------------------------------------------------------
// Output files (bench/cli/file_io.hpp)
// ---------------------------------------------------------------------------------------------

#if ORCHMLLM_TEST_POSIX
TEST_CASE("--out: a symlink is written through, a FIFO or directory is refused and kept") {
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  write_text(items, "rank,slot,length\n0,0,5\n1,0,3\n");
  // A symlink to a regular file: the target gets the plan, the link stays a link.
  const std::string target = dir.file("target.csv");
  write_text(target, "old\n");
  ::chmod(target.c_str(), 0640);
  fs::create_symlink(target, dir.file("link.csv"));
  auto r = run_tool({"plan", "--items", items, "--ranks", "2", "--out", dir.file("link.csv")});
  CHECK(r.rc == 0);
  CHECK(fs::is_symlink(dir.file("link.csv")));
  CHECK(read_text(target).rfind("rank,slot,dst_rank,dst_slot\n", 0) == 0);
  CHECK((fs::status(target).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  // A FIFO, a directory and a dangling link: exit 2, naming the path, left as they were.
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  fs::create_directory(dir.file("sub"));
  fs::create_symlink(dir.file("nowhere"), dir.file("dangling"));
  for (const auto& [name, why] :
       {std::pair{"fifo", "is a FIFO, not a regular file"}, std::pair{"sub", "is a directory"},
        std::pair{"dangling", "dangling symbolic link"}}) {
    CAPTURE(name);
    r = run_tool({"plan", "--items", items, "--ranks", "2", "--out", dir.file(name)});
    CHECK(r.rc == 2);
    CHECK_MESSAGE(r.err.find(why) != std::string::npos, r.err);
  }
  CHECK(fs::is_fifo(dir.file("fifo")));
  CHECK(fs::is_directory(dir.file("sub")));
  CHECK(fs::is_empty(dir.file("sub")));
  CHECK(fs::is_symlink(dir.file("dangling")));
  CHECK(dir.entries() ==
        std::set<std::string>{"items.csv", "target.csv", "link.csv", "fifo", "sub", "dangling"});
}

TEST_CASE("write_files_atomically: all or nothing, and no temporary file after a signal") {
  scratch_dir dir;
  write_text(dir.file("a.csv"), "old a\n");
  REQUIRE(::mkfifo(dir.file("b.csv").c_str(), 0600) == 0);
  // The second destination is refused: the first is not replaced either.
  CHECK_THROWS_AS(tool::write_files_atomically(
                      {{dir.file("a.csv"), "new a\n"}, {dir.file("b.csv"), "new b\n"}}),
                  tool::io_error);
  CHECK(read_text(dir.file("a.csv")) == "old a\n");
  CHECK(dir.entries() == std::set<std::string>{"a.csv", "b.csv"});
  fs::remove(dir.file("b.csv"));
  tool::write_files_atomically({{dir.file("a.csv"), "new a\n"}, {dir.file("b.csv"), "new b\n"}});
  CHECK(read_text(dir.file("a.csv")) == "new a\n");
  CHECK(read_text(dir.file("b.csv")) == "new b\n");
  // SIGTERM while a temporary file exists: the handler removes it, then the process dies of
  // the signal.
  const std::string tmp = tool::temporary_sibling(dir.file("c.csv")).string();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // doctest's crash handler may have replaced the tool's since it was installed.
    tool::detail::install_cleanup_handlers();
    tool::detail::temporary_file guard{fs::path(tmp)};
    { std::ofstream(tmp) << "partial"; }
    ::raise(SIGTERM);
    ::_exit(0);  // not reached
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK(dir.entries() == std::set<std::string>{"a.csv", "b.csv"});
}
#endif

TEST_CASE("messages echo user text cut and printable: a huge header, binary bytes") {
  CHECK(tool::quote_text("12x") == "'12x'");
  CHECK(tool::printable(std::string("a\x01\xff\\b", 5)) == "a\\x01\\xff\\\\b");
  CHECK(tool::printable(std::string(250, 'y')) == std::string(200, 'y') + "...(50 more bytes)");
  scratch_dir dir;
  const std::string items = dir.file("items.csv");
  for (const std::string& header :
       {std::string(10'000'000, 'h'), std::string("rank,slot,le\x1b[2Jngth\x07\x00", 20),
        "rank,slot,length\n0,0,1" + std::string(100'000, '9')}) {
    write_text(items, header + "\n");
    const auto r = run_tool({"plan", "--items", items, "--ranks", "2", "--out", dir.file("p")});
    CHECK(r.rc == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.size() < 1200);
    CHECK(
        std::all_of(r.err.begin(), r.err.end() - 1, [](char c) { return c >= 0x20 && c < 0x7f; }));
  }
}
