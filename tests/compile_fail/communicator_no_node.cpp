// A communicator without node(): the concept names the missing member.
// expect: communicator
// expect: cc.node()
#include <cstddef>
#include <cstdint>
#include <orchmllm/orchestrator/orchestrator.hpp>
#include <span>

struct my_comm {
  static constexpr orchmllm::memory_kind payload_memory = orchmllm::memory_kind::host;
  orchmllm::rank_t rank() const { return 0; }
  orchmllm::rank_t size() const { return 1; }
  orchmllm::rank_t num_nodes() const { return 1; }
  orchmllm::rank_t local_rank() const { return 0; }
  orchmllm::rank_t local_size() const { return 1; }
  void barrier() {}
  void all_gather(const std::byte*, std::int64_t, std::byte*) {}
  void all_gatherv(const std::byte*, std::int64_t, std::byte*, std::span<const std::int64_t>,
                   std::span<const std::int64_t>) {}
  void all_to_allv(const std::byte*, std::span<const std::int64_t>, std::span<const std::int64_t>,
                   std::byte*, std::span<const std::int64_t>, std::span<const std::int64_t>) {}
};

int main() {
  my_comm comm;
  orchmllm::stage_declarations decl;
  orchmllm::local_batch batch;
  (void)orchmllm::gather_step_metadata(comm, decl, batch);
}
