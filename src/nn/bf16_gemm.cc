// Native bf16 GEMM on AVX-512 BF16: register-blocked VDPBF16PS micro-kernels, packing, the
// scalar reference and the run-time switch (contract in the header).
//
// Invariant: every output's k-pairs are folded in order by one accumulator lane, whatever the
// tile, so tiling and threads never change a bit. Padding (the zero k column of an odd k, zero
// columns up to 16) adds fma(0, x, acc) steps identically in kernel and reference and is never
// stored.
#include "nn/bf16_gemm.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define LEANEMB_HAVE_BF16_KERNELS 1
#define LEANEMB_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define LEANEMB_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#endif

#include "core/half.h"
#include "core/parallel.h"
#include "kernels/isa_builds.h"
#include "leanemb/status.h"

namespace leanemb::nn {
namespace {

std::atomic<bool> g_native_enabled{true};
std::atomic<bool> g_amx_enabled{true};

constexpr int64_t kRowBlock = 48;   // rows of C per task (a multiple of both micro-kernel heights)
constexpr int64_t kColBlock = 64;   // columns of C per task: up to 4 vectors of 16

float daz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
float bf16_in(uint16_t h) { return daz(bf16_to_f32(h)); }

// The epilogue of the scalar reference: C = s, C + s, or round(s + bias) (bias optional).
void finish_scalar(float s, const Bf16Epilogue& e, int64_t col, float* out) {
  if (e.accumulate) {
    *out = *out + s;
    return;
  }
  if (e.bias != nullptr) s = s + e.bias[col];
  if (e.round_bf16) s = bf16_to_f32(f32_to_bf16_rne(s));
  *out = s;
}

#ifdef LEANEMB_HAVE_BF16_KERNELS
// x rounded to the bf16 grid in fp32, to nearest even, NaN kept quiet: the bits of
// bf16_to_f32(f32_to_bf16_rne(x)) per lane.
LEANEMB_TARGET_BF16 inline __m512 round_bf16_v(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  // (the maskz form: GCC 12 warns of an uninitialized pass-through operand in the plain one here)
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), hi);
  const __m512i quiet = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), hi);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                 _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

// Stores one vector of sums (m: its valid lanes) at dst, columns col.. of C, per the epilogue.
LEANEMB_TARGET_BF16 inline void finish_vector(__m512 x, const Bf16Epilogue& e, int64_t col, __mmask16 m, float* dst) {
  if (e.accumulate) {
    x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst), x);
  } else {
    if (e.bias != nullptr) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, e.bias + col));
    if (e.round_bf16) x = round_bf16_v(x);
  }
  _mm512_mask_storeu_ps(dst, m, x);
}

// C rows [0, MR) x vectors [0, NV) of 16 columns (ncols valid) from `pairs` k-pairs.
template <int MR, int NV>
LEANEMB_TARGET_BF16 void micro_kernel(int64_t pairs, const uint16_t* a, int64_t lda, const uint32_t* b, int64_t ldb,
                                      float* c, int64_t ldc, int64_t ncols, const Bf16Epilogue& e, int64_t col0) {
  __m512 acc[MR][NV];
  const int32_t* arow[MR];
  for (int r = 0; r < MR; ++r) {
    arow[r] = reinterpret_cast<const int32_t*>(a + r * lda);
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + p * ldb + 16 * v);
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(arow[r][p]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  for (int v = 0; v < NV; ++v) {
    const int64_t left = ncols - 16 * v;
    const __mmask16 m = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
    for (int r = 0; r < MR; ++r) finish_vector(acc[r][v], e, col0 + 16 * v, m, c + r * ldc + 16 * v);
  }
}

using MicroKernel = void (*)(int64_t, const uint16_t*, int64_t, const uint32_t*, int64_t, float*, int64_t, int64_t,
                             const Bf16Epilogue&, int64_t);

// Heights per width: 6 rows of 4 vectors or 8 rows of 1..3 (24 accumulators at most, of 32 registers).
constexpr int max_rows(int nv) { return nv == 4 ? 6 : 8; }

template <int NV, int... R>
constexpr auto kernels_of(std::integer_sequence<int, R...>) {
  return std::array<MicroKernel, sizeof...(R)>{&micro_kernel<R + 1, NV>...};
}
template <int NV>
MicroKernel kernel_for(int rows) {
  static constexpr auto table = kernels_of<NV>(std::make_integer_sequence<int, max_rows(NV)>{});
  return table[static_cast<size_t>(rows - 1)];
}
MicroKernel kernel_for(int nv, int rows) {
  switch (nv) {
    case 1: return kernel_for<1>(rows);
    case 2: return kernel_for<2>(rows);
    case 3: return kernel_for<3>(rows);
    default: return kernel_for<4>(rows);
  }
}

// Rows [r0, r1) x columns [c0, c0 + 64) of C.
void gemm_tile(int64_t r0, int64_t r1, int64_t c0, int64_t n, int64_t pairs, const uint16_t* a, const uint32_t* b,
               float* c, int64_t ldc, const Bf16Epilogue& e) {
  const int64_t lda = 2 * pairs, ldb = bf16_pad_n(n);
  const int64_t ncols = std::min(kColBlock, n - c0);
  const int nv = static_cast<int>((ncols + 15) / 16);
  const int64_t mr = max_rows(nv);
  for (int64_t r = r0; r < r1; r += mr) {
    const int rows = static_cast<int>(std::min(mr, r1 - r));
    kernel_for(nv, rows)(pairs, a + r * lda, lda, b + c0, ldb, c + r * ldc + c0, ldc, ncols, e, c0);
  }
}

// ---- AMX (tile registers; Sapphire Rapids and later) ------------------------------------------
// A block of C of 16 * MA rows x 16 * NB columns: tiles 0..3 hold C (C[i][j] in tile 2 i + j),
// 4..5 the A tiles (16 rows x 16 k-pairs), 6..7 the B tiles (16 k-pairs x 16 columns; the packed B
// is already the pair-interleaved layout the tiles load). Every tile is 16 rows of 64 bytes.
constexpr int64_t kAmxPairs = 16;  // k-pairs per TDPBF16PS

struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// GCC 12's tile intrinsics are asm statements that take only the address of the memory they read
// or write (ldtilecfg: the first 8 bytes), so stores to a local buffer before a tile load, and
// loads after a tile store, need a compiler barrier to stay where they are.
inline void memory_barrier() { asm volatile("" ::: "memory"); }

LEANEMB_TARGET_AMX void amx_load_config() {
  AmxConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  memory_barrier();
  _tile_loadconfig(&cfg);
}

// One chunk of 16 k-pairs into the C tiles: A rows at a0 (and a1 for the second 16 rows), B pairs
// at b0 (and b1 for the second 16 columns). (A function, not a lambda: clang does not give a
// lambda its enclosing function's target features.)
template <int MA, int NB>
LEANEMB_TARGET_AMX inline void amx_chunk(const void* a0, const void* a1, int64_t a_stride, const void* b0, const void* b1,
                                         int64_t b_stride) {
  _tile_loadd(4, a0, a_stride);
  _tile_loadd(6, b0, b_stride);
  if (NB > 1) _tile_loadd(7, b1, b_stride);
  if (MA > 1) _tile_loadd(5, a1, a_stride);
  _tile_dpbf16ps(0, 4, 6);
  if (NB > 1) _tile_dpbf16ps(1, 4, 7);
  if (MA > 1) _tile_dpbf16ps(2, 5, 6);
  if (MA > 1 && NB > 1) _tile_dpbf16ps(3, 5, 7);
}

// The block's k-pairs in chunks of 16 on the tiles (a last partial chunk from zero-padded copies
// of its A rows and B pairs: zero products), stored to acc [16 MA][32] (row stride 32 floats),
// then C = or += acc per the epilogue.
template <int MA, int NB>
LEANEMB_TARGET_AMX void amx_block(int64_t pairs, const uint16_t* a, int64_t lda, const uint32_t* b, int64_t ldb,
                                  float* c, int64_t ldc, int64_t ncols, const Bf16Epilogue& e, int64_t col0) {
  const int64_t full = pairs / kAmxPairs, rest = pairs % kAmxPairs;
  _tile_zero(0);
  if (NB > 1) _tile_zero(1);
  if (MA > 1) _tile_zero(2);
  if (MA > 1 && NB > 1) _tile_zero(3);
  for (int64_t q = 0; q < full; ++q) {
    const uint16_t* aq = a + q * 2 * kAmxPairs;
    const uint32_t* bq = b + q * kAmxPairs * ldb;
    amx_chunk<MA, NB>(aq, aq + 16 * lda, lda * 2, bq, bq + 16, ldb * 4);
  }
  if (rest > 0) {
    alignas(64) uint32_t at[16 * MA][kAmxPairs] = {};  // A rows x the chunk's pairs
    alignas(64) uint32_t bt[kAmxPairs][32] = {};       // the chunk's pairs x 32 columns
    const int64_t p0 = full * kAmxPairs;
    for (int r = 0; r < 16 * MA; ++r)
      std::memcpy(at[r], reinterpret_cast<const uint32_t*>(a + r * lda) + p0, static_cast<size_t>(rest) * 4);
    for (int64_t p = 0; p < rest; ++p) std::memcpy(bt[p], b + (p0 + p) * ldb, static_cast<size_t>(16 * NB) * 4);
    memory_barrier();
    amx_chunk<MA, NB>(at[0], at[MA > 1 ? 16 : 0], 64, &bt[0][0], &bt[0][16], 128);
  }
  alignas(64) float acc[16 * MA][32];
  _tile_stored(0, &acc[0][0], 128);
  if (NB > 1) _tile_stored(1, &acc[0][16], 128);
  if (MA > 1) _tile_stored(2, &acc[16][0], 128);
  if (MA > 1 && NB > 1) _tile_stored(3, &acc[16][16], 128);
  memory_barrier();
  for (int r = 0; r < 16 * MA; ++r) {
    for (int v = 0; v < NB; ++v) {
      const int64_t left = ncols - 16 * v;
      if (left <= 0) break;
      const __mmask16 m = left >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
      finish_vector(_mm512_load_ps(&acc[r][16 * v]), e, col0 + 16 * v, m, c + r * ldc + 16 * v);
    }
  }
}

// Tasks of 32 x 32 blocks over the rows in whole groups of 16 (m16 = m rounded down to 16); a
// task configures the tiles, runs its blocks and releases them. The rows past m16 run on the
// VDPBF16PS kernels.
LEANEMB_TARGET_AMX void amx_blocks(int64_t t0, int64_t t1, int64_t col_blocks, int64_t m16, int64_t n, int64_t pairs,
                                   const uint16_t* a, const uint32_t* b, float* c, int64_t ldc, const Bf16Epilogue& e) {
  amx_load_config();
  memory_barrier();  // the packed operands are complete before the first tile load
  const int64_t lda = 2 * pairs, ldb = bf16_pad_n(n);
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t r = t / col_blocks * 32, col = t % col_blocks * 32;
    const int64_t ncols = std::min<int64_t>(32, n - col);
    const bool two_rows = r + 32 <= m16, two_cols = ncols > 16;
    const uint16_t* ab = a + r * lda;
    const uint32_t* bb = b + col;
    float* cb = c + r * ldc + col;
    if (two_rows && two_cols) amx_block<2, 2>(pairs, ab, lda, bb, ldb, cb, ldc, ncols, e, col);
    else if (two_rows) amx_block<2, 1>(pairs, ab, lda, bb, ldb, cb, ldc, ncols, e, col);
    else if (two_cols) amx_block<1, 2>(pairs, ab, lda, bb, ldb, cb, ldc, ncols, e, col);
    else amx_block<1, 1>(pairs, ab, lda, bb, ldb, cb, ldc, ncols, e, col);
  }
  _tile_release();
}

// The CPU has AMX-BF16 and the kernel lets this process use the tile data (Linux asks each
// process to request it once: arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA).
bool amx_usable() {
  static const bool ok = [] {
    // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE (__builtin_cpu_supports does not know
    // these names in clang 14).
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & (1u << 22)) == 0 || (edx & (1u << 24)) == 0) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}
#endif

}  // namespace

bool bf16_native_supported() {
#ifdef LEANEMB_HAVE_BF16_KERNELS
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return ok;
#else
  return false;
#endif
}

bool bf16_native_enabled() { return bf16_native_supported() && g_native_enabled.load(std::memory_order_relaxed); }
void set_bf16_native_enabled(bool enabled) { g_native_enabled.store(enabled, std::memory_order_relaxed); }

bool bf16_amx_supported() {
#ifdef LEANEMB_HAVE_BF16_KERNELS
  return bf16_native_supported() && amx_usable();
#else
  return false;
#endif
}
bool bf16_amx_enabled() { return bf16_amx_supported() && g_amx_enabled.load(std::memory_order_relaxed); }
void set_bf16_amx_enabled(bool enabled) { g_amx_enabled.store(enabled, std::memory_order_relaxed); }

#ifdef LEANEMB_HAVE_BF16_KERNELS
// GCC 12's AVX-512 intrinsics (unpack, shuffle, shift) pass an undefined vector as their unused
// merge operand, which -Wmaybe-uninitialized reports once the vectors live in an array.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace {

// The 16 x 16 transpose of 32-bit lanes: afterwards v[r] lane c = the old v[c] lane r.
LEANEMB_TARGET_BF16 inline void transpose16x16_epi32(__m512i v[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Each 128-bit lane q of v[i] now holds rows 4q.. of a 4 x 4 block; the two shuffles gather
  // the blocks across lanes.
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_i32x4(v[h + i], v[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(v[h + i], v[h + i + 4], 0xdd);
    }
  for (int i = 0; i < 8; ++i) {
    v[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    v[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

// bf16_pack_a's transpose case (A[i][j] = src[j * cs + i]) for rows [0, m16) and columns
// [0, k32) (multiples of 16 and 32): per block of 16 rows and 32 columns, 32 column loads of 16
// floats, rounded as f32_to_bf16_rne (round_bf16_v: the same bits), paired into 32-bit lanes
// (column 2p low, 2p + 1 high), transposed, and stored as 16 row pieces of 64 bytes.
LEANEMB_TARGET_BF16 void pack_a_transposed_v(const float* src, int64_t m16, int64_t k32, int64_t cs, int64_t kp,
                                            uint16_t* dst) {
  const __m512i lo_half = _mm512_set1_epi32(0xffff);
  for (int64_t i0 = 0; i0 < m16; i0 += 16)
    for (int64_t j0 = 0; j0 < k32; j0 += 32) {
      __m512i v[16];
      for (int p = 0; p < 16; ++p) {
        const float* s = src + (j0 + 2 * p) * cs + i0;
        const __m512i lo = _mm512_castps_si512(round_bf16_v(_mm512_loadu_ps(s)));
        const __m512i hi = _mm512_castps_si512(round_bf16_v(_mm512_loadu_ps(s + cs)));
        v[p] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(lo, 16), lo_half), hi);
      }
      transpose16x16_epi32(v);
      for (int r = 0; r < 16; ++r) _mm512_storeu_si512(dst + (i0 + r) * kp + j0, v[r]);
    }
}

}  // namespace
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// The packs: plain loops GCC vectorizes, one build per ISA (kernels/isa_builds.h,
// LEANEMB_ISA_KERNEL).
namespace {

inline void bf16_pack_a_impl(const float* src, int64_t m, int64_t k, int64_t row_stride, int64_t col_stride,
                             uint16_t* dst) {
  const int64_t kp = bf16_pad_k(k);
  if (col_stride == 1 || row_stride != 1) {
    for (int64_t i = 0; i < m; ++i) {
      uint16_t* d = dst + i * kp;
      const float* s = src + i * row_stride;
      for (int64_t j = 0; j < k; ++j) d[j] = f32_to_bf16_rne(s[j * col_stride]);
      if (kp != k) d[k] = 0;
    }
    return;
  }
  // A transpose (src rows are A's columns). 16 rows of A at a time, each filled left to right:
  // writing a whole column of A per source row would touch m lines whose addresses differ by
  // multiples of 2 kp bytes, which map to few L1 sets (for kp = 1024, two) and thrash.
  // Where the CPU has AVX-512 BF16 (the native path's CPUs), whole blocks of 16 rows and 32
  // columns are transposed in registers; the rest as below.
  int64_t m16 = 0, k32 = 0;
#ifdef LEANEMB_HAVE_BF16_KERNELS
  if (bf16_native_supported()) {
    m16 = m / 16 * 16;
    k32 = k / 32 * 32;
    pack_a_transposed_v(src, m16, k32, col_stride, kp, dst);
  }
#endif
  constexpr int64_t kRows = 16;
  for (int64_t i0 = 0; i0 < m; i0 += kRows) {
    const int64_t rows = std::min(kRows, m - i0);
    for (int64_t j = i0 < m16 ? k32 : 0; j < k; ++j) {
      const float* s = src + j * col_stride + i0;
      for (int64_t r = 0; r < rows; ++r) dst[(i0 + r) * kp + j] = f32_to_bf16_rne(s[r]);
    }
  }
  if (kp != k)
    for (int64_t i = 0; i < m; ++i) dst[i * kp + k] = 0;
}

inline void bf16_pack_b_impl(const float* src, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride,
                             uint32_t* dst) {
  const int64_t pairs = bf16_pad_k(k) / 2, np = bf16_pad_n(n);
  for (int64_t p = 0; p < pairs; ++p) {
    uint32_t* d = dst + p * np;
    const float* lo = src + 2 * p * row_stride;
    const bool has_hi = 2 * p + 1 < k;
    const float* hi = lo + row_stride;
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t h = has_hi ? f32_to_bf16_rne(hi[j * col_stride]) : 0u;
      d[j] = static_cast<uint32_t>(f32_to_bf16_rne(lo[j * col_stride])) | h << 16;
    }
    for (int64_t j = n; j < np; ++j) d[j] = 0;
  }
}

inline void bf16_pack_b_bf16_impl(const uint16_t* src, int64_t k, int64_t n, int64_t row_stride, uint32_t* dst) {
  const int64_t pairs = bf16_pad_k(k) / 2, np = bf16_pad_n(n);
  for (int64_t p = 0; p < pairs; ++p) {
    uint32_t* d = dst + p * np;
    const uint16_t* lo = src + 2 * p * row_stride;
    if (2 * p + 1 < k) {
      const uint16_t* hi = lo + row_stride;
      for (int64_t j = 0; j < n; ++j) d[j] = static_cast<uint32_t>(lo[j]) | static_cast<uint32_t>(hi[j]) << 16;
    } else {
      for (int64_t j = 0; j < n; ++j) d[j] = lo[j];
    }
    for (int64_t j = n; j < np; ++j) d[j] = 0;
  }
}

}  // namespace

LEANEMB_ISA_KERNEL(void, bf16_pack_a,
                   (const float* src, int64_t m, int64_t k, int64_t row_stride, int64_t col_stride, uint16_t* dst),
                   (src, m, k, row_stride, col_stride, dst))
LEANEMB_ISA_KERNEL(void, bf16_pack_b,
                   (const float* src, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride, uint32_t* dst),
                   (src, k, n, row_stride, col_stride, dst))
LEANEMB_ISA_KERNEL(void, bf16_pack_b_bf16, (const uint16_t* src, int64_t k, int64_t n, int64_t row_stride, uint32_t* dst),
                   (src, k, n, row_stride, dst))

void bf16_gemm_reference(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint32_t* b, float* c,
                         int64_t ldc, const Bf16Epilogue& e) {
  const int64_t kp = bf16_pad_k(k), pairs = kp / 2, np = bf16_pad_n(n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < pairs; ++p) {
        const uint32_t w = b[p * np + j];
        const float a0 = bf16_in(a[i * kp + 2 * p]), a1 = bf16_in(a[i * kp + 2 * p + 1]);
        const float b0 = bf16_in(static_cast<uint16_t>(w)), b1 = bf16_in(static_cast<uint16_t>(w >> 16));
        acc = daz(std::fma(a0, b0, daz(std::fma(a1, b1, acc))));
      }
      finish_scalar(acc, e, j, &c[i * ldc + j]);
    }
  }
}

void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint32_t* b, float* c, int64_t ldc,
               const Bf16Epilogue& e) {
  LEANEMB_DCHECK(!e.accumulate || (e.bias == nullptr && !e.round_bf16),
                 "bf16_gemm: an accumulating epilogue with a bias or rounding");
#ifdef LEANEMB_HAVE_BF16_KERNELS
  if (bf16_native_supported()) {
    const int64_t pairs = bf16_pad_k(k) / 2;
    const int64_t m16 = m / 16 * 16;
    if (pairs >= kAmxPairs && m16 > 0 && bf16_amx_enabled()) {
      // Blocks of 32 x 32 on the tiles, at least about 256k multiply-adds per hand-off; the rows
      // past m16 on the VDPBF16PS kernels.
      const int64_t row_blocks = (m16 + 31) / 32, col_blocks = (n + 31) / 32;
      const int64_t block_work = 32 * 32 * 2 * pairs;
      parallel_for(row_blocks * col_blocks, grain_for(block_work, int64_t{1} << 18), [&](int64_t t0, int64_t t1, int) {
        amx_blocks(t0, t1, col_blocks, m16, n, pairs, a, b, c, ldc, e);
      });
      for (int64_t c0 = 0; c0 < n && m16 < m; c0 += kColBlock)
        gemm_tile(m16, m, c0, n, pairs, a, b, c, ldc, e);
      return;
    }
    const int64_t row_blocks = (m + kRowBlock - 1) / kRowBlock, col_blocks = (n + kColBlock - 1) / kColBlock;
    const int64_t tiles = row_blocks * col_blocks;
    // Tiles of at least about 64k multiply-adds per hand-off (a tile does 48 x 64 per k-pair).
    const int64_t tile_work = std::min(m, kRowBlock) * std::min(n, kColBlock) * 2 * pairs;
    parallel_for(tiles, grain_for(tile_work, int64_t{1} << 16), [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t rb = t / col_blocks, cb = t % col_blocks;
        gemm_tile(rb * kRowBlock, std::min(m, (rb + 1) * kRowBlock), cb * kColBlock, n, pairs, a, b, c, ldc, e);
      }
    });
    return;
  }
#endif
  bf16_gemm_reference(m, n, k, a, b, c, ldc, e);
}

}  // namespace leanemb::nn
