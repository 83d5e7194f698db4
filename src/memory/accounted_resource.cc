// AccountedResource: std::pmr over a leanemb Allocator. See accounted_resource.h.
#include "memory/accounted_resource.h"

#include <algorithm>
#include <new>

namespace leanemb {

void* AccountedResource::do_allocate(size_t bytes, size_t alignment) {
  auto a = allocator_->allocate(std::max<size_t>(bytes, 1), category_, std::max<size_t>(alignment, 16));
  if (!a.ok()) throw std::bad_alloc();
  void* p = a.value().data();
  live_.emplace(p, std::move(a).value());
  return p;
}

void AccountedResource::do_deallocate(void* p, size_t /*bytes*/, size_t /*alignment*/) { live_.erase(p); }

}  // namespace leanemb
