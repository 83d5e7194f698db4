// Native bf16 GEMM: bf16 operands, fp32 accumulation, on AVX-512 BF16 (VDPBF16PS), with the
// scalar reference that defines its arithmetic (the test oracle), packing from fp32, and the
// run-time switch between this path and the fp32 emulation (amp/precision.h).
//
// Operands are packed once per call from fp32 (rounded to bf16, round to nearest even):
//   A: bf16 [m, kp] row-major, kp = k rounded up to even, the padding column zero;
//   B: k-pairs [kp / 2, np] of 32-bit words, np = n rounded up to 16, padding zero:
//      word (p, j) = bf16(B[2p][j]) | bf16(B[2p + 1][j]) << 16.
//
// Contract (what VDPBF16PS computes, measured on this Zen4 over 4.8M random lanes including
// subnormals, infinities and NaN: zero mismatches; Intel's pseudocode says the same). With
// daz(x) = x with subnormals as signed zero, ftz(x) the same for results, and every bf16 input
// daz'd, each output C[i][j] is one chain over the k-pairs p = 0 .. kp/2 - 1 in order:
//     t   = ftz(fma(A[i][2p+1], B[2p+1][j], acc))     (the odd element first; products exact,
//     acc = ftz(fma(A[i][2p],   B[2p][j],   t))        one rounding per addition, RNE)
// starting from acc = +0; then C[i][j] = acc, or C[i][j] = C[i][j] + acc (fp32, no flushing)
// with `accumulate`. An element's chain does not depend on tiling or threads, so results are
// bit-identical for every thread count and equal to bf16_gemm_reference().
//
// AMX contract (CPUs with AMX-BF16 whose OS grants the tile state; bf16_amx_enabled()): for
// rows in whole groups of 16 (i < m rounded down to 16) and k >= 32, the k-pairs in chunks
// of 16 are added chunk after chunk by TDPBF16PS, starting from +0, a last partial chunk padded
// with zero pairs; inside a chunk the order and rounding are the hardware's (on the Xeon
// measured here, not the chain above: over 512,000 outputs of 16 k-pairs, 8.5% differed from it
// in the last bits with operands in [-1, 1] and 56% with their exponents spread over 2^8, and
// the mean error to the exact sum was smaller); then the epilogue (Bf16Epilogue, below). Each
// output is within (kp + 4) * 2^-24 * sum |A B products| of the exact sum of its daz'd products
// (tested). Other rows and k < 32 follow the chain bit for bit.
// The blocks do not depend on threads: results are bit-identical for every thread count on a
// given CPU.
//
// Dispatch: bf16_native_enabled() is true when the CPU has AVX512_BF16 (checked at run time)
// and set_bf16_native_enabled(false) was not called; Linear and Mlp use this path for
// DType::kBF16 then, and the emulation (round, then fp32 sgemm) otherwise. The two paths
// differ in the last bits (different summation), each deterministic.
//
// Thread safety: the GEMM and packing functions are pure on caller buffers (bf16_gemm runs its
// tiles with parallel_for, core/parallel.h); the switch is a process-wide atomic for tests and
// benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace leanemb::nn {

// The CPU executes AVX512_BF16 (and AVX512F/BW/VL) and this build has the kernels.
bool bf16_native_supported();
// bf16_native_supported() and not switched off.
bool bf16_native_enabled();
// Switches the native path on (where supported) or off (the emulation then runs everywhere).
void set_bf16_native_enabled(bool enabled);
// The CPU has AMX-BF16 (tile registers) and the OS lets this process use them (see the AMX
// contract above); enabled: supported and not switched off. The switch picks between the tile
// kernels and the VDPBF16PS kernels inside the native path (tests, benchmarks).
bool bf16_amx_supported();
bool bf16_amx_enabled();
void set_bf16_amx_enabled(bool enabled);

inline int64_t bf16_pad_k(int64_t k) { return (k + 1) / 2 * 2; }
inline int64_t bf16_pad_n(int64_t n) { return (n + 15) / 16 * 16; }
// Packed sizes in bytes (see above); callers allocate at least this much.
inline size_t bf16_packed_a_bytes(int64_t m, int64_t k) { return static_cast<size_t>(m * bf16_pad_k(k)) * 2; }
inline size_t bf16_packed_b_bytes(int64_t k, int64_t n) {
  return static_cast<size_t>(bf16_pad_k(k) / 2 * bf16_pad_n(n)) * 4;
}

// A [m, k] with A[i][j] = src[i * row_stride + j * col_stride], packed into dst (see above).
void bf16_pack_a(const float* src, int64_t m, int64_t k, int64_t row_stride, int64_t col_stride, uint16_t* dst);
// B [k, n] with B[i][j] = src[i * row_stride + j * col_stride], packed into dst (see above).
void bf16_pack_b(const float* src, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride, uint32_t* dst);

// B [k, n] from bf16 bit patterns: B[i][j] = bf16 src[i * row_stride + j] (no rounding).
void bf16_pack_b_bf16(const uint16_t* src, int64_t k, int64_t n, int64_t row_stride, uint32_t* dst);

// What the GEMM does with each output's fp32 sum s (column j): C = s; C = C + s (accumulate); or,
// not accumulating, C = s + bias[j] (fp32 add) when bias is set, then rounded to the bf16 grid in
// fp32 (round to nearest even, NaN kept quiet: bf16_to_f32(f32_to_bf16_rne(.))) when round_bf16
// is set. The epilogue runs on the sums in registers (no second pass over C).
struct Bf16Epilogue {
  bool accumulate = false;
  const float* bias = nullptr;  // [n]; only without accumulate
  bool round_bf16 = false;      // only without accumulate
};

// C [m, n] (row stride ldc >= n) = or += A B from packed operands (contract above).
// pseudocode: for each tile of rows x 16..64 columns of C (in parallel), for each k-pair:
//               acc[rows][cols] = vdpbf16ps(acc, broadcast(A[row] pair), B pair row)
//             with AMX, for each 32 x 32 block of C (in parallel): four 16 x 16 fp32 tiles; for
//               each chunk of 16 k-pairs (the last zero-padded): tdpbf16ps(C tile, A tile, B tile)
//             then the epilogue on each vector of sums.
// Without native support it runs the reference. REQUIRES: m, n, k >= 1; an epilogue with
// accumulate has no bias and no rounding.
void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint32_t* b, float* c, int64_t ldc,
               const Bf16Epilogue& epilogue);
void bf16_gemm_reference(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint32_t* b, float* c,
                         int64_t ldc, const Bf16Epilogue& epilogue);
inline void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint32_t* b, float* c, int64_t ldc,
                      bool accumulate) {
  bf16_gemm(m, n, k, a, b, c, ldc, Bf16Epilogue{.accumulate = accumulate});
}
inline void bf16_gemm_reference(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint32_t* b, float* c,
                                int64_t ldc, bool accumulate) {
  bf16_gemm_reference(m, n, k, a, b, c, ldc, Bf16Epilogue{.accumulate = accumulate});
}

}  // namespace leanemb::nn
