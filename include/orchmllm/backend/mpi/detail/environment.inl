#pragma once
// Out-of-line members of mpi::environment (included at the end of backend/mpi/environment.hpp):
// initialisation and the final barrier before MPI_Finalize. Not API. See docs/communication.md,
// "Deadlines".

namespace orchmllm::mpi {

inline environment::environment(int* argc, char*** argv, int required,
                                std::optional<std::chrono::milliseconds> finalize_timeout) {
  if (finalize_timeout)
    ::orchmllm::detail::check_comm_timeout("mpi::environment", *finalize_timeout);
  int finalized = 0;
  detail::mpi_backend::check(MPI_Finalized(&finalized), "MPI_Finalized");
  ORCHMLLM_REQUIRE(!finalized, invalid_argument_error,
                   "MPI was already finalised; it cannot be initialised again");
  int initialized = 0;
  detail::mpi_backend::check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized) {
    detail::mpi_backend::check(MPI_Query_thread(&provided_), "MPI_Query_thread");
    return;
  }
  detail::mpi_backend::check(MPI_Init_thread(argc, argv, required, &provided_), "MPI_Init_thread");
  owns_ = true;
  try {
    timeout_ = ::orchmllm::detail::resolve_comm_timeout("mpi::environment", finalize_timeout);
  } catch (const invalid_argument_error&) {
    timeout_ = ::orchmllm::detail::default_comm_timeout;
  }
  if (timeout_.count() > 0) {
    // If this fails, MPI is initialised but the object is not constructed: finalise here.
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &final_);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(final_, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
      MPI_Finalize();
      detail::mpi_backend::check(rc, "MPI_Comm_dup (mpi::environment)");
    }
  }
}

inline environment::~environment() {
  if (!owns_) return;
  int finalized = 0;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  if (final_ != MPI_COMM_NULL) {
    wait_for_every_rank();
    MPI_Comm_free(&final_);
  }
  MPI_Finalize();
}

inline void environment::wait_for_every_rank() noexcept {
  const std::chrono::milliseconds wait = 2 * timeout_;
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(final_, &req) != MPI_SUCCESS) return;  // broken MPI: finalise anyway
  bool done = false;
  const int rc =
      detail::mpi_backend::poll_until(req, std::chrono::steady_clock::now() + wait, done);
  if (rc != MPI_SUCCESS || done) return;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr,
               "orchmllm: mpi::environment: MPI_Finalize on rank %d did not complete within "
               "%lld ms (a peer failed, returned early or is still inside an operation); "
               "aborting the job\n",
               rank, static_cast<long long>(wait.count()));
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

}  // namespace orchmllm::mpi
