// Communicator: the collectives that multi-process training needs (all_to_all_v, all_reduce,
// broadcast, barrier), every one with a deadline, behind an interface with two backends, made
// by make_communicator() (a sharded EmbeddingTables takes one in DistributionOptions::comm):
//
//   local  ranks in this process: a world of size 1, or N ranks as N threads sharing a
//          LocalWorld (src/dist/local_comm.h), for tests; no MPI anywhere
//   mpi    one rank per process over MPI point-to-point messages (src/dist/mpi_comm.h); only
//          src/dist/ includes <mpi.h>. MPI's lifetime: MpiRuntime, at the end of this header.
//
// Every collective is built on one backend primitive, exchange(): in one round each rank sends
// a byte message to some peers and receives a message of an expected size from some peers (a
// zero-byte message is still a message). The base class turns that into the collectives, so
// both backends have the same semantics, the same error messages and the same arithmetic.
//
// Deadlines: a collective call that has not completed within CommOptions::timeout_ms fails
// with StatusCode::kInternal and a message naming this rank, the collective and every peer
// whose message did not arrive, e.g.
//   "dist: rank 0 of 4: all_reduce timed out after 5000 ms waiting for rank 1"
// A failed collective (timeout, a peer in a different collective, a size mismatch, an MPI
// error) leaves the communicator unusable: every later call returns FailedPrecondition with the
// first error. Messages of the failed round may still be in flight, so the only safe reaction
// is to report the error and end the process (see MpiRuntime below for what that means under MPI).
//
// Determinism rule: all_reduce never adds in arrival order. For each element, the P per-rank
// values are combined by reduce_in_fixed_order(): a pairwise tree over ranks when P is a power
// of two, (((x0 + x1) + x2) + ...) in rank order otherwise. Every rank computes the same tree
// on the same inputs, so the result is bit-identical on every rank, on every run, for either
// backend, and equal to what one process gets by calling reduce_in_fixed_order() on the same
// per-rank partials. (all_reduce is a reduce-scatter: rank k reduces the k-th of P contiguous
// slices of the buffer in the fixed order; then an all-gather of the reduced slices.)
//
// Ordering: all ranks must call the same collectives in the same order (as with MPI). Each
// round carries a sequence number and the collective's kind, so a rank that calls a different
// collective is reported as such instead of silently exchanging the wrong bytes.
//
// Thread safety: one Communicator is used by one thread at a time. Different ranks'
// communicators of a LocalWorld are meant to be used by different threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::dist {

struct CommOptions {
  // Every collective call fails if it has not completed after this many milliseconds.
  // REQUIRES: > 0.
  int64_t timeout_ms = 60000;
};

enum class ReduceOp : uint8_t {
  kSum,  // floats: IEEE addition in the fixed order; int64: two's-complement wrap-around
  kMax,  // floats: NaN if any input is NaN
};

// Kinds of collective, carried by every round so that mismatched calls are detected.
enum class CollectiveKind : uint8_t {
  kAllToAllV = 1,
  kAllToAllVCounts = 2,  // the first round of all_to_all_v_alloc: the byte counts
  kAllReduce = 3,
  kBroadcast = 4,
  kBarrier = 5,
};
std::string_view collective_name(CollectiveKind k);  // "all_to_all_v", "all_reduce", ...

// Bytes moved by this rank's communicator since creation, self-messages excluded.
struct CommStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t collectives = 0;  // completed collective calls
  double seconds = 0;        // wall time in the backend's exchanges (sending, and waiting for peers)
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual std::string_view backend() const = 0;  // "local" | "mpi"
  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommOptions& options() const { return options_; }
  const CommStats& stats() const { return stats_; }
  // OK, or the error that made this communicator unusable.
  const Status& failure() const { return failure_; }

  // Each rank sends send_counts[r] bytes to rank r and receives recv_counts[r] bytes from rank
  // r; messages to and from this rank itself are copied.
  //   send         [sum(send_counts)] bytes; the part for rank r starts at sum(send_counts[0..r))
  //   send_counts  [size()] bytes per destination, >= 0 (0: an empty message)
  //   recv         [sum(recv_counts)] bytes, laid out like send
  //   recv_counts  [size()] bytes expected from each source; must equal what that source sends
  // Errors: InvalidArgument (array sizes, negative counts), Internal (timeout naming the missing
  // ranks, a source that sent a different number of bytes, a source in another collective, an
  // MPI error), FailedPrecondition (an earlier failure).
  Status all_to_all_v(std::span<const uint8_t> send, std::span<const int64_t> send_counts,
                      std::span<uint8_t> recv, std::span<const int64_t> recv_counts);

  // As all_to_all_v when the receiver does not know the sizes: a first round exchanges the
  // counts (8 bytes per peer), then the bytes. recv is resized to the sum of *recv_counts
  // (resized to [size()]). One deadline covers both rounds.
  Status all_to_all_v_alloc(std::span<const uint8_t> send, std::span<const int64_t> send_counts,
                            std::vector<uint8_t>* recv, std::vector<int64_t>* recv_counts);
  // The same, receiving into a vector of a memory resource (e.g. accounted kCommBuffers memory).
  Status all_to_all_v_alloc(std::span<const uint8_t> send, std::span<const int64_t> send_counts,
                            std::pmr::vector<uint8_t>* recv, std::vector<int64_t>* recv_counts);

  // In place: data[i] becomes op over all ranks' data[i], reduced in the fixed order above.
  // Every rank must pass the same number of elements. Errors: as all_to_all_v.
  Status all_reduce(std::span<float> data, ReduceOp op);
  Status all_reduce(std::span<double> data, ReduceOp op);
  Status all_reduce(std::span<int64_t> data, ReduceOp op);

  // Copies root's data into every other rank's data (same size on every rank).
  // Errors: InvalidArgument (root out of range), as all_to_all_v.
  Status broadcast(std::span<uint8_t> data, int root);

  // Returns on each rank only after every rank has entered the barrier.
  Status barrier();

  // The fixed-order reduction behind all_reduce. parts: [P] spans (P >= 1) of out.size()
  // elements each, parts[r] being rank r's values. For each element i:
  //   P a power of two: a pairwise tree,
  //     for (s = 1; s < P; s *= 2) for (r = 0; r < P; r += 2s) v[r] = v[r] op v[r + s];
  //     e.g. P = 4: (x0 op x1) op (x2 op x3)
  //   otherwise rank order: (((x0 op x1) op x2) op ...) op x[P-1]
  // A dense gradient summed by all_reduce equals this function applied by one process to the
  // same per-rank partials, bit for bit. REQUIRES: every part has out.size() elements.
  static void reduce_in_fixed_order(std::span<const std::span<const float>> parts, std::span<float> out, ReduceOp op);
  static void reduce_in_fixed_order(std::span<const std::span<const double>> parts, std::span<double> out, ReduceOp op);
  static void reduce_in_fixed_order(std::span<const std::span<const int64_t>> parts, std::span<int64_t> out, ReduceOp op);

 protected:
  using Clock = std::chrono::steady_clock;

  // One round of messages. For every rank r with send_to[r]: send[r] goes to rank r; for every r
  // with recv_from[r]: exactly recv[r].size() bytes from rank r are written to recv[r]. The
  // round of this rank to itself (send_to[rank()] and recv_from[rank()]) is a copy done by the
  // base class before exchange() is called; backends only see peers (both flags false for
  // rank()). Both ends of a message agree on whether it exists (the protocols are symmetric).
  struct Round {
    CollectiveKind kind = CollectiveKind::kBarrier;
    uint64_t seq = 0;  // rounds since creation, identical on every rank for the same round
    std::vector<std::span<const uint8_t>> send;  // [P]
    std::vector<std::span<uint8_t>> recv;        // [P]
    std::vector<uint8_t> send_to, recv_from;     // [P] 1 = a message to / from that rank
  };

  Communicator(int rank, int size, CommOptions options);

  // Performs `round` or fails by `deadline`. On a timeout the message names the rank(s) whose
  // messages are missing (use timeout_error()). Must not return before every received message
  // is complete and every sent buffer may be reused.
  virtual Status exchange(const Round& round, Clock::time_point deadline) = 0;

  // "dist: rank R of P: <collective> timed out after T ms waiting for rank(s) ..." for the
  // ranks listed in `missing_from` (messages not received) and `missing_to` (messages sent but
  // not taken, MPI only).
  Status timeout_error(const Round& round, const std::vector<int>& missing_from,
                       const std::vector<int>& missing_to) const;
  // "dist: rank R of P: <collective> #seq: <what>" as an Internal error.
  Status round_error(const Round& round, const std::string& what) const;

  CommStats stats_;

 private:
  template <typename T>
  Status all_reduce_impl(std::span<T> data, ReduceOp op);
  template <typename Bytes>
  Status all_to_all_v_alloc_impl(std::span<const uint8_t> send, std::span<const int64_t> send_counts, Bytes* recv,
                                 std::vector<int64_t>* recv_counts);
  // all_to_all_v's data round, counts already checked: send_counts[r] bytes of `send` to rank
  // r and recv_counts[r] bytes from it into `recv`, both in rank order.
  Status all_to_all_v_round(std::span<const uint8_t> send, std::span<const int64_t> send_counts, std::span<uint8_t> recv,
                            std::span<const int64_t> recv_counts, Clock::time_point deadline);
  // Runs one round: copies the self part, calls exchange(), counts bytes, records a failure.
  Status run_round(Round& round, Clock::time_point deadline);
  Round make_round(CollectiveKind kind);
  Clock::time_point deadline_from_now() const;
  Status check_usable() const;

  int rank_;
  int size_;
  CommOptions options_;
  uint64_t next_seq_ = 0;
  Status failure_;
};

// Creates the communicator of this process:
//   "local"  a world of size 1 (N-thread worlds: LocalWorld in src/dist/local_comm.h)
//   "mpi"    rank and size of MPI_COMM_WORLD; MPI must be initialized (an MpiRuntime, below,
//            or the embedding application). Collective over all processes.
// Errors: InvalidArgument (unknown kind, timeout_ms <= 0), Unimplemented ("mpi" in a build
// without MPI), FailedPrecondition (MPI not initialized), Internal (MPI failure or timeout).
Result<std::unique_ptr<Communicator>> make_communicator(std::string_view kind, const CommOptions& options = {});

// Whether this build has the MPI backend (LEANEMB_WITH_MPI and MPI found).
bool mpi_available();

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
// destructor leaves finalization to whoever initialized. After a failed collective ~MpiRuntime
// skips MPI_Finalize (it would wait for the failed peer); the process should report the error
// and exit non-zero (src/dist/mpi_comm.h has the details).
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

}  // namespace leanemb::dist
