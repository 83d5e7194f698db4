// StopSignal: async-signal-safe handlers (an atomic store and write(2)) and the ranks' agreement.
#include "train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>

#include "dist/communicator.h"

namespace leanemb::train {

namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};

// 0: no stop; -1: request(); else the first signal's number. Lock-free, so the handler may
// touch it.
std::atomic<int> g_stop{0};
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free);

const char* name_of(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

void write_stderr(const char* s) {
  ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

void on_signal(int sig) {
  int none = 0;
  if (g_stop.compare_exchange_strong(none, sig)) {
    write_stderr("\nleanemb: ");
    write_stderr(name_of(sig));
    write_stderr(": stopping after this step and writing a checkpoint (a second signal aborts at once)\n");
    return;
  }
  // The second signal: the default action (terminate) at once.
  write_stderr("\nleanemb: second signal: aborting now, without a checkpoint\n");
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

}  // namespace

struct StopSignal::Saved {
  struct sigaction old[3];
};

Result<std::unique_ptr<StopSignal>> StopSignal::install() {
  bool expected = false;
  if (!g_installed.compare_exchange_strong(expected, true))
    return failed_precondition("a StopSignal is already installed in this process");
  std::unique_ptr<StopSignal> s(new StopSignal());
  s->saved_ = std::make_unique<Saved>();
  g_stop.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) sigaddset(&sa.sa_mask, sig);  // no handler runs inside another
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < 3; ++i) {
    // A signal ignored when the process started stays ignored (nohup's SIGHUP, a background
    // job's SIGINT): its sender asked for that.
    if (sigaction(kSignals[i], nullptr, &s->saved_->old[i]) == 0 && s->saved_->old[i].sa_handler == SIG_IGN) continue;
    if (sigaction(kSignals[i], &sa, &s->saved_->old[i]) != 0) {
      for (size_t j = 0; j < i; ++j) sigaction(kSignals[j], &s->saved_->old[j], nullptr);
      g_installed.store(false);
      return internal_error(std::string("sigaction failed: ") + std::strerror(errno));
    }
  }
  return s;
}

StopSignal::~StopSignal() {
  for (size_t i = 0; i < 3; ++i) sigaction(kSignals[i], &saved_->old[i], nullptr);
  g_stop.store(0);
  g_installed.store(false);
}

bool StopSignal::requested() const { return g_stop.load() != 0; }

int StopSignal::signal_number() const {
  const int v = g_stop.load();
  return v > 0 ? v : 0;
}

std::string StopSignal::signal_name() const {
  const int v = g_stop.load();
  return v > 0 ? name_of(v) : "a stop request";
}

void StopSignal::request() {
  int none = 0;
  g_stop.compare_exchange_strong(none, -1);
}

Result<bool> StopSignal::agree_stop(dist::Communicator* comm) {
  if (comm == nullptr || comm->size() <= 1) return requested();
  int64_t flag[1] = {requested() ? 1 : 0};
  LEANEMB_RETURN_IF_ERROR(comm->all_reduce(std::span<int64_t>(flag, 1), dist::ReduceOp::kMax));
  if (flag[0] != 0) request();  // another rank's signal: stop here too
  return flag[0] != 0;
}

}  // namespace leanemb::train
