// A padding rule without ==.
// expect: orchmllm: a padding rule needs `==`
#include <cstdint>
#include <orchmllm/orchestrator/orchestrator.hpp>

struct to_64 {
  [[nodiscard]] std::int64_t padded_length(std::int64_t l) const { return (l + 63) / 64 * 64; }
};

int main() {
  orchmllm::stage_declarations decl;
  decl.llm.policy = to_64{};
}
