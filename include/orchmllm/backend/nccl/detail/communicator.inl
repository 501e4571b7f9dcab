#pragma once
// Out-of-line members of nccl::communicator: construction and the longest collectives
// (included at the end of backend/nccl/communicator.cuh). Not API. See docs/communication.md,
// "Communicator concept" and "Deadlines".

namespace orchmllm::nccl {

inline communicator::communicator(MPI_Comm bootstrap, cudaStream_t stream, options opts)
    : mpi_(bootstrap, mpi_options(opts)), stream_(stream), opts_(opts) {
  namespace od = ::orchmllm::detail;
  // The timeout was resolved (options, ORCHMLLM_TIMEOUT_MS, default), checked and agreed by
  // mpi_'s constructor; the verify flag is agreed here.
  opts_.timeout = mpi_.timeout();
  const std::int64_t keys[2] = {static_cast<std::int64_t>(mpi_.timeout().count()),
                                opts_.verify_counts ? 1 : 0};
  const auto a = agree(false, keys);
  ORCHMLLM_REQUIRE(
      a.key_min[0] == a.key_max[0] && a.key_min[1] == a.key_max[1], invalid_argument_error,
      "nccl::communicator: ranks pass different options (timeout from ", a.key_min[0], " to ",
      a.key_max[0], " ms, verify_counts from ", a.key_min[1], " to ", a.key_max[1], ")");

  // Rank 0's id, with a status word so a failed ncclGetUniqueId fails everyone.
  struct {
    std::int64_t status;
    ncclUniqueId id;
  } message{};
  std::string root_error;
  if (mpi_.rank() == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&message.id);
    message.status = rc;
    if (rc != ncclSuccess)
      root_error = detail::nccl_backend::nccl_message("ncclGetUniqueId", rc, nullptr);
  }
  od::mpi_backend::check(mpi_.with_deadline("nccl::communicator construction (MPI_Bcast)",
                                            [&] {
                                              return MPI_Bcast(&message,
                                                               static_cast<int>(sizeof message),
                                                               MPI_BYTE, 0, mpi_.native_handle());
                                            }),
                         "MPI_Bcast (ncclUniqueId)");
  if (message.status != ncclSuccess) {
    throw communication_error(
        mpi_.rank() == 0
            ? root_error
            : od::concat("nccl::communicator: ncclGetUniqueId failed on rank 0: ",
                         ncclGetErrorString(static_cast<ncclResult_t>(message.status))));
  }

  std::string failure;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; we poll with a deadline
  const ncclResult_t rc =
      ncclCommInitRankConfig(&comm_, mpi_.size(), message.id, mpi_.rank(), &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    failure = detail::nccl_backend::nccl_message("ncclCommInitRankConfig", rc, nullptr);
  } else {
    failure = wait_ready("ncclCommInitRankConfig");
  }
  if (!failure.empty()) abort();
  std::int64_t failed_rank = -1;
  try {
    failed_rank = agree_outcome(!failure.empty());
  } catch (...) {
    abort();  // no destructor runs for a throwing constructor: release the NCCL side here
    throw;
  }
  if (!failure.empty()) {
    throw communication_error(
        od::concat("nccl::communicator on rank ", mpi_.rank(), ": ", failure));
  }
  if (failed_rank >= 0) {
    abort();  // the group is incomplete: this rank's communicator can never be used
    throw communication_error(od::concat("nccl::communicator: NCCL initialisation failed on rank ",
                                         failed_rank, " (its own error names the cause)"));
  }
}

inline void communicator::all_to_allv(const std::byte* send,
                                      std::span<const std::int64_t> send_counts,
                                      std::span<const std::int64_t> send_displs, std::byte* recv,
                                      std::span<const std::int64_t> recv_counts,
                                      std::span<const std::int64_t> recv_displs) {
  namespace od = ::orchmllm::detail;
  static constexpr const char* op = "nccl all_to_allv";
  // After an abort every rank is aborted (outcomes are agreed), so all throw here together.
  ORCHMLLM_REQUIRE(!aborted_, communication_error, op,
                   ": the NCCL communicator was aborted after an earlier failure");
  const auto p = static_cast<std::size_t>(mpi_.size());
  std::optional<invalid_argument_error> local = od::check_all_to_allv_args(
      op, p, send, send_counts, send_displs, recv, recv_counts, recv_displs);
  std::optional<communication_error> mismatch;
  if (opts_.verify_counts)
    mismatch = mpi_.with_deadline("nccl all_to_allv count check", [&] {
      return od::mpi_backend::exchange_and_compare_counts(mpi_.native_handle(), op, mpi_.rank(),
                                                          local.has_value(), send_counts,
                                                          recv_counts, p, nullptr);
    });
  const std::int64_t none[2] = {0, 0};
  const auto a = agree(local.has_value(), none, mismatch.has_value());
  if (local) throw *local;
  ORCHMLLM_REQUIRE(a.bad_rank < 0, invalid_argument_error, op, ": rank ", a.bad_rank,
                   " passed invalid arguments (its own error names them); nothing was sent");
  if (mismatch) throw *mismatch;
  ORCHMLLM_REQUIRE(a.mismatch_rank < 0, communication_error, op,
                   ": send and receive counts disagree between ranks (rank ", a.mismatch_rank,
                   " detected it); nothing was sent");

  std::string failure = exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  if (!failure.empty()) abort();
  const std::int64_t failed_rank = agree_outcome(!failure.empty());
  if (!failure.empty()) {
    throw communication_error(od::concat(op, " on rank ", mpi_.rank(), ": ", failure,
                                         "; the NCCL communicator was aborted"));
  }
  if (failed_rank >= 0) {
    abort();  // a peer aborted: this communicator can never complete another exchange
    throw communication_error(od::concat(op, ": the exchange failed on rank ", failed_rank,
                                         " (its own error names the cause); the NCCL "
                                         "communicator was aborted"));
  }
}
}  // namespace orchmllm::nccl
