// DeviceArena implementation. Invariants (checked by the tests through the public stats):
//   * blocks_ covers [0, budget) exactly: every byte belongs to one Block, keyed by offset.
//   * A Block is unmapped (not in any segment), or belongs to the segment that starts at
//     Block::segment; allocated blocks are never in a free set; free blocks are in exactly the
//     free set of their pool (free_[kUnmapped] for unmapped extents).
//   * Two adjacent unmapped blocks never exist (they are merged); two adjacent free blocks of
//     the same segment never exist (they are merged).
//   * allocated_ is the sum of the sizes of allocated blocks; reserved_ the sum of segments.
#include "leanemb/device_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

namespace leanemb {

namespace {

constexpr size_t kGranule = 512;                 // size and offset granularity
constexpr size_t kSmallSize = size_t{1} << 20;   // requests <= 1 MiB use the small pool
constexpr size_t kSmallSegment = size_t{2} << 20;
constexpr size_t kMinLargeAlloc = size_t{10} << 20;
constexpr size_t kLargeSegment = size_t{20} << 20;  // segment for large requests < 10 MiB
constexpr size_t kRoundLarge = size_t{2} << 20;
constexpr size_t kLargeBuffer = size_t{20} << 20;   // oversize requests take blocks < size + this

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// kReserved: the segment of reserve_bytes. It serves requests of every size (best fit, split to
// the granule) before the small and large pools, so that a reserve of the plan's bytes holds the
// plan's small requests too (no 2 MiB small segments beside it), and it is never released.
enum Pool : uint8_t { kUnmapped = 0, kSmall = 1, kLarge = 2, kReserved = 3 };

struct Block {
  size_t size = 0;
  size_t segment = 0;  // offset of the owning segment (unused for unmapped blocks)
  Pool pool = kUnmapped;
  bool allocated = false;
};

using FreeSet = std::set<std::pair<size_t, size_t>>;  // (size, offset)

}  // namespace

struct DeviceArena::Impl {
  DeviceArenaOptions options;
  uint8_t* base = nullptr;
  size_t mapped_bytes = 0;
  bool huge_pages = false;

  mutable std::mutex mu;
  std::map<size_t, Block> blocks;
  FreeSet free_[4];
  std::map<size_t, size_t> segments;  // offset -> size
  std::unordered_map<size_t, size_t> aligned_to_block;  // returned offset -> block offset (align > 512)
  size_t allocated = 0;
  size_t reserved = 0;
  MemoryStats stats;
  ArenaStats counters;
  int64_t fail_at = -1;
  bool fail_always = false;
  int64_t alloc_counter = 0;

  // ---- free-set bookkeeping ----
  void add_free(size_t off, const Block& b) { free_[b.pool].insert({b.size, off}); }
  void remove_free(size_t off, const Block& b) { free_[b.pool].erase({b.size, off}); }

  // Best fit in a pool under the max_split rules; blocks_.end() if none.
  std::map<size_t, Block>::iterator find_cached(Pool pool, size_t r) {
    auto it = free_[pool].lower_bound({r, 0});
    if (it == free_[pool].end()) return blocks.end();
    const size_t size = it->first;
    const size_t max_split = options.max_split_bytes;
    if (pool == kLarge && max_split != 0) {
      // Sizes only grow along the set, so if the best fit breaks a rule, every block does.
      if (r < max_split && size >= max_split) return blocks.end();
      if (r >= max_split && size >= r + kLargeBuffer) return blocks.end();
    }
    return blocks.find(it->second);
  }

  bool should_split(Pool pool, size_t r, size_t remaining) const {
    if (pool == kSmall || pool == kReserved) return remaining >= kGranule;
    const size_t max_split = options.max_split_bytes;
    return (max_split == 0 || r < max_split) && remaining > kSmallSize;
  }

  // Carves a new segment of `seg_size` from the unmapped space (best fit). Returns its block.
  std::map<size_t, Block>::iterator carve(Pool pool, size_t seg_size) {
    auto fit = free_[kUnmapped].lower_bound({seg_size, 0});
    if (fit == free_[kUnmapped].end()) return blocks.end();
    const size_t off = fit->second;
    auto it = blocks.find(off);
    remove_free(off, it->second);
    const size_t extent = it->second.size;
    if (extent > seg_size) {
      Block rest;
      rest.size = extent - seg_size;
      rest.pool = kUnmapped;
      blocks[off + seg_size] = rest;
      add_free(off + seg_size, rest);
    }
    it->second = Block{seg_size, off, pool, false};
    add_free(off, it->second);
    segments[off] = seg_size;
    reserved += seg_size;
    return it;
  }

  // Merges free block `it` with free neighbours of the same segment (or unmapped neighbours).
  std::map<size_t, Block>::iterator merge(std::map<size_t, Block>::iterator it) {
    auto same = [&](const Block& a, const Block& b) {
      return !b.allocated && a.pool == b.pool && (a.pool == kUnmapped || a.segment == b.segment);
    };
    if (it != blocks.begin()) {
      auto prev = std::prev(it);
      if (same(it->second, prev->second)) {
        remove_free(prev->first, prev->second);
        prev->second.size += it->second.size;
        blocks.erase(it);
        it = prev;
      }
    }
    auto next = std::next(it);
    if (next != blocks.end() && same(it->second, next->second)) {
      remove_free(next->first, next->second);
      it->second.size += next->second.size;
      blocks.erase(next);
    }
    return it;
  }

  // Returns fully free segments to the unmapped space. Returns how many were released.
  size_t release_free_segments() {
    size_t released = 0;
    for (auto s = segments.begin(); s != segments.end();) {
      auto it = blocks.find(s->first);
      if (!it->second.allocated && it->second.size == s->second && it->second.pool != kReserved) {
        remove_free(it->first, it->second);
        it->second.pool = kUnmapped;
        it->second.segment = 0;
        reserved -= s->second;
        s = segments.erase(s);
        it = merge(it);
        add_free(it->first, it->second);
        ++released;
      } else {
        ++s;
      }
    }
    return released;
  }

  // The largest request that could be served now (counting segments that could be released).
  size_t largest_free() const {
    size_t best = 0, run = 0;
    for (const auto& [off, b] : blocks) {
      const bool releasable = b.pool != kUnmapped && !b.allocated && b.size == segments.at(b.segment) && off == b.segment;
      if (b.pool == kUnmapped || releasable) {
        run += b.size;
      } else {
        run = 0;
        // A small-pool block serves only small requests (<= 1 MiB); larger ones go to the large pool.
        if (!b.allocated) best = std::max(best, b.pool == kSmall ? std::min(b.size, kSmallSize) : b.size);
      }
      best = std::max(best, run);
    }
    return best;
  }
};

DeviceArena::DeviceArena(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceArena::~DeviceArena() {
  LEANEMB_CHECK(impl_->allocated == 0,
                "DeviceArena destroyed with " + std::to_string(impl_->allocated) + " bytes outstanding");
  if (impl_->base) munmap(impl_->base, impl_->mapped_bytes);
}

Result<std::unique_ptr<DeviceArena>> DeviceArena::create(const DeviceArenaOptions& options) {
  if (options.budget_bytes == 0) return invalid_argument("device budget must be > 0 bytes");
  if (options.reserve_bytes > options.budget_bytes)
    return invalid_argument("reserve_bytes " + format_bytes(options.reserve_bytes) + " exceeds the device budget " +
                            format_bytes(options.budget_bytes));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  // The usable budget is rounded down to the granule; never more than asked.
  const size_t usable = options.budget_bytes / kGranule * kGranule;
  if (usable == 0) return invalid_argument("device budget " + std::to_string(options.budget_bytes) + " B is below 512 B");
  const size_t huge = size_t{2} << 20;
  void* p = MAP_FAILED;
  if (options.try_huge_pages && usable % huge == 0) {
    // No MAP_NORESERVE here: without a reservation the mapping succeeds even when no huge pages
    // are available, and the first touch raises SIGBUS. Reserved, it fails and we fall back.
    p = mmap(nullptr, usable, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    impl->huge_pages = p != MAP_FAILED;
  }
  if (p == MAP_FAILED) {
    p = mmap(nullptr, usable, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return resource_exhausted("cannot map a device arena of " + format_bytes(usable) + ": " + std::strerror(errno));
    if (options.try_huge_pages) madvise(p, usable, MADV_HUGEPAGE);  // transparent huge pages: best effort
  }
  impl->base = static_cast<uint8_t*>(p);
  impl->mapped_bytes = usable;
  Block all;
  all.size = usable;
  impl->blocks[0] = all;
  impl->add_free(0, all);
  impl->stats.tier = Tier::kDevice;
  impl->stats.budget_bytes = usable;
  auto arena = std::unique_ptr<DeviceArena>(new DeviceArena(std::move(impl)));
  if (options.reserve_bytes > 0) {
    const size_t r = round_up(options.reserve_bytes, kGranule);
    if (r > usable) return invalid_argument("reserve_bytes exceeds the device budget after rounding");
    arena->impl_->carve(kReserved, r);
  }
  return arena;
}

MemoryStats DeviceArena::memory_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  MemoryStats s = impl_->stats;
  s.caching = true;
  s.cached_free_bytes = impl_->reserved - impl_->allocated;
  s.largest_free_bytes = impl_->largest_free();
  const size_t total_free = impl_->mapped_bytes - impl_->allocated;
  s.fragmentation = total_free ? 1.0 - static_cast<double>(s.largest_free_bytes) / static_cast<double>(total_free) : 0.0;
  return s;
}

ArenaStats DeviceArena::arena_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  ArenaStats s = impl_->counters;
  s.budget_bytes = impl_->mapped_bytes;
  s.allocated_bytes = impl_->allocated;
  s.reserved_bytes = impl_->reserved;
  s.cached_free_bytes = impl_->reserved - impl_->allocated;
  s.total_free_bytes = impl_->mapped_bytes - impl_->allocated;
  s.largest_free_bytes = impl_->largest_free();
  s.fragmentation = s.total_free_bytes ? 1.0 - static_cast<double>(s.largest_free_bytes) / static_cast<double>(s.total_free_bytes) : 0.0;
  s.num_segments = impl_->segments.size();
  s.huge_pages = impl_->huge_pages;
  return s;
}

void DeviceArena::release_cached() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->counters.num_segment_releases += impl_->release_free_segments();
}

void DeviceArena::reset_peaks() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.reset_peaks();
}

void DeviceArena::inject_failure(int64_t k, bool always) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->fail_at = k;
  impl_->fail_always = always;
  impl_->alloc_counter = 0;
}

Result<void*> DeviceArena::do_allocate(size_t bytes, size_t alignment, const std::array<size_t, kNumCategories>& parts) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.mu);
  const int64_t n = im.alloc_counter++;
  const bool injected = im.fail_at >= 0 && (n == im.fail_at || (im.fail_always && n > im.fail_at));
  // Over the budget fails before any rounding, which could wrap around near SIZE_MAX.
  const bool too_big = bytes > im.mapped_bytes;
  const size_t extra = alignment > kGranule ? alignment - kGranule : 0;
  const size_t r = too_big ? 0 : round_up(bytes + extra, kGranule);
  const Pool pool = r <= kSmallSize ? kSmall : kLarge;

  auto it = injected || too_big ? im.blocks.end() : im.find_cached(kReserved, r);
  if (!injected && !too_big && it == im.blocks.end()) it = im.find_cached(pool, r);
  if (!injected && !too_big && it == im.blocks.end()) {
    // Preferred segment size first, then exactly the request (tight budgets).
    size_t preferred = pool == kSmall ? kSmallSegment : (r < kMinLargeAlloc ? kLargeSegment : round_up(r, kRoundLarge));
    // A request below max_split gets a segment no larger than max_split: a larger one would be
    // split, and its remainder (>= max_split) could then serve no request below max_split.
    const size_t max_split = im.options.max_split_bytes;
    if (pool == kLarge && max_split != 0 && r < max_split) preferred = std::min(preferred, max_split / kGranule * kGranule);
    for (int attempt = 0; attempt < 2 && it == im.blocks.end(); ++attempt) {
      it = im.carve(pool, preferred);
      if (it == im.blocks.end() && preferred != r) it = im.carve(pool, r);
      if (it == im.blocks.end() && attempt == 0) {
        const size_t released = im.release_free_segments();
        im.counters.num_segment_releases += released;
        if (released == 0) break;
        it = im.find_cached(pool, r);
      }
    }
  }
  if (it == im.blocks.end()) {
    ++im.counters.num_failed_allocs;
    ++im.stats.num_failed_allocs;
    const size_t cached = im.reserved - im.allocated;
    return resource_exhausted("out of device memory: requested " + format_bytes(bytes) + " (" + describe_parts(parts) + ")" +
                              (injected ? " (injected failure)" : "") + "; device budget " +
                              format_bytes(im.mapped_bytes) + "; in use " + format_bytes(im.stats.current_bytes) +
                              " (" + im.stats.in_use_string() + "); cached free " + format_bytes(cached) +
                              "; largest free block " + format_bytes(im.largest_free()));
  }
  // Take the block, splitting off the remainder when worthwhile.
  const size_t off = it->first;
  Block& b = it->second;
  im.remove_free(off, b);
  b.allocated = true;  // before splitting, so the remainder does not merge back into it
  const size_t remaining = b.size - r;
  if (remaining > 0 && im.should_split(b.pool, r, remaining)) {
    Block rest{remaining, b.segment, b.pool, false};
    b.size = r;
    auto rit = im.blocks.emplace(off + r, rest).first;
    rit = im.merge(rit);
    im.add_free(rit->first, rit->second);
  }
  im.allocated += im.blocks.at(off).size;
  ++im.counters.num_allocs;
  im.stats.record_alloc(bytes, parts);  // categories count the requested bytes
  size_t ret = off;
  if (extra) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(im.base) + off;
    ret = round_up(addr, alignment) - reinterpret_cast<uintptr_t>(im.base);
    im.aligned_to_block[ret] = off;
  }
  return static_cast<void*>(im.base + ret);
}

void DeviceArena::do_free(void* ptr, size_t bytes, const std::array<size_t, kNumCategories>& parts) {
  Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.mu);
  size_t off = static_cast<size_t>(static_cast<uint8_t*>(ptr) - im.base);
  if (auto a = im.aligned_to_block.find(off); a != im.aligned_to_block.end()) {
    off = a->second;
    im.aligned_to_block.erase(a);
  }
  auto it = im.blocks.find(off);
  LEANEMB_CHECK(it != im.blocks.end() && it->second.allocated, "DeviceArena: free of an unknown pointer");
  it->second.allocated = false;
  im.allocated -= it->second.size;
  ++im.counters.num_frees;
  it = im.merge(it);
  im.add_free(it->first, it->second);
  im.stats.record_free(bytes, parts);
}

}  // namespace leanemb
