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
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace orchmllm::tool {

/// A file that cannot be read or written. The tool prints the message and exits with code 2.
class io_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The whole content of `path`. Throws io_error naming the path when it cannot be read.
std::string read_file(const std::filesystem::path& path);

/// The temporary name `write_file_atomically` uses for `path`: a hidden sibling, unique per
/// process so two concurrent runs do not clobber each other's temporary file.
std::filesystem::path temporary_sibling(const std::filesystem::path& path);

/// The file `write_file_atomically` replaces for `path`: `path` itself when nothing or a
/// regular file is there, the target of a symbolic link to a regular file. Throws io_error
/// naming the path and what is there for anything else (directory, FIFO, device, socket,
/// dangling link), so it is never replaced.
std::filesystem::path output_target(const std::filesystem::path& path);

namespace detail {

/// The temporary files in flight, removed by the signal handler: fixed storage, written before
/// a file is created and cleared after it is renamed or removed (async-signal-safe to read).
struct pending_temporaries {
  static constexpr std::size_t slots = 8;
  static constexpr std::size_t path_bytes = 4096;
  std::array<std::array<char, path_bytes>, slots> path{};
  std::array<volatile std::sig_atomic_t, slots> used{};
};
pending_temporaries& pending();

/// Points SIGINT, SIGTERM and SIGHUP at the cleanup handler; a signal the caller ignores
/// (nohup, a shell's background job) stays ignored. Done once by the first `temporary_file`.
void install_cleanup_handlers();

/// Registers one temporary file with the signal handler for its lifetime (and removes the file
/// when the scope ends without `release`, e.g. on an exception).
class temporary_file {
 public:
  explicit temporary_file(std::filesystem::path path);
  temporary_file(const temporary_file&) = delete;
  temporary_file& operator=(const temporary_file&) = delete;
  ~temporary_file();
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// The file was renamed away: nothing to remove.
  void release() noexcept;

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
void write_files_atomically(
    const std::vector<std::pair<std::filesystem::path, std::string_view>>& files);

/// Writes `content` to `path` all-or-nothing (`write_files_atomically` with one file).
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

}  // namespace orchmllm::tool
