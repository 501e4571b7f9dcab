#pragma once
/// @file communicator_ref.cuh
/// `orchmllm::nccl::communicator_ref`: the NCCL backend over the trainer's own NCCL communicator
/// and CUDA stream, non-owning and with no MPI, for jobs whose framework already created the
/// NCCL communicator (a torchrun-launched PyTorch or Megatron job's process group).
///
/// Everything travels over NCCL: all_to_allv as one group of ncclSend/ncclRecv on the stream
/// (shared with `nccl::communicator`: nccl/detail/transfer.cuh), the small host metadata
/// collectives staged through a device buffer. Nodes are the hosts (or blocks of
/// `ranks_per_node`). Arguments are agreed before every collective; every wait has a deadline
/// (ORCHMLLM_TIMEOUT_MS, else 5 minutes), and an error or the deadline aborts the NCCL
/// communicator and raises `communication_error` there (no out-of-band channel agrees on the
/// outcome). See docs/communication.md, "Communicator concept" and "Deadlines".

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "orchmllm/backend/cuda/mover.cuh"
#include "orchmllm/backend/nccl/detail/transfer.cuh"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/chunking.hpp"
#include "orchmllm/detail/comm/deadline.hpp"
#include "orchmllm/detail/comm/node_shape.hpp"
#include "orchmllm/detail/core/fnv.hpp"

namespace orchmllm::nccl {

/// Options of `nccl::communicator_ref`. Every rank must pass the same values (checked).
struct communicator_ref_options {
  /// 0: nodes are the hosts (names all-gathered at construction); G > 0: consecutive blocks of
  /// G ranks. Only what node()/local_rank() report changes; NCCL finds its own topology.
  rank_t ranks_per_node = 0;
  /// Longest wait of one operation (its staging, its NCCL calls and the stream work queued
  /// before it) before the NCCL communicator is aborted. Unset (the default):
  /// ORCHMLLM_TIMEOUT_MS (milliseconds, read by the constructor), else `default_timeout` (5
  /// minutes); a value set here wins over both. 0: no deadline (waits are unbounded). In [0,
  /// 365 days]; must agree across ranks. `settings().timeout` holds the value in effect.
  std::optional<std::chrono::milliseconds> timeout{};
};

/// One rank's non-owning handle on the trainer's NCCL communicator; models
/// `orchmllm::communicator` with device payload memory, `max_reducing_communicator` and
/// `agreed_exchange_communicator`. See the file comment.
///
/// The current CUDA device must be the communicator's in every call; `stream` must belong to
/// it, and both `comm` and `stream` must outlive this object, which never destroys or
/// finalises `comm`. Operations are collective over `comm`, synchronous (they return when the
/// stream's work up to and including them has completed), deterministic in what they deliver,
/// and not thread-safe; they enqueue on `stream` behind the trainer's own work. Not copyable
/// or movable.
class communicator_ref : public ::orchmllm::detail::node_shape {
 public:
  using options = communicator_ref_options;

  /// Buffers of all_to_allv live in device memory.
  static constexpr memory_kind payload_memory = memory_kind::device;

  /// Collective over `comm`: agrees on the options (one ncclAllReduce) and learns the node
  /// shape (one ncclAllGather of 64 bytes per rank, unless `ranks_per_node` is set). Throws
  /// `invalid_argument_error` locally for a null `comm`, and on every rank for options that
  /// are invalid or differ between ranks; `communication_error` when NCCL or CUDA fail or a
  /// wait passes the deadline (the communicator is then aborted).
  communicator_ref(ncclComm_t comm, cudaStream_t stream, options opts = {});

  communicator_ref(const communicator_ref&) = delete;
  communicator_ref& operator=(const communicator_ref&) = delete;
  communicator_ref(communicator_ref&&) = delete;
  communicator_ref& operator=(communicator_ref&&) = delete;

  /// Frees the staging buffer (after waiting for the stream); never touches `comm`.
  ~communicator_ref() {
    if (staging_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaFree(staging_);
    }
  }

  /// The adopted NCCL communicator (not owned) and stream.
  [[nodiscard]] ncclComm_t native_handle() const noexcept { return comm_; }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  [[nodiscard]] const options& settings() const noexcept { return opts_; }
  /// The `cuda::device_mover` on this communicator's stream (`mover_providing_communicator`),
  /// created on first use: what `agree_on_routes` and `dispatch` along a route use when given
  /// no mover. Throws what the mover's constructor throws.
  cuda::device_mover& mover() {
    if (!mover_) mover_.emplace(stream_);
    return *mover_;
  }
  /// True after a failure or a timeout aborted the NCCL communicator on this rank.
  [[nodiscard]] bool aborted() const noexcept { return aborted_; }

  /// One ncclAllReduce of one int64 (staged), waited for. Throws `communication_error`.
  void barrier() {
    std::int64_t v = 0;
    reduce_max(&v, 1, "barrier");
  }

  /// Replaces each value by its maximum over all ranks (`max_reducing_communicator`): one
  /// ncclAllReduce(max) of 10 int64, whatever the count (at most 8; every rank passes the same
  /// count, checked in the same reduction). Throws `invalid_argument_error` on every rank when
  /// a rank passes more than 8 values or another count; `communication_error`.
  void all_max(std::span<std::int64_t> values) {
    static constexpr std::size_t max_values = 8;
    constexpr auto lowest = std::numeric_limits<std::int64_t>::min();
    const auto count = static_cast<std::int64_t>(values.size());
    const bool fits = values.size() <= max_values;
    std::array<std::int64_t, max_values + 2> v;
    v.fill(lowest);
    v[0] = fits ? count : std::numeric_limits<std::int64_t>::max();
    v[1] = fits ? ~count : std::numeric_limits<std::int64_t>::max();
    if (fits) std::copy(values.begin(), values.end(), v.begin() + 2);
    reduce_max(v.data(), v.size(), "all_max");
    ORCHMLLM_REQUIRE(v[0] <= static_cast<std::int64_t>(max_values) && v[0] == ~v[1],
                     invalid_argument_error, "all_max: ranks pass different counts or more than ",
                     max_values, " values (this rank passes ", count, ")");
    std::copy(v.begin() + 2, v.begin() + 2 + count, values.begin());
  }

  /// Every rank contributes `bytes` host bytes (the same on every rank, checked); `recv`
  /// (host) receives size()·bytes, rank r's at r·bytes. One agreement and one ncclAllGather.
  /// Throws `invalid_argument_error` on every rank when the byte counts differ or are
  /// negative; `communication_error`.
  void all_gather(const std::byte* send, std::int64_t bytes, std::byte* recv) {
    const bool bad = bytes < 0 || (bytes > 0 && (send == nullptr || recv == nullptr));
    std::array<std::int64_t, 3> v{bad ? rank_ + 1 : 0, bad ? 0 : bytes, bad ? 0 : ~bytes};
    reduce_max(v.data(), v.size(), "all_gather agreement");
    ORCHMLLM_REQUIRE(v[0] == 0, invalid_argument_error, "all_gather: rank ", v[0] - 1,
                     " passed a negative size or a null buffer");
    ORCHMLLM_REQUIRE(v[1] == ~v[2], invalid_argument_error,
                     "all_gather: ranks pass different sizes (from ", ~v[2], " to ", v[1],
                     " bytes)");
    gather_padded(send, bytes, recv);
  }

  /// `orchmllm::agreed_gather_communicator`: the same for a `bytes` every rank passes by
  /// construction, without the agreement: one ncclAllGather. A rank whose own arguments are bad
  /// throws `invalid_argument_error` alone (its peers wait until the deadline).
  void all_gather(const std::byte* send, std::int64_t bytes, std::byte* recv, agreed_gather) {
    ORCHMLLM_REQUIRE(bytes >= 0 && (bytes == 0 || (send != nullptr && recv != nullptr)),
                     invalid_argument_error, "all_gather: rank ", rank_,
                     " passed a negative size or a null buffer");
    gather_padded(send, bytes, recv);
  }

  /// Rank r contributes counts[r] host bytes, written at recv + displs[r]; `bytes` must equal
  /// counts[rank()], and every rank passes the same counts (checked). One agreement and one
  /// ncclAllGather of max(counts) bytes per rank (padded; NCCL has no all-gather-v). Throws
  /// `invalid_argument_error` on every rank for bad or differing arguments;
  /// `communication_error`.
  void all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                   std::span<const std::int64_t> counts, std::span<const std::int64_t> displs);

  /// `orchmllm::agreed_gather_communicator`: the same for `counts` every rank holds by
  /// construction, without the agreement: one padded ncclAllGather. A rank whose own arguments
  /// are bad throws `invalid_argument_error` alone (its peers wait until the deadline).
  void all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                   std::span<const std::int64_t> counts, std::span<const std::int64_t> displs,
                   agreed_gather);

  /// Rank r sends send_counts[q] bytes from send + send_displs[q] to every rank q and receives
  /// recv_counts[q] bytes from q at recv + recv_displs[q] (device memory); counts must match
  /// pairwise. One argument agreement (ncclAllReduce), then one NCCL group of
  /// ncclSend/ncclRecv on the stream, waited for. O(size()) host work, O(Σ counts) bytes
  /// moved. Throws `invalid_argument_error` on every rank when some rank passes bad spans,
  /// counts or buffers; `communication_error` (see the file comment).
  void all_to_allv(const std::byte* send, std::span<const std::int64_t> send_counts,
                   std::span<const std::int64_t> send_displs, std::byte* recv,
                   std::span<const std::int64_t> recv_counts,
                   std::span<const std::int64_t> recv_displs) {
    static constexpr const char* op = "nccl all_to_allv";
    require_usable(op);
    const auto local = ::orchmllm::detail::check_all_to_allv_args(
        op, static_cast<std::size_t>(size_), send, send_counts, send_displs, recv, recv_counts,
        recv_displs);
    std::int64_t v = local ? rank_ + 1 : 0;
    reduce_max(&v, 1, "all_to_allv agreement");
    if (local) throw *local;
    ORCHMLLM_REQUIRE(v == 0, invalid_argument_error, op, ": rank ", v - 1,
                     " passed invalid arguments (its own error names them); nothing was sent");
    move(op, send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }

  /// `orchmllm::agreed_exchange_communicator`: the same for a hop of an agreed route, without
  /// the argument agreement (only the NCCL group). A rank whose own arguments are bad throws
  /// `invalid_argument_error` alone.
  void all_to_allv(const std::byte* send, std::span<const std::int64_t> send_counts,
                   std::span<const std::int64_t> send_displs, std::byte* recv,
                   std::span<const std::int64_t> recv_counts,
                   std::span<const std::int64_t> recv_displs, const agreed_exchange&) {
    static constexpr const char* op = "nccl all_to_allv";
    require_usable(op);
    if (auto local = ::orchmllm::detail::check_all_to_allv_args(op, static_cast<std::size_t>(size_),
                                                                send, send_counts, send_displs,
                                                                recv, recv_counts, recv_displs))
      throw *local;
    move(op, send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }

 private:
  static constexpr std::size_t host_name_bytes = 64;

  void require_usable(const char* op) const {
    ORCHMLLM_REQUIRE(!aborted_, communication_error, op,
                     ": the NCCL communicator was aborted after an earlier failure");
  }

  // Aborts the NCCL communicator and raises `failure` for `what` on this rank.
  [[noreturn]] void fail(const char* what, const std::string& failure) {
    if (!aborted_) ncclCommAbort(comm_);
    aborted_ = true;
    throw communication_error(::orchmllm::detail::concat("nccl::communicator_ref: ", what,
                                                         " on rank ", rank_, ": ", failure,
                                                         "; the NCCL communicator was aborted"));
  }

  void check(ncclResult_t rc, const char* call) {
    if (rc != ncclSuccess)
      throw communication_error(detail::nccl_backend::nccl_message(call, rc, comm_));
  }

  // A device buffer of at least `bytes` bytes (grows after waiting for the stream).
  std::byte* staging(std::size_t bytes, const char* what) {
    if (bytes <= staging_bytes_) return staging_;
    if (staging_ != nullptr) {
      const cudaError_t e = cudaStreamSynchronize(stream_);
      if (e != cudaSuccess)
        fail(what, detail::nccl_backend::cuda_message("cudaStreamSynchronize", e));
      cudaFree(staging_);
      staging_ = nullptr;
      staging_bytes_ = 0;
    }
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) fail(what, detail::nccl_backend::cuda_message("cudaMalloc", e));
    staging_ = static_cast<std::byte*>(p);
    staging_bytes_ = bytes;
    return staging_;
  }

  // Host → device at `dev`, one NCCL collective `post(dev)`, device → host, waited for.
  template <class Post>
  void staged(const char* what, const void* host_in, std::size_t in_bytes, void* host_out,
              std::size_t out_bytes, std::size_t dev_bytes, Post&& post) {
    require_usable(what);
    std::byte* dev = staging(std::max<std::size_t>(dev_bytes, 1), what);
    cudaError_t e = cudaSuccess;
    if (in_bytes > 0) e = cudaMemcpyAsync(dev, host_in, in_bytes, cudaMemcpyHostToDevice, stream_);
    if (e != cudaSuccess) fail(what, detail::nccl_backend::cuda_message("cudaMemcpyAsync", e));
    const ncclResult_t rc = post(dev);
    if (detail::nccl_backend::failed(rc))
      fail(what, detail::nccl_backend::nccl_message(what, rc, comm_));
    std::string failure = detail::nccl_backend::wait_stream(comm_, stream_, timeout_, what);
    if (!failure.empty()) fail(what, failure);
    if (out_bytes > 0) {
      e = cudaMemcpyAsync(host_out, dev, out_bytes, cudaMemcpyDeviceToHost, stream_);
      if (e != cudaSuccess) fail(what, detail::nccl_backend::cuda_message("cudaMemcpyAsync", e));
      e = cudaStreamSynchronize(stream_);
      if (e != cudaSuccess)
        fail(what, detail::nccl_backend::cuda_message("cudaStreamSynchronize", e));
    }
  }

  // In place on the staging buffer: ncclAllReduce(max) of `n` int64.
  void reduce_max(std::int64_t* values, std::size_t n, const char* what) {
    const std::size_t b = n * sizeof(std::int64_t);
    staged(what, values, b, values, b, b, [&](std::byte* dev) {
      return ncclAllReduce(dev, dev, n, ncclInt64, ncclMax, comm_, stream_);
    });
  }

  bool bad_all_gatherv(const std::byte* send, std::int64_t bytes, const std::byte* recv,
                       std::span<const std::int64_t> counts, std::span<const std::int64_t> displs,
                       std::int64_t& widest) const;
  void gather_v(const std::byte* send, std::int64_t bytes, std::byte* recv,
                std::span<const std::int64_t> counts, std::span<const std::int64_t> displs,
                std::int64_t widest);
  // ncclAllGather of `bytes` bytes per rank (in place: this rank's block at rank·bytes).
  void gather_padded(const std::byte* send, std::int64_t bytes, std::byte* recv) {
    if (bytes == 0) return;
    const auto b = static_cast<std::size_t>(bytes);
    const std::size_t total = b * static_cast<std::size_t>(size_);
    const std::size_t at = b * static_cast<std::size_t>(rank_);
    require_usable("all_gather");
    std::byte* dev = staging(total, "all_gather");
    const cudaError_t e = cudaMemcpyAsync(dev + at, send, b, cudaMemcpyHostToDevice, stream_);
    if (e != cudaSuccess)
      fail("all_gather", detail::nccl_backend::cuda_message("cudaMemcpyAsync", e));
    staged("all_gather", nullptr, 0, recv, total, total,
           [&](std::byte* d) { return ncclAllGather(d + at, d, b, ncclUint8, comm_, stream_); });
  }

  void move(const char* op, const std::byte* send, std::span<const std::int64_t> send_counts,
            std::span<const std::int64_t> send_displs, std::byte* recv,
            std::span<const std::int64_t> recv_counts, std::span<const std::int64_t> recv_displs) {
    const std::string failure = detail::nccl_backend::exchange(
        comm_, stream_, timeout_, send, send_counts, send_displs, recv, recv_counts, recv_displs);
    if (!failure.empty()) fail(op, failure);
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  options opts_;
  std::chrono::milliseconds timeout_ = ::orchmllm::detail::default_comm_timeout;  // in effect
  std::byte* staging_ = nullptr;
  std::size_t staging_bytes_ = 0;
  bool aborted_ = false;
  std::optional<cuda::device_mover> mover_;  // destroyed first: waits for its stream work
};

static_assert(::orchmllm::communicator<communicator_ref>);
static_assert(::orchmllm::max_reducing_communicator<communicator_ref>);
static_assert(::orchmllm::agreed_exchange_communicator<communicator_ref>);
static_assert(::orchmllm::agreed_gather_communicator<communicator_ref>);

}  // namespace orchmllm::nccl

// The out-of-line members.
#include "orchmllm/backend/nccl/detail/communicator_ref.inl"  // IWYU pragma: export
