// Invariant: messages from one source to one destination are queued in the order the source
// sent them, which is increasing round sequence number. A receiver expecting round `seq` from
// source s looks only at the front of s's queue: seq equal -> its message; larger -> s has
// skipped this round (it is in another collective); smaller cannot happen while the
// communicator is usable (every round takes every message addressed to it).
#include "dist/local_comm.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

namespace leanemb::dist {

namespace {

struct Message {
  uint64_t seq = 0;
  CollectiveKind kind = CollectiveKind::kBarrier;
  std::vector<uint8_t> bytes;
};

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<Message>> from;  // [P] queue per source rank
};

}  // namespace

struct LocalWorld::Impl {
  int size = 0;
  CommOptions options;
  std::vector<std::unique_ptr<Mailbox>> boxes;  // [P] by destination
  std::mutex taken_mu;
  std::vector<uint8_t> taken;  // [P] whether communicator(r) was handed out
};

namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(int rank, std::shared_ptr<LocalWorld::Impl> world)
      : Communicator(rank, world->size, world->options), world_(std::move(world)) {}

  std::string_view backend() const override { return "local"; }

 protected:
  Status exchange(const Round& round, Clock::time_point deadline) override {
    const size_t p = round.send.size();
    for (size_t dst = 0; dst < p; ++dst) {
      if (!round.send_to[dst]) continue;
      Mailbox& box = *world_->boxes[dst];
      Message m{round.seq, round.kind, std::vector<uint8_t>(round.send[dst].begin(), round.send[dst].end())};
      {
        std::lock_guard<std::mutex> lock(box.mu);
        box.from[static_cast<size_t>(rank())].push_back(std::move(m));
      }
      box.cv.notify_all();
    }

    Mailbox& box = *world_->boxes[static_cast<size_t>(rank())];
    std::vector<uint8_t> pending(round.recv_from);
    std::unique_lock<std::mutex> lock(box.mu);
    for (;;) {
      bool any_pending = false;
      for (size_t src = 0; src < p; ++src) {
        if (!pending[src]) continue;
        auto& q = box.from[src];
        if (q.empty()) {
          any_pending = true;
          continue;
        }
        Message& m = q.front();
        if (m.seq != round.seq || m.kind != round.kind) {
          const std::string what = "rank " + std::to_string(src) + " is in " + std::string(collective_name(m.kind)) +
                                   " #" + std::to_string(m.seq) + " (collectives called in a different order?)";
          return round_error(round, what);
        }
        if (m.bytes.size() != round.recv[src].size()) {
          return round_error(round, "rank " + std::to_string(src) + " sent " + std::to_string(m.bytes.size()) +
                                        " bytes where " + std::to_string(round.recv[src].size()) + " were expected");
        }
        if (!m.bytes.empty()) std::memcpy(round.recv[src].data(), m.bytes.data(), m.bytes.size());
        q.pop_front();
        pending[src] = 0;
      }
      if (!any_pending) return Status::ok_status();
      if (box.cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        // One last look: a message may have arrived together with the deadline.
        bool arrived = false;
        for (size_t src = 0; src < p; ++src) arrived |= pending[src] && !box.from[src].empty();
        if (arrived) continue;
        std::vector<int> missing;
        for (size_t src = 0; src < p; ++src) {
          if (pending[src]) missing.push_back(static_cast<int>(src));
        }
        return timeout_error(round, missing, {});
      }
    }
  }

 private:
  std::shared_ptr<LocalWorld::Impl> world_;
};

}  // namespace

Result<std::shared_ptr<LocalWorld>> LocalWorld::create(int size, const CommOptions& options) {
  if (size < 1) return invalid_argument("dist: LocalWorld size must be >= 1, got " + std::to_string(size));
  if (options.timeout_ms <= 0) {
    return invalid_argument("dist: CommOptions::timeout_ms must be positive, got " + std::to_string(options.timeout_ms));
  }
  auto impl = std::make_shared<Impl>();
  impl->size = size;
  impl->options = options;
  impl->taken.assign(static_cast<size_t>(size), 0);
  for (int r = 0; r < size; ++r) {
    auto box = std::make_unique<Mailbox>();
    box->from.resize(static_cast<size_t>(size));
    impl->boxes.push_back(std::move(box));
  }
  return std::shared_ptr<LocalWorld>(new LocalWorld(std::move(impl)));
}

LocalWorld::LocalWorld(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
LocalWorld::~LocalWorld() = default;

int LocalWorld::size() const { return impl_->size; }

Result<std::unique_ptr<Communicator>> LocalWorld::communicator(int rank) {
  if (rank < 0 || rank >= impl_->size) {
    return out_of_range("dist: rank " + std::to_string(rank) + " out of range for a local world of size " +
                        std::to_string(impl_->size));
  }
  std::lock_guard<std::mutex> lock(impl_->taken_mu);
  if (impl_->taken[static_cast<size_t>(rank)]) {
    return failed_precondition("dist: the communicator of rank " + std::to_string(rank) + " was already taken");
  }
  impl_->taken[static_cast<size_t>(rank)] = 1;
  return std::unique_ptr<Communicator>(new LocalCommunicator(rank, impl_));
}

}  // namespace leanemb::dist
