// A byte mover whose scratch() returns void*: the concept names the requirement.
// expect: byte_mover
// expect: m.scratch(slot, bytes)
#include <cstddef>
#include <cstdint>
#include <orchmllm/comm/dispatch.hpp>
#include <orchmllm/comm/local.hpp>
#include <vector>

struct my_mover {
  std::vector<std::byte> buffer;
  void* scratch(int, std::int64_t bytes) {
    buffer.resize(static_cast<std::size_t>(bytes));
    return buffer.data();
  }
  template <class Segments>
  void gather(const std::byte*, std::byte*, const Segments&) {}
};

int main() {
  orchmllm::local::run(1, [](orchmllm::local::communicator& comm) {
    orchmllm::route r;
    my_mover mover;
    orchmllm::dispatch(comm, r, {}, {}, mover);
  });
}
