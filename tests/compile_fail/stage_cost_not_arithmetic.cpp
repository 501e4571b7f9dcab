// A stage cost model that returns a string.
// expect: orchmllm: a stage's cost model must return a non-bool arithmetic type
#include <cstdint>
#include <orchmllm/orchestrator/orchestrator.hpp>
#include <string>

int main() {
  orchmllm::stage_declarations decl;
  decl.encoders.push_back(orchmllm::encoder_stage{
      .name = "vision", .cost = [](std::int64_t l) { return std::to_string(l); }});
}
