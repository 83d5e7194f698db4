// Fast fused optimizer updates: one unique row at a time, converted to fp32 scratch arrays,
// updated with vectorizable loops in the same arithmetic order as ref_update_row, and stored
// back (weights with stochastic rounding). Rows are split into parallel_for chunks that threads
// claim (core/parallel.h); rows are independent, so the result does not depend on the thread
// count.
//
// The fused backward (reduce_and_update) streams over a chunk's unique rows: for row u it
// reduces u's gradient contributions into an L1-resident scratch row and updates u at once,
// while the fat row kRowsAhead rows on and the gradient vectors kGradsAhead contributions on
// are prefetched. Each loop is built for every ISA of isa.h (the x86-64-v4 reduce keeps a
// 128-column block of the gradient in eight 16-lane registers); the per-element arithmetic is
// the reference's in every build.
//
// This header holds the loops, as templates over the ISA; update_base.cc, update_v3.cc and
// update_v4.cc each compile one build of them (update_builds.h), update.cc the entry points.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/isa.h"
#include "kernels/isa_builds.h"
#include "kernels/kernels.h"
#include "kernels/q8_vec.h"
#include "kernels/quant4.h"
#include "kernels/quant4_vec.h"
#include "kernels/quant8_vec.h"
#include "kernels/row_access.h"
#include "kernels/vec16.h"
#include "kernels/vec8.h"
#include "kernels/update_builds.h"

namespace leanemb::kernels {

namespace {

using update_detail::Loop;
using update_detail::RangeJob;
using update_detail::Scratch;


template <Isa I, DType S>
inline void load_state(const RowLayout& l, const uint8_t* row, int k, float* __restrict out) {
  const uint8_t* p = row + l.state_offset(k);
  const int64_t d = l.dim;
  if constexpr (S == DType::kF32) {
    std::memcpy(out, p, static_cast<size_t>(d) * 4);
  } else if constexpr (S == DType::kBF16) {
    const uint16_t* r = reinterpret_cast<const uint16_t*>(p);
    for (int64_t j = 0; j < d; ++j) out[j] = bf16_to_f32(r[j]);
  } else if constexpr (S == DType::kInt8Blockwise) {
    dequantize_row_t<I>(p, row + l.state_scale_offset(k), d, l.state_signed(k), out);
  } else {
    quant4_load_array_t<I>(p, row + l.state_scale_offset(k), d, l.state_signed(k), out);
  }
}

template <Isa I, DType S>
inline void store_state(const RowLayout& l, uint8_t* row, int k, const float* __restrict x, uint32_t key) {
  uint8_t* p = row + l.state_offset(k);
  const int64_t d = l.dim;
  if constexpr (S == DType::kF32) {
    std::memcpy(p, x, static_cast<size_t>(d) * 4);
  } else if constexpr (S == DType::kBF16) {
    store_row_sr<DType::kBF16>(p, x, d, key, state_sr_column(d, k, 0));
  } else if constexpr (S == DType::kInt4Blockwise) {
    quant4_store_array_t<I>(x, d, l.state_signed(k), p, row + l.state_scale_offset(k), key, state_sr_column(d, k, 0));
  } else {
    uint8_t* scales = row + l.state_scale_offset(k);
    for (int64_t b = 0; b < l.num_blocks; ++b) {
      const int64_t j0 = b * kQuantBlockSize;
      store_f32(scales + 4 * b,
                quantize_block_t<I>(x + j0, std::min(kQuantBlockSize, d - j0), l.state_signed(k),
                                    p + j0));
    }
  }
}

// sum_squares (kernels.h) with the lanes in a vector register: lane k sums g[k], g[k + 8], ...
// in order, exactly as the scalar definition, then the lanes combine in the documented order.
inline float sum_squares_v(const float* g, int64_t n) {
  v8f acc = v8f{};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v8f x = load8f(g + j);
    acc += x * x;
  }
  float s[8];
  store8f(s, acc);
  for (; j < n; ++j) s[j % 8] += g[j] * g[j];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// max(0, max_j x[j]) over n >= 0 values, with 8 lanes in a vector register; max is exact, so
// any order gives the scalar loop's value.
inline float max_v(const float* x, int64_t n) {
  v8f acc = v8f{};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v8f v = load8f(x + j);
    acc = v > acc ? v : acc;
  }
  float s[8];
  store8f(s, acc);
  float r = 0.0f;
  for (int k = 0; k < 8; ++k) r = std::max(r, s[k]);
  for (; j < n; ++j) r = std::max(r, x[j]);
  return r;
}

// Look-ahead of the streaming loops, measured on a Zen 4 VM (E=2e6 x 128 fp32, B=4096, L=20,
// Zipf 1.05, one thread; docs/benchmarks.md):
//   * Every fat row costs a TLB miss (a nested page walk in a VM). A loop that does a row's
//     whole update between two rows keeps only one or two rows in the reorder buffer, so the
//     walks ran one after the other; touching one line of each of the next kTranslateBurst
//     rows in one burst (every kTranslateBurst rows, kTranslateAhead rows ahead) lets the walks
//     overlap: the fused backward took 0.6-0.75x the time.
//   * The rows' lines are prefetched kRowsAhead rows ahead with the T2 hint (into L2): T0 fills
//     held L1 miss buffers and cost ~10%; distances 3-16 measured alike.
//   * Gradient vectors are prefetched kGradsAhead contributions ahead (T2): 20% less time than
//     without.
constexpr int64_t kRowsAhead = 6;
constexpr int64_t kTranslateAhead = 16;
constexpr int64_t kTranslateBurst = 8;
constexpr int64_t kGradsAhead = 16;
constexpr int kRowLocality = 1;
constexpr int kGradLocality = 1;

// Hyper-parameters of one update call, in the forms the rules use.
struct UpdateConsts {
  float nlr, lr, eps, wd, nstep, c1, c2;
  UpdateConsts(const OptimizerOptions& o, int64_t step)
      : nlr(-o.learning_rate),
        lr(o.learning_rate),
        eps(o.eps),
        wd(o.weight_decay),
        nstep(-adam_step_size(o, step)),
        c1(one_minus(o.beta1)),
        c2(one_minus(o.beta2)) {}
};

// The weights' store with stochastic rounding (store_row_sr), vectorized for fp16 rows (vec8.h,
// vec16.h) and q8 rows (q8_vec.h) in the x86-64-v3 and v4 builds (bit-identical).
// Columns are numbered from column0 (0: a whole row).
template <Isa I, DType W>
inline void store_weights_sr(uint8_t* __restrict row, const float* __restrict w, int64_t d, uint32_t key,
                             uint32_t column0 = 0) {
  if constexpr (W == DType::kQ8) return q8_store_t<I, true>(row, w, d, key, column0);
#ifdef LEANEMB_HAVE_V4
  if constexpr (W == DType::kF16 && I == Isa::kV4) return store_row_sr_f16_v4(row, w, d, key, column0);
#endif
#ifdef LEANEMB_HAVE_V3
  if constexpr (W == DType::kF16 && I == Isa::kV3) return store_row_sr_f16_v3(row, w, d, key, column0);
#endif
  store_row_sr<W>(row, w, d, key, column0);
}

// The weights' load into the fp32 scratch (load_row), with the hardware conversion for fp16 rows
// in the x86-64-v3 and v4 builds (load_row_f16_v3 / _v4: VCVTPH2PS, exact for every half; it
// sets the quiet bit of a signaling NaN, which the arithmetic that follows sets anyway, and a
// NaN is stored back as 0x7e00 with its sign either way). The generic code converts with
// integer arithmetic. q8 rows: load_row_q8_t (q8_vec.h), the same floats in every build.
template <Isa I, DType W>
inline void load_weights(float* __restrict w, const uint8_t* __restrict row, int64_t d) {
  if constexpr (W == DType::kQ8) return load_row_q8_t<I>(w, row, d);
#ifdef LEANEMB_HAVE_V4
  if constexpr (W == DType::kF16 && I == Isa::kV4) return load_row_f16_v4(w, row, d);
#endif
#ifdef LEANEMB_HAVE_V3
  if constexpr (W == DType::kF16 && I == Isa::kV3) return load_row_f16_v3(w, row, d);
#endif
  load_row<W>(w, row, d);
}

// Applies the optimizer to one fat row with gradient gin [dim], in ref_update_row's order.
template <Isa I, DType W, DType S>
inline void update_one(const RowLayout& l, const UpdateConsts& c, uint8_t* row, const float* __restrict gin,
                       uint32_t key, Scratch sc) {
  const OptimizerOptions& o = l.optimizer;
  const int64_t d = l.dim;
  // fp32 weights are updated in place (the row is their fp32 copy); other dtypes in scratch,
  // stored back with stochastic rounding. Without weight decay the rules read gin itself.
  constexpr bool kInPlace = W == DType::kF32;
  float* __restrict w = kInPlace ? reinterpret_cast<float*>(row) : sc.w;
  const float* __restrict g = gin;
  float* __restrict m = sc.m;
  float* __restrict v = sc.v;
  if constexpr (!kInPlace) load_weights<I, W>(w, row, d);
  if (c.wd > 0.0f) {
    for (int64_t j = 0; j < d; ++j) sc.g[j] = gin[j] + c.wd * w[j];
    g = sc.g;
  }
  switch (o.kind) {
    case OptimizerKind::kSgd:
      for (int64_t j = 0; j < d; ++j) w[j] = w[j] + c.nlr * g[j];
      break;
    case OptimizerKind::kAdagrad:
      load_state<I, S>(l, row, 0, m);
      for (int64_t j = 0; j < d; ++j) {
        m[j] = m[j] + g[j] * g[j];
        w[j] = w[j] + c.nlr * (g[j] / (std::sqrt(m[j]) + c.eps));
      }
      store_state<I, S>(l, row, 0, m, key);
      break;
    case OptimizerKind::kRowwiseAdagrad: {
      const float s_new = load_f32(row + l.rowwise_offset) + sum_squares_v(g, d) / static_cast<float>(d);
      const float mult = c.lr / (std::sqrt(s_new) + c.eps);
      for (int64_t j = 0; j < d; ++j) w[j] = w[j] - mult * g[j];
      store_f32(row + l.rowwise_offset, s_new);
      break;
    }
    case OptimizerKind::kSm3: {
      // nu in m; the rule as ref_update_row's, the maxes (exact) in vector-friendly loops.
      // std::min / std::max are spelled out on values (the same selections): their reference
      // results kept GCC 12 from vectorizing these loops (2.2x row-wise Adagrad's step).
      const float row_acc = load_f32(row + l.rowwise_offset);
      const float* __restrict col = sc.sm3_col;
      float* __restrict part = sc.sm3_part;
      for (int64_t j = 0; j < d; ++j) {
        const float cj = col[j];
        m[j] = (cj < row_acc ? cj : row_acc) + g[j] * g[j];
        w[j] = w[j] + c.nlr * (g[j] / (std::sqrt(m[j]) + c.eps));
      }
      for (int64_t j = 0; j < d; ++j) {
        const float p = part[j], x = m[j];
        part[j] = p < x ? x : p;
      }
      store_f32(row + l.rowwise_offset, max_v(m, d));
      break;
    }
    case OptimizerKind::kAdam:
      load_state<I, S>(l, row, 0, m);
      load_state<I, S>(l, row, 1, v);
      for (int64_t j = 0; j < d; ++j) {
        m[j] = m[j] + (g[j] - m[j]) * c.c1;
        v[j] = v[j] + (g[j] * g[j] - v[j]) * c.c2;
        w[j] = w[j] + c.nstep * (m[j] / (std::sqrt(v[j]) + c.eps));
      }
      store_state<I, S>(l, row, 0, m, key);
      store_state<I, S>(l, row, 1, v, key);
      break;
    case OptimizerKind::kPartialRowwiseAdam: {
      const float v_old = load_f32(row + l.rowwise_offset);
      const float v_new = v_old + (sum_squares_v(g, d) / static_cast<float>(d) - v_old) * c.c2;
      const float denom = std::sqrt(v_new) + c.eps;
      load_state<I, S>(l, row, 0, m);
      for (int64_t j = 0; j < d; ++j) {
        m[j] = m[j] + (g[j] - m[j]) * c.c1;
        w[j] = w[j] + c.nstep * (m[j] / denom);
      }
      store_state<I, S>(l, row, 0, m, key);
      store_f32(row + l.rowwise_offset, v_new);
      break;
    }
  }
  if constexpr (!kInPlace) store_weights_sr<I, W>(row, w, d, key);
}

// The fat-row prefetches of a loop over rows[u0, end): call start() once, then step(u) before
// row u is processed.
struct RowPrefetch {
  const TableView& t;
  const int64_t* rows;
  int64_t u0, end;
  int lines;
  RowPrefetch(const TableView& tv, const int64_t* r, int64_t begin, int64_t e)
      : t(tv), rows(r), u0(begin), end(e),
        lines(row_lines(tv.base, tv.layout->stride_bytes, tv.layout->weight_bytes + tv.layout->state_bytes)) {}
  const uint8_t* row(int64_t u) const { return t.base + static_cast<size_t>(rows[u]) * t.layout->stride_bytes; }
  // One line of rows [a, b): starts their address translations.
  void translate(int64_t a, int64_t b) const {
    for (int64_t u = a; u < std::min(b, end); ++u) prefetch_line<0, kRowLocality>(row(u));
  }
  void start() const {
    translate(u0, u0 + kTranslateAhead);
    for (int64_t u = u0; u < std::min(end, u0 + kRowsAhead); ++u) prefetch_lines<0, kRowLocality, 32>(row(u), lines);
  }
  void step(int64_t u) const {
    if ((u - u0) % kTranslateBurst == 0) translate(u + kTranslateAhead, u + kTranslateAhead + kTranslateBurst);
    if (u + kRowsAhead < end) prefetch_lines<0, kRowLocality, 32>(row(u + kRowsAhead), lines);
  }
};

template <Isa I, DType W, DType S>
inline void update_range(const TableView& t, const int64_t* rows, const float* grads, int64_t u0, int64_t u1,
                         const UpdateStep& s, Scratch sc) {
  const RowLayout& l = *t.layout;
  const UpdateConsts c(l.optimizer, s.step);
  const RowPrefetch prefetch(t, rows, u0, u1);
  prefetch.start();
  for (int64_t u = u0; u < u1; ++u) {
    prefetch.step(u);
    uint8_t* row = t.base + static_cast<size_t>(rows[u]) * l.stride_bytes;
    const uint32_t key = row_key(s.seed, static_cast<uint64_t>(s.step), t.table_index, t.key_row(rows[u]));
    update_one<I, W, S>(l, c, row, grads + u * l.dim, key, sc);
  }
}

// ---- segment reduce ----------------------------------------------------------------------------
// Prefetches the gradient vector of contribution k (dim floats) when k < pf_end: the first
// kBytes at compile-time offsets (straight-line code, see prefetch_lines), its last byte (the
// extra line of a vector that does not start on a line), then any rest.
template <size_t kBytes = 512>
inline void prefetch_grad(const SegmentSource& s, int64_t k, int64_t pf_end) {
  if (k >= pf_end) return;
  const uint8_t* q = reinterpret_cast<const uint8_t*>(s.ptr[k]);
  const size_t bytes = static_cast<size_t>(s.dim) * 4;
  for (size_t o = 0; o < kBytes; o += 64) prefetch_line<0, kGradLocality>(q + o);
  prefetch_line<0, kGradLocality>(q + bytes - 1);
  if (bytes > kBytes) prefetch_span<0, kGradLocality>(q + kBytes, bytes - kBytes);
}

// Register-blocked segment reduce with 8-lane vectors: columns [col, col + 8 * kVecs) of one
// unique row in vector accumulators; the first block prefetches the vectors kGradsAhead
// contributions on.
template <int kVecs>
inline void reduce_columns(const SegmentSource& s, int64_t u, int64_t col, int64_t pf_end, float* __restrict g) {
  v8f acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = v8f{};
  for (int64_t k = s.seg[u]; k < s.seg[u + 1]; ++k) {
    if (col == 0) prefetch_grad(s, k + kGradsAhead, pf_end);
    const float* x = s.ptr[k] + col;
    const float sc = s.scale[k];
    for (int v = 0; v < kVecs; ++v) acc[v] += sc * load8f(x + 8 * v);
  }
  for (int v = 0; v < kVecs; ++v) store8f(g + col + 8 * v, acc[v] * s.multiplier);
}

// Columns past the last full block of 8, one at a time.
inline void reduce_tail(const SegmentSource& s, int64_t u, int64_t col, float* __restrict g) {
  for (int64_t j = col; j < s.dim; ++j) {
    float acc = 0.0f;
    for (int64_t k = s.seg[u]; k < s.seg[u + 1]; ++k) acc += s.scale[k] * s.ptr[k][j];
    g[j] = acc * s.multiplier;
  }
}

inline void reduce_row_v8(const SegmentSource& s, int64_t u, int64_t pf_end, float* __restrict g) {
  const int64_t d = s.dim;
  int64_t col = 0;
  for (; col + 64 <= d; col += 64) reduce_columns<8>(s, u, col, pf_end, g);
  for (; col + 8 <= d; col += 8) reduce_columns<1>(s, u, col, pf_end, g);
  if (col == 0) {
    for (int64_t k = s.seg[u]; k < s.seg[u + 1]; ++k) prefetch_grad(s, k + kGradsAhead, pf_end);
  }
  if (col < d) reduce_tail(s, u, col, g);
}

#ifdef LEANEMB_HAVE_V4
// Columns [col, col + 16 * kVecs) of one unique row (kTail: the last vector masked by `last`):
// acc = acc + scale_k * x_k in contribution order, then g = acc * multiplier.
template <int kVecs, bool kTail>
LEANEMB_TARGET_V4 inline void reduce_block_v4(const SegmentSource& s, int64_t u, int64_t col, __mmask16 last,
                                              int64_t pf_end, float* __restrict g) {
  const float* const* const ptr = s.ptr;
  const float* const scale = s.scale;
  __m512 acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t k = s.seg[u]; k < s.seg[u + 1]; ++k) {
    if (col == 0) prefetch_grad<64 * kVecs>(s, k + kGradsAhead, pf_end);
    const float* x = ptr[k] + col;
    const __m512 sc = _mm512_set1_ps(scale[k]);
    for (int v = 0; v < kVecs; ++v) {
      const __m512 xv = (kTail && v == kVecs - 1) ? _mm512_maskz_loadu_ps(last, x + 16 * v) : _mm512_loadu_ps(x + 16 * v);
      acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(sc, xv));
    }
  }
  const __m512 mult = _mm512_set1_ps(s.multiplier);
  for (int v = 0; v < kVecs; ++v) {
    const __m512 r = _mm512_mul_ps(acc[v], mult);
    if (kTail && v == kVecs - 1) _mm512_mask_storeu_ps(g + col + 16 * v, last, r);
    else _mm512_storeu_ps(g + col + 16 * v, r);
  }
}

template <bool kTail>
LEANEMB_TARGET_V4 inline void reduce_block_dispatch_v4(int vecs, const SegmentSource& s, int64_t u, int64_t col,
                                                       __mmask16 last, int64_t pf_end, float* __restrict g) {
  switch (vecs) {
    case 1: return reduce_block_v4<1, kTail>(s, u, col, last, pf_end, g);
    case 2: return reduce_block_v4<2, kTail>(s, u, col, last, pf_end, g);
    case 3: return reduce_block_v4<3, kTail>(s, u, col, last, pf_end, g);
    case 4: return reduce_block_v4<4, kTail>(s, u, col, last, pf_end, g);
    case 5: return reduce_block_v4<5, kTail>(s, u, col, last, pf_end, g);
    case 6: return reduce_block_v4<6, kTail>(s, u, col, last, pf_end, g);
    case 7: return reduce_block_v4<7, kTail>(s, u, col, last, pf_end, g);
    default: return reduce_block_v4<8, kTail>(s, u, col, last, pf_end, g);
  }
}

LEANEMB_TARGET_V4 inline void reduce_row_v4(const SegmentSource& s, int64_t u, int64_t pf_end, float* __restrict g) {
  const int64_t d = s.dim;
  for (int64_t col = 0; col < d; col += 128) {
    const int64_t cols = std::min<int64_t>(128, d - col);
    const int vecs = static_cast<int>((cols + 15) / 16);
    const __mmask16 last = lane_mask16(cols - 16 * (vecs - 1));
    if (last == 0xffff) reduce_block_dispatch_v4<false>(vecs, s, u, col, last, pf_end, g);
    else reduce_block_dispatch_v4<true>(vecs, s, u, col, last, pf_end, g);
  }
}
#endif  // LEANEMB_HAVE_V4

template <bool kV4>
inline void reduce_row(const SegmentSource& s, int64_t u, int64_t pf_end, float* __restrict g) {
#ifdef LEANEMB_HAVE_V4
  if constexpr (kV4) return reduce_row_v4(s, u, pf_end, g);
#endif
  reduce_row_v8(s, u, pf_end, g);
}

// Reduces rows [u0, u1) into out [(u1 - u0), dim]; false if any output is Inf or NaN.
template <bool kV4>
inline bool reduce_range_t(const SegmentSource& s, int64_t u0, int64_t u1, float* out) {
  const int64_t d = s.dim;
  const int64_t pf_end = s.seg[u1];  // prefetch stays inside this range's contributions
  int bad = 0;
  for (int64_t k = s.seg[u0]; k < std::min(pf_end, s.seg[u0] + kGradsAhead); ++k) prefetch_grad(s, k, pf_end);
  for (int64_t u = u0; u < u1; ++u) {
    float* __restrict g = out + (u - u0) * d;
    reduce_row<kV4>(s, u, pf_end, g);
    for (int64_t j = 0; j < d; ++j) bad |= std::isfinite(g[j]) ? 0 : 1;
  }
  return bad == 0;
}

// The fused loop: reduce row u's gradient into sc.r, update row u.
template <Isa I, DType W, DType S>
inline void fused_range(const TableView& t, const SegmentSource& s, const int64_t* rows, int64_t u0, int64_t u1,
                        const UpdateStep& st, Scratch sc, float* __restrict reduced) {
  const RowLayout& l = *t.layout;
  const UpdateConsts c(l.optimizer, st.step);
  const RowPrefetch prefetch(t, rows, u0, u1);
  const int64_t pf_end = s.seg[u1];
  prefetch.start();
  for (int64_t k = s.seg[u0]; k < std::min(pf_end, s.seg[u0] + kGradsAhead); ++k) prefetch_grad(s, k, pf_end);
  for (int64_t u = u0; u < u1; ++u) {
    prefetch.step(u);
    reduce_row<I == Isa::kV4>(s, u, pf_end, reduced);
    uint8_t* row = t.base + static_cast<size_t>(rows[u]) * l.stride_bytes;
    const uint32_t key = row_key(st.seed, static_cast<uint64_t>(st.step), t.table_index, t.key_row(rows[u]));
    update_one<I, W, S>(l, c, row, reduced, key, sc);
  }
}

// Calls f.template operator()<W, S>() for the table's weight and state dtypes.
template <typename F>
inline void with_dtypes(const RowLayout& l, F&& f) {
  auto with_w = [&](auto wtag) {
    constexpr DType W = decltype(wtag)::value;
    switch (l.optimizer.state_dtype) {
      case DType::kF32: return f.template operator()<W, DType::kF32>();
      case DType::kBF16: return f.template operator()<W, DType::kBF16>();
      case DType::kInt8Blockwise: return f.template operator()<W, DType::kInt8Blockwise>();
      case DType::kInt4Blockwise: return f.template operator()<W, DType::kInt4Blockwise>();
      default: LEANEMB_CHECK(false, "not an optimizer state dtype");
    }
  };
  switch (l.weight_dtype) {
    case DType::kF32: return with_w(std::integral_constant<DType, DType::kF32>{});
    case DType::kF16: return with_w(std::integral_constant<DType, DType::kF16>{});
    case DType::kBF16: return with_w(std::integral_constant<DType, DType::kBF16>{});
    case DType::kFP8: return with_w(std::integral_constant<DType, DType::kFP8>{});
    case DType::kQ8: return with_w(std::integral_constant<DType, DType::kQ8>{});
    case DType::kInt8Rowwise: LEANEMB_CHECK(false, "int8 rows are not trainable");
    default: LEANEMB_CHECK(false, "not a row dtype");
  }
}

template <Isa I>
inline void run_update(const RangeJob& j) {
  with_dtypes(*j.t->layout,
              [&]<DType W, DType S>() { update_range<I, W, S>(*j.t, j.rows, j.grads, j.u0, j.u1, *j.step, j.sc); });
}
template <Isa I>
inline void run_fused(const RangeJob& j) {
  with_dtypes(*j.t->layout,
              [&]<DType W, DType S>() { fused_range<I, W, S>(*j.t, *j.s, j.rows, j.u0, j.u1, *j.step, j.sc, j.out); });
}

}  // namespace

}  // namespace leanemb::kernels

// The body of each build of the loops (isa_builds.h): run_base, run_v3, run_v4.
#define LEANEMB_RUN_BODY(I)                                             \
  if (k == Loop::kUpdate) run_update<I>(j);                             \
  else if (k == Loop::kFused) run_fused<I>(j);                          \
  else return reduce_range_t<I == Isa::kV4>(*j.s, j.u0, j.u1, j.out); \
  return true;
