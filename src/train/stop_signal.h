// StopSignal: the graceful stop of a training run (docs/train.md, "Signals").
//
// While a StopSignal is installed, the first SIGTERM, SIGINT or SIGHUP only sets a flag and
// writes one line to stderr ("leanemb: SIGTERM: stopping after this step ..."); the loop then
// finishes the step it is in, writes a checkpoint and ends with the documented exit code (5).
// A second signal of any of the three restores the default action and re-raises itself: the
// process ends at once (the checkpoint being written, if any, stays a .tmp that is never taken
// as a checkpoint). A signal that was ignored when install() ran stays ignored (nohup leaves
// SIGHUP ignored; a shell's background job, SIGINT).
//
// Several processes (mpirun): a scheduler may signal one rank, some or all. agree_stop()
// all-reduces the ranks' flags, so every rank stops after the same step.
//
// Ownership: one StopSignal at a time per process (install() fails while another is
// installed); the destructor restores the previous handlers.
// Thread safety: the flag is a lock-free atomic; requested() may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "leanemb/status.h"

namespace leanemb::dist {
class Communicator;
}

namespace leanemb::train {

class StopSignal {
 public:
  // Installs the handlers of SIGTERM, SIGINT and SIGHUP.
  // Errors: FailedPrecondition (another StopSignal is installed), Internal (sigaction failed).
  static Result<std::unique_ptr<StopSignal>> install();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // True once a signal arrived (or request() was called).
  bool requested() const;
  // The first signal's number (SIGTERM, ...), 0 when none or when request() set the flag.
  int signal_number() const;
  // "SIGTERM", "SIGINT", "SIGHUP", or "a stop request" (request() or another rank's signal).
  std::string signal_name() const;
  // Sets the flag as a signal would, without one (tests; another rank asked to stop).
  void request();

  // Every rank's verdict: true on all ranks if any rank's flag is set (an all_reduce of one
  // integer; with comm == nullptr or one rank, just requested()). Collective: every rank calls
  // it at the same point of its loop. Errors: those of the communicator.
  Result<bool> agree_stop(dist::Communicator* comm);

 private:
  StopSignal() = default;
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

}  // namespace leanemb::train
