#pragma once
// The bodies of comm/local.hpp, included by it at its end: the local communicator's data
// collectives (check locally, publish, copy from the peers, release) and its argument checks, and
// `run`, which starts one thread per rank and rethrows the first rank's failure.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace orchmllm::local {

inline void communicator::all_gather(const std::byte* send, std::int64_t bytes, std::byte* recv) {
  using detail::concat;
  std::string problem;
  if (bytes < 0) {
    problem = concat("all_gather: bytes = ", bytes, " is negative");
  } else if (bytes > std::numeric_limits<std::int64_t>::max() / size()) {
    problem =
        concat("all_gather: size() * bytes = ", size(), " * ", bytes, " does not fit in 64 bits");
  } else if (bytes > 0 && (send == nullptr || recv == nullptr)) {
    problem = concat("all_gather: null ", send == nullptr ? "send" : "recv",
                     " buffer with bytes = ", bytes);
  } else if (overlap(send, bytes, recv, bytes * size())) {
    problem = concat("all_gather: send buffer (", bytes, " bytes) overlaps recv buffer (",
                     bytes * size(), " bytes)");
  }
  auto& a = group_->args(rank_);
  a = {};
  a.valid = problem.empty();
  a.send = send;
  a.bytes = bytes;
  publish(detail::local::collective::all_gather, problem);
  for (rank_t i = 0; i < size(); ++i) {
    const rank_t p = (rank_ + i) % size();  // start with self: spreads reads over peers
    copy(recv, static_cast<std::int64_t>(p) * bytes, group_->args(p).send, 0, bytes);
  }
  release(detail::local::collective::all_gather);
}

inline void communicator::all_gatherv(const std::byte* send, std::int64_t bytes, std::byte* recv,
                                      std::span<const std::int64_t> counts,
                                      std::span<const std::int64_t> displs) {
  using detail::concat;
  std::string problem = check_vector("all_gatherv", "counts", counts, "displs", displs);
  std::int64_t recv_extent = 0;
  if (problem.empty()) {
    recv_extent = extent(counts, displs);
    if (bytes != counts[static_cast<std::size_t>(rank_)]) {
      problem = concat("all_gatherv: bytes = ", bytes, " but counts[", rank_,
                       "] = ", counts[static_cast<std::size_t>(rank_)], " (must be equal)");
    } else if (bytes > 0 && send == nullptr) {
      problem = concat("all_gatherv: null send buffer with bytes = ", bytes);
    } else if (recv_extent > 0 && recv == nullptr) {
      problem = concat("all_gatherv: null recv buffer with ", recv_extent, " bytes to receive");
    } else if (overlap(send, bytes, recv, recv_extent)) {
      problem = concat("all_gatherv: send buffer (", bytes, " bytes) overlaps recv buffer (",
                       recv_extent, " bytes)");
    }
  }
  auto& a = group_->args(rank_);
  a = {};
  a.valid = problem.empty();
  a.send = send;
  a.bytes = bytes;
  a.send_counts = counts.data();
  a.send_displs = displs.data();
  publish(detail::local::collective::all_gatherv, problem);
  for (rank_t i = 0; i < size(); ++i) {
    const rank_t p = (rank_ + i) % size();
    const auto pi = static_cast<std::size_t>(p);
    copy(recv, displs[pi], group_->args(p).send, 0, counts[pi]);
  }
  release(detail::local::collective::all_gatherv);
}

inline void communicator::all_to_allv(const std::byte* send,
                                      std::span<const std::int64_t> send_counts,
                                      std::span<const std::int64_t> send_displs, std::byte* recv,
                                      std::span<const std::int64_t> recv_counts,
                                      std::span<const std::int64_t> recv_displs) {
  using detail::concat;
  std::string problem =
      check_vector("all_to_allv", "send_counts", send_counts, "send_displs", send_displs);
  if (problem.empty()) {
    problem = check_vector("all_to_allv", "recv_counts", recv_counts, "recv_displs", recv_displs);
  }
  if (problem.empty()) {
    const std::int64_t send_extent = extent(send_counts, send_displs);
    const std::int64_t recv_extent = extent(recv_counts, recv_displs);
    if (send_extent > 0 && send == nullptr) {
      problem = concat("all_to_allv: null send buffer with ", send_extent, " bytes to send");
    } else if (recv_extent > 0 && recv == nullptr) {
      problem = concat("all_to_allv: null recv buffer with ", recv_extent, " bytes to receive");
    } else if (overlap(send, send_extent, recv, recv_extent)) {
      problem = concat("all_to_allv: send extent (", send_extent, " bytes) overlaps recv extent (",
                       recv_extent, " bytes)");
    }
  }
  auto& a = group_->args(rank_);
  a = {};
  a.valid = problem.empty();
  a.send = send;
  a.send_counts = send_counts.data();
  a.send_displs = send_displs.data();
  a.recv_counts = recv_counts.data();
  a.recv_displs = recv_displs.data();
  publish(detail::local::collective::all_to_allv, problem);
  const auto me = static_cast<std::size_t>(rank_);
  for (rank_t i = 0; i < size(); ++i) {
    const rank_t p = (rank_ + i) % size();
    const auto pi = static_cast<std::size_t>(p);
    const auto& peer = group_->args(p);
    // recv_counts[p] == peer.send_counts[me]: the publish verdict checked it.
    copy(recv, recv_displs[pi], peer.send, peer.send_displs[me], recv_counts[pi]);
  }
  release(detail::local::collective::all_to_allv);
}

inline std::string communicator::check_vector(const char* op, const char* counts_name,
                                              std::span<const std::int64_t> counts,
                                              const char* displs_name,
                                              std::span<const std::int64_t> displs) const {
  using detail::concat;
  const auto n = static_cast<std::size_t>(size());
  if (counts.size() != n) {
    return concat(op, ": ", counts_name, " has ", counts.size(), " entries, expected size() = ", n);
  }
  if (displs.size() != n) {
    return concat(op, ": ", displs_name, " has ", displs.size(), " entries, expected size() = ", n);
  }
  for (std::size_t p = 0; p < n; ++p) {
    if (counts[p] < 0) return concat(op, ": ", counts_name, "[", p, "] = ", counts[p], " < 0");
    if (displs[p] < 0) return concat(op, ": ", displs_name, "[", p, "] = ", displs[p], " < 0");
    if (displs[p] > std::numeric_limits<std::int64_t>::max() - counts[p]) {
      return concat(op, ": ", displs_name, "[", p, "] + ", counts_name, "[", p, "] = ", displs[p],
                    " + ", counts[p], " overflows 64 bits");
    }
  }
  return {};
}

template <class F>
void run(rank_t ranks, F&& f, run_options options) {
  ORCHMLLM_REQUIRE(ranks >= 1, invalid_argument_error, "local::run: ranks = ", ranks,
                   " must be at least 1");
  ORCHMLLM_REQUIRE(options.ranks_per_node >= 0, invalid_argument_error,
                   "local::run: ranks_per_node = ", options.ranks_per_node,
                   " must be >= 0 (0: one node)");
  ORCHMLLM_REQUIRE(options.timeout.count() >= 0, invalid_argument_error,
                   "local::run: timeout = ", options.timeout.count(),
                   " ms must be >= 0 (0: wait forever)");
  detail::local::group g(ranks, options.timeout);
  auto body = [&g, &f, rpn = options.ranks_per_node](rank_t r) noexcept {
    try {
      communicator comm(g, r, rpn);
      std::invoke(f, comm);
      g.leave(r);
    } catch (...) {
      g.fail(r, std::current_exception());
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  try {
    for (rank_t r = 0; r < ranks; ++r) threads.emplace_back(body, r);
  } catch (...) {
    g.abort(
        detail::concat("could not start the thread of rank ", static_cast<rank_t>(threads.size())));
    for (auto& t : threads) t.join();
    throw;
  }
  for (auto& t : threads) t.join();
  if (auto e = g.first_error()) std::rethrow_exception(e);
}

}  // namespace orchmllm::local
