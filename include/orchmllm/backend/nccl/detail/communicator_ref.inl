#pragma once
// Out-of-line members of nccl::communicator_ref: construction and the longest collectives
// (included at the end of backend/nccl/communicator_ref.cuh). Not API. See docs/communication.md,
// "Communicator concept" and "Deadlines".

namespace orchmllm::nccl {

inline communicator_ref::communicator_ref(ncclComm_t comm, cudaStream_t stream, options opts)
    : comm_(comm), stream_(stream), opts_(opts) {
  ORCHMLLM_REQUIRE(comm_ != nullptr, invalid_argument_error,
                   "nccl::communicator_ref: the NCCL communicator is null");
  int n = 0;
  int r = 0;
  check(ncclCommCount(comm_, &n), "ncclCommCount");
  check(ncclCommUserRank(comm_, &r), "ncclCommUserRank");
  size_ = n;
  rank_ = r;
  // Resolved locally (options, ORCHMLLM_TIMEOUT_MS, default), then agreed; until then the
  // waits use the local value, or the default when it is invalid.
  std::optional<invalid_argument_error> local;
  try {
    timeout_ = ::orchmllm::detail::resolve_comm_timeout("nccl::communicator_ref", opts_.timeout);
    ORCHMLLM_REQUIRE(opts_.ranks_per_node >= 0, invalid_argument_error,
                     "nccl::communicator_ref: ranks_per_node = ", opts_.ranks_per_node,
                     " is negative (0 means the hosts)");
  } catch (const invalid_argument_error& e) {
    local = e;
  }
  // [bad, t, ~t, g, ~g]: max(~x) = ~min(x), so one reduction gives both extremes.
  const std::int64_t t = timeout_.count(), g = opts_.ranks_per_node;
  std::array<std::int64_t, 5> v{local ? rank_ + 1 : 0, t, ~t, g, ~g};
  reduce_max(v.data(), v.size(), "nccl::communicator_ref options");
  if (local) throw *local;
  opts_.timeout = timeout_;
  ORCHMLLM_REQUIRE(v[0] == 0, invalid_argument_error, "nccl::communicator_ref: rank ", v[0] - 1,
                   " passed invalid options (its own error names them)");
  ORCHMLLM_REQUIRE(v[1] == ~v[2] && v[3] == ~v[4], invalid_argument_error,
                   "nccl::communicator_ref: ranks pass different options (timeout from ", ~v[2],
                   " to ", v[1], " ms, ranks_per_node from ", ~v[4], " to ", v[3], ")");

  if (opts_.ranks_per_node > 0) {
    assign_blocks(opts_.ranks_per_node);
  } else {
    std::array<char, host_name_bytes> mine{};
    if (gethostname(mine.data(), mine.size() - 1) != 0) std::strcpy(mine.data(), "?");
    std::vector<char> names(host_name_bytes * static_cast<std::size_t>(size_));
    all_gather(reinterpret_cast<const std::byte*>(mine.data()), host_name_bytes,
               reinterpret_cast<std::byte*>(names.data()));
    std::vector<std::string> hosts;
    for (rank_t q = 0; q < size_; ++q)
      hosts.emplace_back(names.data() + static_cast<std::size_t>(q) * host_name_bytes);
    assign_by_keys(std::span<const std::string>(hosts));
  }
}

// Whether this rank's all_gatherv arguments are bad, and the largest count.
inline bool communicator_ref::bad_all_gatherv(const std::byte* send, std::int64_t bytes,
                                              const std::byte* recv,
                                              std::span<const std::int64_t> counts,
                                              std::span<const std::int64_t> displs,
                                              std::int64_t& widest) const {
  widest = 0;
  try {
    ::orchmllm::detail::validate_counts_displs(counts, displs, static_cast<std::size_t>(size_),
                                               "all_gatherv: recv");
  } catch (const invalid_argument_error&) {
    return true;
  }
  bool bad = bytes != counts[static_cast<std::size_t>(rank_)] || (bytes > 0 && send == nullptr);
  for (std::size_t q = 0; q < counts.size(); ++q) {
    widest = std::max(widest, counts[q]);
    bad = bad || (counts[q] > 0 && recv == nullptr);
  }
  return bad;
}

// The transfer of an all_gatherv whose arguments are valid: one padded ncclAllGather.
inline void communicator_ref::gather_v(const std::byte* send, std::int64_t bytes, std::byte* recv,
                                       std::span<const std::int64_t> counts,
                                       std::span<const std::int64_t> displs, std::int64_t widest) {
  std::vector<std::byte> padded(static_cast<std::size_t>(widest) * static_cast<std::size_t>(size_));
  std::vector<std::byte> mine(static_cast<std::size_t>(widest));
  if (bytes > 0) std::memcpy(mine.data(), send, static_cast<std::size_t>(bytes));
  gather_padded(mine.data(), widest, padded.data());
  for (std::size_t q = 0; q < counts.size(); ++q)
    if (counts[q] > 0)
      std::memcpy(recv + displs[q], padded.data() + q * static_cast<std::size_t>(widest),
                  static_cast<std::size_t>(counts[q]));
}

inline void communicator_ref::all_gatherv(const std::byte* send, std::int64_t bytes,
                                          std::byte* recv, std::span<const std::int64_t> counts,
                                          std::span<const std::int64_t> displs) {
  namespace od = ::orchmllm::detail;
  std::int64_t widest = 0;
  const bool bad = bad_all_gatherv(send, bytes, recv, counts, displs, widest);
  od::fnv digest;
  if (!bad) digest.mix_all(counts);
  const auto key = bad ? std::int64_t{0} : static_cast<std::int64_t>(digest.h >> 1);
  std::array<std::int64_t, 3> v{bad ? rank_ + 1 : 0, key, ~key};
  reduce_max(v.data(), v.size(), "all_gatherv agreement");
  ORCHMLLM_REQUIRE(v[0] == 0, invalid_argument_error, "all_gatherv: rank ", v[0] - 1,
                   " passed invalid counts, displacements or buffers");
  ORCHMLLM_REQUIRE(v[1] == ~v[2], invalid_argument_error,
                   "all_gatherv: ranks pass different counts");
  gather_v(send, bytes, recv, counts, displs, widest);
}

inline void communicator_ref::all_gatherv(const std::byte* send, std::int64_t bytes,
                                          std::byte* recv, std::span<const std::int64_t> counts,
                                          std::span<const std::int64_t> displs, agreed_gather) {
  std::int64_t widest = 0;
  ORCHMLLM_REQUIRE(!bad_all_gatherv(send, bytes, recv, counts, displs, widest),
                   invalid_argument_error, "all_gatherv: rank ", rank_,
                   " passed invalid counts, displacements or buffers");
  gather_v(send, bytes, recv, counts, displs, widest);
}
}  // namespace orchmllm::nccl
