#pragma once
// orchmllm-bench: whole-file reads and all-or-nothing writes.
//
// Output files are written to a temporary name in the destination's directory and renamed
// over the destination only when complete, so a failing run (bad input, infeasible plan, full
// disk) never leaves a partial or stale-looking file behind; rename within one directory is
// atomic on POSIX file systems.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#if __has_include(<unistd.h>)
#include <unistd.h>
#define ORCHMLLM_TOOL_HAS_GETPID 1
#endif

namespace orchmllm::tool {

/// A file that cannot be read or written. The tool prints the message and exits with code 2.
class io_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The whole content of `path`. Throws io_error naming the path when it cannot be read.
inline std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw io_error("cannot read '" + path.string() + "': is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error("cannot open '" + path.string() + "' for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw io_error("error while reading '" + path.string() + "'");
  return text;
}

/// The temporary name `write_file_atomically` uses for `path`: a hidden sibling, unique per
/// process so two concurrent runs do not clobber each other's temporary file.
inline std::filesystem::path temporary_sibling(const std::filesystem::path& path) {
  std::string name = "." + path.filename().string() + ".tmp";
#ifdef ORCHMLLM_TOOL_HAS_GETPID
  name += "." + std::to_string(static_cast<long long>(::getpid()));
#endif
  return path.parent_path() / name;
}

/// Writes `content` to `path` all-or-nothing (temporary sibling + rename). Throws io_error
/// naming the path on failure, after removing the temporary file.
inline void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  const auto tmp = temporary_sibling(path);
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw io_error("cannot create '" + tmp.string() + "' (for '" + path.string() + "')");
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      throw io_error("error while writing '" + tmp.string() + "' (for '" + path.string() + "')");
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw io_error("cannot rename '" + tmp.string() + "' to '" + path.string() +
                   "': " + ec.message());
  }
}

}  // namespace orchmllm::tool
