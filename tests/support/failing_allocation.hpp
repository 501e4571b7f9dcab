#pragma once
// Allocation failures on demand, for fault tests: include this header in exactly one
// translation unit of a test program. It replaces the program's global `operator new` /
// `operator delete` (plain malloc/free underneath) so that, while a `failing_allocations`
// guard is alive on a thread, every allocation of at least `from_bytes` bytes on that thread
// throws `std::bad_alloc` (the nothrow forms return null) — as a rank that runs out of host
// memory would. Other threads, and smaller allocations, are untouched.

#include <cstddef>
#include <cstdlib>
#include <new>

namespace orchmllm::test {

inline thread_local std::size_t fail_allocations_from = 0;  // 0: never fail

/// While alive, allocations of at least `from_bytes` bytes on this thread throw bad_alloc.
class failing_allocations {
 public:
  explicit failing_allocations(std::size_t from_bytes) noexcept : previous_(fail_allocations_from) {
    fail_allocations_from = from_bytes;
  }
  ~failing_allocations() { fail_allocations_from = previous_; }
  failing_allocations(const failing_allocations&) = delete;
  failing_allocations& operator=(const failing_allocations&) = delete;

 private:
  std::size_t previous_;
};

}  // namespace orchmllm::test

// Not inlined: g++ would otherwise see `free` meet a pointer from `operator new` at the call
// site (-Wmismatched-new-delete), although both sides are these malloc-based replacements.
#if defined(__GNUC__)
#define ORCHMLLM_TEST_NOINLINE __attribute__((noinline))
#else
#define ORCHMLLM_TEST_NOINLINE
#endif

namespace orchmllm::test::allocation {
ORCHMLLM_TEST_NOINLINE inline void* allocate(std::size_t bytes) {
  const std::size_t from = fail_allocations_from;
  if (from != 0 && bytes >= from) throw std::bad_alloc();
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
}  // namespace orchmllm::test::allocation

// Every non-aligned form is replaced, so that no pair mixes these with the runtime's own (a
// sanitizer's allocator reports such a mix). Aligned forms keep their runtime definitions,
// which pair with each other.
void* operator new(std::size_t bytes) { return orchmllm::test::allocation::allocate(bytes); }
void* operator new[](std::size_t bytes) { return orchmllm::test::allocation::allocate(bytes); }
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return orchmllm::test::allocation::allocate(bytes);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return orchmllm::test::allocation::allocate(bytes);
  } catch (...) {
    return nullptr;
  }
}
ORCHMLLM_TEST_NOINLINE void operator delete(void* p) noexcept { std::free(p); }
ORCHMLLM_TEST_NOINLINE void operator delete[](void* p) noexcept { std::free(p); }
ORCHMLLM_TEST_NOINLINE void operator delete(void* p, std::size_t) noexcept { std::free(p); }
ORCHMLLM_TEST_NOINLINE void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
ORCHMLLM_TEST_NOINLINE void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
ORCHMLLM_TEST_NOINLINE void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
#undef ORCHMLLM_TEST_NOINLINE
