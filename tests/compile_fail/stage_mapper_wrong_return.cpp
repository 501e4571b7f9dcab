// A stage mapper that returns one rank instead of the rank of every bin.
// expect: orchmllm: a stage's mapper must return std::vector<orchmllm::rank_t>
#include <orchmllm/orchestrator/orchestrator.hpp>

struct first_rank {
  orchmllm::rank_t operator()(const orchmllm::bin_mapping_problem&) const { return 0; }
};

int main() {
  orchmllm::stage_declarations decl;
  decl.llm.mapper = first_rank{};
}
