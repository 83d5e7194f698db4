// Memory accounting: every byte the engine allocates goes through an Allocator with a tier and
// a category, so that current and peak bytes per (tier, category) are always known.
//
// Ownership: an Allocation is an owning handle (move-only); destroying it returns the bytes to
// the allocator it came from, which must outlive it. Thread safety: allocate/free and
// memory_stats() may be called concurrently from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "leanemb/status.h"

namespace leanemb {

enum class Tier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2 };
inline constexpr int kNumTiers = 3;

enum class Category : uint8_t {
  kWeights = 0,
  kOptimizerState = 1,
  kGradients = 2,
  kActivations = 3,
  kWorkspace = 4,
  kRowCache = 5,
  kCommBuffers = 6,
  kIoBuffers = 7,
};
inline constexpr int kNumCategories = 8;

std::string_view tier_name(Tier t);          // "device", "host", "disk"
// The tier as human-readable outputs name it on this machine: "device (cpu)" (this build has
// no accelerator backend: the device tier is the DeviceArena in host RAM, where compute runs),
// "host", "disk". JSON keys and config values keep tier_name().
std::string_view tier_label(Tier t);
std::string_view category_name(Category c);  // "weights", "optimizer_state", ...

// Bytes of one allocation attributed to one category. A fat row buffer holds weights and
// optimizer state together; it is one allocation with two parts.
struct CategoryBytes {
  Category category;
  size_t bytes;
};

struct CategoryStats {
  size_t current_bytes = 0;
  size_t peak_bytes = 0;
  uint64_t num_allocs = 0;
};

// A snapshot of one allocator's accounting.
struct MemoryStats {
  Tier tier = Tier::kHost;
  std::array<CategoryStats, kNumCategories> by_category{};
  size_t current_bytes = 0;      // all categories
  size_t peak_bytes = 0;         // peak of the sum (not the sum of per-category peaks)
  size_t budget_bytes = 0;       // 0 = unlimited
  uint64_t num_failed_allocs = 0;
  // Caching allocators (DeviceArena) only; zero for heap tiers (`caching` false).
  bool caching = false;
  size_t cached_free_bytes = 0;   // freed bytes kept in segments for reuse
  size_t largest_free_bytes = 0;  // the largest request that could succeed now
  double fragmentation = 0.0;     // 1 - largest_free / (budget - in use); 0 when nothing is free

  const CategoryStats& operator[](Category c) const { return by_category[static_cast<size_t>(c)]; }
  // The seed's breakdown table: category, current, peak, share of the current total.
  std::string summary_table() const;
  std::string to_json() const;
  // "weights 1.00 GiB, optimizer_state 12.00 MiB" (categories with bytes in use) or "nothing".
  std::string in_use_string() const;

  // Bookkeeping shared by every Allocator: `bytes` taken or returned, split as `parts`.
  void record_alloc(size_t bytes, const std::array<size_t, kNumCategories>& parts);
  void record_free(size_t bytes, const std::array<size_t, kNumCategories>& parts);
  void reset_peaks();  // peaks := current values
};

class Allocator;

// Owning handle of allocated bytes. Default-constructed: empty.
class Allocation {
 public:
  Allocation() = default;
  Allocation(Allocation&& o) noexcept { *this = std::move(o); }
  Allocation& operator=(Allocation&& o) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation() { reset(); }

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t size_bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }
  void reset();

 private:
  friend class Allocator;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  Allocator* owner_ = nullptr;
  std::array<size_t, kNumCategories> parts_{};
};

// Interface: a source of bytes in one tier. Implementations: TrackingAllocator (host heap, with
// an optional budget); later the budgeted DeviceArena and accelerator allocators.
class Allocator {
 public:
  virtual ~Allocator() = default;

  // Allocates `bytes` (> 0) aligned to `alignment` (a power of two, <= 4096) for `category`.
  // Returns ResourceExhausted, with the request, the budget and the bytes in use per category in
  // the message, when the budget would be exceeded or the system refuses.
  Result<Allocation> allocate(size_t bytes, Category category, size_t alignment = 64);
  // One allocation whose bytes are split over several categories (the sum of the parts).
  Result<Allocation> allocate_parts(std::span<const CategoryBytes> parts, size_t alignment = 64);

  virtual Tier tier() const = 0;
  virtual MemoryStats memory_stats() const = 0;

 protected:
  // Raw interface for implementations; accounting is theirs (parts sum to bytes).
  virtual Result<void*> do_allocate(size_t bytes, size_t alignment,
                                    const std::array<size_t, kNumCategories>& parts) = 0;
  virtual void do_free(void* ptr, size_t bytes, const std::array<size_t, kNumCategories>& parts) = 0;
  friend class Allocation;
};

struct TrackingAllocatorOptions {
  Tier tier = Tier::kHost;
  size_t budget_bytes = 0;  // 0 = no budget (only the system limits)
};

// Heap allocator (aligned operator new) that accounts bytes per category, enforces an optional
// budget, and can be told to fail chosen allocations (for failure-sweep tests).
class TrackingAllocator final : public Allocator {
 public:
  explicit TrackingAllocator(TrackingAllocatorOptions options = {});
  ~TrackingAllocator() override;

  Tier tier() const override { return options_.tier; }
  MemoryStats memory_stats() const override;
  // Resets peaks to current values (e.g. after setup, to measure one step).
  void reset_peaks();
  // Test hook: allocation number k (0-based, counted from this call) fails; with `always`,
  // every allocation from k on fails. k < 0 disables injection.
  void inject_failure(int64_t k, bool always = false);

 protected:
  Result<void*> do_allocate(size_t bytes, size_t alignment,
                            const std::array<size_t, kNumCategories>& parts) override;
  void do_free(void* ptr, size_t bytes, const std::array<size_t, kNumCategories>& parts) override;

 private:
  TrackingAllocatorOptions options_;
  mutable std::mutex mu_;
  MemoryStats stats_;
  int64_t fail_at_ = -1;
  bool fail_always_ = false;
  int64_t alloc_counter_ = 0;
};

// The process-wide default host allocator (unbudgeted).
Allocator* default_host_allocator();

// "weights 1.00 GiB, optimizer_state 2.00 GiB": the non-zero parts of one request ("nothing").
std::string describe_parts(const std::array<size_t, kNumCategories>& parts);
// Formats a byte count as "1.50 GiB", "12.00 MiB", "512 B".
std::string format_bytes(size_t bytes);
// Parses "512MiB", "32GiB", "1.5GB", "4096" (bytes). Binary (KiB/MiB/GiB/TiB) and decimal
// (KB/MB/GB/TB) units; a bare number is bytes.
Result<size_t> parse_bytes(std::string_view s);

}  // namespace leanemb
