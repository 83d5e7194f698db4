// PresenceBitmap: one bit per row, "this row was written to the store at least once".
//
// Ownership: the words come from an Allocator (category weights: the bitmap is part of the
// stored table) and are zeroed at creation (1 bit per row: 1/(8 * row_bytes) of the rows).
// Thread safety: test() and set() are atomic per word, so a reader may test row a while a
// writer sets row b of the same word (set is a release, test an acquire: a reader that sees the
// bit also sees the row bytes written before it).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "leanemb/memory.h"
#include "leanemb/status.h"
#include "tiered/sizes.h"

namespace leanemb::tiered {

class PresenceBitmap {
 public:
  PresenceBitmap() = default;

  // Errors: ResourceExhausted from the allocator.
  static Result<PresenceBitmap> create(int64_t num_rows, Allocator* alloc) {
    PresenceBitmap b;
    const size_t bytes = presence_bitmap_bytes(num_rows);
    if (bytes == 0) return b;
    LEANEMB_ASSIGN_OR_RETURN(b.mem_, alloc->allocate(bytes, Category::kWeights, 64));
    std::memset(b.mem_.data(), 0, bytes);
    return b;
  }

  bool test(int64_t row) const {
    return (std::atomic_ref<uint64_t>(word(row)).load(std::memory_order_acquire) >> (row & 63)) & 1u;
  }
  void set(int64_t row) {
    std::atomic_ref<uint64_t>(word(row)).fetch_or(uint64_t{1} << (row & 63), std::memory_order_release);
  }
  size_t bytes() const { return mem_.size_bytes(); }

 private:
  uint64_t& word(int64_t row) const { return mem_.as<uint64_t>()[row >> 6]; }
  Allocation mem_;
};

}  // namespace leanemb::tiered
