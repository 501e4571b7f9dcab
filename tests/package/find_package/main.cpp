// Consumer of an installed orchmllm (package.find_package test).
#include <cstdio>
#include <cstring>
#include <orchmllm/orchmllm.hpp>

static_assert(ORCHMLLM_VERSION_MAJOR == 0, "unexpected major version");

int main() {
  const char* v = orchmllm::version_string();
  std::printf("orchmllm %s (find_package)\n", v);
  return (v != nullptr && std::strlen(v) > 0) ? 0 : 1;
}
