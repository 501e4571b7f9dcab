// A stage balancer that returns the makespan instead of a plan.
// expect: orchmllm: a stage's balancer must return orchmllm::balancer_plan,
// std::vector<orchmllm::rank_t>
#include <orchmllm/orchestrator/orchestrator.hpp>

struct makespan_only {
  double operator()(const auto&) const { return 0.0; }
};

int main() {
  orchmllm::stage_declarations decl;
  decl.llm.balancer = makespan_only{};
}
