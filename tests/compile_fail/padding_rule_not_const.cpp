// A padding rule whose padded_length is not const.
// expect: orchmllm: a padding rule needs `padded_length(std::int64_t) const`
#include <cstdint>
#include <orchmllm/orchestrator/orchestrator.hpp>

struct to_64 {
  std::int64_t padded_length(std::int64_t l) { return (l + 63) / 64 * 64; }
  friend bool operator==(const to_64&, const to_64&) = default;
};

int main() {
  orchmllm::stage_declarations decl;
  decl.llm.policy = to_64{};
}
