#pragma once
// The body of comm/metadata.hpp's `gather_layout` over lengths and bytes, included by it at its
// end: one all-gather of every rank's record (item count, whether it gives bytes, whether its
// input is malformed), the agreement on bytes, then one all-gatherv per array.

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace orchmllm {

template <communicator Comm>
batch_layout gather_layout(Comm& comm, std::span<const std::int64_t> lengths,
                           std::span<const std::int64_t> bytes) {
  const auto d = static_cast<std::size_t>(comm.size());
  struct record {
    std::int64_t items;
    std::int64_t has_bytes;
    std::int64_t bad;  // 0 ok, 1 sizes disagree, 2 negative value
  };
  // has_bytes: 0 no, 1 yes, 2 either. A rank without items passes empty spans either way (it
  // cannot give bytes for no items), so it follows the ranks that have items.
  record mine{static_cast<std::int64_t>(lengths.size()),
              lengths.empty() && bytes.empty() ? 2 : (bytes.empty() ? 0 : 1), 0};
  if (!bytes.empty() && bytes.size() != lengths.size()) mine.bad = 1;
  for (const auto v : lengths)
    if (v < 0) mine.bad = 2;
  for (const auto v : bytes)
    if (v < 0) mine.bad = 2;
  const std::vector<record> all = orchmllm::all_gather(comm, mine);
  std::size_t decides = 0;  // the first rank with items (its choice is the group's)
  while (decides + 1 < d && all[decides].has_bytes == 2) ++decides;
  const bool has_bytes = all[decides].has_bytes == 1;
  for (std::size_t r = 0; r < d; ++r) {
    ORCHMLLM_REQUIRE(all[r].bad != 1, communication_error, "rank ", r,
                     " gave payload bytes for another number of items than lengths");
    ORCHMLLM_REQUIRE(all[r].bad != 2, communication_error, "rank ", r,
                     " gave a negative length or byte count");
    ORCHMLLM_REQUIRE(all[r].has_bytes == 2 || (all[r].has_bytes == 1) == has_bytes,
                     communication_error,
                     "ranks disagree on whether payload bytes are given: rank ", decides,
                     has_bytes ? " gives" : " does not give", " them, rank ", r,
                     all[r].has_bytes == 1 ? " does" : " does not");
  }
  std::vector<std::int64_t> counts(d);
  for (std::size_t r = 0; r < d; ++r) counts[r] = all[r].items;
  // The counts come from the gathered records: the same on every rank.
  auto global_lengths = orchmllm::all_gatherv(comm, lengths, counts, agreed_gather{});
  std::vector<std::int64_t> global_bytes;
  if (has_bytes) global_bytes = orchmllm::all_gatherv(comm, bytes, counts, agreed_gather{}).values;
  return batch_layout(std::move(global_lengths.offsets), std::move(global_lengths.values),
                      std::move(global_bytes));
}

}  // namespace orchmllm
