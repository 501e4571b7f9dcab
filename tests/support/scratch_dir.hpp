#pragma once
// A fresh, empty directory for one test case, removed at the end (the tool, dispatch and
// workload tests write their files there).

#include <atomic>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <system_error>

namespace orchmllm::test {

class scratch_dir {
 public:
  /// A new directory named `prefix` + a random number + a per-process counter under the
  /// system's temporary directory (the name only needs to be unique; it never affects results).
  explicit scratch_dir(const std::string& prefix = "orchmllm_test_") {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            (prefix + std::to_string(rd()) + "_" + std::to_string(++counter));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// The path of `name` inside the directory.
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  /// Names of all entries (to prove no temporary or partial file was left behind).
  [[nodiscard]] std::set<std::string> entries() const {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.insert(e.path().filename().string());
    return out;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace orchmllm::test
