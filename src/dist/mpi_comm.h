// The `mpi` Communicator backend: one rank per process, over MPI point-to-point messages.
//
// Every round of a collective (see communicator.h) posts MPI_Irecv for each expected message and
// MPI_Isend for each outgoing one on a private duplicate of MPI_COMM_WORLD, then polls them with
// MPI_Testsome until all are complete or the deadline passes. Because each message is its own
// request, a timeout knows exactly which peers' messages are missing and names them. The tag of
// a message carries the collective's kind and its round number (mod 4096), so a peer that is in
// a different collective is reported as such. Messages over 1 GiB travel in 1 GiB pieces.
// The communicator's error handler is MPI_ERRORS_RETURN: MPI errors become Status (Internal).
//
// MPI's lifetime is the caller's, through MpiRuntime (RAII), created at the top of main():
//
//   int main(int argc, char** argv) {
//     auto rt = leanemb::dist::MpiRuntime::init(&argc, &argv);   // MPI_Init_thread
//     auto comm = leanemb::dist::make_communicator("mpi", {.timeout_ms = 30000});
//     ...
//   }   // ~MpiRuntime: MPI_Finalize
//
// make_communicator("mpi") never initializes MPI itself (it fails with FailedPrecondition when
// MPI is not initialized), so an application that initializes MPI on its own (mpi4py, another
// library) keeps control of it; MpiRuntime::init then joins the existing initialization and its
// destructor leaves finalization to whoever initialized.
//
// After a failed collective (a timeout: a peer died or hangs) the process must not wait for the
// peer again: MPI_Finalize (a synchronization in Open MPI) would block on it, and sends of the
// failed round may never complete. So once any MPI communicator has failed, ~MpiRuntime skips
// MPI_Finalize (and communicators skip MPI_Comm_free). The process should then print the error
// and exit non-zero; mpirun sees a process that ended without finalizing, reports it and ends
// the job. MpiRuntime::abort() ends the whole job at once instead (MPI_Abort).
//
// Thread safety: MPI is initialized with MPI_THREAD_SERIALIZED requested; a communicator must
// be used by one thread at a time (with only MPI_THREAD_FUNNELED provided: the initializing
// thread).
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace leanemb::dist {

class MpiRuntime {
 public:
  // Initializes MPI (MPI_Init_thread) unless it already is. argc / argv may be null.
  // Errors: Unimplemented (no MPI in this build), FailedPrecondition (MPI already finalized),
  // Internal (MPI_Init_thread failed).
  static Result<std::unique_ptr<MpiRuntime>> init(int* argc, char*** argv);
  // MPI_Finalize if this object initialized MPI and no MPI communicator has failed.
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Whether this object initialized MPI (and so finalizes it).
  bool owns_mpi() const { return owns_; }
  // Whether an MPI communicator of this process has failed (so MPI_Finalize will be skipped).
  static bool communication_failed();
  // Ends every process of the job with exit code `code` (MPI_Abort on MPI_COMM_WORLD); without
  // MPI in the build or before MPI_Init, ends this process (std::_Exit).
  [[noreturn]] static void abort(int code);

 private:
  MpiRuntime(bool owns, int rank, int size) : owns_(owns), world_rank_(rank), world_size_(size) {}
  bool owns_;
  int world_rank_;
  int world_size_;
};

// The "mpi" case of make_communicator(): a communicator over a duplicate of MPI_COMM_WORLD
// (collective: every process must call it; the duplication itself has the options' deadline).
// Errors: as make_communicator.
Result<std::unique_ptr<Communicator>> make_mpi_communicator(const CommOptions& options);

}  // namespace leanemb::dist
