#pragma once
// Out-of-line members of mpi::communicator (included at the end of backend/mpi/communicator.hpp):
// construction (options resolved, checked and agreed, the communicator duplicated, the node
// shape found) and all_gatherv. Not API. See docs/communication.md, "Communicator concept"
// and "Deadlines".

namespace orchmllm::mpi {

inline void communicator::init(MPI_Comm comm, bool own) {
  namespace impl = ::orchmllm::detail::mpi_backend;
  int initialized = 0;
  impl::check(MPI_Initialized(&initialized), "MPI_Initialized");
  ORCHMLLM_REQUIRE(initialized, invalid_argument_error,
                   "MPI is not initialised: create an orchmllm::mpi::environment (or call "
                   "MPI_Init) before an orchmllm::mpi::communicator");
  ORCHMLLM_REQUIRE(comm != MPI_COMM_NULL, invalid_argument_error,
                   "mpi::communicator: the MPI communicator is MPI_COMM_NULL");
  int r = 0;
  impl::check(MPI_Comm_rank(comm, &r), "MPI_Comm_rank");
  rank_ = r;

  // Resolve and validate the options locally, then agree, so that a bad option on one rank
  // fails every rank here instead of hanging the first collective.
  std::optional<invalid_argument_error> local;
  std::int64_t per_node = opts_.ranks_per_node;
  std::chrono::milliseconds timeout = default_timeout;
  try {
    ORCHMLLM_REQUIRE(opts_.ranks_per_node >= 0, invalid_argument_error,
                     "mpi::communicator: ranks_per_node = ", opts_.ranks_per_node,
                     " is negative (0 means real nodes)");
    ORCHMLLM_REQUIRE(opts_.max_chunk_bytes >= 1 && opts_.max_chunk_bytes <= INT_MAX,
                     invalid_argument_error,
                     "mpi::communicator: max_chunk_bytes = ", opts_.max_chunk_bytes,
                     " is outside [1, ", INT_MAX, "]");
    timeout = ::orchmllm::detail::resolve_comm_timeout("mpi::communicator", opts_.timeout);
    if (per_node == 0) {
      if (auto env = impl::ranks_per_node_from_env()) per_node = *env;
    }
  } catch (const invalid_argument_error& e) {
    local = e;
  }
  // Every wait from here on has the deadline, the constructor's own collectives included (a
  // peer that never constructs its communicator leaves this one in MPI_Comm_dup).
  watch_ = std::make_unique<impl::watchdog>("mpi::communicator", timeout, r);
  MPI_Comm used = comm;
  if (own) {
    const int rc = collective("mpi::communicator construction (MPI_Comm_dup)",
                              [&] { return MPI_Comm_dup(comm, &used); });
    impl::check(rc, "MPI_Comm_dup");
    handle_.comm = used;  // owned from here on: freed if anything below throws
    impl::check(MPI_Comm_set_errhandler(used, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  } else {
    handle_.comm = used;
    handle_.owned = false;
  }
  int s = 0;
  impl::check(MPI_Comm_size(used, &s), "MPI_Comm_size");
  size_ = s;

  const std::array<std::int64_t, 4> keys{per_node, opts_.max_chunk_bytes,
                                         opts_.verify_counts ? 1 : 0,
                                         static_cast<std::int64_t>(timeout.count())};
  const agreement a =
      agree("mpi::communicator construction", local.has_value(), keys, false, false);
  if (local) throw *local;
  throw_if_invalid("mpi::communicator", a);
  const char* names[] = {"ranks_per_node (after ORCHMLLM_RANKS_PER_NODE)", "max_chunk_bytes",
                         "verify_counts", "timeout (ms, after ORCHMLLM_TIMEOUT_MS)"};
  for (std::size_t k = 0; k < keys.size(); ++k) {
    ORCHMLLM_REQUIRE(a.key_min[k] == a.key_max[k], invalid_argument_error,
                     "mpi::communicator: ranks pass different ", names[k], ": from ", a.key_min[k],
                     " to ", a.key_max[k]);
  }
  opts_.ranks_per_node = static_cast<rank_t>(per_node);
  opts_.timeout = timeout;

  if (per_node > 0) {
    assign_blocks(opts_.ranks_per_node);
  } else {
    real_nodes();
  }
}

// The local checks of both all_gatherv overloads; throws invalid_argument_error.
inline void communicator::check_all_gatherv(const std::byte* send, std::int64_t bytes,
                                            const std::byte* recv,
                                            std::span<const std::int64_t> counts,
                                            std::span<const std::int64_t> displs) const {
  static constexpr const char* op = "all_gatherv";
  const auto p = static_cast<std::size_t>(size_);
  const auto me = static_cast<std::size_t>(rank_);
  ::orchmllm::detail::validate_counts_displs(counts, displs, p, "all_gatherv: recv");
  ORCHMLLM_REQUIRE(bytes == counts[me], invalid_argument_error, op, ": bytes = ", bytes,
                   " but counts[", rank_, "] = ", counts[me]);
  ORCHMLLM_REQUIRE(bytes == 0 || send != nullptr, invalid_argument_error, op,
                   ": null send buffer with bytes = ", bytes);
  for (std::size_t q = 0; q < p; ++q) {
    ORCHMLLM_REQUIRE(counts[q] == 0 || recv != nullptr, invalid_argument_error, op,
                     ": null recv buffer with counts[", q, "] = ", counts[q]);
  }
}

inline void communicator::all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                                      std::span<const std::int64_t> counts,
                                      std::span<const std::int64_t> displs) {
  static constexpr const char* op = "all_gatherv";
  namespace d = ::orchmllm::detail;
  std::optional<invalid_argument_error> local;
  try {
    check_all_gatherv(send, bytes, recv, counts, displs);
  } catch (const invalid_argument_error& e) {
    local = e;
  }
  const bool fits = !local && d::fits_in_int_call(counts, displs, limit());
  const std::int64_t key = local ? 0 : ::orchmllm::detail::mpi_backend::digest(counts);
  const agreement a = agree(op, local.has_value(), std::array<std::int64_t, 1>{key}, !fits, false);
  if (local) throw *local;
  throw_if_invalid(op, a);
  ORCHMLLM_REQUIRE(a.key_min[0] == a.key_max[0], invalid_argument_error, op,
                   ": ranks pass different counts (all_gatherv needs the same counts on "
                   "every rank)");
  if (a.chunked) ++chunked_calls_;
  d::mpi_backend::move_all_gatherv(comm(), rank_, size_, limit(), watch_.get(), op, send, bytes,
                                   recv, counts, displs, a.chunked);
}

inline void communicator::all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                                      std::span<const std::int64_t> counts,
                                      std::span<const std::int64_t> displs,
                                      ::orchmllm::agreed_gather) {
  static constexpr const char* op = "all_gatherv";
  namespace d = ::orchmllm::detail;
  check_all_gatherv(send, bytes, recv, counts, displs);
  // The path from the counts alone, the same on every rank: one MPI_Allgatherv when every count
  // and their total fit `int` and max_chunk_bytes (then so do packed displacements).
  std::int64_t total = 0;
  bool chunked = false;
  for (const auto c : counts) {
    chunked = chunked || c > limit() || c > INT_MAX - total;
    if (!chunked) total += c;
  }
  ORCHMLLM_REQUIRE(chunked || d::fits_in_int_call(counts, displs, limit()), invalid_argument_error,
                   op, ": this rank's displacements do not fit MPI's int while the counts do");
  if (chunked) ++chunked_calls_;
  d::mpi_backend::move_all_gatherv(comm(), rank_, size_, limit(), watch_.get(), op, send, bytes,
                                   recv, counts, displs, chunked);
}
}  // namespace orchmllm::mpi
