// Fast fused optimizer updates: one unique row at a time, converted to fp32 scratch arrays,
// updated with vectorizable loops in the same arithmetic order as ref_update_row, and stored
// back (weights with stochastic rounding). Rows are split over threads in static chunks; rows
// are independent, so the result does not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/multiversion.h"
#include "kernels/row_access.h"
#include "kernels/vec8.h"

namespace leanemb::kernels {

namespace {

inline bool state_signed(OptimizerKind k, int idx) {
  return idx == 0 && (k == OptimizerKind::kAdam || k == OptimizerKind::kPartialRowwiseAdam);
}

template <StateDType S>
inline void load_state(const RowLayout& l, const uint8_t* row, int k, float* __restrict out) {
  const uint8_t* p = row + (k == 0 ? l.m_offset : l.v_offset);
  const int64_t d = l.dim;
  if constexpr (S == StateDType::kF32) {
    std::memcpy(out, p, static_cast<size_t>(d) * 4);
  } else if constexpr (S == StateDType::kBF16) {
    const uint16_t* r = reinterpret_cast<const uint16_t*>(p);
    for (int64_t j = 0; j < d; ++j) out[j] = bf16_to_f32(r[j]);
  } else {
    const uint8_t* scales = row + (k == 0 ? l.m_scale_offset : l.v_scale_offset);
    for (int64_t b = 0; b < l.num_blocks; ++b) {
      const int64_t j0 = b * kQuantBlockSize;
      dequantize_block(p + j0, std::min(kQuantBlockSize, d - j0), state_signed(l.optimizer.kind, k),
                       load_f32(scales + 4 * b), out + j0);
    }
  }
}

template <StateDType S>
inline void store_state(const RowLayout& l, uint8_t* row, int k, const float* __restrict x, uint32_t key) {
  uint8_t* p = row + (k == 0 ? l.m_offset : l.v_offset);
  const int64_t d = l.dim;
  if constexpr (S == StateDType::kF32) {
    std::memcpy(p, x, static_cast<size_t>(d) * 4);
  } else if constexpr (S == StateDType::kBF16) {
    store_row_sr<DType::kBF16>(p, x, d, key, state_sr_column(d, k, 0));
  } else {
    uint8_t* scales = row + (k == 0 ? l.m_scale_offset : l.v_scale_offset);
    for (int64_t b = 0; b < l.num_blocks; ++b) {
      const int64_t j0 = b * kQuantBlockSize;
      store_f32(scales + 4 * b,
                quantize_block(x + j0, std::min(kQuantBlockSize, d - j0), state_signed(l.optimizer.kind, k), p + j0));
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

struct Scratch {
  float* w;
  float* g;
  float* m;
  float* v;
};

template <DType W, StateDType S>
inline void update_range(const TableView& t, const int64_t* rows, const float* grads, int64_t u0, int64_t u1,
                         const UpdateStep& s, Scratch sc) {
  const RowLayout& l = *t.layout;
  const OptimizerOptions& o = l.optimizer;
  const int64_t d = l.dim;
  const float nlr = -o.learning_rate;
  const float lr = o.learning_rate;
  const float eps = o.eps;
  const float wd = o.weight_decay;
  const float nstep = -adam_step_size(o, s.step);
  const float c1 = one_minus(o.beta1), c2 = one_minus(o.beta2);
  float* __restrict w = sc.w;
  float* __restrict g = sc.g;
  float* __restrict m = sc.m;
  float* __restrict v = sc.v;

  for (int64_t u = u0; u < u1; ++u) {
    if (u + 2 < u1) {
      const uint8_t* next = t.base + static_cast<size_t>(rows[u + 2]) * l.stride_bytes;
      prefetch_span<1, 0>(next, l.weight_bytes + l.state_bytes);
    }
    uint8_t* row = t.base + static_cast<size_t>(rows[u]) * l.stride_bytes;
    const float* __restrict gin = grads + u * d;
    const uint32_t key = row_key(s.seed, static_cast<uint64_t>(s.step), t.table_index, t.key_row(rows[u]));
    load_row<W>(w, row, d);
    if (wd > 0.0f) {
      for (int64_t j = 0; j < d; ++j) g[j] = gin[j] + wd * w[j];
    } else {
      std::memcpy(g, gin, static_cast<size_t>(d) * 4);
    }
    switch (o.kind) {
      case OptimizerKind::kSgd:
        for (int64_t j = 0; j < d; ++j) w[j] = w[j] + nlr * g[j];
        break;
      case OptimizerKind::kAdagrad:
        load_state<S>(l, row, 0, m);
        for (int64_t j = 0; j < d; ++j) {
          m[j] = m[j] + g[j] * g[j];
          w[j] = w[j] + nlr * (g[j] / (std::sqrt(m[j]) + eps));
        }
        store_state<S>(l, row, 0, m, key);
        break;
      case OptimizerKind::kRowwiseAdagrad: {
        const float s_new = load_f32(row + l.rowwise_offset) + sum_squares_v(g, d) / static_cast<float>(d);
        const float mult = lr / (std::sqrt(s_new) + eps);
        for (int64_t j = 0; j < d; ++j) w[j] = w[j] - mult * g[j];
        store_f32(row + l.rowwise_offset, s_new);
        break;
      }
      case OptimizerKind::kAdam:
        load_state<S>(l, row, 0, m);
        load_state<S>(l, row, 1, v);
        for (int64_t j = 0; j < d; ++j) {
          m[j] = m[j] + (g[j] - m[j]) * c1;
          v[j] = v[j] + (g[j] * g[j] - v[j]) * c2;
          w[j] = w[j] + nstep * (m[j] / (std::sqrt(v[j]) + eps));
        }
        store_state<S>(l, row, 0, m, key);
        store_state<S>(l, row, 1, v, key);
        break;
      case OptimizerKind::kPartialRowwiseAdam: {
        const float v_old = load_f32(row + l.rowwise_offset);
        const float v_new = v_old + (sum_squares_v(g, d) / static_cast<float>(d) - v_old) * c2;
        const float denom = std::sqrt(v_new) + eps;
        load_state<S>(l, row, 0, m);
        for (int64_t j = 0; j < d; ++j) {
          m[j] = m[j] + (g[j] - m[j]) * c1;
          w[j] = w[j] + nstep * (m[j] / denom);
        }
        store_state<S>(l, row, 0, m, key);
        store_f32(row + l.rowwise_offset, v_new);
        break;
      }
    }
    store_row_sr<W>(row, w, d, key, 0);
  }
}

template <DType W>
inline void update_range_w(const TableView& t, const int64_t* rows, const float* grads, int64_t u0, int64_t u1,
                           const UpdateStep& s, Scratch sc) {
  switch (t.layout->optimizer.state_dtype) {
    case StateDType::kF32: update_range<W, StateDType::kF32>(t, rows, grads, u0, u1, s, sc); break;
    case StateDType::kBF16: update_range<W, StateDType::kBF16>(t, rows, grads, u0, u1, s, sc); break;
    case StateDType::kInt8Blockwise: update_range<W, StateDType::kInt8Blockwise>(t, rows, grads, u0, u1, s, sc); break;
  }
}

LEANEMB_MULTIVERSION
void update_range_any(const TableView& t, const int64_t* rows, const float* grads, int64_t u0, int64_t u1,
                      const UpdateStep& s, Scratch sc) {
  switch (t.layout->weight_dtype) {
    case DType::kF32: update_range_w<DType::kF32>(t, rows, grads, u0, u1, s, sc); break;
    case DType::kF16: update_range_w<DType::kF16>(t, rows, grads, u0, u1, s, sc); break;
    case DType::kBF16: update_range_w<DType::kBF16>(t, rows, grads, u0, u1, s, sc); break;
    case DType::kInt8Rowwise: LEANEMB_CHECK(false, "int8 rows are not trainable");
  }
}

// Register-blocked segment reduce: columns [col, col + 8 * kVecs) of one unique row, in
// vector accumulators. The first column block prefetches gradient vectors a few
// contributions ahead.
template <int kVecs>
inline void reduce_columns(const SegmentSource& s, int64_t u, int64_t col, bool prefetch, int64_t n,
                           float* __restrict g) {
  constexpr int64_t kAhead = 8;
  v8f acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = v8f{};
  for (int64_t k = s.seg[u]; k < s.seg[u + 1]; ++k) {
    if (prefetch && k + kAhead < n) {
      const float* p = s.ptr[k + kAhead];
      for (int64_t off = 0; off < s.dim; off += 16) __builtin_prefetch(p + off, 0, 1);
    }
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

LEANEMB_MULTIVERSION
bool reduce_range(const SegmentSource& s, int64_t u0, int64_t u1, float* out) {
  const int64_t d = s.dim;
  int bad = 0;
  for (int64_t u = u0; u < u1; ++u) {
    float* __restrict g = out + (u - u0) * d;
    const int64_t n = s.seg[u1];  // prefetch stays inside this range's contributions
    int64_t col = 0;
    for (; col + 64 <= d; col += 64) reduce_columns<8>(s, u, col, col == 0, n, g);
    for (; col + 8 <= d; col += 8) reduce_columns<1>(s, u, col, col == 0, n, g);
    if (col < d) reduce_tail(s, u, col, g);
    for (int64_t j = 0; j < d; ++j) bad |= std::isfinite(g[j]) ? 0 : 1;
  }
  return bad == 0;
}

constexpr int64_t kFusedChunkRows = 16;  // unique rows reduced per batch of updates (fits L1/L2)

}  // namespace

bool reduce_segments(const SegmentSource& s, int64_t u0, int64_t u1, float* out) {
  return reduce_range(s, u0, u1, out);
}

size_t reduce_and_update_scratch_floats(int64_t dim, int num_threads) {
  return static_cast<size_t>(num_threads) * static_cast<size_t>(kFusedChunkRows + 4) * static_cast<size_t>(dim);
}

void reduce_and_update(const TableView& t, const SegmentSource& s, const int64_t* rows, int64_t num_unique,
                       const UpdateStep& step, int num_threads, float* scratch) {
  const int nt = num_threads > 0 ? num_threads : omp_get_max_threads();
  const int64_t d = t.layout->dim;
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    float* mine = scratch + static_cast<size_t>(tid) * static_cast<size_t>(kFusedChunkRows + 4) * static_cast<size_t>(d);
    float* grads = mine + 4 * d;
    Scratch sc{mine, mine + d, mine + 2 * d, mine + 3 * d};
    int64_t u0, u1;
    static_chunk(num_unique, tid, omp_get_num_threads(), &u0, &u1);
    for (int64_t c = u0; c < u1; c += kFusedChunkRows) {
      const int64_t c1 = std::min(c + kFusedChunkRows, u1);
      // Start fetching this chunk's rows; reducing their gradients hides much of the latency.
      const size_t stride = t.layout->stride_bytes, used = t.layout->weight_bytes + t.layout->state_bytes;
      for (int64_t u = c; u < c1; ++u) {
        const uint8_t* row = t.base + static_cast<size_t>(rows[u]) * stride;
        prefetch_span<1, 0>(row, used);
      }
      reduce_range(s, c, c1, grads);
      update_range_any(t, rows + c, grads, 0, c1 - c, step, sc);
    }
  }
}

void update_rows(const TableView& t, const int64_t* rows, const float* grads, int64_t num_unique,
                 const UpdateStep& s, int num_threads) {
  const int nt = num_threads > 0 ? num_threads : omp_get_max_threads();
  const int64_t d = t.layout->dim;
#pragma omp parallel num_threads(nt)
  {
    // Per-thread fp32 scratch of 4 rows: small (16 * dim bytes) and reused for every row.
    std::vector<float> buf(static_cast<size_t>(4 * d));
    Scratch sc{buf.data(), buf.data() + d, buf.data() + 2 * d, buf.data() + 3 * d};
    int64_t u0, u1;
    static_chunk(num_unique, omp_get_thread_num(), omp_get_num_threads(), &u0, &u1);
    update_range_any(t, rows, grads, u0, u1, s, sc);
  }
}

}  // namespace leanemb::kernels
