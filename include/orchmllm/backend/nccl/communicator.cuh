#pragma once
/// @file communicator.cuh
/// NCCL backend of the `orchmllm::communicator` concept: `orchmllm::nccl::communicator`, with
/// all_to_allv payloads in device memory (CMake target orchmllm::nccl, option
/// ORCHMLLM_ENABLE_NCCL, macro ORCHMLLM_HAS_NCCL). Needs NCCL >= 2.14, CUDA and MPI.
///
/// Bootstrap and metadata go over an internal `mpi::communicator` (rank, size, node shape, the
/// ncclUniqueId broadcast, the host collectives and the agreements that keep ranks failing
/// together); all_to_allv is one NCCL group of ncclSend/ncclRecv on the stream given at
/// construction. NCCL runs non-blocking and the host polls it, so an NCCL or CUDA error or a
/// transfer past the deadline (ORCHMLLM_TIMEOUT_MS, else 5 minutes: `default_timeout`) aborts
/// the NCCL communicator instead of hanging, and after an MPI agreement every rank raises
/// `communication_error`. See docs/communication.md, "Communicator concept" and "Deadlines".

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/backend/cuda/mover.cuh"
#include "orchmllm/backend/mpi/communicator.hpp"
#include "orchmllm/backend/nccl/detail/transfer.cuh"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/chunking.hpp"
#include "orchmllm/detail/comm/deadline.hpp"

namespace orchmllm::nccl {

/// Construction options of `nccl::communicator`. Every rank must pass the same values
/// (checked: invalid_argument_error on every rank otherwise).
struct communicator_options {
  /// Node shape, as in mpi::communicator_options: 0 means real nodes (shared-memory groups,
  /// or the ORCHMLLM_RANKS_PER_NODE environment variable); G > 0 fakes consecutive blocks of G
  /// ranks. Only what node()/local_rank() report changes; NCCL finds its own topology.
  rank_t ranks_per_node = 0;
  /// Longest wait for communicator creation, one all_to_allv (including work queued on the
  /// stream before it) or finalisation before the NCCL communicator is aborted; also the
  /// deadline of the internal mpi::communicator's waits (past which the job is aborted). Unset
  /// (the default): ORCHMLLM_TIMEOUT_MS (milliseconds, read by the constructor), else
  /// `default_timeout` (5 minutes); a value set here wins over both. 0: no deadline (every
  /// wait unbounded). In [0, 365 days]; must agree across ranks. `settings().timeout` holds
  /// the value in effect.
  std::optional<std::chrono::milliseconds> timeout{};
  /// When true, all_to_allv first exchanges send counts over MPI (one MPI_Alltoall of size()
  /// int64) and raises communication_error on every rank if they disagree with the peers'
  /// recv_counts, before anything is posted to NCCL.
  bool verify_counts = false;
};

/// One rank's handle on an NCCL communicator; models `orchmllm::communicator` with device
/// payload memory. See the file comment for the failure model.
///
/// The CUDA device current at construction is the communicator's device (call cudaSetDevice
/// first); `stream` must belong to it and outlive the communicator. all_to_allv is
/// synchronous: it returns when the stream's work up to and including the exchange has
/// completed, so buffers may be reused at once. The metadata collectives use host memory and
/// MPI. Operations are collective, deterministic in what they deliver, and not thread-safe.
/// Not copyable or movable (hold it in a std::unique_ptr to move it).
class communicator {
 public:
  using options = communicator_options;

  /// Buffers of all_to_allv live in device memory.
  static constexpr memory_kind payload_memory = memory_kind::device;

  /// Collective over `bootstrap`: builds the MPI communicator, broadcasts rank 0's
  /// ncclUniqueId, creates a non-blocking NCCL communicator (ncclCommInitRankConfig) and waits
  /// for it, at most `opts.timeout`. O(size()) host work plus NCCL's initialisation.
  /// Throws invalid_argument_error on every rank for invalid or differing options (a timeout
  /// outside [0, 365 days] or a malformed ORCHMLLM_TIMEOUT_MS, reported by the internal
  /// mpi::communicator's constructor, which also throws for MPI not initialised or
  /// MPI_COMM_NULL);
  /// communication_error on every rank when ncclGetUniqueId or the NCCL initialisation fails
  /// or times out on any rank.
  communicator(MPI_Comm bootstrap, cudaStream_t stream, options opts = {});

  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&&) = delete;
  communicator& operator=(communicator&&) = delete;

  /// Finalises (ncclCommFinalize, waiting at most the timeout) and destroys the NCCL
  /// communicator, or only aborts it when finalisation fails or times out; nothing for an
  /// aborted one. Then frees the MPI duplicate (collective: destroy on every rank, in the same
  /// order, before MPI_Finalize). Never throws.
  ~communicator() {
    if (comm_ == nullptr || aborted_) return;
    const ncclResult_t rc = ncclCommFinalize(comm_);
    if ((rc == ncclSuccess || rc == ncclInProgress) && wait_ready("ncclCommFinalize").empty()) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }

  /// This rank, 0..size()-1 (the MPI rank in `bootstrap`). O(1).
  [[nodiscard]] rank_t rank() const noexcept { return mpi_.rank(); }
  /// Number of ranks. O(1).
  [[nodiscard]] rank_t size() const noexcept { return mpi_.size(); }
  /// This rank's node (see communicator_options::ranks_per_node). O(1).
  [[nodiscard]] rank_t node() const noexcept { return mpi_.node(); }
  /// Number of nodes. O(1).
  [[nodiscard]] rank_t num_nodes() const noexcept { return mpi_.num_nodes(); }
  /// This rank's index inside its node. O(1).
  [[nodiscard]] rank_t local_rank() const noexcept { return mpi_.local_rank(); }
  /// Number of ranks on this rank's node. O(1).
  [[nodiscard]] rank_t local_size() const noexcept { return mpi_.local_size(); }

  /// The NCCL communicator (owned; do not destroy it). Null once aborted.
  [[nodiscard]] ncclComm_t native_handle() const noexcept { return aborted_ ? nullptr : comm_; }
  /// The CUDA stream all_to_allv runs on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  /// The `cuda::device_mover` on this communicator's stream (`mover_providing_communicator`),
  /// created on first use: what `agree_on_routes` and `dispatch` along a route use when given
  /// no mover. Throws what the mover's constructor throws.
  cuda::device_mover& mover() {
    if (!mover_) mover_.emplace(stream_);
    return *mover_;
  }
  /// The MPI communicator used for bootstrap and metadata.
  [[nodiscard]] mpi::communicator& bootstrap() noexcept { return mpi_; }
  /// The options in effect.
  [[nodiscard]] const options& settings() const noexcept { return opts_; }
  /// True after an error or a timeout aborted the NCCL communicator (on every rank together).
  [[nodiscard]] bool aborted() const noexcept { return aborted_; }

  /// Version of the NCCL library loaded at run time (NCCL_VERSION_CODE encoding, e.g. 22809
  /// for 2.28.9). Throws communication_error if ncclGetVersion fails.
  [[nodiscard]] static int library_version() {
    int v = 0;
    const ncclResult_t rc = ncclGetVersion(&v);
    if (rc != ncclSuccess)
      throw communication_error(detail::nccl_backend::nccl_message("ncclGetVersion", rc, nullptr));
    return v;
  }

  /// MPI barrier over the group (host; does not wait for the stream). Throws
  /// communication_error.
  void barrier() { mpi_.barrier(); }

  /// Host-memory element-wise maximum over MPI (see mpi::communicator::all_max).
  void all_max(std::span<std::int64_t> values) { mpi_.all_max(values); }

  /// Host-memory all_gather over MPI (see mpi::communicator::all_gather).
  void all_gather(const std::byte* send, std::int64_t bytes, std::byte* recv) {
    mpi_.all_gather(send, bytes, recv);
  }

  /// `orchmllm::agreed_gather_communicator`: the same for a `bytes` every rank passes by
  /// construction, without the argument agreement (see mpi::communicator).
  void all_gather(const std::byte* send, std::int64_t bytes, std::byte* recv, agreed_gather a) {
    mpi_.all_gather(send, bytes, recv, a);
  }

  /// Host-memory all_gatherv over MPI (see mpi::communicator::all_gatherv).
  void all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                   std::span<const std::int64_t> counts, std::span<const std::int64_t> displs) {
    mpi_.all_gatherv(send, bytes, recv, counts, displs);
  }

  /// `orchmllm::agreed_gather_communicator`: the same for `counts` every rank holds by
  /// construction, without the argument agreement (see mpi::communicator).
  void all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                   std::span<const std::int64_t> counts, std::span<const std::int64_t> displs,
                   agreed_gather a) {
    mpi_.all_gatherv(send, bytes, recv, counts, displs, a);
  }

  /// Rank r sends send_counts[q] bytes from send + send_displs[q] to every rank q and receives
  /// recv_counts[q] bytes from q at recv + recv_displs[q]; `send` and `recv` are device memory
  /// of this communicator's device. One NCCL group: ncclSend/ncclRecv of ncclUint8 for each
  /// peer with a nonzero count (zero counts post nothing, on both sides; the own block goes
  /// through NCCL too), on the stream; then waits for the stream. 64-bit counts need no
  /// chunking (NCCL counts in size_t). Send and receive ranges must not overlap.
  ///
  /// O(size()) host work, two MPI_Allreduce of two int64 (plus one MPI_Alltoall with
  /// verify_counts), O(Σ counts) bytes moved. Throws invalid_argument_error on every rank when
  /// some rank passes spans whose size is not size(), negative counts or displacements,
  /// displ + count overflowing 64 bits, or a null buffer with data; communication_error on
  /// every rank when counts disagree (verify_counts), when NCCL or CUDA report an error, when
  /// the exchange does not finish within the timeout on some rank (the communicator is then
  /// aborted), or when it was aborted before.
  void all_to_allv(const std::byte* send, std::span<const std::int64_t> send_counts,
                   std::span<const std::int64_t> send_displs, std::byte* recv,
                   std::span<const std::int64_t> recv_counts,
                   std::span<const std::int64_t> recv_displs);

  /// `orchmllm::agreed_exchange_communicator`: the same for a hop of an agreed route (routes
  /// whose fingerprints the ranks compared once per step, `agree_on_routes`): only the NCCL
  /// group, without the two MPI agreements. A rank whose own arguments are bad throws
  /// `invalid_argument_error` alone; a failure or a timeout aborts this rank's NCCL
  /// communicator and raises `communication_error` here, and its peers' exchanges then fail
  /// or time out, each by its own deadline. With `verify_counts` on, this is the call above.
  void all_to_allv(const std::byte* send, std::span<const std::int64_t> send_counts,
                   std::span<const std::int64_t> send_displs, std::byte* recv,
                   std::span<const std::int64_t> recv_counts,
                   std::span<const std::int64_t> recv_displs, const agreed_exchange&) {
    namespace od = ::orchmllm::detail;
    static constexpr const char* op = "nccl all_to_allv";
    if (opts_.verify_counts) {
      all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs);
      return;
    }
    ORCHMLLM_REQUIRE(!aborted_, communication_error, op,
                     ": the NCCL communicator was aborted after an earlier failure");
    if (auto local =
            od::check_all_to_allv_args(op, static_cast<std::size_t>(mpi_.size()), send, send_counts,
                                       send_displs, recv, recv_counts, recv_displs))
      throw *local;
    const std::string failure =
        exchange(send, send_counts, send_displs, recv, recv_counts, recv_displs);
    if (!failure.empty()) {
      abort();
      throw communication_error(od::concat(op, " on rank ", mpi_.rank(), ": ", failure,
                                           "; the NCCL communicator was aborted"));
    }
  }

 private:
  struct agreement {
    std::int64_t bad_rank = -1;
    std::int64_t mismatch_rank = -1;
    std::int64_t key_min[2] = {0, 0};
    std::int64_t key_max[2] = {0, 0};
  };

  static mpi::communicator_options mpi_options(const options& o) {
    mpi::communicator_options m;
    m.ranks_per_node = o.ranks_per_node;
    m.timeout = o.timeout;  // resolved (ORCHMLLM_TIMEOUT_MS, default) and agreed there
    return m;
  }

  // One MPI_Allreduce(MAX) of [bad rank + 1, mismatch rank + 1, k0, ~k0, k1, ~k1]
  // (max(~k) = ~min(k), so one reduction gives both extremes of each key).
  agreement agree(bool invalid, const std::int64_t (&keys)[2], bool mismatch = false) {
    const std::int64_t lowest = std::numeric_limits<std::int64_t>::min();
    const std::int64_t me = mpi_.rank();
    std::int64_t v[6] = {invalid ? me + 1 : 0,       mismatch ? me + 1 : 0,
                         invalid ? lowest : keys[0], invalid ? lowest : ~keys[0],
                         invalid ? lowest : keys[1], invalid ? lowest : ~keys[1]};
    std::int64_t r[6] = {};
    ::orchmllm::detail::mpi_backend::check(
        mpi_.with_deadline(
            "nccl argument agreement",
            [&] { return MPI_Allreduce(v, r, 6, MPI_INT64_T, MPI_MAX, mpi_.native_handle()); }),
        "MPI_Allreduce (nccl argument agreement)");
    agreement a;
    a.bad_rank = r[0] - 1;
    a.mismatch_rank = r[1] - 1;
    for (int k = 0; k < 2; ++k) {
      a.key_max[k] = r[2 + 2 * k];
      a.key_min[k] = ~r[3 + 2 * k];
    }
    return a;
  }

  // Highest rank that failed, or -1. Every rank calls it after each NCCL phase.
  std::int64_t agree_outcome(bool failed) {
    const std::int64_t mine = failed ? mpi_.rank() + 1 : 0;
    std::int64_t worst = 0;
    ::orchmllm::detail::mpi_backend::check(mpi_.with_deadline("nccl outcome agreement",
                                                              [&] {
                                                                return MPI_Allreduce(
                                                                    &mine, &worst, 1, MPI_INT64_T,
                                                                    MPI_MAX, mpi_.native_handle());
                                                              }),
                                           "MPI_Allreduce (nccl outcome agreement)");
    return worst - 1;
  }

  // Polls until the non-blocking communicator has no operation in progress (see
  // nccl/detail/transfer.cuh). Returns "" on success, else the failure.
  std::string wait_ready(const char* what) {
    return detail::nccl_backend::wait_ready(comm_, mpi_.timeout(), what);
  }

  // Posts the group and waits for the stream. Returns "" on success, else the failure.
  std::string exchange(const std::byte* send, std::span<const std::int64_t> send_counts,
                       std::span<const std::int64_t> send_displs, std::byte* recv,
                       std::span<const std::int64_t> recv_counts,
                       std::span<const std::int64_t> recv_displs) {
    return detail::nccl_backend::exchange(comm_, stream_, mpi_.timeout(), send, send_counts,
                                          send_displs, recv, recv_counts, recv_displs);
  }

  void abort() noexcept {
    if (comm_ != nullptr && !aborted_) ncclCommAbort(comm_);
    aborted_ = true;
  }

  mpi::communicator mpi_;
  cudaStream_t stream_;
  options opts_;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  std::optional<cuda::device_mover> mover_;  // destroyed first: waits for its stream work
};

static_assert(::orchmllm::communicator<communicator>);
static_assert(::orchmllm::agreed_exchange_communicator<communicator>);
static_assert(::orchmllm::agreed_gather_communicator<communicator>);

}  // namespace orchmllm::nccl

// The out-of-line members.
#include "orchmllm/backend/nccl/detail/communicator.inl"  // IWYU pragma: export
