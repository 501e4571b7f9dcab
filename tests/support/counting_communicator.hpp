#pragma once
// A communicator that forwards to another one and counts every collective it issues, by kind:
// the tests of "one all-to-all(v) per hop and nothing else" count with it. Forwards `all_max`
// only when the inner communicator has it (so the library takes the same path as with the
// inner one). Not thread-safe: one per rank.

#include <cstddef>
#include <cstdint>
#include <span>

#include "orchmllm/comm/communicator.hpp"

namespace orchmllm::test {

template <communicator Inner>
struct counting_communicator {
  Inner& inner;
  std::int64_t barriers = 0, all_gathers = 0, all_gathervs = 0, all_to_allvs = 0, all_maxes = 0;

  static constexpr auto payload_memory = Inner::payload_memory;

  /// Every collective issued so far.
  [[nodiscard]] std::int64_t total() const noexcept {
    return barriers + all_gathers + all_gathervs + all_to_allvs + all_maxes;
  }
  void reset() noexcept { barriers = all_gathers = all_gathervs = all_to_allvs = all_maxes = 0; }

  rank_t rank() const { return inner.rank(); }
  rank_t size() const { return inner.size(); }
  rank_t node() const { return inner.node(); }
  rank_t num_nodes() const { return inner.num_nodes(); }
  rank_t local_rank() const { return inner.local_rank(); }
  rank_t local_size() const { return inner.local_size(); }
  void barrier() {
    ++barriers;
    inner.barrier();
  }
  void all_gather(const std::byte* s, std::int64_t b, std::byte* r) {
    ++all_gathers;
    inner.all_gather(s, b, r);
  }
  void all_gatherv(const std::byte* s, std::int64_t b, std::byte* r,
                   std::span<const std::int64_t> c, std::span<const std::int64_t> o) {
    ++all_gathervs;
    inner.all_gatherv(s, b, r, c, o);
  }
  void all_to_allv(const std::byte* s, std::span<const std::int64_t> sc,
                   std::span<const std::int64_t> sd, std::byte* r, std::span<const std::int64_t> rc,
                   std::span<const std::int64_t> rd) {
    ++all_to_allvs;
    inner.all_to_allv(s, sc, sd, r, rc, rd);
  }
  void all_max(std::span<std::int64_t> values) requires max_reducing_communicator<Inner> {
    ++all_maxes;
    inner.all_max(values);
  }
};

}  // namespace orchmllm::test
