// The `mpi` Communicator backend: one rank per process, over MPI point-to-point messages.
//
// Every round of a collective (see leanemb/communicator.h) posts MPI_Irecv for each expected message and
// MPI_Isend for each outgoing one on a private duplicate of MPI_COMM_WORLD, then polls them with
// MPI_Testsome until all are complete or the deadline passes. Because each message is its own
// request, a timeout knows exactly which peers' messages are missing and names them. The tag of
// a message carries the collective's kind and its round number (mod 4096), so a peer that is in
// a different collective is reported as such. Messages over 1 GiB travel in 1 GiB pieces.
// The communicator's error handler is MPI_ERRORS_RETURN: MPI errors become Status (Internal).
//
// MPI's lifetime is the caller's, through MpiRuntime (leanemb/communicator.h).
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

#include "leanemb/communicator.h"

namespace leanemb::dist {

// The "mpi" case of make_communicator(): a communicator over a duplicate of MPI_COMM_WORLD
// (collective: every process must call it; the duplication itself has the options' deadline).
// Errors: as make_communicator.
Result<std::unique_ptr<Communicator>> make_mpi_communicator(const CommOptions& options);

}  // namespace leanemb::dist
