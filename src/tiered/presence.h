// PresenceBitmap: one bit per row, "this row was written to the store at least once".
//
// Ownership: pages of bits (kPageRows rows, 32 KiB; smaller tables get one page of their size)
// come from an Allocator (category weights: the bitmap is part of the stored table), zeroed, and
// are made on first write of one of their rows, so a store of 2^33 rows costs a directory of
// 256 KiB until rows are written, not a 1 GiB bitmap. Rows are int64 throughout.
// Thread safety: test() may run on any thread while one writer (the store serializes writers)
// prepares and sets: a page pointer is published with a release store and read with an acquire
// load; bits are atomic per word (set is a release, test an acquire: a reader that sees the bit
// also sees the row bytes written before it).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "leanemb/memory.h"
#include "leanemb/status.h"
#include "tiered/sizes.h"

namespace leanemb::tiered {

class PresenceBitmap {
 public:
  PresenceBitmap() = default;

  // Errors: ResourceExhausted from the allocator (the directory).
  static Result<PresenceBitmap> create(int64_t num_rows, Allocator* alloc) {
    PresenceBitmap b;
    b.s_ = std::make_unique<State>();
    b.s_->alloc = alloc;
    b.s_->num_rows = num_rows;
    b.s_->page_words = presence_page_words(num_rows);
    const size_t pages = presence_num_pages(num_rows);
    if (pages == 0) return b;
    LEANEMB_ASSIGN_OR_RETURN(b.s_->dir, alloc->allocate(pages * sizeof(uint64_t*), Category::kWeights, 64));
    std::memset(b.s_->dir.data(), 0, pages * sizeof(uint64_t*));
    b.s_->bytes.store(b.s_->dir.size_bytes(), std::memory_order_relaxed);
    return b;
  }

  bool test(int64_t row) const {
    const uint64_t* p = page(row >> kPageShift).load(std::memory_order_acquire);
    if (p == nullptr) return false;
    const int64_t r = row & kPageMask;
    return (std::atomic_ref<const uint64_t>(p[r >> 6]).load(std::memory_order_acquire) >> (r & 63)) & 1u;
  }
  // Makes the pages of rows [begin, begin + count) exist. REQUIRES: one writer at a time.
  // Errors: ResourceExhausted (nothing set; pages made before stay).
  Status prepare_range(int64_t begin, int64_t count) {
    if (count <= 0) return Status();
    for (int64_t pg = begin >> kPageShift; pg <= (begin + count - 1) >> kPageShift; ++pg)
      LEANEMB_RETURN_IF_ERROR(make_page(pg));
    return Status();
  }
  Status prepare(int64_t row) { return make_page(row >> kPageShift); }
  // REQUIRES: the row's page prepared.
  void set(int64_t row) {
    uint64_t* p = page(row >> kPageShift).load(std::memory_order_relaxed);
    const int64_t r = row & kPageMask;
    std::atomic_ref<uint64_t>(p[r >> 6]).fetch_or(uint64_t{1} << (r & 63), std::memory_order_release);
  }
  void set_range(int64_t begin, int64_t count) {
    for (int64_t r = begin; r < begin + count;) {
      if ((r & 63) == 0 && begin + count - r >= 64) {  // whole words at once
        uint64_t* p = page(r >> kPageShift).load(std::memory_order_relaxed);
        std::atomic_ref<uint64_t>(p[(r & kPageMask) >> 6]).store(~uint64_t{0}, std::memory_order_release);
        r += 64;
      } else {
        set(r++);
      }
    }
  }
  // Bytes allocated now (directory and pages made so far).
  size_t bytes() const { return s_ ? s_->bytes.load(std::memory_order_relaxed) : 0; }

 private:
  static constexpr int kPageShift = kPresencePageShift;
  static constexpr int64_t kPageMask = (int64_t{1} << kPageShift) - 1;

  struct State {
    Allocator* alloc = nullptr;
    int64_t num_rows = 0;
    size_t page_words = 0;
    Allocation dir;                 // [pages] uint64_t*, null until made
    std::vector<Allocation> pages;  // the pages made (owners), in order of creation
    std::atomic<size_t> bytes{0};
  };

  std::atomic_ref<uint64_t*> page(int64_t pg) const { return std::atomic_ref<uint64_t*>(s_->dir.as<uint64_t*>()[pg]); }
  Status make_page(int64_t pg) {
    if (page(pg).load(std::memory_order_relaxed) != nullptr) return Status();
    const size_t bytes = s_->page_words * 8;
    LEANEMB_ASSIGN_OR_RETURN(Allocation a, s_->alloc->allocate(bytes, Category::kWeights, 64));
    std::memset(a.data(), 0, bytes);
    page(pg).store(a.as<uint64_t>(), std::memory_order_release);
    s_->pages.push_back(std::move(a));
    s_->bytes.fetch_add(bytes, std::memory_order_relaxed);
    return Status();
  }

  std::unique_ptr<State> s_;
};

}  // namespace leanemb::tiered
