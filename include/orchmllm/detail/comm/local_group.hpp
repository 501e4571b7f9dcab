#pragma once
// Shared state of one `local::run` group: the rendezvous every collective of the in-process
// backend is built from, the arguments each rank publishes for its peers to read, and the
// group's failure state (a rank that threw, a rank that left, a timeout).
//
// Why one rendezvous with a verdict instead of a bare barrier: the last rank to arrive sees
// every rank's published arguments under the group mutex, so it can decide once, for all
// ranks, whether the collective may proceed (same operation everywhere, valid arguments
// everywhere, counts that match pairwise). Every rank then reads the same verdict and either
// all proceed or all throw at the same point, which keeps the group in lockstep after a
// mismatch instead of leaving some ranks waiting for peers that have given up.
//
// Why pull-based copies need two rendezvous per data collective: after the first, every rank
// reads (memcpy) straight from its peers' send buffers, so those buffers and the published
// pointers must stay valid and unchanged until every reader is done; the second rendezvous is
// that guarantee. A rank only rewrites its published arguments after passing the second one.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm::detail::local {

/// The collective a rank is in; part of the rendezvous tag so that ranks calling different
/// collectives are caught instead of pairing up.
enum class collective : std::uint8_t { barrier, all_gather, all_gatherv, all_to_allv };

/// First or second rendezvous of a data collective (a barrier only has the first).
enum class phase : std::uint8_t { publish, release };

inline const char* collective_name(collective c) noexcept {
  switch (c) {
    case collective::barrier:
      return "barrier";
    case collective::all_gather:
      return "all_gather";
    case collective::all_gatherv:
      return "all_gatherv";
    case collective::all_to_allv:
      return "all_to_allv";
  }
  return "?";
}

/// What a rank publishes before the first rendezvous of a data collective. Peers read it between
/// the two rendezvous; the arrays are the caller's spans (length size(), checked locally first).
struct published_args {
  bool valid = true;                          // the rank's local argument checks passed
  const std::byte* send = nullptr;            // all ops
  std::int64_t bytes = 0;                     // all_gather / all_gatherv: own contribution
  const std::int64_t* send_counts = nullptr;  // all_to_allv; all_gatherv: counts
  const std::int64_t* send_displs = nullptr;  // all_to_allv; all_gatherv: displs
  const std::int64_t* recv_counts = nullptr;  // all_to_allv
  const std::int64_t* recv_displs = nullptr;  // all_to_allv
};

/// Outcome of one rendezvous, identical on every rank of the group.
struct verdict {
  enum class kind : std::uint8_t { ok, invalid_arguments, mismatch };
  kind what = kind::ok;
  std::string message;  // empty when ok (so copying it allocates nothing on the hot path)
};

/// One group of `size` ranks. Thread-safe; each rank index is used by one thread at a time.
class group {
 public:
  group(rank_t size, std::chrono::milliseconds timeout)
      : size_(size),
        timeout_(timeout),
        args_(static_cast<std::size_t>(size)),
        tags_(static_cast<std::size_t>(size)),
        arrived_flag_(static_cast<std::size_t>(size), 0) {}

  group(const group&) = delete;
  group& operator=(const group&) = delete;

  [[nodiscard]] rank_t size() const noexcept { return size_; }

  /// The slot rank `r` publishes into. Only rank r writes it, and only outside the window
  /// between its two rendezvous.
  [[nodiscard]] published_args& args(rank_t r) noexcept {
    return args_[static_cast<std::size_t>(r)];
  }
  [[nodiscard]] const published_args& args(rank_t r) const noexcept {
    return args_[static_cast<std::size_t>(r)];
  }

  /// Blocks until every rank has arrived with its tag, then returns the verdict the last
  /// arriver computed (see `judge`).
  ///
  /// Publish phase: throws `communication_error` when the group is aborted (a rank failed, a
  /// rendezvous timed out) or a rank has left it, whether that happens before or while this rank
  /// waits; waiting longer than the group's timeout aborts the group for everyone.
  ///
  /// Release phase: never throws and never times out. Every rank that passed the publish
  /// rendezvous with an ok verdict is copying from its peers' send buffers and is bound to
  /// arrive (memcpy cannot fail); letting a rank leave early here, on a timeout say, would let
  /// it unwind and free a send buffer a slower peer is still reading.
  [[nodiscard]] verdict rendezvous(rank_t me, collective op, phase ph) {
    std::unique_lock lock(mutex_);
    if (ph == phase::publish) throw_if_unusable(me, op);
    tags_[static_cast<std::size_t>(me)] = tag{op, ph};
    arrived_flag_[static_cast<std::size_t>(me)] = 1;
    if (++arrived_ == size_) {
      verdict_ = judge(ph);
      arrived_ = 0;
      for (auto& a : arrived_flag_) a = 0;
      ++generation_;
      cv_.notify_all();
      return verdict_;
    }
    const std::uint64_t gen = generation_;
    if (ph == phase::release) {
      cv_.wait(lock, [&] { return generation_ != gen; });
      return verdict_;
    }
    auto released = [&] { return generation_ != gen || aborted_ || departed_ > 0; };
    if (timeout_.count() == 0) {
      cv_.wait(lock, released);
    } else if (!cv_.wait_for(lock, timeout_, released)) {
      abort_locked(concat("timed out after ", timeout_.count(), " ms in ", collective_name(op),
                          " waiting for ", missing_ranks_locked()));
    }
    // Completed rendezvous first: a peer that failed or left right after releasing us must not
    // turn a finished collective into an error.
    if (generation_ != gen) return verdict_;
    throw_if_unusable(me, op);
    // `released` held, so one of the branches above returned or threw.
    raise<communication_error>("local: internal error: rendezvous released without a cause");
  }

  /// Records that rank `r`'s function threw `e` and aborts the group. The first recorded
  /// exception is the one `first_error` returns; later ones (typically the communication_errors
  /// this abort causes on other ranks) are dropped.
  void fail(rank_t r, std::exception_ptr e) {
    std::string what = describe(e);
    std::lock_guard lock(mutex_);
    if (!first_error_) first_error_ = e;
    abort_locked(concat("rank ", r, " failed: ", what));
  }

  /// Aborts the group with `reason` (used when the group cannot even start).
  void abort(const std::string& reason) {
    std::lock_guard lock(mutex_);
    abort_locked(reason);
  }

  /// Records that rank `r`'s function returned. From now on no rendezvous can complete, so any
  /// rank waiting in or entering a collective gets `communication_error` ("rank r left the
  /// group"); ranks that are done too are unaffected.
  void leave(rank_t r) {
    std::lock_guard lock(mutex_);
    if (departed_++ == 0) first_departed_ = r;
    cv_.notify_all();
  }

  /// The first exception recorded by `fail`, or null.
  [[nodiscard]] std::exception_ptr first_error() const {
    std::lock_guard lock(mutex_);
    return first_error_;
  }

 private:
  struct tag {
    collective op = collective::barrier;
    phase ph = phase::publish;
    friend bool operator==(const tag&, const tag&) = default;
  };

  static std::string describe(const std::exception_ptr& e) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return x.what();
    } catch (...) {
    }
    return "unknown exception";
  }

  static std::string tag_name(const tag& t) {
    std::string s = collective_name(t.op);
    if (t.ph == phase::release) s += " (completion)";
    return s;
  }

  void abort_locked(const std::string& reason) {
    if (!aborted_) {
      aborted_ = true;
      abort_reason_ = reason;
    }
    cv_.notify_all();
  }

  void throw_if_unusable(rank_t me, collective op) const {
    if (aborted_) {
      raise<communication_error>(concat("local: ", collective_name(op), " on rank ", me,
                                        ": group aborted: ", abort_reason_));
    }
    if (departed_ > 0) {
      raise<communication_error>(concat("local: ", collective_name(op), " on rank ", me, ": rank ",
                                        first_departed_,
                                        " left the group (its function returned)"));
    }
  }

  std::string missing_ranks_locked() const {
    std::string out = "rank(s)";
    int listed = 0;
    for (rank_t r = 0; r < size_; ++r) {
      if (arrived_flag_[static_cast<std::size_t>(r)]) continue;
      if (listed == 8) {
        out += " ...";
        break;
      }
      out += ' ' + std::to_string(r);
      ++listed;
    }
    return out;
  }

  // Runs on the last arriver, under the mutex, with every rank's tag and (for the publish
  // phase) arguments in place. Deterministic: scans ranks in increasing order and reports the
  // first problem, so every rank sees the same message. O(size) for the tags, O(size²) for the
  // pairwise count checks (one thread, once per collective).
  verdict judge(phase ph) const {
    const tag expected = tags_[0];
    for (rank_t r = 1; r < size_; ++r) {
      const tag& t = tags_[static_cast<std::size_t>(r)];
      if (!(t == expected)) {
        return {verdict::kind::mismatch,
                concat("local: collective mismatch: rank 0 called ", tag_name(expected),
                       " but rank ", r, " called ", tag_name(t))};
      }
    }
    if (ph != phase::publish || expected.op == collective::barrier) return {};
    const auto name = collective_name(expected.op);
    for (rank_t r = 0; r < size_; ++r) {
      if (!args(r).valid) {
        return {verdict::kind::invalid_arguments,
                concat("local: ", name, ": rank ", r, " passed invalid arguments")};
      }
    }
    switch (expected.op) {
      case collective::all_gather:
        for (rank_t r = 1; r < size_; ++r) {
          if (args(r).bytes != args(0).bytes) {
            return {
                verdict::kind::mismatch,
                concat("local: all_gather: rank 0 contributes ", args(0).bytes, " bytes but rank ",
                       r, " contributes ", args(r).bytes, " (bytes must be equal on every rank)")};
          }
        }
        break;
      case collective::all_gatherv:
        // Rank r's own counts[r] equals its `bytes` (checked locally), so comparing every
        // receiver's counts[r] with `bytes` covers all disagreements.
        for (rank_t a = 0; a < size_; ++a) {
          for (rank_t r = 0; r < size_; ++r) {
            const std::int64_t expect = args(a).send_counts[r];
            if (expect != args(r).bytes) {
              return {verdict::kind::mismatch,
                      concat("local: all_gatherv: rank ", a, " expects counts[", r, "] = ", expect,
                             " bytes but rank ", r, " contributes ", args(r).bytes)};
            }
          }
        }
        break;
      case collective::all_to_allv:
        for (rank_t s = 0; s < size_; ++s) {
          for (rank_t t = 0; t < size_; ++t) {
            const std::int64_t sent = args(s).send_counts[t];
            const std::int64_t expected_bytes = args(t).recv_counts[s];
            if (sent != expected_bytes) {
              return {verdict::kind::mismatch,
                      concat("local: all_to_allv: rank ", s, " sends ", sent, " bytes to rank ", t,
                             " but rank ", t, " expects ", expected_bytes, " bytes from rank ", s)};
            }
          }
        }
        break;
      case collective::barrier:
        break;
    }
    return {};
  }

  const rank_t size_;
  const std::chrono::milliseconds timeout_;
  std::vector<published_args> args_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  // Everything below is guarded by mutex_.
  std::vector<tag> tags_;
  std::vector<char> arrived_flag_;  // who is in the current rendezvous (for timeout messages)
  rank_t arrived_ = 0;
  std::uint64_t generation_ = 0;
  verdict verdict_;
  bool aborted_ = false;
  std::string abort_reason_;
  rank_t departed_ = 0;
  rank_t first_departed_ = -1;
  std::exception_ptr first_error_;
};

}  // namespace orchmllm::detail::local
