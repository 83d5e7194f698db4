// MemorySystem: the tiers of one engine and the placement that says where each category of
// bytes lives.
//
//   device tier  the accelerator's memory: a DeviceArena (one region of exactly
//                `device_budget_bytes`, a caching allocator on top). Without a budget the arena
//                spans the machine's physical memory (mapped without reservation).
//   host tier    a TrackingAllocator with an optional `host_budget_bytes`.
//
// Placement maps each Category to a tier: `weights = device, optimizer_state = host` is the
// seed's optimizer offload. Compute happens on the device, so bytes of a host-placed category
// that a step reads or writes cross the host link; the engine records them with
// record_transfer(), by direction, so that a plan can price them on a real accelerator (on CPU
// they cost a memcpy, not PCIe time). What EmbeddingCollection records is documented in
// docs/memory.md.
//
// Workspace: scratch buffers borrowed from an allocator for one scope and returned, all of them,
// when the Workspace is destroyed (RAII).
//
// Ownership: the MemorySystem owns its allocators; everything allocated from them must be freed
// before it is destroyed. Thread safety: allocators, record_transfer() and the stats accessors
// may be called concurrently; set_placement() must not race with allocation.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/device_arena.h"
#include "leanemb/memory.h"
#include "leanemb/status.h"

namespace leanemb {

// Where each category lives. Defaults: everything on the device except I/O buffers (host).
struct Placement {
  std::array<Tier, kNumCategories> tier{Tier::kDevice, Tier::kDevice, Tier::kDevice, Tier::kDevice,
                                        Tier::kDevice, Tier::kDevice, Tier::kDevice, Tier::kHost};
  Tier operator[](Category c) const { return tier[static_cast<size_t>(c)]; }
  Tier& operator[](Category c) { return tier[static_cast<size_t>(c)]; }
  // "weights=device,optimizer_state=host" (the categories not named keep their defaults).
  std::string to_string() const;  // every category, "weights=device,..."
};

Result<Tier> parse_tier(std::string_view s);          // "device" | "host"
Result<Category> parse_category(std::string_view s);  // "weights", "optimizer_state", ...
// Parses "cat=tier[,cat=tier...]" on top of `base`. Only weights, optimizer_state, comm_buffers
// and io_buffers may leave the device: gradients, activations, workspace and the row cache are
// where compute happens. Errors: InvalidArgument naming the bad entry.
Result<Placement> parse_placement(std::string_view s, const Placement& base = {});
// Checks the rule above. Errors: InvalidArgument.
Status validate_placement(const Placement& p);

struct MemorySystemOptions {
  // Hard cap of the device tier (a DeviceArena); 0 = the machine's physical memory.
  size_t device_budget_bytes = 0;
  // Cap of the host tier; 0 = no cap (only the system's limits).
  size_t host_budget_bytes = 0;
  // DeviceArena options (used only with a device budget): see device_arena.h.
  size_t max_split_bytes = 0;
  size_t reserve_bytes = 0;
  Placement placement;
};

// Bytes that crossed from one tier to another, [from][to].
struct TransferStats {
  std::array<std::array<uint64_t, kNumTiers>, kNumTiers> bytes{};
  uint64_t operator()(Tier from, Tier to) const { return bytes[static_cast<size_t>(from)][static_cast<size_t>(to)]; }
  uint64_t host_to_device() const { return (*this)(Tier::kHost, Tier::kDevice); }
  uint64_t device_to_host() const { return (*this)(Tier::kDevice, Tier::kHost); }
  // {"host_to_device": N, "device_to_host": N, ...} (pairs with bytes only, always the two above).
  std::string to_json() const;
};

class MemorySystem {
 public:
  // Errors: InvalidArgument (bad placement, reserve > budget), ResourceExhausted (the device
  // region could not be mapped).
  static Result<std::unique_ptr<MemorySystem>> create(const MemorySystemOptions& options);
  ~MemorySystem();

  const MemorySystemOptions& options() const { return options_; }
  const Placement& placement() const { return options_.placement; }
  Allocator* device() const { return device_.get(); }
  Allocator* host() const { return host_.get(); }
  // The device tier's DeviceArena.
  DeviceArena* arena() const { return arena_; }
  Allocator* tier(Tier t) const { return t == Tier::kDevice ? device() : host(); }
  // The allocator of the tier `c` is placed in.
  Allocator* allocator_for(Category c) const { return tier(options_.placement[c]); }

  void record_transfer(Tier from, Tier to, uint64_t bytes) {
    if (from != to && bytes) transfers_[static_cast<size_t>(from) * kNumTiers + static_cast<size_t>(to)].fetch_add(bytes, std::memory_order_relaxed);
  }
  TransferStats transfers() const;
  void reset_transfers();

  // Per tier: device first, then host.
  std::array<MemoryStats, 2> stats() const;
  void reset_peaks();
  // The seed's breakdown table, one block per tier with bytes in use or a peak (category,
  // current, peak, share), the arena's cached-free / largest-free / fragmentation line, the
  // placement, and the transfers so far.
  std::string memory_summary() const;
  // {"placement": {...}, "device": MemoryStats JSON, "host": ..., "transfers": {...}}.
  std::string to_json() const;

 private:
  MemorySystem() = default;
  MemorySystemOptions options_;
  std::unique_ptr<Allocator> device_;
  std::unique_ptr<Allocator> host_;
  DeviceArena* arena_ = nullptr;
  std::array<std::atomic<uint64_t>, kNumTiers * kNumTiers> transfers_{};
};

// Scratch buffers for one scope: each take() allocates from `alloc` in `category`; all of them
// are returned when the Workspace is destroyed (or release() is called).
//   Workspace ws(mem->allocator_for(Category::kWorkspace));
//   LEANEMB_ASSIGN_OR_RETURN(std::span<float> tmp, ws.take<float>(n));
class Workspace {
 public:
  explicit Workspace(Allocator* alloc, Category category = Category::kWorkspace)
      : alloc_(alloc), category_(category) {}
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // [n] elements of T (uninitialized), aligned to 64 bytes. Errors: ResourceExhausted.
  template <typename T>
  Result<std::span<T>> take(size_t n) {
    LEANEMB_ASSIGN_OR_RETURN(Allocation a, alloc_->allocate(std::max<size_t>(n * sizeof(T), 1), category_, 64));
    T* p = a.as<T>();
    bytes_ += a.size_bytes();
    parts_.push_back(std::move(a));
    return std::span<T>(p, n);
  }
  size_t bytes() const { return bytes_; }
  void release() {
    parts_.clear();
    bytes_ = 0;
  }

 private:
  Allocator* alloc_;
  Category category_;
  std::vector<Allocation> parts_;
  size_t bytes_ = 0;
};

}  // namespace leanemb
