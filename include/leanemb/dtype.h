// Runtime element types of embedding rows and optimizer state, described by one traits table.
//
// kInt8Rowwise stores each row as `dim` uint8 codes followed by an fp32 scale and an fp32 bias
// (value = code * scale + bias), as FBGEMM's fused 8-bit rowwise format. Such tables are
// lookup-only in leanemb (frozen or inference); see EmbeddingCollection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "leanemb/status.h"

namespace leanemb {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kInt8Rowwise = 3 };
inline constexpr int kNumDTypes = 4;

struct DTypeTraits {
  std::string_view name;        // "fp32", "fp16", "bf16", "int8"
  size_t element_bytes;         // bytes per element of a row
  size_t row_overhead_bytes;    // bytes per row beyond dim * element_bytes (int8: scale + bias)
  bool trainable;               // whether rows of this dtype can be updated in place
};

const DTypeTraits& dtype_traits(DType t);
inline std::string_view dtype_name(DType t) { return dtype_traits(t).name; }
// Bytes of one row of `dim` elements, excluding padding.
inline size_t dtype_row_bytes(DType t, int64_t dim) {
  const auto& tr = dtype_traits(t);
  return static_cast<size_t>(dim) * tr.element_bytes + tr.row_overhead_bytes;
}
// Parses "fp32" | "fp16" | "bf16" | "int8" (also "f32", "float32", "float16", "bfloat16").
Result<DType> parse_dtype(std::string_view s);

}  // namespace leanemb
