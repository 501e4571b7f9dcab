#pragma once
/// @file local.hpp
/// The in-process `local` communicator backend: N ranks as N threads of one process, used by the
/// tests, by single-process programs and as the demo's default transport. `local::run` starts the
/// group and gives each thread a `local::communicator`, a model of `orchmllm::communicator`
/// (comm/communicator.hpp) with host payload memory whose collectives never hang: a failure or a
/// disagreement raises on every rank. See docs/communication.md, "Communicator concept".

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/comm/local_group.hpp"

namespace orchmllm::local {

/// Options of `run`.
struct run_options {
  /// 0: all ranks in one node. Otherwise nodes are consecutive blocks of this many ranks, the
  /// last one possibly smaller (uneven nodes); values above the rank count mean one node.
  rank_t ranks_per_node = 0;
  /// 0: wait forever. Otherwise a collective that waits longer than this for its peers raises
  /// `communication_error` on every waiting rank (and aborts the group, so every later
  /// collective raises it too).
  std::chrono::milliseconds timeout{0};
};

class communicator;

template <class F>
void run(rank_t ranks, F&& f, run_options options = {});

/// One rank's handle on a `run` group. Created by `run` (one per rank), not copyable nor
/// movable, and used only by the thread `run` gave it to.
///
/// Every collective is one or two rendezvous of all ranks (mutex + condition variable +
/// generation counter). Data collectives publish their arguments, meet, copy (memcpy) the blocks
/// addressed to them straight out of their peers' send buffers, and meet again so no send
/// buffer is released while a peer still reads it. The last rank to arrive at the first
/// rendezvous checks, once for everyone, that all ranks called the same collective with valid
/// arguments and counts that match pairwise; so a disagreement fails on every rank at the same
/// point and the group stays usable afterwards.
///
/// Failure model (no hang, ever):
/// - a rank whose function throws aborts the group: every rank blocked in a collective, and
///   every rank entering one later, gets `communication_error` naming the failed rank; `run`
///   rethrows the first rank's original exception;
/// - a rank whose function returns while others still call collectives counts as gone: their
///   collectives raise `communication_error` ("rank 3 left the group");
/// - with `run_options::timeout`, a rank waiting longer than that for its peers aborts the group
///   (`communication_error` on every rank, naming the ranks that did not arrive);
/// - ranks calling different collectives, `all_gather` sizes that differ, `all_gatherv` counts
///   that disagree with the contributions, `all_to_allv` counts that do not match pairwise:
///   `communication_error` on every rank, naming the ranks and values;
/// - arguments that fail the local checks (span lengths, negative counts or displacements, null
///   buffers with non-zero sizes, overlapping send and receive buffers): `invalid_argument_error`
///   on the ranks that passed them and `communication_error` naming the first such rank on the
///   others, raised after one rendezvous (so no rank is left waiting) and before any byte moves.
///
/// Queries are O(1) and never throw. Collectives follow comm/communicator.hpp; each costs two
/// rendezvous of all ranks (one for `barrier`), O(size()) work per rank plus the copies, and an
/// O(size()²) agreement check done once by the last rank to arrive (for `all_gatherv` and
/// `all_to_allv`); no heap allocation on success. Results are deterministic (byte copies only).
/// Buffers passed to one collective must not overlap each other (checked: send vs receive).
class communicator {
 public:
  /// `all_to_allv` buffers are ordinary host memory.
  static constexpr memory_kind payload_memory = memory_kind::host;

  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&&) = delete;
  communicator& operator=(communicator&&) = delete;
  ~communicator() = default;

  /// This rank, in [0, size()).
  [[nodiscard]] rank_t rank() const noexcept { return rank_; }
  /// Number of ranks in the group.
  [[nodiscard]] rank_t size() const noexcept { return group_->size(); }
  /// This rank's node: rank() / ranks_per_node (0 when all ranks share one node).
  [[nodiscard]] rank_t node() const noexcept { return rank_ / ranks_per_node_; }
  /// Number of nodes: ceil(size() / ranks_per_node).
  [[nodiscard]] rank_t num_nodes() const noexcept {
    return (size() + ranks_per_node_ - 1) / ranks_per_node_;
  }
  /// Index of this rank inside its node.
  [[nodiscard]] rank_t local_rank() const noexcept { return rank_ % ranks_per_node_; }
  /// Number of ranks in this rank's node (the last node may be smaller).
  [[nodiscard]] rank_t local_size() const noexcept {
    const rank_t first = node() * ranks_per_node_;
    return size() - first < ranks_per_node_ ? size() - first : ranks_per_node_;
  }

  /// Waits until every rank has called `barrier`. Throws `communication_error` (see the class
  /// comment).
  void barrier() {
    auto& a = group_->args(rank_);
    a = {};
    publish(detail::local::collective::barrier, {});
  }

  /// Every rank contributes `bytes` bytes from `send` (the same `bytes` on every rank); `recv`
  /// receives size()·bytes bytes, rank r's at r·bytes. Throws `invalid_argument_error` for a
  /// negative `bytes`, size()·bytes overflowing 64 bits, null buffers with non-zero sizes or
  /// overlapping buffers; `communication_error` when ranks disagree on `bytes`.
  void all_gather(const std::byte* send, std::int64_t bytes, std::byte* recv);

  /// Rank r contributes counts[r] bytes, written at recv + displs[r] on every rank; `bytes`
  /// must equal counts[rank()]. Throws `invalid_argument_error` when `counts`/`displs` do not
  /// have size() entries, hold negative values, displs[r] + counts[r] overflows, `bytes` differs
  /// from counts[rank()], buffers are null with non-zero sizes or overlap;
  /// `communication_error` when a rank's counts[r] differs from what rank r contributes.
  void all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                   std::span<const std::int64_t> counts, std::span<const std::int64_t> displs);

  /// Sends send_counts[p] bytes from send + send_displs[p] to every rank p and receives
  /// recv_counts[p] bytes from p at recv + recv_displs[p]. Send buffers must stay valid until
  /// the call returns (it returns only when every rank has copied its blocks). Throws
  /// `invalid_argument_error` when a span does not have size() entries, a count or
  /// displacement is negative, displacement + count overflows, a buffer is null while it has
  /// bytes to move, or the send and receive extents overlap; `communication_error` when counts
  /// do not match pairwise (send_counts[t] on s != recv_counts[s] on t), naming both ranks and
  /// both counts.
  void all_to_allv(const std::byte* send, std::span<const std::int64_t> send_counts,
                   std::span<const std::int64_t> send_displs, std::byte* recv,
                   std::span<const std::int64_t> recv_counts,
                   std::span<const std::int64_t> recv_displs);

 private:
  template <class F>
  friend void run(rank_t ranks, F&& f, run_options options);

  communicator(detail::local::group& g, rank_t rank, rank_t ranks_per_node) noexcept
      : group_(&g),
        rank_(rank),
        ranks_per_node_(ranks_per_node <= 0 || ranks_per_node > g.size() ? g.size()
                                                                         : ranks_per_node) {}

  // First rendezvous; throws on every rank together when the verdict is not ok. A rank whose
  // own arguments were bad (so the verdict cannot be ok) gets its own invalid_argument_error;
  // testing `problem` first also shows the compiler that no copy follows bad arguments.
  void publish(detail::local::collective op, const std::string& problem) {
    auto v = group_->rendezvous(rank_, op, detail::local::phase::publish);
    if (!problem.empty()) detail::raise<invalid_argument_error>("local: " + problem);
    if (v.what == detail::local::verdict::kind::ok) return;
    detail::raise<communication_error>(v.message + " (seen on rank " + std::to_string(rank_) + ")");
  }

  void release(detail::local::collective op) {
    (void)group_->rendezvous(rank_, op, detail::local::phase::release);
  }

  // Offsets are applied only for non-empty blocks: a zero-count block may carry any
  // displacement, even on a null buffer, without forming an invalid pointer.
  static void copy(std::byte* dst, std::int64_t dst_offset, const std::byte* src,
                   std::int64_t src_offset, std::int64_t n) noexcept {
    if (n > 0) std::memcpy(dst + dst_offset, src + src_offset, static_cast<std::size_t>(n));
  }

  // Span sizes, signs and overflow of displs + counts; empty string when fine.
  std::string check_vector(const char* op, const char* counts_name,
                           std::span<const std::int64_t> counts, const char* displs_name,
                           std::span<const std::int64_t> displs) const;

  // Bytes from the buffer start to the end of its last non-empty block (validated spans).
  static std::int64_t extent(std::span<const std::int64_t> counts,
                             std::span<const std::int64_t> displs) noexcept {
    std::int64_t e = 0;
    for (std::size_t p = 0; p < counts.size(); ++p) {
      if (counts[p] > 0 && displs[p] + counts[p] > e) e = displs[p] + counts[p];
    }
    return e;
  }

  // Compared as addresses: the built-in < on pointers into unrelated objects is unspecified,
  // and an end pointer may lie past an object we cannot name.
  static bool overlap(const std::byte* a, std::int64_t na, const std::byte* b,
                      std::int64_t nb) noexcept {
    if (na <= 0 || nb <= 0 || a == nullptr || b == nullptr) return false;
    const auto ia = reinterpret_cast<std::uintptr_t>(a);
    const auto ib = reinterpret_cast<std::uintptr_t>(b);
    return ia < ib ? ib - ia < static_cast<std::uintptr_t>(na)
                   : ia - ib < static_cast<std::uintptr_t>(nb);
  }

  detail::local::group* group_;
  rank_t rank_;
  rank_t ranks_per_node_;
};

static_assert(orchmllm::communicator<communicator>);

/// Runs `f(communicator&)` on `ranks` threads, one rank each, and returns when all have
/// finished. `f` is shared by all threads (called concurrently on the same object, as an
/// lvalue); its return value is ignored.
///
/// Throws `invalid_argument_error` before starting anything when `ranks` < 1,
/// `options.ranks_per_node` < 0 or `options.timeout` < 0. When any rank's `f` throws, the group
/// is aborted (see `communicator`), every thread is joined, and the exception of the rank
/// that failed first is rethrown unchanged (the `communication_error`s the abort causes on the
/// other ranks are dropped). A `std::system_error` from starting a thread aborts the group,
/// joins the started threads and is rethrown.
///
/// Costs `ranks` thread starts; the group state is O(ranks) and allocated once.
template <class F>
void run(rank_t ranks, F&& f, run_options options);

}  // namespace orchmllm::local

// The definitions of the members and of `run` declared only above.
#include "orchmllm/detail/comm/local.inl"  // IWYU pragma: export
