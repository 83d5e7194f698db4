// The `local` Communicator backend: ranks that live in this process.
//
// A LocalWorld of size N holds one mailbox per rank (a mutex, a condition variable and a queue
// of messages from each source). communicator(r) gives rank r's Communicator; N threads, one
// per rank, then run collectives exactly as N MPI processes would, with the same deadlines and
// error messages. A world of size 1 is the single-process case (make_communicator("local")).
// Sends never block (a message is copied into the destination's mailbox); a receive waits on
// the mailbox's condition variable until its deadline.
//
// Ownership: every communicator holds a reference to its world; the world lives until the last
// of them is destroyed. Messages never taken (a rank that stopped participating) are freed with
// the world.
//
// Thread safety: a LocalWorld may be used from any thread; each communicator by one thread at
// a time (normally its rank's thread).
#pragma once

#include <memory>
#include <vector>

#include "dist/communicator.h"

namespace leanemb::dist {

class LocalWorld {
 public:
  // Errors: InvalidArgument (size < 1, timeout_ms <= 0).
  static Result<std::shared_ptr<LocalWorld>> create(int size, const CommOptions& options = {});
  ~LocalWorld();

  int size() const;
  // The communicator of `rank`; each rank's can be taken once.
  // Errors: OutOfRange (rank), FailedPrecondition (already taken).
  Result<std::unique_ptr<Communicator>> communicator(int rank);

  struct Impl;

 private:
  explicit LocalWorld(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace leanemb::dist
