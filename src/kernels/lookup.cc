// Fast pooled and sequence lookups. Work is split over bags in contiguous static chunks, one
// per OpenMP thread; each bag is summed by one thread in id order, exactly as the reference.
#include <omp.h>

#include "kernels/kernels.h"
#include "kernels/multiversion.h"
#include "kernels/row_access.h"

namespace leanemb::kernels {

namespace {

constexpr int64_t kPrefetchDistance = 8;  // rows ahead

inline void prefetch_row(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 0);
}

template <DType T>
inline void accumulate(float* __restrict out, const uint8_t* __restrict row, int64_t d, float w, bool weighted) {
  if constexpr (T == DType::kF32) {
    const float* r = reinterpret_cast<const float*>(row);
    if (weighted) for (int64_t j = 0; j < d; ++j) out[j] += w * r[j];
    else for (int64_t j = 0; j < d; ++j) out[j] += r[j];
  } else if constexpr (T == DType::kF16) {
    const uint16_t* r = reinterpret_cast<const uint16_t*>(row);
    if (weighted) for (int64_t j = 0; j < d; ++j) out[j] += w * f16_to_f32(r[j]);
    else for (int64_t j = 0; j < d; ++j) out[j] += f16_to_f32(r[j]);
  } else if constexpr (T == DType::kBF16) {
    const uint16_t* r = reinterpret_cast<const uint16_t*>(row);
    if (weighted) for (int64_t j = 0; j < d; ++j) out[j] += w * bf16_to_f32(r[j]);
    else for (int64_t j = 0; j < d; ++j) out[j] += bf16_to_f32(r[j]);
  } else {
    const float scale = load_f32(row + d), bias = load_f32(row + d + 4);
    if (weighted) for (int64_t j = 0; j < d; ++j) out[j] += w * (static_cast<float>(row[j]) * scale + bias);
    else for (int64_t j = 0; j < d; ++j) out[j] += static_cast<float>(row[j]) * scale + bias;
  }
}

template <DType T>
inline void pool_bags(const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
  const RowLayout& l = *t.layout;
  const int64_t d = l.dim;
  const size_t stride = l.stride_bytes;
  const size_t touch = l.weight_bytes;
  const int64_t nnz = a.offsets[a.batch_size];
  for (int64_t b = b0; b < b1; ++b) {
    float* __restrict out = a.out + b * a.ldo;
    for (int64_t j = 0; j < d; ++j) out[j] = 0.0f;
    const int64_t begin = a.offsets[b], end = a.offsets[b + 1];
    for (int64_t i = begin; i < end; ++i) {
      if (i + kPrefetchDistance < nnz) prefetch_row(t.base + static_cast<size_t>(a.ids[i + kPrefetchDistance]) * stride, touch);
      const uint8_t* row = t.base + static_cast<size_t>(a.ids[i]) * stride;
      accumulate<T>(out, row, d, a.weights ? a.weights[i] : 1.0f, a.weights != nullptr);
    }
    if (a.pooling == PoolingMode::kMean && end > begin) {
      const float n = static_cast<float>(end - begin);
      for (int64_t j = 0; j < d; ++j) out[j] /= n;
    }
  }
}

LEANEMB_MULTIVERSION
void pool_bags_any(const TableView& t, const PooledArgs& a, int64_t b0, int64_t b1) {
  switch (t.layout->weight_dtype) {
    case DType::kF32: pool_bags<DType::kF32>(t, a, b0, b1); break;
    case DType::kF16: pool_bags<DType::kF16>(t, a, b0, b1); break;
    case DType::kBF16: pool_bags<DType::kBF16>(t, a, b0, b1); break;
    case DType::kInt8Rowwise: pool_bags<DType::kInt8Rowwise>(t, a, b0, b1); break;
  }
}

template <DType T>
inline void copy_rows(const TableView& t, const int64_t* ids, int64_t i0, int64_t i1, int64_t nnz, float* out) {
  const RowLayout& l = *t.layout;
  const int64_t d = l.dim;
  for (int64_t i = i0; i < i1; ++i) {
    if (i + kPrefetchDistance < nnz) prefetch_row(t.base + static_cast<size_t>(ids[i + kPrefetchDistance]) * l.stride_bytes, l.weight_bytes);
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
  const int nt = num_threads > 0 ? num_threads : omp_get_max_threads();
  if (nt == 1 || a.batch_size < 2) {
    pool_bags_any(t, a, 0, a.batch_size);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    int64_t b0, b1;
    static_chunk(a.batch_size, omp_get_thread_num(), omp_get_num_threads(), &b0, &b1);
    pool_bags_any(t, a, b0, b1);
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
