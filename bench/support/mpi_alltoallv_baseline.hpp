#pragma once
// The MPI baseline of the dispatch measurement (dispatch_driver.hpp): one MPI_Alltoallv of the
// direct schedule's byte matrix. Declared only where the build links orchmllm::mpi
// (ORCHMLLM_HAS_MPI); elsewhere this header declares nothing.

#if defined(ORCHMLLM_HAS_MPI) && ORCHMLLM_HAS_MPI
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <orchmllm/backend/mpi/communicator.hpp>
#include <orchmllm/comm/communicator.hpp>
#include <span>
#include <vector>

namespace orchmllm::bench {

/// MPI_Alltoallv of the direct schedule's byte matrix on the communicator's MPI group.
class mpi_alltoallv_baseline {
 public:
  explicit mpi_alltoallv_baseline(MPI_Comm comm) : comm_(comm) {}

  /// Collective. False on every rank when some rank's counts or displacements do not fit in
  /// `int` (MPI_Alltoallv counts in int; the baseline is then reported as null).
  template <communicator Comm>
  bool prepare(Comm&, std::span<const std::int64_t> send, std::span<const std::int64_t> recv) {
    int fits = convert(send, sc_, sd_) && convert(recv, rc_, rd_) ? 1 : 0;
    int all = 0;
    ::orchmllm::detail::mpi_backend::check(MPI_Allreduce(&fits, &all, 1, MPI_INT, MPI_MIN, comm_),
                                           "MPI_Allreduce");
    return all == 1;
  }

  /// Seconds of one MPI_Alltoallv. Throws communication_error when it fails.
  double run(const std::byte* send, std::byte* recv) {
    const auto t0 = std::chrono::steady_clock::now();
    ::orchmllm::detail::mpi_backend::check(
        MPI_Alltoallv(send, sc_.data(), sd_.data(), MPI_BYTE, recv, rc_.data(), rd_.data(),
                      MPI_BYTE, comm_),
        "MPI_Alltoallv");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  static bool convert(std::span<const std::int64_t> counts, std::vector<int>& c,
                      std::vector<int>& displs) {
    c.assign(counts.size(), 0);
    displs.assign(counts.size(), 0);
    std::int64_t at = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] > std::numeric_limits<int>::max() || at > std::numeric_limits<int>::max())
        return false;
      c[i] = static_cast<int>(counts[i]);
      displs[i] = static_cast<int>(at);
      at += counts[i];
    }
    return true;
  }

  MPI_Comm comm_;
  std::vector<int> sc_, sd_, rc_, rd_;
};

}  // namespace orchmllm::bench

#endif  // ORCHMLLM_HAS_MPI
