// A stage balancer whose call operator is not const.
// expect: orchmllm: a stage's balancer must be callable as `(const orchmllm::balance_problem<C>&)
// const`
#include <orchmllm/orchestrator/orchestrator.hpp>
#include <vector>

struct round_robin {
  template <class C>
  std::vector<orchmllm::rank_t> operator()(const orchmllm::balance_problem<C>& p) {
    return std::vector<orchmllm::rank_t>(static_cast<std::size_t>(p.layout.num_items()), 0);
  }
};

int main() {
  orchmllm::stage_declarations decl;
  decl.llm.balancer = round_robin{};
}
