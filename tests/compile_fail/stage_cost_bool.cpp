// A stage cost model that returns bool.
// expect: orchmllm: a stage's cost model returns bool
#include <cstdint>
#include <orchmllm/orchestrator/orchestrator.hpp>

int main() {
  orchmllm::stage_declarations decl;
  decl.llm.cost = [](std::int64_t l) { return l > 1024; };
}
