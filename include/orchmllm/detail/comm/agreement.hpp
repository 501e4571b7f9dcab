#pragma once
// Small agreements between the ranks of a communicator: `all_max`, through the communicator's
// own reduction when it has one (`max_reducing_communicator`), else through `all_gather`.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"

namespace orchmllm::detail {

/// Collective: replaces each value by its maximum over all ranks (every rank passes the same
/// count, at most 8). One reduction with a `max_reducing_communicator`, else one all_gather of
/// count · 8 bytes per rank. Throws what the communicator throws.
template <communicator Comm>
void all_max(Comm& comm, std::span<std::int64_t> values) {
  if constexpr (max_reducing_communicator<Comm>) {
    comm.all_max(values);
  } else {
    const auto k = values.size();
    auto all = orchmllm::all_gather(comm, std::span<const std::int64_t>(values));
    for (std::size_t r = 1; r < static_cast<std::size_t>(comm.size()); ++r)
      for (std::size_t i = 0; i < k; ++i) all[i] = std::max(all[i], all[r * k + i]);
    std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), values.begin());
  }
}

}  // namespace orchmllm::detail
