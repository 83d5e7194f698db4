// Runtime element types, one enum for every use, described by one traits table.
//
// DType is the project's only element-type enum: embedding rows, per-element optimizer state,
// rows and gradients on the wire between ranks, and activations under mixed precision (AMP) all
// name their type with it. Each use accepts a subset (allowed_dtypes):
//
//   use (DTypeUse)    allowed                                  config key / option
//   kRows             fp32, fp16, bf16, q8, fp8, int8 (kInt8Rowwise) embedding.dtype, TableOptions::dtype
//   kOptimizerState   fp32, bf16, int8 (kInt8Blockwise)         embedding.state_dtype, OptimizerOptions
//   kPayload          fp32, fp16, bf16, int8 (kInt8Rowwise)     dist.forward_payload / backward_payload
//   kActivations      fp32, fp16, bf16                          train.precision
//
// The formats:
//   kF32            IEEE binary32.
//   kF16            IEEE binary16 (rows: stochastic rounding on update; wire and AMP: nearest even).
//   kBF16           bfloat16, the top half of a binary32 (rounding as kF16).
//   kInt8Rowwise    per row uint8 codes with an fp32 scale and an fp32 bias (value = code * scale +
//                   bias). Rows store `dim` codes then scale, bias, as FBGEMM's fused 8-bit rowwise
//                   format; such tables are lookup-only. On the wire (dist/payload.h) the scale and
//                   offset come first, then the codes.
//   kFP8            rows only: 8-bit floats, E4M3 with exponent bias 12 (core/fp8.h: +-14, normals
//                   from 2^-11, subnormal steps of 2^-14), stochastic rounding on update; one byte
//                   per element and nothing per row.
//   kQ8             rows only: per row `dim` signed int8 codes then one fp32 scale (absmax / 127;
//                   value = code * scale), rewritten whole with stochastic rounding on update.
//   kInt8Blockwise  optimizer state only: blocks of kQuantBlockSize codes of a dynamic-exponent map
//                   with one fp32 absmax per block (8-bit optimizers).
// Both 8-bit formats are named "int8": the use decides which one the name means.
//
// The numeric values are the row dtype's long-standing codes (kF32..kInt8Rowwise = 0..3); files
// and messages record dtypes by name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "leanemb/status.h"

namespace leanemb {

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kInt8Rowwise = 3, kInt8Blockwise = 4, kFP8 = 5, kQ8 = 6,
                              kInt4Blockwise = 7 };
inline constexpr int kNumDTypes = 8;

// What a DType is used for; each use allows a subset of the dtypes (table above).
enum class DTypeUse : uint8_t { kRows, kOptimizerState, kPayload, kActivations };

struct DTypeTraits {
  std::string_view name;        // "fp32", "fp16", "bf16", "int8", "fp8", "q8"
  size_t element_bits;          // bits per element (int8 formats: per code; int4: two codes per byte)
  size_t row_overhead_bytes;    // bytes per row beyond the elements' bytes (int8 rowwise: scale + bias)
  bool trainable;               // whether rows of this dtype can be updated in place
  size_t row_alignment_bytes;   // fat-row stride alignment of tables with rows of this dtype (0: not a row dtype)
  bool block_scales;            // state formats with an fp32 scale per kQuantBlockSize elements (int8, int4)
};

const DTypeTraits& dtype_traits(DType t);
// "fp32" | "fp16" | "bf16" | "int8" (kInt8Rowwise and kInt8Blockwise alike).
std::string_view dtype_name(DType t);
// Bytes of n elements packed (a partial last byte counts whole), without scales or padding.
inline size_t dtype_array_bytes(DType t, int64_t n) {
  return (static_cast<size_t>(n) * dtype_traits(t).element_bits + 7) / 8;
}
// Bytes of one row of `dim` elements, excluding padding.
inline size_t dtype_row_bytes(DType t, int64_t dim) {
  return dtype_array_bytes(t, dim) + dtype_traits(t).row_overhead_bytes;
}

// The dtypes `use` accepts, in the order of the table above.
std::span<const DType> allowed_dtypes(DTypeUse use);
// "row dtype" | "optimizer state dtype" | "payload dtype" | "precision" (for messages).
std::string_view dtype_use_name(DTypeUse use);
bool dtype_allowed(DTypeUse use, DType t);
// OK when `use` accepts t. Errors: InvalidArgument naming the use, the dtype and the allowed ones,
// e.g. "optimizer state dtype fp16 is not supported (expected fp32, bf16, int8 or int4)".
Status check_dtype(DTypeUse use, DType t);
// Parses a dtype of `use`; every use accepts the same spellings of a format:
//   fp32: "fp32", "f32", "float32", "float"   fp16: "fp16", "f16", "float16", "half"
//   bf16: "bf16", "bfloat16"                   int8: "int8", and "int8_rowwise" (rows, payload)
//                                                    or "int8_blockwise", "8bit" (state)
//   fp8: "fp8", "fp8_e4m3", "e4m3" (rows)      q8: "q8", "int8_scaled" (rows)
// Errors: InvalidArgument "unknown <use> 's' (expected ...)" listing the use's names.
Result<DType> parse_dtype(std::string_view s, DTypeUse use);

}  // namespace leanemb
