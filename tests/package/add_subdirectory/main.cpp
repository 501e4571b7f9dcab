// Consumer of orchmllm via add_subdirectory (package.add_subdirectory test).
#include <cstdio>
#include <cstring>
#include <orchmllm/orchmllm.hpp>

static_assert(ORCHMLLM_VERSION_MAJOR == 0, "unexpected major version");

int main() {
  const char* v = orchmllm::version_string();
  std::printf("orchmllm %s (add_subdirectory)\n", v);
  return (v != nullptr && std::strlen(v) > 0) ? 0 : 1;
}
