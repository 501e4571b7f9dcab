#pragma once
// Helpers of the fault tests (tests/comm/dispatch_faults_test.cpp on the in-process backend,
// tests/backend/mpi/fault_test.cpp over MPI): a mover that cannot allocate, and an `execute`
// that proves nothing arrived before a failure.

#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <vector>

#include "orchmllm/comm/mover.hpp"
#include "orchmllm/comm/route.hpp"

namespace orchmllm::test {

/// A host mover whose scratch allocation fails (as a device mover's cudaMalloc may) while
/// `fail` is set.
struct failing_mover {
  host_mover inner;
  bool fail = false;
  std::byte* scratch(int slot, std::int64_t bytes) {
    if (fail) throw std::bad_alloc();
    return inner.scratch(slot, bytes);
  }
  void gather(const std::byte* in, std::byte* out, const detail::segment_list& s) {
    inner.gather(in, out, s);
  }
};

/// Runs `r` on this rank into a buffer filled with 0x5a; if it throws, checks that not one
/// byte arrived (the failure was agreed before anything moved: else std::runtime_error "bytes
/// moved before the failure") and rethrows.
template <class Comm, class Mover>
void execute_untouched(Comm& comm, const route& r, const std::byte* in, Mover& mover) {
  std::vector<std::byte> out(static_cast<std::size_t>(r.output_bytes()), std::byte{0x5a});
  try {
    execute(comm, r, in, out.data(), mover);
  } catch (...) {
    for (const auto b : out)
      if (b != std::byte{0x5a}) throw std::runtime_error("bytes moved before the failure");
    throw;
  }
}

}  // namespace orchmllm::test
