// DeviceArena: the `device` tier. On CPU it is a DRAM region of exactly `budget_bytes`, taken
// once (mmap, huge pages where available) and never grown; on an accelerator the same
// interface would sit on cudaMalloc / aclrtMalloc. A caching allocator manages the region the
// way PyTorch's CUDA caching allocator manages device memory:
//
//   * The region is carved into segments (PyTorch's cudaMalloc calls): requests <= 1 MiB share
//     2 MiB "small" segments; larger requests get a segment of 20 MiB (requests < 10 MiB) or of
//     the request rounded up to 2 MiB. Segment carving is best fit over the unmapped space, and
//     unmapped neighbours coalesce.
//   * Inside segments, blocks are split on allocation and coalesced with free neighbours of the
//     same segment on free. Free blocks stay cached in their pool (small or large) for reuse,
//     found by best fit. Blocks larger than `max_split_bytes` are never split, and a request
//     smaller than `max_split_bytes` never takes such a block (PyTorch's max_split_size_mb):
//     this keeps large cached blocks whole for large requests and bounds fragmentation.
//   * When carving fails, fully free cached segments are released to the unmapped space and
//     carving is retried (PyTorch's free-cached-blocks-and-retry); only then is the request
//     refused with ResourceExhausted, naming the request, the budget, the bytes in use per
//     category, the cached free bytes and the largest free block.
//   * Sizes and offsets are multiples of 512 bytes, so every block suits SIMD loads and
//     O_DIRECT I/O; alignments up to 4096 are honoured.
//   * `reserve_bytes` carves one segment of that size up front (the honest form of "pre-allocate
//     80%": reserve exactly what a plan needs, before the run). It serves requests of every size
//     first (best fit, split to 512 bytes; small requests too, so no 2 MiB small segment is
//     needed beside it) and is never released: a reserve of the plan's bytes, rounded as the
//     arena rounds, holds the plan.
//
// Thread safety: all methods may be called concurrently (one mutex).
#pragma once

#include <cstddef>
#include <memory>

#include "leanemb/memory.h"

namespace leanemb {

struct DeviceArenaOptions {
  size_t budget_bytes = 0;      // the hard cap; required (> 0)
  // Blocks larger than this are not split (0 = no limit: every block may be split).
  size_t max_split_bytes = 0;
  // Carve one segment of this many bytes up front (0 = none). Must be <= budget_bytes.
  size_t reserve_bytes = 0;
  bool try_huge_pages = true;   // MAP_HUGETLB, else madvise(MADV_HUGEPAGE)
};

// Allocator-level figures beyond MemoryStats.
struct ArenaStats {
  size_t budget_bytes = 0;
  size_t allocated_bytes = 0;    // bytes handed out (rounded to 512)
  size_t reserved_bytes = 0;     // bytes in segments (allocated + cached free)
  size_t cached_free_bytes = 0;  // free bytes kept in segments
  size_t largest_free_bytes = 0; // the largest request that could succeed now (after release)
  size_t total_free_bytes = 0;   // budget - allocated
  double fragmentation = 0.0;    // 1 - largest_free / total_free (0 when nothing is free)
  size_t num_segments = 0;
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
  uint64_t num_failed_allocs = 0;
  uint64_t num_segment_releases = 0;  // segments returned to unmapped space to satisfy a request
  bool huge_pages = false;            // the region is backed by explicit huge pages
};

class DeviceArena final : public Allocator {
 public:
  // Errors: InvalidArgument (budget 0, reserve > budget), ResourceExhausted (mmap refused).
  static Result<std::unique_ptr<DeviceArena>> create(const DeviceArenaOptions& options);
  ~DeviceArena() override;

  Tier tier() const override { return Tier::kDevice; }
  MemoryStats memory_stats() const override;
  ArenaStats arena_stats() const;
  // Returns every fully free cached segment to the unmapped space (like torch.cuda.empty_cache).
  void release_cached();
  void reset_peaks();
  // Test hook as TrackingAllocator::inject_failure.
  void inject_failure(int64_t k, bool always = false);

 protected:
  Result<void*> do_allocate(size_t bytes, size_t alignment,
                            const std::array<size_t, kNumCategories>& parts) override;
  void do_free(void* ptr, size_t bytes, const std::array<size_t, kNumCategories>& parts) override;

 private:
  struct Impl;
  explicit DeviceArena(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace leanemb
