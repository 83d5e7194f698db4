// load_named, allocate_floats, StoredTensor.
#include "nn/tensor.h"

#include <unordered_map>

namespace leanemb::nn {

Status load_named(std::span<const NamedTensor> src, std::span<const NamedTarget> dst, std::string_view what) {
  std::unordered_map<std::string_view, const NamedTensor*> by_name;
  for (const NamedTensor& t : src) {
    if (!by_name.emplace(t.name, &t).second)
      return invalid_argument(std::string(what) + ": tensor '" + t.name + "' given twice");
  }
  for (const NamedTarget& d : dst) {
    auto it = by_name.find(d.name);
    if (it == by_name.end()) return invalid_argument(std::string(what) + ": tensor '" + d.name + "' is missing");
    if (it->second->values.size() != d.values.size())
      return invalid_argument(std::string(what) + ": tensor '" + d.name + "' has " +
                              std::to_string(it->second->values.size()) + " values, expected " +
                              std::to_string(d.values.size()));
  }
  if (src.size() != dst.size()) {
    for (const NamedTensor& t : src) {
      bool known = false;
      for (const NamedTarget& d : dst) known = known || d.name == t.name;
      if (!known) return invalid_argument(std::string(what) + ": unexpected tensor '" + t.name + "'");
    }
  }
  for (const NamedTarget& d : dst) {
    const auto& values = by_name[d.name]->values;
    std::copy(values.begin(), values.end(), d.values.begin());
  }
  return Status();
}

Result<Allocation> allocate_floats(Allocator* alloc, size_t count, Category category) {
  return alloc->allocate(count * sizeof(float), category);
}

Result<StoredTensor> StoredTensor::create(Allocator* alloc, int64_t numel, DType precision) {
  if (numel <= 0) return invalid_argument("activation buffer of " + std::to_string(numel) + " elements");
  StoredTensor t;
  LEANEMB_ASSIGN_OR_RETURN(t.buffer_, alloc->allocate(static_cast<size_t>(numel) * amp::precision_bytes(precision),
                                                      Category::kActivations));
  t.numel_ = numel;
  t.precision_ = precision;
  return t;
}

void StoredTensor::store(std::span<const float> x) {
  LEANEMB_DCHECK(static_cast<int64_t>(x.size()) == numel_, "StoredTensor::store size");
  amp::pack(x, precision_, buffer_.data());
}

void StoredTensor::load(std::span<float> out) const {
  LEANEMB_DCHECK(static_cast<int64_t>(out.size()) == numel_, "StoredTensor::load size");
  amp::unpack(buffer_.data(), precision_, out);
}

const float* StoredTensor::f32_data() const {
  return precision_ == DType::kF32 ? buffer_.as<const float>() : nullptr;
}

const uint16_t* StoredTensor::bf16_data() const {
  return precision_ == DType::kBF16 ? buffer_.as<const uint16_t>() : nullptr;
}

}  // namespace leanemb::nn
