// Wire payloads: blocks of fp32 rows [n, dim] encoded for all_to_all_v in a smaller dtype.
//
//   fp32  4 * dim bytes per row, the bytes of the floats: exact (bit for bit, NaN payloads too)
//   bf16  2 * dim, round to nearest even (core/half.h)
//   fp16  2 * dim, round to nearest even; |x| >= 65520 becomes +-Inf
//   int8  8 + dim: per row an fp32 scale and an fp32 offset (the row's minimum), then dim
//         codes q = round((x - offset) / scale) with scale = (max - min) / 255; x ~ q * scale + offset
//
// Error bounds of decode(encode(x)) for finite x (tested in dist_test.cc; u = unit roundoff):
//   fp32  0
//   bf16  |err| <= 2^-8 |x| for |x| >= 2^-126 (u = 2^-8), <= 2^-134 below (fp32 subnormals
//         keep bf16's 7-bit mantissa spacing 2^-133); |x| > 3.3961e38 becomes +-Inf
//   fp16  |err| <= 2^-11 |x| for 2^-14 <= |x| < 65520 (u = 2^-11), <= 2^-25 below (the half
//         subnormal spacing is 2^-24); |x| >= 65520 becomes +-Inf
//   int8  |err| <= (max - min) / 510 + 2^-20 * max(|min|, |max|) per row (half a quantization
//         step, plus fp32 rounding in the decode); a constant row is exact
// Non-finite input: fp32/bf16/fp16 keep Inf and NaN (NaN as a quiet NaN); an int8 row holding
// a NaN or Inf (or whose max - min overflows fp32) decodes to all NaN, so a found-inf check
// after decoding still catches it.
// Rows are packed back to back with no alignment; decode reads them with memcpy.
//
// Functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "leanemb/status.h"
#include "leanemb/tables.h"

namespace leanemb::dist {

// Payload dtypes are the DTypes of DTypeUse::kPayload (leanemb/dtype.h): kF32, kF16, kBF16 and
// kInt8Rowwise ("int8", the wire layout above).
using ::leanemb::DType;

// Encoded bytes of one row of `dim` values. REQUIRES: dim >= 0.
size_t payload_bytes_per_row(DType t, int64_t dim);

// in: [n, dim] row-major fp32, n = in.size() / dim; out: [n * payload_bytes_per_row(t, dim)].
// Errors: InvalidArgument (t not a payload dtype, dim < 1, in.size() not a multiple of dim, out of the wrong size).
Status encode_rows(DType t, int64_t dim, std::span<const float> in, std::span<uint8_t> out);
// in: [n * payload_bytes_per_row(t, dim)] as written by encode_rows; out: [n, dim] fp32.
// Errors: InvalidArgument (sizes).
Status decode_rows(DType t, int64_t dim, std::span<const uint8_t> in, std::span<float> out);

}  // namespace leanemb::dist
