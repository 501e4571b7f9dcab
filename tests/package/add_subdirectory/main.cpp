// Consumer of a vendored orchmllm (package.add_subdirectory and package.fetchcontent tests).
#include <cstdio>
#include <cstring>
#include <orchmllm/orchmllm.hpp>

static_assert(ORCHMLLM_VERSION_MAJOR == 0, "unexpected major version");

int main() {
  const char* v = orchmllm::version_string();
  std::printf("orchmllm %s (vendored)\n", v);
  return (v != nullptr && std::strlen(v) > 0) ? 0 : 1;
}
