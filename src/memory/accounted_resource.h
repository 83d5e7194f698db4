// AccountedResource: a std::pmr::memory_resource whose every byte comes from a leanemb Allocator
// under one category, so that standard containers (std::pmr::vector, ...) used as scratch are
// counted in MemoryStats like every other allocation (and obey the tier's budget).
//
//   AccountedResource res(memory->allocator_for(Category::kCommBuffers), Category::kCommBuffers);
//   std::pmr::vector<uint8_t> buf(&res);   // its growth is allocated and freed through `res`
//
// An allocation the Allocator refuses (budget, system) throws std::bad_alloc, as a
// memory_resource must; callers that report Status catch it at their API boundary. The resource
// must outlive every container that uses it. Thread safety: one thread at a time (the map of
// live allocations is not locked).
#pragma once

#include <memory_resource>
#include <unordered_map>

#include "leanemb/memory.h"

namespace leanemb {

class AccountedResource final : public std::pmr::memory_resource {
 public:
  AccountedResource(Allocator* allocator, Category category) : allocator_(allocator), category_(category) {}
  AccountedResource(const AccountedResource&) = delete;
  AccountedResource& operator=(const AccountedResource&) = delete;

  Allocator* allocator() const { return allocator_; }
  Category category() const { return category_; }

 private:
  void* do_allocate(size_t bytes, size_t alignment) override;
  void do_deallocate(void* p, size_t bytes, size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  Allocator* allocator_;
  Category category_;
  std::unordered_map<void*, Allocation> live_;
};

}  // namespace leanemb
