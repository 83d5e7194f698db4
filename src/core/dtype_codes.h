// Numeric codes that files recorded before the project had one DType.
//
// DType's own values (kF32 = 0, kF16 = 1, kBF16 = 2, kInt8Rowwise = 3) are the row dtype's codes,
// unchanged. The optimizer state dtype was a separate enum whose values a file format still
// records (table_io's header: u32 state_dtype); these functions map it both ways, so files
// written before stay readable and files written now stay byte-identical:
//   state code 0 = fp32, 1 = bf16, 2 = int8 block-wise
// The other former enums (wire payload, AMP precision) were never written as numbers: configs,
// manifests and digests record their names (dtype_name), which are unchanged.
#pragma once

#include <cstdint>
#include <string>

#include "leanemb/dtype.h"
#include "leanemb/status.h"

namespace leanemb {

// REQUIRES: dtype_allowed(DTypeUse::kOptimizerState, t).
constexpr uint32_t state_dtype_code(DType t) {
  switch (t) {
    case DType::kBF16: return 1;
    case DType::kInt8Blockwise: return 2;
    default: return 0;
  }
}

// Errors: InvalidArgument for a code that no state dtype had.
inline Result<DType> state_dtype_from_code(uint32_t code) {
  switch (code) {
    case 0: return DType::kF32;
    case 1: return DType::kBF16;
    case 2: return DType::kInt8Blockwise;
  }
  return invalid_argument("unknown optimizer state dtype code " + std::to_string(code));
}

}  // namespace leanemb
