// A mapper configuration struct passed where the mapper goes.
// expect: orchmllm: a stage's mapper must be callable as `(const orchmllm::bin_mapping_problem&)
// const`
#include <orchmllm/orchestrator/orchestrator.hpp>

struct mapper_settings {
  double tolerance = 0.01;
};

int main() {
  orchmllm::stage_declarations decl;
  decl.llm.mapper = mapper_settings{};
}
