// Fast pooled and sequence lookups. Work is split over bags in chunks that the threads of
// parallel_for (core/parallel.h) claim; each bag is summed by one thread in id order, exactly as
// the reference.
//
// Three builds of the pooled lookup (isa.h): x86-64-v4 pools up to 128 columns of a bag in
// eight 16-lane registers (a 128-dim fp32 row is one pass over its 8 cache lines; the last
// vector of a row is a masked load, so any dim takes one code path), x86-64-v3 pools 64
// columns per pass in eight 8-lane registers, and the baseline build uses the same source
// with generic vector code.
//
// Prefetch: every line a row's weights touch is prefetched kPrefetchRows ids ahead, with the
// "T2" hint (locality 1). Measured on a Zen 4 VM (E=2e6 x 128 fp32, Zipf 1.05, one thread):
// T2 beat T0 and the non-temporal hint by 10-45% (the non-temporal fill bypasses the L2 and
// L3, so the hot rows of a skewed stream were refetched from DRAM; a T0 fill occupies an L1
// miss buffer per line until it lands, which stalls the demand loads behind it), and 16 rows
// ahead beat 8 (fewer rows in flight than the memory can serve); 24 and 32 were no better.
#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "kernels/isa.h"
#include "kernels/isa_builds.h"
#include "kernels/kernels.h"
#include "kernels/row_access.h"
#include "kernels/vec16.h"
#include "kernels/vec8.h"

namespace leanemb::kernels {

namespace {

constexpr int64_t kPrefetchRows = 16;  // rows ahead
constexpr int kPrefetchLocality = 1;   // __builtin_prefetch locality: prefetcht2

// The weights of row `id`: `lines` = row_lines(table, weight bytes).
inline void prefetch_row(const TableView& t, int64_t id, int lines) {
  prefetch_lines<0, kPrefetchLocality>(t.base + static_cast<size_t>(id) * t.layout->stride_bytes, lines);
}
inline int weight_lines(const TableView& t) {
  return row_lines(t.base, t.layout->stride_bytes, t.layout->weight_bytes);
}


// One element of a row as fp32.
template <DType T>
inline float load_elem(const uint8_t* __restrict row, int64_t j, int64_t d) {
  if constexpr (T == DType::kF32) {
    return reinterpret_cast<const float*>(row)[j];
  } else if constexpr (T == DType::kF16) {
    return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[j]);
  } else if constexpr (T == DType::kBF16) {
    return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[j]);
  } else if constexpr (T == DType::kFP8) {
    return fp8_to_f32(row[j]);
  } else if constexpr (T == DType::kQ8) {
    return q8_load(row, j, d);
  } else {
    return static_cast<float>(row[j]) * load_f32(row + d) + load_f32(row + d + 4);
  }
}

template <DType T, bool kV3>
inline v8f load(const uint8_t* row, int64_t j, int64_t d) {
#ifdef LEANEMB_HAVE_V3
  if constexpr (kV3) return load8_v3<T>(row, j, d);
#endif
  return load8<T>(row, j, d);
}

// Pools columns [col, col + 8 * kVecs) of one bag in kVecs vector accumulators that stay in
// registers (the row data is the only memory traffic). The sum runs in id order, as the
// reference's, so results are bit-identical.
template <DType T, int kVecs, bool kV3>
inline void pool_columns(const TableView& t, const PooledArgs& a, int64_t begin, int64_t end, int64_t col,
                         int pf_lines, float* __restrict out) {
  const RowLayout& l = *t.layout;
  const int64_t d = l.dim;
  const size_t stride = l.stride_bytes;
  const int64_t nnz = a.offsets[a.batch_size];
  v8f acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = v8f{};
  for (int64_t i = begin; i < end; ++i) {
    if (pf_lines > 0 && i + kPrefetchRows < nnz) prefetch_row(t, a.ids[i + kPrefetchRows], pf_lines);
    const uint8_t* row = t.base + static_cast<size_t>(a.ids[i]) * stride;
    if (a.weights != nullptr) {
      const float w = a.weights[i];
      for (int v = 0; v < kVecs; ++v) acc[v] += w * load<T, kV3>(row, col + 8 * v, d);
    } else {
      for (int v = 0; v < kVecs; ++v) acc[v] += load<T, kV3>(row, col + 8 * v, d);
    }
  }
  if (a.pooling == PoolingMode::kMean && end > begin) {
    const float n = static_cast<float>(end - begin);
    for (int v = 0; v < kVecs; ++v) acc[v] /= n;
  }
  for (int v = 0; v < kVecs; ++v) store8f(out + col + 8 * v, acc[v]);
}

// Columns that do not fill a block of 8: accumulate in `out` directly.
template <DType T>
inline void pool_tail(const TableView& t, const PooledArgs& a, int64_t begin, int64_t end, int64_t col,
                      float* __restrict out) {
  const RowLayout& l = *t.layout;
  const int64_t d = l.dim;
  for (int64_t j = col; j < d; ++j) out[j] = 0.0f;
  for (int64_t i = begin; i < end; ++i) {
    const uint8_t* row = t.base + static_cast<size_t>(a.ids[i]) * l.stride_bytes;
    const float w = a.weights != nullptr ? a.weights[i] : 1.0f;
    for (int64_t j = col; j < d; ++j) out[j] += a.weights != nullptr ? w * load_elem<T>(row, j, d) : load_elem<T>(row, j, d);
  }
  if (a.pooling == PoolingMode::kMean && end > begin) {
    const float n = static_cast<float>(end - begin);
    for (int64_t j = col; j < d; ++j) out[j] /= n;
  }
}

template <DType T, bool kV3>
inline void pool_bags(const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
  const int64_t d = t.layout->dim;
  const int lines = weight_lines(t);
  for (int64_t b = b0; b < b1; ++b) {
    float* out = a.out + b * a.ldo;
    const int64_t begin = a.offsets[b], end = a.offsets[b + 1];
    int64_t col = 0;
    // Prefetching is issued during the first column block only: it fetches whole rows.
    for (; col + 64 <= d; col += 64) pool_columns<T, 8, kV3>(t, a, begin, end, col, col == 0 ? lines : 0, out);
    for (; col + 8 <= d; col += 8) pool_columns<T, 1, kV3>(t, a, begin, end, col, col == 0 ? lines : 0, out);
    if (col < d) pool_tail<T>(t, a, begin, end, col, out);
  }
}

#ifdef LEANEMB_HAVE_V4
// Pools columns [col, col + 16 * kVecs) of one bag (kTail: the last vector masked by `last`) in
// kVecs registers, in id order like the reference: acc = acc + w * x (two roundings), then / n.
// Full vectors use plain loads: a masked load of a line that misses the cache cost about 10%
// of the lookup on Zen 4. kWeighted is a template parameter so that the unweighted loop adds
// straight from memory (fewer instructions per row: more rows, and page walks, in flight).
template <DType T, int kVecs, bool kTail, bool kWeighted>
LEANEMB_TARGET_V4 inline void pool_block_v4(const TableView& t, const PooledArgs& a, int64_t begin, int64_t end,
                                            int64_t col, __mmask16 last, bool prefetch, float* __restrict out) {
  // Everything the loop reads besides the rows lives in locals (no reloads through t and a),
  // and the loads use constant offsets from the block's first column.
  const int64_t d = t.layout->dim;
  const size_t stride = t.layout->stride_bytes;
  const size_t weight_bytes = t.layout->weight_bytes;
  const uint8_t* const base = t.base;
  const int64_t* const ids = a.ids;
  const float* const weights = a.weights;
  const size_t col_bytes = static_cast<size_t>(col) * kElemBytes<T>;
  // Rows i + kPrefetchRows exist for i < pf_end (no prefetch: pf_end = begin).
  const int64_t pf_end = prefetch ? a.offsets[a.batch_size] - kPrefetchRows : begin;
  // The prefetch of a row ahead is straight-line code: the block's lines at compile-time
  // offsets (kVecs vectors from the first column), then the row's last weight byte (the extra
  // line of a row that does not start on a line, and int8's scale and bias), then, only for
  // rows of more than 128 columns, the rest of the row.
  constexpr size_t kBlockBytes = 16 * kVecs * kElemBytes<T>;
  const bool multi_block = d > 128;
  // The last byte lies on a line of its own only for unaligned rows, int8 rows (scale, bias), q8 rows (scale)
  // and blocks narrower than kBlockBytes.
  const bool pf_last = kTail || T == DType::kInt8Rowwise || T == DType::kQ8 || stride % 64 != 0 || reinterpret_cast<uintptr_t>(base) % 64 != 0;
  __m512 acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t i = begin; i < end; ++i) {
    if (i < pf_end) {
      const uint8_t* q = base + static_cast<size_t>(ids[i + kPrefetchRows]) * stride;
      for (size_t o = 0; o < kBlockBytes; o += 64) prefetch_line<0, kPrefetchLocality>(q + o);
      if (pf_last) prefetch_line<0, kPrefetchLocality>(q + weight_bytes - 1);
      if (multi_block) prefetch_span<0, kPrefetchLocality>(q + kBlockBytes, weight_bytes - kBlockBytes);
    }
    const uint8_t* row = base + static_cast<size_t>(ids[i]) * stride;
    const RowAffine af = row_affine16<T>(row, d);
    const uint8_t* rc = row + col_bytes;
    const __m512 w = kWeighted ? _mm512_set1_ps(weights[i]) : _mm512_setzero_ps();
    for (int v = 0; v < kVecs; ++v) {
      __m512 x = (kTail && v == kVecs - 1) ? load16<T>(rc, 16 * v, last, af) : load16<T>(rc, 16 * v, af);
      if (kWeighted) x = _mm512_mul_ps(w, x);
      acc[v] = _mm512_add_ps(acc[v], x);
    }
  }
  if (a.pooling == PoolingMode::kMean && end > begin) {
    const __m512 n = _mm512_set1_ps(static_cast<float>(end - begin));
    for (int v = 0; v < kVecs; ++v) acc[v] = _mm512_div_ps(acc[v], n);
  }
  for (int v = 0; v + 1 < kVecs; ++v) _mm512_storeu_ps(out + col + 16 * v, acc[v]);
  if (kTail) _mm512_mask_storeu_ps(out + col + 16 * (kVecs - 1), last, acc[kVecs - 1]);
  else _mm512_storeu_ps(out + col + 16 * (kVecs - 1), acc[kVecs - 1]);
}

template <DType T, bool kTail, bool kW>
LEANEMB_TARGET_V4 inline void pool_block_dispatch_v4(int vecs, const TableView& t, const PooledArgs& a, int64_t begin,
                                                     int64_t end, int64_t col, __mmask16 last, bool pf,
                                                     float* __restrict out) {
  switch (vecs) {
    case 1: return pool_block_v4<T, 1, kTail, kW>(t, a, begin, end, col, last, pf, out);
    case 2: return pool_block_v4<T, 2, kTail, kW>(t, a, begin, end, col, last, pf, out);
    case 3: return pool_block_v4<T, 3, kTail, kW>(t, a, begin, end, col, last, pf, out);
    case 4: return pool_block_v4<T, 4, kTail, kW>(t, a, begin, end, col, last, pf, out);
    case 5: return pool_block_v4<T, 5, kTail, kW>(t, a, begin, end, col, last, pf, out);
    case 6: return pool_block_v4<T, 6, kTail, kW>(t, a, begin, end, col, last, pf, out);
    case 7: return pool_block_v4<T, 7, kTail, kW>(t, a, begin, end, col, last, pf, out);
    default: return pool_block_v4<T, 8, kTail, kW>(t, a, begin, end, col, last, pf, out);
  }
}

template <DType T>
LEANEMB_TARGET_V4 inline void pool_bags_v4_t(const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
  const int64_t d = t.layout->dim;
  for (int64_t b = b0; b < b1; ++b) {
    float* out = a.out + b * a.ldo;
    const int64_t begin = a.offsets[b], end = a.offsets[b + 1];
    // Blocks of up to 128 columns; prefetching is issued during the first block only (it
    // fetches whole rows).
    for (int64_t col = 0; col < d; col += 128) {
      const int64_t cols = std::min<int64_t>(128, d - col);
      const int vecs = static_cast<int>((cols + 15) / 16);
      const __mmask16 last = lane_mask16(cols - 16 * (vecs - 1));
      const bool pf = col == 0;
      const bool tail = last != 0xffff, weighted = a.weights != nullptr;
      if (!tail && !weighted) pool_block_dispatch_v4<T, false, false>(vecs, t, a, begin, end, col, last, pf, out);
      else if (!tail) pool_block_dispatch_v4<T, false, true>(vecs, t, a, begin, end, col, last, pf, out);
      else if (!weighted) pool_block_dispatch_v4<T, true, false>(vecs, t, a, begin, end, col, last, pf, out);
      else pool_block_dispatch_v4<T, true, true>(vecs, t, a, begin, end, col, last, pf, out);
    }
  }
}

#endif  // LEANEMB_HAVE_V4

// Bags [b0, b1) of dtype T with build I's column loop: x86-64-v4 pools 128-column blocks in
// 16-lane registers; x86-64-v3 uses AVX2/F16C intrinsics for the conversions; the baseline
// build is portable.
template <Isa I, DType T>
inline void pool_bags_isa(const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
#ifdef LEANEMB_HAVE_V4
  if constexpr (I == Isa::kV4) {
    pool_bags_v4_t<T>(t, a, b0, b1);
  } else {
    pool_bags<T, I == Isa::kV3>(t, a, b0, b1);
  }
#else
  pool_bags<T, I == Isa::kV3>(t, a, b0, b1);
#endif
}

template <Isa I>
inline void pool_bags_t(const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
  switch (t.layout->weight_dtype) {
    case DType::kF32: pool_bags_isa<I, DType::kF32>(t, a, b0, b1); break;
    case DType::kF16: pool_bags_isa<I, DType::kF16>(t, a, b0, b1); break;
    case DType::kBF16: pool_bags_isa<I, DType::kBF16>(t, a, b0, b1); break;
    case DType::kFP8: pool_bags_isa<I, DType::kFP8>(t, a, b0, b1); break;
    case DType::kQ8: pool_bags_isa<I, DType::kQ8>(t, a, b0, b1); break;
    case DType::kInt8Rowwise: pool_bags_isa<I, DType::kInt8Rowwise>(t, a, b0, b1); break;
    default: LEANEMB_CHECK(false, "not a row dtype");
  }
}

// One build per ISA (isa_builds.h): pool_bags_base, pool_bags_v3, pool_bags_v4.
#define LEANEMB_POOL_BAGS_BODY(I) pool_bags_t<I>(t, a, b0, b1);
LEANEMB_ISA_BUILDS(void, pool_bags, (const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1), LEANEMB_POOL_BAGS_BODY)
#undef LEANEMB_POOL_BAGS_BODY

void pool_bags_any(Isa isa, const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
  LEANEMB_RETURN_ISA_CALL(isa, pool_bags, t, a, b0, b1);
}

template <DType T>
inline void copy_rows(const TableView& t, const int64_t* ids, int64_t i0, int64_t i1, int64_t nnz, float* out) {
  const RowLayout& l = *t.layout;
  const int64_t d = l.dim;
  const int pf_lines = weight_lines(t);
  for (int64_t i = i0; i < i1; ++i) {
    if (i + kPrefetchRows < nnz) prefetch_row(t, ids[i + kPrefetchRows], pf_lines);
    load_row<T>(out + i * d, t.base + static_cast<size_t>(ids[i]) * l.stride_bytes, d);
  }
}

inline void copy_rows_any_impl(const TableView& t, const int64_t* ids, int64_t i0, int64_t i1, int64_t nnz, float* out) {
  switch (t.layout->weight_dtype) {
    case DType::kF32: copy_rows<DType::kF32>(t, ids, i0, i1, nnz, out); break;
    case DType::kF16: copy_rows<DType::kF16>(t, ids, i0, i1, nnz, out); break;
    case DType::kBF16: copy_rows<DType::kBF16>(t, ids, i0, i1, nnz, out); break;
    case DType::kFP8: copy_rows<DType::kFP8>(t, ids, i0, i1, nnz, out); break;
    case DType::kQ8: copy_rows<DType::kQ8>(t, ids, i0, i1, nnz, out); break;
    case DType::kInt8Rowwise: copy_rows<DType::kInt8Rowwise>(t, ids, i0, i1, nnz, out); break;
    default: LEANEMB_CHECK(false, "not a row dtype");
  }
}
// The sequence lookup's row copies: plain loops GCC vectorizes in each build.
LEANEMB_ISA_KERNEL(void, copy_rows_any, (const TableView& t, const int64_t* ids, int64_t i0, int64_t i1, int64_t nnz, float* out),
                   (t, ids, i0, i1, nnz, out))

}  // namespace

void pooled_lookup(const TableView& t, const PooledArgs& a, int num_threads) {
  const PooledJob job{t, a};
  pooled_lookup_multi(&job, 1, num_threads);
}

void pooled_lookup_multi(const PooledJob* jobs, int num_jobs, int num_threads) {
  const Isa isa = active_isa();
  // One parallel_for over every job's bags, job after job (a chunk may span two jobs), with
  // chunks of about kChunkWork row elements.
  std::vector<int64_t> start(static_cast<size_t>(num_jobs) + 1, 0);
  int64_t work = 0;
  for (int j = 0; j < num_jobs; ++j) {
    const PooledArgs& a = jobs[j].args;
    start[static_cast<size_t>(j) + 1] = start[static_cast<size_t>(j)] + a.batch_size;
    if (a.batch_size > 0) work += (a.offsets[a.batch_size] - a.offsets[0] + a.batch_size) * jobs[j].table.layout->dim;
  }
  const int64_t total = start.back();
  const int64_t grain = grain_for(total > 0 ? work / total : 1);
  parallel_for(total, grain, [&](int64_t b, int64_t e, int) {
    size_t j = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), b) - start.begin()) - 1;
    while (b < e) {
      const int64_t end = std::min(e, start[j + 1]);
      if (end > b) pool_bags_any(isa, jobs[j].table, jobs[j].args, b - start[j], end - start[j]);
      b = end;
      ++j;
    }
  }, num_threads);
}

void sequence_lookup(const TableView& t, const int64_t* ids, int64_t nnz, float* out, int num_threads) {
  parallel_for(nnz, grain_for(t.layout->dim), [&](int64_t i0, int64_t i1, int) { copy_rows_any(t, ids, i0, i1, nnz, out); },
               num_threads);
}

}  // namespace leanemb::kernels
