// Precision of activations and dense compute under mixed precision (AMP), and the conversions
// that emulate bf16 / fp16 compute on a CPU.
//
// What "bf16" and "fp16" mean here (an emulation, not native 16-bit arithmetic): the values a
// layer feeds into a GEMM (inputs, weights, output gradients) are rounded to the 16-bit grid with
// round-to-nearest-even (src/core/half.h), the GEMM runs in fp32 on those exactly representable
// values (fp32 products and fp32 accumulation, as a tensor-core GEMM with fp32 accumulate), and
// its output is rounded to the 16-bit grid again. Activations saved for backward are stored in
// 16 bits (half the bytes of fp32). Master weights, weight gradients and optimizer state stay
// fp32. This reproduces the rounding of torch.autocast-style compute; it does not make the CPU
// any faster.
//
// fp16 overflows to +-Inf beyond 65504 (round to nearest), which is what a loss scaler detects.
//
// Native bf16 compute: where the CPU has AVX512_BF16, bf16 GEMMs run on bf16 operands with fp32
// accumulation (nn/bf16_gemm.h); the values rounded and stored are the same, the summation
// inside the GEMM differs (docs/nn.md, "bf16 compute").
//
// Ownership: functions only read and write caller buffers. Thread safety: all functions are
// pure; loops run on the calling thread (compiled for AVX-512, AVX2 and the baseline ISA, picked
// at run time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/half.h"
#include "leanemb/dtype.h"
#include "leanemb/status.h"

namespace leanemb::amp {

// The precision of activations is a DType of use DTypeUse::kActivations (kF32, kBF16, kF16):
// parse_dtype(s, DTypeUse::kActivations), dtype_name(p). Every function here REQUIRES
// dtype_allowed(DTypeUse::kActivations, p).

// Bytes of one stored element: 4 for kF32, 2 for kBF16 and kF16.
size_t precision_bytes(DType p);

// x[i] := the nearest value of p's grid (round to nearest even), kept in fp32. kF32: no-op.
// NaN stays NaN; fp16: |x| >= 65520 becomes +-Inf.
void round_to_precision(std::span<float> x, DType p);
// x rounded to p's grid in fp32 (the value round_to_precision stores), inline over core/half.h's
// branch-free conversions, so that a kernel's own loop over a few values vectorizes it in the
// kernel's ISA (no call per array). NaN stays a quiet NaN.
inline float rounded_value(float x, DType p) {
  if (p == DType::kBF16) return bf16_to_f32(f32_to_bf16_rne(x));
  if (p == DType::kF16) return f16_to_f32(f32_to_f16_rne(x));
  return x;
}

// out[i] := x[i] rounded to p (a copy for kF32). REQUIRES: out holds x.size() floats; it may be
// x itself but must not overlap it otherwise.
void copy_rounded(std::span<const float> x, DType p, float* out);

// Stores x in p's storage format: out holds x.size() * precision_bytes(p) bytes (fp32 values,
// or uint16 bf16/fp16 bit patterns, rounded to nearest even).
// REQUIRES: out is suitably aligned (4 bytes for kF32, 2 otherwise).
void pack(std::span<const float> x, DType p, void* out);
// The inverse of pack: out[i] = the value stored at element i of `in` (exact for 16-bit formats).
void unpack(const void* in, DType p, std::span<float> out);

}  // namespace leanemb::amp
