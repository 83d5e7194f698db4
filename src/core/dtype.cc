#include "leanemb/dtype.h"

#include <array>
#include <string>

namespace leanemb {

namespace {
constexpr std::array<DTypeTraits, kNumDTypes> kTraits = {{
    {"fp32", 4, 0, true},
    {"fp16", 2, 0, true},
    {"bf16", 2, 0, true},
    {"int8", 1, 8, false},
}};
}  // namespace

const DTypeTraits& dtype_traits(DType t) { return kTraits[static_cast<size_t>(t)]; }

Result<DType> parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "f32" || s == "float32" || s == "float") return DType::kF32;
  if (s == "fp16" || s == "f16" || s == "float16" || s == "half") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "int8" || s == "int8_rowwise") return DType::kInt8Rowwise;
  return invalid_argument("unknown dtype '" + std::string(s) + "' (expected fp32, fp16, bf16 or int8)");
}

}  // namespace leanemb
