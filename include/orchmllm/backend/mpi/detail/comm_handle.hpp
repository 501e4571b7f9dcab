#pragma once
// The MPI communicator an mpi::communicator runs on, as an RAII handle: the duplicate it owns
// (freed on destruction while MPI is not finalised) or the caller's (communicator_ref: never
// freed).

#include <mpi.h>

#include <utility>

namespace orchmllm::detail::mpi_backend {

// Owns the duplicated MPI_Comm; moves leave MPI_COMM_NULL behind.
struct comm_handle {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = true;  // false: the caller's communicator (communicator_ref), never freed
  comm_handle() = default;
  comm_handle(const comm_handle&) = delete;
  comm_handle& operator=(const comm_handle&) = delete;
  comm_handle(comm_handle&& o) noexcept
      : comm(std::exchange(o.comm, MPI_COMM_NULL)), owned(o.owned) {}
  comm_handle& operator=(comm_handle&& o) noexcept {
    if (this != &o) {
      release();
      comm = std::exchange(o.comm, MPI_COMM_NULL);
      owned = o.owned;
    }
    return *this;
  }
  ~comm_handle() { release(); }
  void release() noexcept {
    if (comm == MPI_COMM_NULL) return;
    if (!owned) {
      comm = MPI_COMM_NULL;
      return;
    }
    // Freeing after MPI_Finalize is an error; a communicator outliving MPI just leaks.
    int finalized = 0;
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Comm_free(&comm);
    comm = MPI_COMM_NULL;
  }
};

}  // namespace orchmllm::detail::mpi_backend
