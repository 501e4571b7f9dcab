#pragma once
/// @file communicator.hpp
/// MPI backend of the `orchmllm::communicator` concept (CMake target `orchmllm::mpi`, option
/// `ORCHMLLM_ENABLE_MPI`, macro `ORCHMLLM_HAS_MPI`):
///
/// - `mpi::communicator`: one rank's handle on a duplicate of an MPI communicator, with node
///   groups (real ones from MPI_Comm_split_type, or faked blocks of G ranks for tests) and
///   all-gather(v) / all-to-all(v) of host bytes with 64-bit counts, chunked where MPI counts in
///   `int`; `mpi::communicator_ref`: the same over the caller's communicator itself.
/// - `mpi::environment` (backend/mpi/environment.hpp, included): MPI_Init_thread / MPI_Finalize.
///
/// Ranks agree on every call's arguments and, after a chunked transfer, on its outcome, so a bad
/// argument or a failure on one rank raises on all; every wait has a deadline (5 minutes,
/// ORCHMLLM_TIMEOUT_MS, `communicator_options::timeout`) past which the job aborts. The failure
/// model, the environment variables and the deadline: docs/communication.md, "Communicator
/// concept" and "Deadlines". Internals: backend/mpi/detail/.

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/backend/mpi/detail/agreement.hpp"
#include "orchmllm/backend/mpi/detail/comm_handle.hpp"
#include "orchmllm/backend/mpi/detail/error_and_wait.hpp"
#include "orchmllm/backend/mpi/detail/exchange.hpp"
#include "orchmllm/backend/mpi/detail/gather_datatypes.hpp"
#include "orchmllm/backend/mpi/environment.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/chunking.hpp"
#include "orchmllm/detail/comm/deadline.hpp"
#include "orchmllm/detail/comm/node_shape.hpp"
#include "orchmllm/detail/comm/segments.hpp"

namespace orchmllm::mpi {

/// The deadline of every wait when neither `communicator_options::timeout` nor
/// ORCHMLLM_TIMEOUT_MS sets one: 5 minutes (see docs/communication.md, "Deadlines").
inline constexpr std::chrono::milliseconds default_timeout =
    ::orchmllm::detail::default_comm_timeout;

/// Construction options of `mpi::communicator`. Every rank must pass the same values (checked:
/// invalid_argument_error on every rank otherwise).
struct communicator_options {
  /// 0: real nodes (ranks that share memory, MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), unless
  /// the environment variable ORCHMLLM_RANKS_PER_NODE overrides it. G > 0: nodes are
  /// consecutive blocks of G ranks, the last one smaller when G does not divide size() (how CI
  /// fakes 2x4, 4x2 or 3+3+2 on one machine). Negative: invalid.
  rank_t ranks_per_node = 0;
  /// The largest number of bytes one MPI call moves per peer, in [1, INT_MAX]. Transfers above
  /// it (or whose displacements do not fit in `int`) take the chunked point-to-point path.
  /// Tests lower it to force that path.
  std::int64_t max_chunk_bytes = INT_MAX;
  /// When true, all_to_allv first exchanges send counts (one MPI_Alltoall of size() int64) and
  /// raises communication_error on every rank if any rank's recv_counts disagree with what its
  /// peers send. Off by default: callers such as the dispatch layer already check a plan
  /// fingerprint collectively.
  bool verify_counts = false;
  /// Deadline of every wait of the constructor and of every operation (its agreement round
  /// trips, its transfer, the chunked path's message exchange as a whole). Unset (the
  /// default): the environment variable ORCHMLLM_TIMEOUT_MS (milliseconds, read by the
  /// constructor), else `default_timeout` (5 minutes); a value set here wins over both. 0: no
  /// deadline (waits are unbounded). In [0, 365 days]. Past it the waiting rank prints
  /// "orchmllm: mpi::communicator: <operation> on rank <r> did not complete within <t> ms (...)"
  /// and aborts the job (MPI_Abort(MPI_COMM_WORLD)): a peer that died, returned early or called
  /// another operation never arrives. The calls stay MPI's blocking ones: a watchdog thread of
  /// the communicator (asleep, waking every timeout/16 and at least once a second) enforces
  /// it, so MPI_Abort comes from that thread (beyond the letter of MPI_THREAD_FUNNELED; Open
  /// MPI 4.1 ends the job reliably, backend.mpi.deadline.*). Must agree across ranks.
  /// `settings().timeout` holds the value in effect.
  std::optional<std::chrono::milliseconds> timeout{};
};

/// One rank's handle on a group of MPI processes; models `orchmllm::communicator` with host
/// payload memory.
///
/// The constructor duplicates the given MPI communicator (MPI_Comm_dup), so the library's
/// traffic never matches the caller's messages, and sets MPI_ERRORS_RETURN on the duplicate, so
/// failures become exceptions instead of aborts. The destructor frees the duplicate
/// (MPI_Comm_free is collective: destroy communicators in the same order on every rank, and
/// before MPI_Finalize). Movable, not copyable; a moved-from object may only be destroyed or
/// assigned to.
///
/// Node numbering follows the concept: nodes are numbered 0..num_nodes()-1 in order of their
/// lowest rank, local ranks in increasing rank order.
///
/// Operations are collective, synchronous (buffers may be reused on return), deterministic in
/// what they deliver, and not thread-safe (one thread per rank at a time; MPI_THREAD_FUNNELED
/// suffices). Each adds one MPI_Allreduce of a few int64 before the transfer (argument
/// agreement; not the `agreed_gather` and `agreed_exchange` overloads, whose callers guarantee
/// the arguments agree) and, on the chunked path only, one after it (outcome agreement; see
/// the file comment). Transfers that fit in `int` and
/// `max_chunk_bytes` use one MPI_Alltoallv / MPI_Allgather / MPI_Allgatherv of MPI_BYTE; the
/// others (ranks agree on the path first) use MPI_Irecv/MPI_Isend per peer in messages of at
/// most `max_chunk_bytes` bytes, addressed in 64 bits, at most 4 in flight per peer and
/// direction, completed with MPI_Waitsome. Zero counts post nothing. A rank's own block is
/// copied with memcpy on the chunked path. Send and receive buffers must not overlap.
class communicator : public ::orchmllm::detail::node_shape {
 public:
  using options = communicator_options;

  /// Buffers of all_to_allv live in host memory.
  static constexpr memory_kind payload_memory = memory_kind::host;

  /// Collective over `comm`. O(size()) time and memory (plus MPI_Comm_dup, MPI_Comm_split_type
  /// and an MPI_Allgather of one int for real nodes), and one watchdog thread when the deadline
  /// is positive. Its waits have the deadline resolved locally (the built-in one if that value
  /// is invalid). Throws invalid_argument_error on every rank for options that are invalid or
  /// differ between ranks (ranks_per_node < 0, max_chunk_bytes outside [1, INT_MAX], a timeout
  /// outside [0, 365 days], a malformed ORCHMLLM_RANKS_PER_NODE or ORCHMLLM_TIMEOUT_MS), and
  /// when MPI is not initialised or `comm` is MPI_COMM_NULL (locally); communication_error when
  /// an MPI call fails.
  explicit communicator(MPI_Comm comm = MPI_COMM_WORLD, options opts = {}) : opts_(opts) {
    init(comm, true);
  }

 protected:
  // `communicator_ref`: uses `comm` itself (no duplicate, nothing freed, its error handler
  // untouched).
  struct adopt_t {};
  communicator(adopt_t, MPI_Comm comm, options opts) : opts_(opts) { init(comm, false); }

 private:
  void init(MPI_Comm comm, bool own);

 public:
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  ~communicator() = default;

  /// The options in effect (ranks_per_node after ORCHMLLM_RANKS_PER_NODE; timeout always set,
  /// after ORCHMLLM_TIMEOUT_MS and the default).
  [[nodiscard]] const options& settings() const noexcept { return opts_; }
  /// The deadline of every wait (0: none); the same as `*settings().timeout`. O(1).
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept {
    return opts_.timeout.value_or(std::chrono::milliseconds(0));
  }
  /// Runs `call`, a blocking MPI call on native_handle() that waits for peers (e.g. the
  /// baseline MPI_Alltoallv a benchmark times, or a backend's bootstrap MPI_Bcast), under this
  /// communicator's deadline: past it the job aborts with the message naming `what` (a string
  /// with static storage duration) and this rank. Returns what `call` returns. O(1) on top of
  /// the call.
  template <class Call>
  decltype(auto) with_deadline(const char* what, Call&& call) {
    const ::orchmllm::detail::mpi_backend::armed guard(watch_.get(), what);
    return call();
  }
  /// The duplicated MPI communicator (owned by this object; do not free it). Useful to time
  /// a plain MPI_Alltoallv on the same group.
  [[nodiscard]] MPI_Comm native_handle() const noexcept { return handle_.comm; }
  /// How many all_gather / all_gatherv / all_to_allv calls took the chunked point-to-point
  /// path (the same on every rank). Diagnostics and tests.
  [[nodiscard]] std::int64_t chunked_calls() const noexcept { return chunked_calls_; }

  /// MPI_Barrier. Throws communication_error when it fails.
  void barrier() {
    const MPI_Comm c = comm();
    ::orchmllm::detail::mpi_backend::check(collective("barrier", [&] { return MPI_Barrier(c); }),
                                           "MPI_Barrier");
  }

  /// Replaces each value by its maximum over all ranks (`orchmllm::max_reducing_communicator`):
  /// one MPI_Allreduce(MAX) of 10 int64, whatever the count. Throws invalid_argument_error on every
  /// rank when some rank passes more than 8 values or a count differing from the others';
  /// communication_error when MPI fails.
  void all_max(std::span<std::int64_t> values) {
    static constexpr std::size_t max_values = 8;
    constexpr auto lowest = std::numeric_limits<std::int64_t>::min();
    // [count, ~count, values..., padding]: ~ turns max into min, so the ranks learn whether
    // every count agrees; an invalid count (too many values) is sent as INT64_MAX.
    const std::int64_t count = values.size() <= max_values
                                   ? static_cast<std::int64_t>(values.size())
                                   : std::numeric_limits<std::int64_t>::max();
    std::array<std::int64_t, 2 + max_values> v{};
    v.fill(lowest);
    v[0] = count;
    v[1] = ~count;
    if (values.size() <= max_values) std::copy(values.begin(), values.end(), v.begin() + 2);
    std::array<std::int64_t, 2 + max_values> r{};
    ::orchmllm::detail::mpi_backend::max_reduce(comm(), "all_max", v, r, watch_.get(), "");
    ORCHMLLM_REQUIRE(r[0] != std::numeric_limits<std::int64_t>::max(), invalid_argument_error,
                     "all_max: some rank passes more than ", max_values, " values");
    ORCHMLLM_REQUIRE(r[0] == ~r[1], invalid_argument_error,
                     "all_max: ranks pass different counts (between ", ~r[1], " and ", r[0], ")");
    std::copy(r.begin() + 2, r.begin() + 2 + static_cast<std::ptrdiff_t>(values.size()),
              values.begin());
  }

  /// Every rank contributes `bytes` bytes from `send` (the same `bytes` on every rank); `recv`
  /// receives size()·bytes bytes, rank r's block at r·bytes. O(size()·bytes) bytes moved.
  /// Throws invalid_argument_error on every rank when some rank passes bytes < 0, a null
  /// buffer with bytes > 0, a size()·bytes that overflows 64 bits, or a `bytes` differing from
  /// the others'; communication_error on every rank when the transfer fails.
  void all_gather(const std::byte* send, std::int64_t bytes, std::byte* recv) {
    static constexpr const char* op = "all_gather";
    std::optional<invalid_argument_error> local;
    try {
      check_all_gather(send, bytes, recv);
    } catch (const invalid_argument_error& e) {
      local = e;
    }
    const agreement a = agree(op, local.has_value(), std::array<std::int64_t, 1>{bytes},
                              !local && all_gather_chunked(bytes), false);
    if (local) throw *local;
    throw_if_invalid(op, a);
    ORCHMLLM_REQUIRE(a.key_min[0] == a.key_max[0], invalid_argument_error, op,
                     ": ranks pass different byte counts, from ", a.key_min[0], " to ",
                     a.key_max[0],
                     " (all_gather needs the same count everywhere; use "
                     "all_gatherv)");
    if (a.chunked) ++chunked_calls_;
    ::orchmllm::detail::mpi_backend::move_all_gather(comm(), rank_, size_, limit(), watch_.get(),
                                                     op, send, bytes, recv, a.chunked);
  }

  /// `orchmllm::agreed_gather_communicator`: the same for a `bytes` that every rank passes by
  /// construction (a fixed-size record), without the argument agreement: one MPI_Allgather, or
  /// the chunked path when size()·bytes does not fit MPI's `int` or `max_chunk_bytes` (decided
  /// from `bytes` and size() alone, the same on every rank). A rank whose own arguments are bad
  /// throws `invalid_argument_error` alone; its peers wait in the transfer until the timeout.
  void all_gather(const std::byte* send, std::int64_t bytes, std::byte* recv,
                  ::orchmllm::agreed_gather) {
    check_all_gather(send, bytes, recv);
    const bool chunked = all_gather_chunked(bytes);
    if (chunked) ++chunked_calls_;
    ::orchmllm::detail::mpi_backend::move_all_gather(comm(), rank_, size_, limit(), watch_.get(),
                                                     "all_gather", send, bytes, recv, chunked);
  }

  /// Rank r contributes counts[r] bytes (`bytes` must equal counts[rank()]), written at
  /// recv + displs[r] on every rank. `counts` must be the same on every rank; `displs` may
  /// differ. O(Σ counts) bytes moved. Throws invalid_argument_error on every rank when some
  /// rank passes spans whose size is not size(), negative counts or displacements, displ +
  /// count overflowing 64 bits, bytes != counts[rank()], null buffers with data, or counts that
  /// differ from the other ranks'; communication_error on every rank when the transfer fails.
  void all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                   std::span<const std::int64_t> counts, std::span<const std::int64_t> displs);

  /// `orchmllm::agreed_gather_communicator`: the same for `counts` that every rank holds by
  /// construction (derived from data the ranks gathered), without the argument agreement: one
  /// MPI_Allgatherv, or the chunked path when a count or the total does not fit MPI's `int` or
  /// `max_chunk_bytes` (decided from the counts alone, the same on every rank). A rank whose own
  /// arguments are bad throws `invalid_argument_error` alone; its peers wait in the transfer
  /// until the timeout.
  void all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                   std::span<const std::int64_t> counts, std::span<const std::int64_t> displs,
                   ::orchmllm::agreed_gather);

  /// Optional capability used by `orchmllm::execute`: an all_to_allv whose send buffer is the
  /// gather of `segments` from `in` (a route hop's pack: segment destinations address the
  /// packed send buffer that send_counts/send_displs describe). Each peer's block goes out
  /// straight from `in` as one MPI_Type_create_hindexed datatype in one MPI_Alltoallw, so the
  /// pack copy is never made. Returns false, on every rank and before anything moves, when the
  /// call does not fit MPI's `int` counts (the caller then packs and calls all_to_allv, which
  /// chunks). Same agreement, errors and guarantees as all_to_allv; O(segments + size()) host
  /// work to build the datatypes.
  bool all_to_allv_gather(const std::byte* in, const ::orchmllm::detail::segment_list& segments,
                          std::span<const std::int64_t> send_counts,
                          std::span<const std::int64_t> send_displs, std::byte* recv,
                          std::span<const std::int64_t> recv_counts,
                          std::span<const std::int64_t> recv_displs) {
    static constexpr const char* op = "all_to_allv";
    // Built before the agreement so that a failure here is agreed on like a bad argument.
    gather_call call(size_);
    std::optional<invalid_argument_error> local = call.build(
        op, in, segments, send_counts, send_displs, recv, recv_counts, recv_displs, limit());
    const agreement a =
        agree(op, local.has_value(), std::array<std::int64_t, 0>{}, !call.fits, false);
    if (local || a.bad_rank >= 0 || a.chunked) call.free_types();
    if (local) throw *local;
    throw_if_invalid(op, a);
    if (a.chunked) return false;
    send_gathered(op, in, recv, call);
    return true;
  }

  /// `orchmllm::agreed_gathering_communicator`: the same for a hop of an agreed route. The
  /// path is chosen from `agreed` alone (no MPI_Allreduce first): false, on every rank, when
  /// the group's blocks, buffers or segment counts do not fit MPI's `int` (the caller then
  /// packs and calls the agreed all_to_allv, which chunks). A rank whose own arguments or
  /// segments are bad throws `invalid_argument_error` alone; its peers wait in the transfer
  /// until the timeout. With `verify_counts` on, this is the call above (agreed).
  bool all_to_allv_gather(const std::byte* in, const ::orchmllm::detail::segment_list& segments,
                          std::span<const std::int64_t> send_counts,
                          std::span<const std::int64_t> send_displs, std::byte* recv,
                          std::span<const std::int64_t> recv_counts,
                          std::span<const std::int64_t> recv_displs,
                          const ::orchmllm::agreed_exchange& agreed) {
    static constexpr const char* op = "all_to_allv";
    if (opts_.verify_counts)
      return all_to_allv_gather(in, segments, send_counts, send_displs, recv, recv_counts,
                                recv_displs);
    if (!agreed_fits(agreed, true)) return false;
    gather_call call(size_);
    if (auto local = call.build(op, in, segments, send_counts, send_displs, recv, recv_counts,
                                recv_displs, limit())) {
      call.free_types();
      throw *local;
    }
    ORCHMLLM_REQUIRE(call.fits, invalid_argument_error, op,
                     ": this rank's call does not fit the group's figures (agreed_exchange) "
                     "it was given");
    send_gathered(op, in, recv, call);
    return true;
  }

  /// Rank r sends send_counts[q] bytes from send + send_displs[q] to every rank q and receives
  /// recv_counts[q] bytes from q at recv + recv_displs[q]; counts must match pairwise (see
  /// `communicator_options::verify_counts`). Zero counts post nothing on either side.
  /// O(Σ counts) bytes moved, O(size()) extra memory. Throws
  /// invalid_argument_error on every rank when some rank passes spans whose size is not
  /// size(), negative counts or displacements, displ + count overflowing 64 bits, or null
  /// buffers with data; communication_error on every rank when counts disagree (with
  /// verify_counts) or the transfer fails (including a message shorter than its recv count).
  void all_to_allv(const std::byte* send, std::span<const std::int64_t> send_counts,
                   std::span<const std::int64_t> send_displs, std::byte* recv,
                   std::span<const std::int64_t> recv_counts,
                   std::span<const std::int64_t> recv_displs) {
    static constexpr const char* op = "all_to_allv";
    namespace d = ::orchmllm::detail;
    const auto p = static_cast<std::size_t>(size_);
    std::optional<invalid_argument_error> local = d::mpi_backend::check_all_to_allv_args(
        op, p, send, send_counts, send_displs, recv, recv_counts, recv_displs);
    std::optional<communication_error> mismatch;
    if (opts_.verify_counts)
      mismatch = d::mpi_backend::exchange_and_compare_counts(
          comm(), op, rank_, local.has_value(), send_counts, recv_counts, p, watch_.get());
    const bool fits = !local && d::fits_in_int_call(send_counts, send_displs, limit()) &&
                      d::fits_in_int_call(recv_counts, recv_displs, limit());
    const agreement a =
        agree(op, local.has_value(), std::array<std::int64_t, 0>{}, !fits, mismatch.has_value());
    if (local) throw *local;
    throw_if_invalid(op, a);
    if (mismatch) throw *mismatch;
    ORCHMLLM_REQUIRE(a.mismatch_rank < 0, communication_error, op,
                     ": send and receive counts disagree between ranks (rank ", a.mismatch_rank,
                     " detected it); nothing was sent");
    move_all_to_allv(op, send, send_counts, send_displs, recv, recv_counts, recv_displs, a.chunked);
  }

  /// `orchmllm::agreed_exchange_communicator`: the same for a hop of an agreed route, without
  /// the argument agreement: one MPI_Alltoallv, or the chunked path when `agreed` says some
  /// block or buffer of the group does not fit MPI's `int` (decided from `agreed` alone, the
  /// same on every rank). A rank whose own arguments are bad throws `invalid_argument_error`
  /// alone; its peers wait in the transfer until the timeout. With `verify_counts` on, this is
  /// the call above (agreed, counts checked).
  void all_to_allv(const std::byte* send, std::span<const std::int64_t> send_counts,
                   std::span<const std::int64_t> send_displs, std::byte* recv,
                   std::span<const std::int64_t> recv_counts,
                   std::span<const std::int64_t> recv_displs,
                   const ::orchmllm::agreed_exchange& agreed) {
    static constexpr const char* op = "all_to_allv";
    if (opts_.verify_counts) {
      all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs);
      return;
    }
    if (auto local = ::orchmllm::detail::mpi_backend::check_all_to_allv_args(
            op, static_cast<std::size_t>(size_), send, send_counts, send_displs, recv, recv_counts,
            recv_displs))
      throw *local;
    const bool fits = agreed_fits(agreed, false);
    ORCHMLLM_REQUIRE(
        !fits || (::orchmllm::detail::fits_in_int_call(send_counts, send_displs, limit()) &&
                  ::orchmllm::detail::fits_in_int_call(recv_counts, recv_displs, limit())),
        invalid_argument_error, op,
        ": this rank's call does not fit the group's figures (agreed_exchange) it "
        "was given");
    move_all_to_allv(op, send, send_counts, send_displs, recv, recv_counts, recv_displs, !fits);
  }

 private:
  // Owns the duplicated MPI_Comm; moves leave MPI_COMM_NULL behind.
  using comm_handle = ::orchmllm::detail::mpi_backend::comm_handle;

  // What the ranks agreed on before a transfer; one all_to_allv_gather call's MPI arguments.
  using agreement = ::orchmllm::detail::mpi_backend::agreement;
  using gather_call = ::orchmllm::detail::mpi_backend::gather_call;

  [[nodiscard]] MPI_Comm comm() const {
    ORCHMLLM_REQUIRE(handle_.comm != MPI_COMM_NULL, invalid_argument_error,
                     "mpi::communicator used after it was moved from");
    return handle_.comm;
  }
  [[nodiscard]] std::int64_t limit() const noexcept { return opts_.max_chunk_bytes; }
  // The local checks of both all_gather overloads; throws invalid_argument_error.
  void check_all_gather(const std::byte* send, std::int64_t bytes, const std::byte* recv) const {
    static constexpr const char* op = "all_gather";
    ORCHMLLM_REQUIRE(bytes >= 0, invalid_argument_error, op, ": bytes = ", bytes, " is negative");
    ORCHMLLM_REQUIRE(bytes <= std::numeric_limits<std::int64_t>::max() / size_,
                     invalid_argument_error, op, ": size() * bytes = ", size_, " * ", bytes,
                     " exceeds the 64-bit byte range");
    ORCHMLLM_REQUIRE(bytes == 0 || (send != nullptr && recv != nullptr), invalid_argument_error, op,
                     ": null buffer with bytes = ", bytes);
  }
  // Whether an all_gather of valid `bytes` per rank takes the chunked path (the same for the
  // same `bytes` on every rank).
  [[nodiscard]] bool all_gather_chunked(std::int64_t bytes) const noexcept {
    return bytes > limit() || bytes * size_ > INT_MAX;
  }
  void check_all_gatherv(const std::byte* send, std::int64_t bytes, const std::byte* recv,
                         std::span<const std::int64_t> counts,
                         std::span<const std::int64_t> displs) const;

  // Whether a call with the group's figures `a` takes one MPI call (true) or the chunked path
  // (all_to_allv) / the packing fallback (all_to_allv_gather), the same on every rank.
  [[nodiscard]] bool agreed_fits(const ::orchmllm::agreed_exchange& a, bool gather) const noexcept {
    return a.max_block <= limit() && a.max_buffer <= static_cast<std::int64_t>(INT_MAX) &&
           (!gather || a.max_items <= static_cast<std::int64_t>(INT_MAX));
  }

  // The transfer of an all_to_allv whose arguments were agreed (or are agreed by construction):
  // one MPI_Alltoallv, or the chunked point-to-point path (detail::mpi_backend).
  void move_all_to_allv(const char* op, const std::byte* send,
                        std::span<const std::int64_t> send_counts,
                        std::span<const std::int64_t> send_displs, std::byte* recv,
                        std::span<const std::int64_t> recv_counts,
                        std::span<const std::int64_t> recv_displs, bool chunked) {
    if (chunked) ++chunked_calls_;
    ::orchmllm::detail::mpi_backend::move_all_to_allv(comm(), rank_, size_, limit(), watch_.get(),
                                                      op, send, send_counts, send_displs, recv,
                                                      recv_counts, recv_displs, chunked);
  }

  // The transfer of a built gather call: one MPI_Alltoallw straight from `in`; frees the types.
  void send_gathered(const char* op, const std::byte* in, std::byte* recv, gather_call& call) {
    ::orchmllm::detail::mpi_backend::send_gathered(comm(), rank_, watch_.get(), op, in, recv, call);
  }

  // One blocking MPI call that waits for peers, under the deadline (the watchdog).
  template <class Call>
  int collective(const char* what, Call&& call) {
    return ::orchmllm::detail::mpi_backend::run_collective(watch_.get(), what, call);
  }

  // The argument agreement (detail::mpi_backend::agree) on this communicator.
  template <std::size_t K>
  agreement agree(const char* op, bool invalid, const std::array<std::int64_t, K>& keys,
                  bool chunked, bool mismatch) {
    return ::orchmllm::detail::mpi_backend::agree(comm(), rank_, watch_.get(), op, invalid, keys,
                                                  chunked, mismatch);
  }

  static void throw_if_invalid(const char* op, const agreement& a) {
    ::orchmllm::detail::mpi_backend::throw_if_invalid(op, a);
  }

  void real_nodes() {
    namespace impl = ::orchmllm::detail::mpi_backend;
    MPI_Comm node_comm = MPI_COMM_NULL;
    impl::check(collective("mpi::communicator construction (MPI_Comm_split_type)",
                           [&] {
                             return MPI_Comm_split_type(handle_.comm, MPI_COMM_TYPE_SHARED, rank_,
                                                        MPI_INFO_NULL, &node_comm);
                           }),
                "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    comm_handle node;  // frees node_comm on every path
    node.comm = node_comm;
    impl::check(MPI_Comm_set_errhandler(node_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    int leader = rank_;  // the node's lowest rank names it
    impl::check(
        collective(
            "mpi::communicator construction (node leader)",
            [&] { return MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node_comm); }),
        "MPI_Allreduce (node leader)");
    std::vector<int> leaders(static_cast<std::size_t>(size_));
    impl::check(collective("mpi::communicator construction (node leaders)",
                           [&] {
                             return MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT,
                                                  handle_.comm);
                           }),
                "MPI_Allgather (node leaders)");
    assign_by_keys(std::span<const int>(leaders));
  }

  comm_handle handle_;
  options opts_;
  std::int64_t chunked_calls_ = 0;
  // The deadline of every wait (a thread when positive); declared after handle_ so that it is
  // destroyed, its thread joined, before the MPI communicator is freed.
  std::unique_ptr<::orchmllm::detail::mpi_backend::watchdog> watch_;
};

static_assert(::orchmllm::communicator<communicator>);
static_assert(::orchmllm::agreed_gather_communicator<communicator>);

/// A non-owning `mpi::communicator` over the caller's MPI communicator, for a trainer that
/// already has one (e.g. the group its framework created): no MPI_Comm_dup, nothing freed on
/// destruction, the communicator's error handler left as the caller set it. Everything else
/// (node groups, options and their agreement, every operation and guarantee) is
/// `mpi::communicator`'s. Two differences follow from not owning the communicator:
/// - with MPI's default error handler (MPI_ERRORS_ARE_FATAL) an MPI failure aborts the job
///   instead of raising `communication_error`; set MPI_ERRORS_RETURN on it to get exceptions;
/// - the chunked path's point-to-point messages travel on the caller's communicator (one tag,
///   0x0c4d): a trainer posting wildcard receives (MPI_ANY_TAG) on it at the same time could
///   match them. Use the owning `mpi::communicator` (a duplicate) when that can happen.
/// `comm` must outlive this object. Collective over `comm`; throws what the owning
/// constructor throws.
class communicator_ref : public communicator {
 public:
  explicit communicator_ref(MPI_Comm comm, options opts = {})
      : communicator(adopt_t{}, comm, opts) {}
};

static_assert(::orchmllm::communicator<communicator_ref>);
static_assert(::orchmllm::agreed_gather_communicator<communicator_ref>);

}  // namespace orchmllm::mpi

// The out-of-line members.
#include "orchmllm/backend/mpi/detail/communicator.inl"  // IWYU pragma: export
