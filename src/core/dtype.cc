#include "leanemb/dtype.h"

#include <array>
#include <string>

#include "core/enum_names.h"

namespace leanemb {

template <>
struct EnumNames<DType> {
  static constexpr std::string_view kWhat = "dtype";
  static constexpr EnumName<DType> kNames[] = {
      {DType::kF32, "fp32", "f32 float32 float"},
      {DType::kF16, "fp16", "f16 float16 half"},
      {DType::kBF16, "bf16", "bfloat16"},
      {DType::kInt8Rowwise, "int8", "int8_rowwise"},
      {DType::kInt8Blockwise, "int8", "int8_blockwise 8bit"},
      {DType::kFP8, "fp8", "fp8_e4m3 e4m3"},
      {DType::kQ8, "q8", "int8_scaled"},
      {DType::kInt4Blockwise, "int4", "int4_blockwise 4bit"},
  };
};

namespace {

constexpr std::array<DTypeTraits, kNumDTypes> kTraits = {{
    // The 1-byte trainable formats exist to make rows small: their strides keep the fp32 fields'
    // 4-byte alignment only (fp8 + 8-bit Adagrad at dim 16: 36 bytes, not 40). The others keep 8
    // (their layouts, and so their checkpoints' strides, are unchanged).
    {"fp32", 32, 0, true, 8, false},
    {"fp16", 16, 0, true, 8, false},
    {"bf16", 16, 0, true, 8, false},
    {"int8", 8, 8, false, 8, false},
    {"int8", 8, 0, false, 0, true},  // block scales: placed by the optimizer's row layout
    {"fp8", 8, 0, true, 4, false},
    {"q8", 8, 4, true, 4, false},    // the fp32 scale after the codes
    {"int4", 4, 0, false, 0, true},  // two codes per byte, block scales as int8's
}};

constexpr DType kRowDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8, DType::kFP8, DType::kInt8Rowwise};
constexpr DType kStateDTypes[] = {DType::kF32, DType::kBF16, DType::kInt8Blockwise, DType::kInt4Blockwise};
constexpr DType kPayloadDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8Rowwise};
constexpr DType kActivationDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

}  // namespace

const DTypeTraits& dtype_traits(DType t) { return kTraits[static_cast<size_t>(t)]; }

std::string_view dtype_name(DType t) { return enum_name(t); }

std::span<const DType> allowed_dtypes(DTypeUse use) {
  switch (use) {
    case DTypeUse::kRows: return kRowDTypes;
    case DTypeUse::kOptimizerState: return kStateDTypes;
    case DTypeUse::kPayload: return kPayloadDTypes;
    case DTypeUse::kActivations: return kActivationDTypes;
  }
  return {};
}

std::string_view dtype_use_name(DTypeUse use) {
  switch (use) {
    case DTypeUse::kRows: return "row dtype";
    case DTypeUse::kOptimizerState: return "optimizer state dtype";
    case DTypeUse::kPayload: return "payload dtype";
    case DTypeUse::kActivations: return "precision";
  }
  return "dtype";
}

bool dtype_allowed(DTypeUse use, DType t) {
  for (DType a : allowed_dtypes(use))
    if (a == t) return true;
  return false;
}

Status check_dtype(DTypeUse use, DType t) {
  if (dtype_allowed(use, t)) return Status::ok_status();
  // Both 8-bit formats are named "int8": say which one was refused.
  std::string name;
  if (static_cast<size_t>(t) >= kTraits.size()) name = "code " + std::to_string(static_cast<int>(t));
  else if (t == DType::kInt8Rowwise) name = "int8 (row-wise)";
  else if (t == DType::kInt8Blockwise) name = "int8 (block-wise)";
  else name = std::string(dtype_name(t));
  return invalid_argument(std::string(dtype_use_name(use)) + " " + name + " is not supported (expected " +
                          enum_name_list_in(allowed_dtypes(use)) + ")");
}

Result<DType> parse_dtype(std::string_view s, DTypeUse use) {
  return parse_enum_in(s, allowed_dtypes(use), dtype_use_name(use));
}

}  // namespace leanemb
