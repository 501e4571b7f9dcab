// orchmllm-bench: whole-file reads and all-or-nothing writes (file_io.hpp).
#include "bench/cli/file_io.hpp"

#include <array>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
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

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw io_error("cannot read '" + path.string() + "': is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error("cannot open '" + path.string() + "' for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw io_error("error while reading '" + path.string() + "'");
  return text;
}

std::filesystem::path temporary_sibling(const std::filesystem::path& path) {
  std::string name(1, '.');
  name += path.filename().string();
  name += ".tmp";
#ifdef ORCHMLLM_TOOL_POSIX
  name += '.';
  name += std::to_string(static_cast<long long>(::getpid()));
#endif
  return path.parent_path() / name;
}

std::filesystem::path output_target(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  auto kind = [](fs::file_type t) -> std::string {
    switch (t) {
      case fs::file_type::directory:
        return "a directory";
      case fs::file_type::fifo:
        return "a FIFO";
      case fs::file_type::character:
        return "a character device";
      case fs::file_type::block:
        return "a block device";
      case fs::file_type::socket:
        return "a socket";
      default:
        return "not a regular file";
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

pending_temporaries& pending() {
  static pending_temporaries p;
  return p;
}

#ifdef ORCHMLLM_TOOL_POSIX
extern "C" void remove_temporaries_and_die(int sig) {
  auto& p = pending();
  for (std::size_t i = 0; i < pending_temporaries::slots; ++i)
    if (p.used[i]) ::unlink(p.path[i].data());
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}
#endif

void install_cleanup_handlers() {
#ifdef ORCHMLLM_TOOL_POSIX
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    if (std::signal(sig, &remove_temporaries_and_die) == SIG_IGN) std::signal(sig, SIG_IGN);
#endif
}

temporary_file::temporary_file(std::filesystem::path path) : path_(std::move(path)) {
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

temporary_file::~temporary_file() {
  if (!released_) {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  if (slot_ != npos) pending().used[slot_] = 0;
}

void temporary_file::release() noexcept {
  released_ = true;
  if (slot_ != npos) pending().used[slot_] = 0;
  slot_ = npos;
}

}  // namespace detail

void write_files_atomically(
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
      throw io_error("error while writing '" + tmp.string() + "' (for '" + files[i].first.string() +
                     "')");
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

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  write_files_atomically({{path, content}});
}

}  // namespace orchmllm::tool
