// Fast pooled and sequence lookups. Work is split over bags in contiguous static chunks, one
// per OpenMP thread; each bag is summed by one thread in id order, exactly as the reference.
#include <omp.h>

#include "kernels/kernels.h"
#include "kernels/multiversion.h"
#include "kernels/row_access.h"
#include "kernels/vec8.h"

namespace leanemb::kernels {

namespace {

constexpr int64_t kPrefetchDistance = 8;  // rows ahead


// One element of a row as fp32.
template <DType T>
inline float load_elem(const uint8_t* __restrict row, int64_t j, int64_t d) {
  if constexpr (T == DType::kF32) {
    return reinterpret_cast<const float*>(row)[j];
  } else if constexpr (T == DType::kF16) {
    return f16_to_f32(reinterpret_cast<const uint16_t*>(row)[j]);
  } else if constexpr (T == DType::kBF16) {
    return bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[j]);
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
                         bool prefetch, float* __restrict out) {
  const RowLayout& l = *t.layout;
  const int64_t d = l.dim;
  const size_t stride = l.stride_bytes;
  const int64_t nnz = a.offsets[a.batch_size];
  v8f acc[kVecs];
  for (int v = 0; v < kVecs; ++v) acc[v] = v8f{};
  for (int64_t i = begin; i < end; ++i) {
    if (prefetch && i + kPrefetchDistance < nnz)
      prefetch_span<0, 0>(t.base + static_cast<size_t>(a.ids[i + kPrefetchDistance]) * stride, l.weight_bytes);
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
  for (int64_t b = b0; b < b1; ++b) {
    float* out = a.out + b * a.ldo;
    const int64_t begin = a.offsets[b], end = a.offsets[b + 1];
    int64_t col = 0;
    // Prefetching is issued during the first column block only: it fetches whole rows.
    for (; col + 64 <= d; col += 64) pool_columns<T, 8, kV3>(t, a, begin, end, col, col == 0, out);
    for (; col + 8 <= d; col += 8) pool_columns<T, 1, kV3>(t, a, begin, end, col, col == 0, out);
    if (col < d) pool_tail<T>(t, a, begin, end, col, out);
  }
}

template <bool kV3>
inline void pool_bags_dtype(const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
  switch (t.layout->weight_dtype) {
    case DType::kF32: pool_bags<DType::kF32, kV3>(t, a, b0, b1); break;
    case DType::kF16: pool_bags<DType::kF16, kV3>(t, a, b0, b1); break;
    case DType::kBF16: pool_bags<DType::kBF16, kV3>(t, a, b0, b1); break;
    case DType::kInt8Rowwise: pool_bags<DType::kInt8Rowwise, kV3>(t, a, b0, b1); break;
  }
}

// Two explicit builds of the pooled lookup, chosen per call by CPU: with AVX2/F16C intrinsics
// for the conversions, and portable.
__attribute__((flatten)) void pool_bags_base(const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
  pool_bags_dtype<false>(t, a, b0, b1);
}
#ifdef LEANEMB_HAVE_V3
LEANEMB_TARGET_V3 __attribute__((flatten)) void pool_bags_v3(const TableView& t, const PooledArgs& a, int64_t b0,
                                                             int64_t b1) {
  pool_bags_dtype<true>(t, a, b0, b1);
}
#endif

void pool_bags_any(const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
#ifdef LEANEMB_HAVE_V3
  if (cpu_has_v3()) return pool_bags_v3(t, a, b0, b1);
#endif
  pool_bags_base(t, a, b0, b1);
}

template <DType T>
inline void copy_rows(const TableView& t, const int64_t* ids, int64_t i0, int64_t i1, int64_t nnz, float* out) {
  const RowLayout& l = *t.layout;
  const int64_t d = l.dim;
  for (int64_t i = i0; i < i1; ++i) {
    if (i + kPrefetchDistance < nnz) prefetch_span<0, 0>(t.base + static_cast<size_t>(ids[i + kPrefetchDistance]) * l.stride_bytes, l.weight_bytes);
    load_row<T>(out + i * d, t.base + static_cast<size_t>(ids[i]) * l.stride_bytes, d);
  }
}

LEANEMB_MULTIVERSION
void copy_rows_any(const TableView& t, const int64_t* ids, int64_t i0, int64_t i1, int64_t nnz, float* out) {
  switch (t.layout->weight_dtype) {
    case DType::kF32: copy_rows<DType::kF32>(t, ids, i0, i1, nnz, out); break;
    case DType::kF16: copy_rows<DType::kF16>(t, ids, i0, i1, nnz, out); break;
    case DType::kBF16: copy_rows<DType::kBF16>(t, ids, i0, i1, nnz, out); break;
    case DType::kInt8Rowwise: copy_rows<DType::kInt8Rowwise>(t, ids, i0, i1, nnz, out); break;
  }
}

}  // namespace

void pooled_lookup(const TableView& t, const PooledArgs& a, int num_threads) {
  const PooledJob job{t, a};
  pooled_lookup_multi(&job, 1, num_threads);
}

void pooled_lookup_multi(const PooledJob* jobs, int num_jobs, int num_threads) {
  const int nt = num_threads > 0 ? num_threads : omp_get_max_threads();
#pragma omp parallel num_threads(nt)
  {
    for (int j = 0; j < num_jobs; ++j) {
      int64_t b0, b1;
      static_chunk(jobs[j].args.batch_size, omp_get_thread_num(), omp_get_num_threads(), &b0, &b1);
      pool_bags_any(jobs[j].table, jobs[j].args, b0, b1);
    }
  }
}

void sequence_lookup(const TableView& t, const int64_t* ids, int64_t nnz, float* out, int num_threads) {
  const int nt = num_threads > 0 ? num_threads : omp_get_max_threads();
#pragma omp parallel num_threads(nt)
  {
    int64_t i0, i1;
    static_chunk(nnz, omp_get_thread_num(), omp_get_num_threads(), &i0, &i1);
    copy_rows_any(t, ids, i0, i1, nnz, out);
  }
}

}  // namespace leanemb::kernels
