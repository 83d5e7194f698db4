// Dot interaction kernels: register-blocked fast path and scalar reference (contract in the header).
//
// Invariant: for every output, the fast kernel performs the reference's multiplications and
// additions in the reference's order; vector lanes only run several outputs side by side. Padded
// lanes (columns j >= R of Tt) compute values that are never stored.
#include "nn/dot_interaction.h"

#include <algorithm>
#include <cstring>

#include "kernels/isa.h"
#include "kernels/isa_builds.h"
#include "kernels/vec16.h"
#include "kernels/vec8.h"

namespace leanemb::nn {
namespace {

using kernels::load8f;
using kernels::store8f;
using kernels::v8f;

constexpr int64_t kStackFloats = 16384;  // 64 KiB of scratch on the stack per call
// Rows per register block: independent accumulators that hide the add latency.
constexpr int kForwardRows = 8, kBackwardRows = 4;

// Row r of T for one sample: r = 0 is z, r = f + 1 is embedding f.
inline const float* t_row(const float* z, const float* e, int64_t d, int64_t r) { return r == 0 ? z : e + (r - 1) * d; }
inline float* t_row(float* z, float* e, int64_t d, int64_t r) { return r == 0 ? z : e + (r - 1) * d; }

// n rounded up to a multiple of the kernel's lane count (8 or 16): T^T's padded row length.
inline int64_t round_up(int64_t n, int64_t lanes) { return (n + lanes - 1) / lanes * lanes; }
inline int64_t pair_index(int64_t i, int64_t j) { return i * (i - 1) / 2 + j; }  // j < i

// Forward, rows i0..i0+NR-1 against the 8 columns j0.. of tt (T^T, row stride rp).
template <int NR>
inline void forward_block(const float* z, const float* e, int64_t d, const float* tt, int64_t rp, int64_t i0,
                          int64_t j0, float* pairs) {
  v8f acc[NR];
  const float* rows[NR];
  for (int q = 0; q < NR; ++q) {
    acc[q] = v8f{};
    rows[q] = t_row(z, e, d, i0 + q);
  }
  for (int64_t c = 0; c < d; ++c) {
    const v8f t = load8f(tt + c * rp + j0);
    for (int q = 0; q < NR; ++q) acc[q] = acc[q] + rows[q][c] * t;
  }
  for (int q = 0; q < NR; ++q) {
    const int64_t i = i0 + q;
    const int64_t valid = std::min<int64_t>(8, i - j0);  // lanes j < i; >= 1 since i > j0
    float* dst = pairs + pair_index(i, j0);
    if (valid == 8) {
      store8f(dst, acc[q]);
    } else {
      alignas(32) float tmp[8];
      store8f(tmp, acc[q]);
      std::memcpy(dst, tmp, static_cast<size_t>(valid) * sizeof(float));
    }
  }
}

// Backward, rows r0..r0+NR-1 of dT at the 8 columns c0.. (s: S, row stride R).
template <int NR>
inline void backward_block(const float* z, const float* e, int64_t d, int64_t R, const float* s, const float* gz,
                           int64_t r0, int64_t c0, float* dz, float* de) {
  v8f acc[NR];
  for (int q = 0; q < NR; ++q) acc[q] = r0 + q == 0 ? load8f(gz + c0) : v8f{};
  for (int64_t j = 0; j < R; ++j) {
    const v8f t = load8f(t_row(z, e, d, j) + c0);
    for (int q = 0; q < NR; ++q) acc[q] = acc[q] + s[(r0 + q) * R + j] * t;
  }
  for (int q = 0; q < NR; ++q) store8f(t_row(dz, de, d, r0 + q) + c0, acc[q]);
}

// The last `left` (< NB) rows starting at r, as one block of that many rows.
template <int NB, typename Block>
inline void tail_block(int64_t r, int64_t left, Block& block) {
  if constexpr (NB > 0) {
    if (left == NB) return block(r, std::integral_constant<int, NB>{});
    tail_block<NB - 1>(r, left, block);
  }
}

// Rows [first, R) in blocks of NB rows, then one block of the rows left.
template <int NB, typename Block>
inline void for_row_blocks(int64_t first, int64_t R, Block&& block) {
  int64_t r = first;
  for (; r + NB <= R; r += NB) block(r, std::integral_constant<int, NB>{});
  tail_block<NB - 1>(r, R - r, block);
}

// Stack floats of the rounded copies: T [R, d], then (backward) gz [d] and g [pairs].
int64_t rounded_floats(const DotShape& s, bool backward) {
  if (s.precision == DType::kF32) return 0;
  const int64_t R = s.num_features + 1;
  return R * s.dim + (backward ? s.dim + dot_pair_count(s) : 0);
}

// The copies are loops over amp::rounded_value, inlined into each build of the sample kernels
// (a call into amp per input of every sample cost more than the rounding).
template <DType P>
inline void copy_rounded_inline(const float* __restrict x, size_t n, float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = amp::rounded_value(x[i], P);
}
inline void copy_rounded_to(const float* x, size_t n, DType p, float* out) {
  if (p == DType::kBF16) copy_rounded_inline<DType::kBF16>(x, n, out);
  else copy_rounded_inline<DType::kF16>(x, n, out);
}
// Rounded copies of the inputs in buf when the precision asks for them; the pointers then point
// there. T's rows stay in the z / e layout (z first, then e contiguous).
void round_inputs(const DotShape& s, const float** z, const float** e, const float** gz, const float** g, float* buf) {
  if (s.precision == DType::kF32) return;
  const size_t d = static_cast<size_t>(s.dim), ed = static_cast<size_t>(s.num_features) * d;
  copy_rounded_to(*z, d, s.precision, buf);
  copy_rounded_to(*e, ed, s.precision, buf + d);
  *z = buf;
  *e = buf + d;
  if (gz == nullptr) return;
  copy_rounded_to(*gz, d, s.precision, buf + d + ed);
  copy_rounded_to(*g, static_cast<size_t>(dot_pair_count(s)), s.precision, buf + 2 * d + ed);
  *gz = buf + d + ed;
  *g = buf + 2 * d + ed;
}

// The forward's scratch in `stack`: the rounded inputs after T^T (z, e then point there), and
// tt[c * rp + j] = T_j[c], zero for R <= j < rp.
inline void prepare_forward(const DotShape& s, int64_t rp, float* stack, const float** z, const float** e) {
  const int64_t R = s.num_features + 1, d = s.dim;
  float* tt = stack;
  round_inputs(s, z, e, nullptr, nullptr, stack + d * rp);
  for (int64_t c = 0; c < d; ++c) {
    float* col = tt + c * rp;
    for (int64_t j = R; j < rp; ++j) col[j] = 0.0f;
  }
  for (int64_t j = 0; j < R; ++j) {
    const float* tj = t_row(*z, *e, d, j);
    for (int64_t c = 0; c < d; ++c) tt[c * rp + j] = tj[c];
  }
}

// The forward of one sample with kLanes outputs per block: the scratch prepared in `stack`
// (prepare_forward; T^T padded to rp = R rounded up to kLanes), then for each chunk j0 of kLanes
// columns of T^T the rows i > j0 (row 0 has no outputs) in blocks of kRows:
// block(z, e, rp, i0, j0, rows) with z, e the inputs to read (the rounded copies when the
// precision asks for them) and rows a std::integral_constant.
template <int kLanes, int kRows, typename Block>
inline void forward_sample_blocks(const DotShape& s, const float* z, const float* e, float* stack, Block&& block) {
  const int64_t R = s.num_features + 1, rp = round_up(R, kLanes);
  prepare_forward(s, rp, stack, &z, &e);
  for (int64_t j0 = 0; j0 < rp; j0 += kLanes)
    for_row_blocks<kRows>(std::max<int64_t>(1, j0 + 1), R, [&](int64_t i0, auto nr) { block(z, e, rp, i0, j0, nr); });
}

// The backward's scratch in `stack`: S [R, R] (symmetric, zero diagonal, from the pair
// gradients), then the rounded inputs (the pointers then point there).
inline void prepare_backward(const DotShape& s, float* stack, const float** z, const float** e, const float** gz,
                             const float** g) {
  const int64_t R = s.num_features + 1;
  float* sm = stack;
  round_inputs(s, z, e, gz, g, stack + R * R);
  for (int64_t r = 0; r < R; ++r) {
    sm[r * R + r] = 0.0f;
    for (int64_t j = 0; j < r; ++j) sm[r * R + j] = sm[j * R + r] = (*g)[pair_index(r, j)];
  }
}

// The reference reads through this: x rounded to the shape's precision.
float in_value(const DotShape& s, float x) {
  float out = x;
  if (s.precision != DType::kF32) amp::copy_rounded({&x, 1}, s.precision, &out);
  return out;
}

}  // namespace

namespace {
// The stack scratch of the kernels with `lanes` lanes holds T^T padded to them (forward) and S
// (backward), each with the rounded inputs.
bool fits_with_lanes(const DotShape& s, int64_t lanes) {
  const int64_t R = s.num_features + 1;
  return s.dim * round_up(R, lanes) + rounded_floats(s, false) <= kStackFloats &&
         R * R + rounded_floats(s, true) <= kStackFloats;
}
}  // namespace

bool dot_fast_path_fits(const DotShape& s) { return fits_with_lanes(s, 8); }

void dot_forward_sample_reference(const DotShape& s, const float* z, const float* e, float* pairs) {
  const int64_t F = s.num_features, d = s.dim;
  for (int64_t i = 1; i <= F; ++i) {
    const float* ti = t_row(z, e, d, i);
    for (int64_t j = 0; j < i; ++j) {
      const float* tj = t_row(z, e, d, j);
      float acc = 0.0f;
      for (int64_t c = 0; c < d; ++c) acc = acc + in_value(s, ti[c]) * in_value(s, tj[c]);
      pairs[pair_index(i, j)] = acc;
    }
  }
}

void dot_backward_sample_reference(const DotShape& s, const float* z, const float* e, const float* gz,
                                   const float* g, float* dz, float* de) {
  const int64_t R = s.num_features + 1, d = s.dim;
  for (int64_t r = 0; r < R; ++r) {
    float* dst = t_row(dz, de, d, r);
    for (int64_t c = 0; c < d; ++c) {
      float acc = r == 0 ? in_value(s, gz[c]) : 0.0f;
      for (int64_t j = 0; j < R; ++j) {
        const float srj = j == r ? 0.0f : in_value(s, j < r ? g[pair_index(r, j)] : g[pair_index(j, r)]);
        acc = acc + srj * in_value(s, t_row(z, e, d, j)[c]);
      }
      dst[c] = acc;
    }
  }
}

namespace {

// The 8-lane kernels (their x86-64-v3 and baseline builds run below x86-64-v4, and their v4
// build for shapes the 16-lane kernels' stack buffer does not fit).
inline void forward_sample_v8_impl(const DotShape& s, const float* z, const float* e, float* pairs) {
  alignas(64) float stack[kStackFloats];
  forward_sample_blocks<8, kForwardRows>(s, z, e, stack, [&](const float* zr, const float* er, int64_t rp, int64_t i0,
                                                            int64_t j0, auto nr) {
    forward_block<decltype(nr)::value>(zr, er, s.dim, stack, rp, i0, j0, pairs);
  });
}

LEANEMB_ISA_KERNEL(void, forward_sample_v8, (const DotShape& s, const float* z, const float* e, float* pairs),
                   (s, z, e, pairs))

inline void backward_sample_v8_impl(const DotShape& s, const float* z, const float* e, const float* gz, const float* g,
                                    float* dz, float* de) {
  const int64_t R = s.num_features + 1, d = s.dim;
  alignas(32) float stack[kStackFloats];
  float* sm = stack;  // S [R, R]; then the rounded inputs
  prepare_backward(s, stack, &z, &e, &gz, &g);
  const int64_t d8 = d / 8 * 8;
  for (int64_t c0 = 0; c0 < d8; c0 += 8) {
    for_row_blocks<kBackwardRows>(0, R, [&](int64_t r0, auto nr) {
      backward_block<decltype(nr)::value>(z, e, d, R, sm, gz, r0, c0, dz, de);
    });
  }
  for (int64_t r = 0; r < R && d8 < d; ++r) {  // the last d % 8 columns, one at a time
    float* dst = t_row(dz, de, d, r);
    for (int64_t c = d8; c < d; ++c) {
      float acc = r == 0 ? gz[c] : 0.0f;
      for (int64_t j = 0; j < R; ++j) acc = acc + sm[r * R + j] * t_row(z, e, d, j)[c];
      dst[c] = acc;
    }
  }
}
LEANEMB_ISA_KERNEL(void, backward_sample_v8,
                   (const DotShape& s, const float* z, const float* e, const float* gz, const float* g, float* dz,
                    float* de),
                   (s, z, e, gz, g, dz, de))

#ifdef LEANEMB_HAVE_V4
// The 16-lane kernels (x86-64-v4): the same blocks with 16 outputs per vector (forward: 16
// columns j of T^T; backward: 16 columns c of dT, the last block masked), the same additions in
// the same order per output.
constexpr int kForwardRowsV4 = 8, kBackwardRowsV4 = 8;

template <int NR>
LEANEMB_TARGET_V4 inline void forward_block_v4(const float* z, const float* e, int64_t d, const float* tt, int64_t rp,
                                               int64_t i0, int64_t j0, float* pairs) {
  __m512 acc[NR];
  const float* rows[NR];
  for (int q = 0; q < NR; ++q) {
    acc[q] = _mm512_setzero_ps();
    rows[q] = t_row(z, e, d, i0 + q);
  }
  for (int64_t c = 0; c < d; ++c) {
    const __m512 t = _mm512_loadu_ps(tt + c * rp + j0);
    for (int q = 0; q < NR; ++q) acc[q] = _mm512_add_ps(acc[q], _mm512_mul_ps(_mm512_set1_ps(rows[q][c]), t));
  }
  for (int q = 0; q < NR; ++q) {
    const int64_t i = i0 + q;
    _mm512_mask_storeu_ps(pairs + pair_index(i, j0), kernels::lane_mask16(i - j0), acc[q]);  // lanes j < i
  }
}

template <int NR>
LEANEMB_TARGET_V4 inline void backward_block_v4(const float* z, const float* e, int64_t d, int64_t R, const float* s,
                                                const float* gz, int64_t r0, int64_t c0, __mmask16 m, float* dz,
                                                float* de) {
  __m512 acc[NR];
  for (int q = 0; q < NR; ++q) acc[q] = r0 + q == 0 ? _mm512_maskz_loadu_ps(m, gz + c0) : _mm512_setzero_ps();
  for (int64_t j = 0; j < R; ++j) {
    const __m512 t = _mm512_maskz_loadu_ps(m, t_row(z, e, d, j) + c0);
    for (int q = 0; q < NR; ++q) acc[q] = _mm512_add_ps(acc[q], _mm512_mul_ps(_mm512_set1_ps(s[(r0 + q) * R + j]), t));
  }
  for (int q = 0; q < NR; ++q) _mm512_mask_storeu_ps(t_row(dz, de, d, r0 + q) + c0, m, acc[q]);
}

LEANEMB_TARGET_V4 void forward_sample_v4(const DotShape& s, const float* z, const float* e, float* pairs) {
  alignas(64) float stack[kStackFloats];
  forward_sample_blocks<16, kForwardRowsV4>(s, z, e, stack, [&](const float* zr, const float* er, int64_t rp,
                                                               int64_t i0, int64_t j0, auto nr) {
    forward_block_v4<decltype(nr)::value>(zr, er, s.dim, stack, rp, i0, j0, pairs);
  });
}

LEANEMB_TARGET_V4 void backward_sample_v4(const DotShape& s, const float* z, const float* e, const float* gz,
                                          const float* g, float* dz, float* de) {
  const int64_t R = s.num_features + 1, d = s.dim;
  alignas(64) float stack[kStackFloats];
  float* sm = stack;  // S [R, R]; then the rounded inputs
  prepare_backward(s, stack, &z, &e, &gz, &g);
  for (int64_t c0 = 0; c0 < d; c0 += 16) {
    const __mmask16 m = kernels::lane_mask16(d - c0);
    for_row_blocks<kBackwardRowsV4>(0, R, [&](int64_t r0, auto nr) {
      backward_block_v4<decltype(nr)::value>(z, e, d, R, sm, gz, r0, c0, m, dz, de);
    });
  }
}

// The v4 kernels run when the kernels' ISA (kernels/isa.h: the CPU, capped by LEANEMB_ISA and
// set_isa_limit) is x86-64-v4 and the shape fits their stack buffer.
bool use_v4(const DotShape& s) { return kernels::active_isa() == kernels::Isa::kV4 && fits_with_lanes(s, 16); }
#endif  // LEANEMB_HAVE_V4

}  // namespace

void dot_forward_sample(const DotShape& s, const float* z, const float* e, float* pairs) {
#ifdef LEANEMB_HAVE_V4
  if (use_v4(s)) return forward_sample_v4(s, z, e, pairs);
#endif
  if (!dot_fast_path_fits(s)) return dot_forward_sample_reference(s, z, e, pairs);
  forward_sample_v8(s, z, e, pairs);
}

void dot_backward_sample(const DotShape& s, const float* z, const float* e, const float* gz, const float* g,
                         float* dz, float* de) {
#ifdef LEANEMB_HAVE_V4
  if (use_v4(s)) return backward_sample_v4(s, z, e, gz, g, dz, de);
#endif
  if (!dot_fast_path_fits(s)) return dot_backward_sample_reference(s, z, e, gz, g, dz, de);
  backward_sample_v8(s, z, e, gz, g, dz, de);
}

}  // namespace leanemb::nn
