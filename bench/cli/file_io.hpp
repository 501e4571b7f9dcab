#pragma once
// orchmllm-bench: whole-file reads and all-or-nothing writes.
//
// Output files are written to a temporary name in the destination's directory and renamed
// over the destination only when complete, so a failing run (bad input, infeasible plan, full
// disk) never leaves a partial or stale-looking file behind; rename within one directory is
// atomic on POSIX file systems. What is at the destination is respected:
//   - a regular file is replaced and keeps its permission bits;
//   - a symbolic link to a regular file is written through (the target is replaced, the link
//     stays); a dangling link or a link to anything else is refused;
//   - a directory, FIFO, device node or socket is refused (io_error, exit 2) and left as it was;
//     renaming over `/dev/null` as root would replace the system's null device.
// While a temporary file exists, SIGINT, SIGTERM and SIGHUP remove it before the process dies
// with that signal (POSIX), so an interrupted large write leaves nothing behind.

#include <array>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#if __has_include(<unistd.h>)
#include <unistd.h>
#define ORCHMLLM_TOOL_POSIX 1
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
#ifdef ORCHMLLM_TOOL_POSIX
  name += "." + std::to_string(static_cast<long long>(::getpid()));
#endif
  return path.parent_path() / name;
}

/// The file `write_file_atomically` replaces for `path`: `path` itself when nothing or a
/// regular file is there, the target of a symbolic link to a regular file. Throws io_error
/// naming the path and what is there for anything else (directory, FIFO, device, socket,
/// dangling link), so it is never replaced.
inline std::filesystem::path output_target(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  auto kind = [](fs::file_type t) -> std::string {
    switch (t) {
      case fs::file_type::directory: return "a directory";
      case fs::file_type::fifo: return "a FIFO";
      case fs::file_type::character: return "a character device";
      case fs::file_type::block: return "a block device";
      case fs::file_type::socket: return "a socket";
      default: return "not a regular file";
    }
  };
  std::error_code ec;
  const auto link = fs::symlink_status(path, ec);
  if (ec || link.type() == fs::file_type::not_found) return path;
  if (link.type() == fs::file_type::regular) return path;
  if (link.type() != fs::file_type::symlink)
    throw io_error("'" + path.string() + "' is " + kind(link.type()) +
                   ", not a regular file: not replacing it");
  const auto target = fs::status(path, ec);
  if (ec || target.type() == fs::file_type::not_found)
    throw io_error("'" + path.string() + "' is a dangling symbolic link: not writing through it");
  if (target.type() != fs::file_type::regular)
    throw io_error("'" + path.string() + "' links to " + kind(target.type()) +
                   ", not a regular file: not replacing it");
  auto resolved = fs::canonical(path, ec);
  if (ec) throw io_error("cannot resolve '" + path.string() + "': " + ec.message());
  return resolved;
}

namespace detail {

/// The temporary files in flight, removed by the signal handler: fixed storage, written before
/// a file is created and cleared after it is renamed or removed (async-signal-safe to read).
struct pending_temporaries {
  static constexpr std::size_t slots = 8;
  static constexpr std::size_t path_bytes = 4096;
  std::array<std::array<char, path_bytes>, slots> path{};
  std::array<volatile std::sig_atomic_t, slots> used{};
};
inline pending_temporaries& pending() {
  static pending_temporaries p;
  return p;
}

#ifdef ORCHMLLM_TOOL_POSIX
extern "C" inline void remove_temporaries_and_die(int sig) {
  auto& p = pending();
  for (std::size_t i = 0; i < pending_temporaries::slots; ++i)
    if (p.used[i]) ::unlink(p.path[i].data());
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}
#endif

/// Points SIGINT, SIGTERM and SIGHUP at the cleanup handler; a signal the caller ignores
/// (nohup, a shell's background job) stays ignored. Done once by the first `temporary_file`.
inline void install_cleanup_handlers() {
#ifdef ORCHMLLM_TOOL_POSIX
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    if (std::signal(sig, &remove_temporaries_and_die) == SIG_IGN) std::signal(sig, SIG_IGN);
#endif
}

/// Registers one temporary file with the signal handler for its lifetime (and removes the file
/// when the scope ends without `release`, e.g. on an exception).
class temporary_file {
 public:
  explicit temporary_file(std::filesystem::path path) : path_(std::move(path)) {
#ifdef ORCHMLLM_TOOL_POSIX
    static const bool installed = (install_cleanup_handlers(), true);
    (void)installed;
    const std::string s = path_.string();
    auto& p = pending();
    for (std::size_t i = 0; i < pending_temporaries::slots; ++i) {
      if (p.used[i] || s.size() >= pending_temporaries::path_bytes) continue;
      s.copy(p.path[i].data(), s.size());
      p.path[i][s.size()] = '\0';
      p.used[i] = 1;
      slot_ = i;
      break;
    }
#endif
  }
  temporary_file(const temporary_file&) = delete;
  temporary_file& operator=(const temporary_file&) = delete;
  ~temporary_file() {
    if (!released_) {
      std::error_code ignored;
      std::filesystem::remove(path_, ignored);
    }
    if (slot_ != npos) pending().used[slot_] = 0;
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// The file was renamed away: nothing to remove.
  void release() noexcept {
    released_ = true;
    if (slot_ != npos) pending().used[slot_] = 0;
    slot_ = npos;
  }

 private:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::filesystem::path path_;
  std::size_t slot_ = npos;
  bool released_ = false;
};

}  // namespace detail

/// Writes every `{path, content}` all-or-nothing: each content goes to a temporary sibling of
/// its destination (`output_target`), and only when all are written are they renamed into
/// place; a failure before that leaves every destination as it was and no temporary file.
/// A replaced file keeps its permission bits. Throws io_error naming the path on failure.
inline void write_files_atomically(
    const std::vector<std::pair<std::filesystem::path, std::string_view>>& files) {
  namespace fs = std::filesystem;
  std::vector<fs::path> targets;
  for (const auto& f : files) targets.push_back(output_target(f.first));
  std::vector<std::unique_ptr<detail::temporary_file>> temps;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& target = targets[i];
    temps.push_back(std::make_unique<detail::temporary_file>(temporary_sibling(target)));
    const auto& tmp = temps.back()->path();
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw io_error("cannot create '" + tmp.string() + "' (for '" + files[i].first.string() +
                     "')");
    out.write(files[i].second.data(), static_cast<std::streamsize>(files[i].second.size()));
    out.flush();
    if (!out)
      throw io_error("error while writing '" + tmp.string() + "' (for '" +
                     files[i].first.string() + "')");
    out.close();
    std::error_code ec;
    const auto old = fs::status(target, ec);
    if (!ec && old.type() == fs::file_type::regular)
      fs::permissions(tmp, old.permissions(), fs::perm_options::replace, ec);
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::error_code ec;
    fs::rename(temps[i]->path(), targets[i], ec);
    if (ec)
      throw io_error("cannot rename '" + temps[i]->path().string() + "' to '" +
                     targets[i].string() + "': " + ec.message());
    temps[i]->release();
  }
}

/// Writes `content` to `path` all-or-nothing (`write_files_atomically` with one file).
inline void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  write_files_atomically({{path, content}});
}

}  // namespace orchmllm::tool
