// The MPI backend (built when LEANEMB_WITH_MPI is ON and MPI is found; mpi_none.cc otherwise).
//
// Invariant: between two rounds no request of this communicator is pending. A round posts its
// receives before its sends (so eager messages land in place), then polls all of them. On a
// failure, incomplete receives are cancelled and completed (local in MPI), incomplete sends are
// abandoned, and the process-wide failure flag makes MpiRuntime skip MPI_Finalize.
#include "dist/mpi_comm.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

namespace leanemb::dist {

namespace {

std::atomic<bool> g_failed{false};

constexpr size_t kPieceBytes = size_t{1} << 30;
constexpr int kSeqBits = 12;  // tag = (seq mod 4096) << 3 | kind: at most 32767 = MPI's minimum TAG_UB

int make_tag(CollectiveKind kind, uint64_t seq) {
  return static_cast<int>(((seq & ((uint64_t{1} << kSeqBits) - 1)) << 3) | static_cast<uint64_t>(kind));
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

// Waiting for peers: spins (yielding the core, so that ranks that share cores with it still
// run) for the first 2 ms of idleness, then sleeps a little longer the longer nothing happens.
// Spinning first keeps the latency of a collective low between ranks that each have a core (a
// sleep costs a context switch and the timer's slack on every round); sleeping later keeps
// idle or oversubscribed ranks (tests) from burning the cores the others need.
void back_off(std::chrono::steady_clock::duration idle) {
  using std::chrono::microseconds;
  if (idle < std::chrono::milliseconds(2)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(microseconds(idle < std::chrono::milliseconds(100) ? 20 : 500));
  }
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int rank, int size, CommOptions options, MPI_Comm comm)
      : Communicator(rank, size, options), comm_(comm) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && failure().ok() && !g_failed.load()) MPI_Comm_free(&comm_);
  }

  std::string_view backend() const override { return "mpi"; }

 protected:
  Status exchange(const Round& round, Clock::time_point deadline) override {
    Status st = exchange_impl(round, deadline);
    if (!st.ok()) g_failed.store(true);
    return st;
  }

 private:
  struct Piece {
    int peer;
    bool is_recv;
    size_t bytes;
  };

  Status exchange_impl(const Round& round, Clock::time_point deadline) {
    const int tag = make_tag(round.kind, round.seq);
    const size_t p = round.send.size();
    reqs_.clear();
    pieces_.clear();
    auto post = [&](int peer, bool is_recv, uint8_t* data, size_t bytes) -> Status {
      size_t off = 0;
      do {
        const size_t len = std::min(kPieceBytes, bytes - off);
        MPI_Request req;
        const int count = static_cast<int>(len);
        const int rc = is_recv ? MPI_Irecv(data + off, count, MPI_BYTE, peer, tag, comm_, &req)
                               : MPI_Isend(data + off, count, MPI_BYTE, peer, tag, comm_, &req);
        if (rc != MPI_SUCCESS) {
          return round_error(round, std::string(is_recv ? "MPI_Irecv from" : "MPI_Isend to") + " rank " +
                                        std::to_string(peer) + " failed: " + mpi_error_string(rc));
        }
        reqs_.push_back(req);
        pieces_.push_back({peer, is_recv, len});
        off += len;
      } while (off < bytes);
      return Status::ok_status();
    };
    Status st;
    for (size_t r = 0; r < p && st.ok(); ++r) {
      if (round.recv_from[r]) st = post(static_cast<int>(r), true, round.recv[r].data(), round.recv[r].size());
    }
    for (size_t r = 0; r < p && st.ok(); ++r) {
      // MPI_Isend takes a non-const buffer in old MPI headers; it only reads it.
      if (round.send_to[r]) st = post(static_cast<int>(r), false, const_cast<uint8_t*>(round.send[r].data()), round.send[r].size());
    }
    if (st.ok()) st = poll(round, tag, deadline);
    if (!st.ok()) abandon();
    return st;
  }

  Status poll(const Round& round, int tag, Clock::time_point deadline) {
    const int n = static_cast<int>(reqs_.size());
    std::vector<int> done_idx(reqs_.size());
    std::vector<MPI_Status> statuses(reqs_.size());
    int remaining = n;
    auto idle_since = Clock::now();
    while (remaining > 0) {
      int outcount = 0;
      const int rc = MPI_Testsome(n, reqs_.data(), &outcount, done_idx.data(), statuses.data());
      if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
        return round_error(round, "MPI_Testsome failed: " + mpi_error_string(rc));
      }
      if (outcount == MPI_UNDEFINED) break;  // no active request left
      for (int k = 0; k < outcount; ++k) {
        const Piece& pc = pieces_[static_cast<size_t>(done_idx[static_cast<size_t>(k)])];
        const MPI_Status& s = statuses[static_cast<size_t>(k)];
        if (rc == MPI_ERR_IN_STATUS && s.MPI_ERROR != MPI_SUCCESS) {
          if (s.MPI_ERROR == MPI_ERR_TRUNCATE) {
            return round_error(round, "rank " + std::to_string(pc.peer) + " sent more than the " +
                                          std::to_string(pc.bytes) + " bytes expected");
          }
          return round_error(round, std::string(pc.is_recv ? "receiving from" : "sending to") + " rank " +
                                        std::to_string(pc.peer) + " failed: " + mpi_error_string(s.MPI_ERROR));
        }
        if (pc.is_recv) {
          int count = 0;
          MPI_Get_count(&s, MPI_BYTE, &count);
          if (static_cast<size_t>(count) != pc.bytes) {
            return round_error(round, "rank " + std::to_string(pc.peer) + " sent " + std::to_string(count) +
                                          " bytes where " + std::to_string(pc.bytes) + " were expected");
          }
        }
      }
      remaining -= outcount;
      if (remaining == 0) break;
      const auto now = Clock::now();
      if (now >= deadline) return timed_out(round, tag);
      if (outcount > 0) idle_since = now;
      back_off(now - idle_since);
    }
    return Status::ok_status();
  }

  // Names the peers whose receives or sends are still pending; a peer whose pending message has
  // another tag is in another collective.
  Status timed_out(const Round& round, int tag) {
    std::vector<int> from, to;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i] == MPI_REQUEST_NULL) continue;
      std::vector<int>& v = pieces_[i].is_recv ? from : to;
      if (std::find(v.begin(), v.end(), pieces_[i].peer) == v.end()) v.push_back(pieces_[i].peer);
    }
    std::sort(from.begin(), from.end());
    std::sort(to.begin(), to.end());
    for (int peer : from) {
      int flag = 0;
      MPI_Status s;
      if (MPI_Iprobe(peer, MPI_ANY_TAG, comm_, &flag, &s) == MPI_SUCCESS && flag && s.MPI_TAG != tag) {
        const auto kind = static_cast<CollectiveKind>(s.MPI_TAG & 7);
        return round_error(round, "rank " + std::to_string(peer) + " is in " + std::string(collective_name(kind)) +
                                      " #" + std::to_string(s.MPI_TAG >> 3) +
                                      " mod 4096 (collectives called in a different order?)");
      }
    }
    std::vector<int> to_only;
    for (int peer : to) {
      if (std::find(from.begin(), from.end(), peer) == from.end()) to_only.push_back(peer);
    }
    return timeout_error(round, from, to_only);
  }

  // After a failure: cancels and completes pending receives (their buffers belong to the caller);
  // pending sends are left to MPI (the process is expected to exit).
  void abandon() {
    for (size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i] == MPI_REQUEST_NULL || !pieces_[i].is_recv) continue;
      MPI_Cancel(&reqs_[i]);
      MPI_Wait(&reqs_[i], MPI_STATUS_IGNORE);
    }
    reqs_.clear();
    pieces_.clear();
  }

  MPI_Comm comm_;
  std::vector<MPI_Request> reqs_;
  std::vector<Piece> pieces_;
};

}  // namespace

bool mpi_available() { return true; }

bool MpiRuntime::communication_failed() { return g_failed.load(); }

Result<std::unique_ptr<MpiRuntime>> MpiRuntime::init(int* argc, char*** argv) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return failed_precondition("dist: MPI was already finalized; it cannot be initialized again");
  bool owns = false;
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return internal_error("dist: MPI_Init_thread failed: " + mpi_error_string(rc));
    owns = true;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<MpiRuntime>(new MpiRuntime(owns, rank, size));
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized && !g_failed.load()) MPI_Finalize();
}

void MpiRuntime::abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

Result<std::unique_ptr<Communicator>> make_mpi_communicator(const CommOptions& options) {
  if (options.timeout_ms <= 0) {
    return invalid_argument("dist: CommOptions::timeout_ms must be positive, got " + std::to_string(options.timeout_ms));
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return failed_precondition("dist: MPI is not initialized: create a dist::MpiRuntime (MpiRuntime::init) first");
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &comm, &req);
  if (rc != MPI_SUCCESS) return internal_error("dist: MPI_Comm_idup failed: " + mpi_error_string(rc));
  int done = 0;
  const auto started = std::chrono::steady_clock::now();
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  while (!done) {
    rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return internal_error("dist: MPI_Comm_idup failed: " + mpi_error_string(rc));
    if (done) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      g_failed.store(true);
      return internal_error("dist: creating the MPI communicator timed out after " + std::to_string(options.timeout_ms) +
                            " ms: not every one of the " + std::to_string(world_size) + " ranks called it");
    }
    back_off(std::chrono::steady_clock::now() - started);
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  return std::unique_ptr<Communicator>(new MpiCommunicator(rank, size, options, comm));
}

}  // namespace leanemb::dist
