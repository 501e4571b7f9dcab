#pragma once
/// @file async_planner.hpp
/// Planning step t+1 on a background thread while step t trains: `async_planner` runs
/// `plan_step` on one worker thread on the metadata the trainer submits, and hands the plans
/// back in submission order, identical on every rank to inline planning. See
/// docs/orchestrator.md, "Asynchronous planning".

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <variant>

#include "orchmllm/core/error.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// Plans submitted steps on one worker thread, in submission order.
///
/// @code
///   orchmllm::async_planner planner(decl, topo);               // one worker thread
///   planner.submit(orchmllm::gather_step_metadata(comm, decl, prefetched_batch_1));
///   for (step t = 0 ...) {
///     step_plan plan = planner.next();                          // waits; rethrows planning errors
///     planner.submit(gather_step_metadata(comm, decl, prefetched_batch_{t+2}));  // overlaps
///     ... train step t with plan ...
///   }
/// @endcode
///
/// Identical on every rank: the worker runs `plan_step`, a pure function, on the metadata in
/// submission order, so every rank gets the same plans in the same order as if it planned
/// inline (the metadata gather stays on the calling thread: collectives are never issued from
/// the worker, so they cannot interleave with the trainer's own).
///
/// Bounded: at most `max_pending` submitted steps are in flight (queued, planning, or planned and
/// not yet taken by `next()`). `submit` with that many in flight throws instead of waiting:
/// with one trainer thread, waiting could never end (only its own `next()` frees a place), so
/// the mistake is reported at once. The usual pattern (submit t+1, then next() for t) needs
/// `max_pending` ≥ 2.
///
/// Errors: an exception thrown while planning a step (e.g. `infeasible_error`) is stored and
/// rethrown by the `next()` that would have returned that step's plan, on the calling thread;
/// later steps still plan. Because `plan_step` throws identically on every rank, every rank
/// sees the same error at the same step — no rank waits for another.
///
/// Thread-safety: submit, next and in_flight may be called from any threads (one mutex); plans
/// come back in submission order whichever thread asks.
/// Destruction stops the worker after the step it is planning, dropping queued steps.
class async_planner {
 public:
  /// Starts the worker; every step is planned with `options` (e.g. `routes_for` = this rank,
  /// for the step's prebuilt routes; then agree on them on the training thread with
  /// `agree_on_routes(comm, plan.routes.all)`). Throws `invalid_argument_error` for
  /// max_pending < 1 or invalid declarations (checked here, once, on the calling thread).
  async_planner(stage_declarations decl, topology topo, std::size_t max_pending = 2,
                plan_options options = {})
      : decl_(std::move(decl)),
        topo_(std::move(topo)),
        max_pending_(max_pending),
        options_(options) {
    ORCHMLLM_REQUIRE(max_pending_ >= 1, invalid_argument_error, "max_pending is ", max_pending_,
                     ", must be >= 1");
    decl_.validate();
    worker_ = std::thread([this] { work(); });
  }
  async_planner(const async_planner&) = delete;
  async_planner& operator=(const async_planner&) = delete;

  ~async_planner() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  /// Queues one step's metadata for planning. O(1) besides the move. Throws
  /// `invalid_argument_error` when `max_pending` steps are already in flight (call next()
  /// first).
  void submit(step_metadata meta) {
    std::unique_lock lock(mu_);
    ORCHMLLM_REQUIRE(pending() < max_pending_, invalid_argument_error, "async_planner: ", pending(),
                     " steps are in flight, the limit is ", max_pending_,
                     "; call next() before submitting another");
    inbox_.push_back(std::move(meta));
    cv_.notify_all();
  }

  /// The plan of the oldest submitted step not yet returned; waits for it. Rethrows the
  /// exception its planning raised. Throws `invalid_argument_error` when nothing was submitted.
  step_plan next() {
    std::unique_lock lock(mu_);
    ORCHMLLM_REQUIRE(pending() > 0, invalid_argument_error,
                     "async_planner::next() without a submitted step");
    cv_.wait(lock, [&] { return !outbox_.empty(); });
    auto result = std::move(outbox_.front());
    outbox_.pop_front();
    cv_.notify_all();
    lock.unlock();
    if (auto* e = std::get_if<std::exception_ptr>(&result)) std::rethrow_exception(*e);
    return std::move(std::get<step_plan>(result));
  }

  /// Steps submitted and not yet returned by next() (queued, planning or planned).
  [[nodiscard]] std::size_t in_flight() const {
    std::lock_guard lock(mu_);
    return pending();
  }

 private:
  using outcome = std::variant<step_plan, std::exception_ptr>;

  std::size_t pending() const { return inbox_.size() + (busy_ ? 1 : 0) + outbox_.size(); }

  void work() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !inbox_.empty(); });
      if (stop_) return;
      step_metadata meta = std::move(inbox_.front());
      inbox_.pop_front();
      busy_ = true;
      lock.unlock();
      outcome result;
      try {
        result = plan_step(decl_, meta, topo_, options_);
      } catch (...) {
        result = std::current_exception();
      }
      lock.lock();
      busy_ = false;
      outbox_.push_back(std::move(result));
      cv_.notify_all();
    }
  }

  const stage_declarations decl_;
  const topology topo_;
  const std::size_t max_pending_;
  const plan_options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<step_metadata> inbox_;
  std::deque<outcome> outbox_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace orchmllm
