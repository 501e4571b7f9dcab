// A mutable lambda as a stage cost model (its call operator is not const).
// expect: orchmllm: a stage's cost model must be callable as `(std::int64_t) const`
#include <cstdint>
#include <orchmllm/orchestrator/orchestrator.hpp>

int main() {
  orchmllm::stage_declarations decl;
  std::int64_t calls = 0;
  decl.llm.cost = [calls](std::int64_t l) mutable {
    ++calls;
    return l;
  };
}
