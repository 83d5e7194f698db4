// Scalar reference kernels: one element at a time, in the canonical arithmetic order. These are
// the oracle every fast kernel is tested against; keep them obvious rather than fast.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/quant4.h"
#include "kernels/row_access.h"

namespace leanemb::kernels {

namespace {

float load_weight(const RowLayout& l, const uint8_t* row, int64_t j) {
  switch (l.weight_dtype) {
    case DType::kF32: return load_f32(row + 4 * j);
    case DType::kF16: return f16_to_f32(load_u16(row + 2 * j));
    case DType::kBF16: return bf16_to_f32(load_u16(row + 2 * j));
    case DType::kFP8: return fp8_to_f32(row[j]);
    case DType::kQ8: return q8_load(row, j, l.dim);
    case DType::kInt8Rowwise: {
      const float scale = load_f32(row + l.dim);
      const float bias = load_f32(row + l.dim + 4);
      return static_cast<float>(row[j]) * scale + bias;
    }
    default: LEANEMB_CHECK(false, "not a row dtype");
  }
  return 0.0f;
}

// Stores a row's weights with stochastic rounding (fp16, bf16, fp8: element by element; q8: the
// whole row, whose scale depends on every element) or exactly (fp32).
void store_row_weights_sr(const RowLayout& l, uint8_t* row, const float* w, uint32_t key) {
  const int64_t d = l.dim;
  auto bits = [key](int64_t j) { return column_bits(key, static_cast<uint32_t>(j)); };
  switch (l.weight_dtype) {
    case DType::kF32:
      for (int64_t j = 0; j < d; ++j) store_f32(row + 4 * j, w[j]);
      break;
    case DType::kF16:
      for (int64_t j = 0; j < d; ++j) store_u16(row + 2 * j, f32_to_f16_sr(w[j], bits(j)));
      break;
    case DType::kBF16:
      for (int64_t j = 0; j < d; ++j) store_u16(row + 2 * j, f32_to_bf16_sr(w[j], bits(j)));
      break;
    case DType::kFP8:
      for (int64_t j = 0; j < d; ++j) row[j] = f32_to_fp8_sr(w[j], bits(j));
      break;
    case DType::kQ8: q8_store<true>(row, w, d, key, 0); break;
    case DType::kInt8Rowwise: LEANEMB_CHECK(false, "int8 rows are not trainable");
    default: LEANEMB_CHECK(false, "not a row dtype");
  }
}

void store_elem_state(const RowLayout& l, uint8_t* row, int k, const float* x, uint32_t key) {
  uint8_t* p = row + l.state_offset(k);
  switch (l.optimizer.state_dtype) {
    case DType::kF32:
      for (int64_t j = 0; j < l.dim; ++j) store_f32(p + 4 * j, x[j]);
      break;
    case DType::kBF16:
      for (int64_t j = 0; j < l.dim; ++j)
        store_u16(p + 2 * j, f32_to_bf16_sr(x[j], column_bits(key, state_sr_column(l.dim, k, j))));
      break;
    case DType::kInt8Blockwise:
      for (int64_t b = 0; b < l.num_blocks; ++b) {
        const int64_t j0 = b * kQuantBlockSize;
        const int64_t n = std::min(kQuantBlockSize, l.dim - j0);
        const float scale = quantize_block(x + j0, n, l.state_signed(k), p + j0);
        store_f32(row + l.state_scale_offset(k) + 4 * b, scale);
      }
      break;
    case DType::kInt4Blockwise:
      quant4_store_array(x, l.dim, l.state_signed(k), p, row + l.state_scale_offset(k), key, state_sr_column(l.dim, k, 0));
      break;
    default: LEANEMB_CHECK(false, "not an optimizer state dtype");
  }
}

}  // namespace

void ref_load_weights(const RowLayout& l, const uint8_t* row, float* out) {
  for (int64_t j = 0; j < l.dim; ++j) out[j] = load_weight(l, row, j);
}

void ref_store_weights_rne(const RowLayout& l, uint8_t* row, const float* w) {
  switch (l.weight_dtype) {
    case DType::kF32:
      for (int64_t j = 0; j < l.dim; ++j) store_f32(row + 4 * j, w[j]);
      break;
    case DType::kF16:
      for (int64_t j = 0; j < l.dim; ++j) store_u16(row + 2 * j, f32_to_f16_rne(w[j]));
      break;
    case DType::kBF16:
      for (int64_t j = 0; j < l.dim; ++j) store_u16(row + 2 * j, f32_to_bf16_rne(w[j]));
      break;
    case DType::kFP8:
      for (int64_t j = 0; j < l.dim; ++j) row[j] = f32_to_fp8_rn(w[j]);
      break;
    case DType::kQ8:
      q8_store<false>(row, w, l.dim, 0, 0);
      break;
    case DType::kInt8Rowwise: {
      float lo = w[0], hi = w[0];
      for (int64_t j = 1; j < l.dim; ++j) {
        lo = std::min(lo, w[j]);
        hi = std::max(hi, w[j]);
      }
      const float scale = (hi - lo) / 255.0f;
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (int64_t j = 0; j < l.dim; ++j) {
        const float q = std::nearbyint((w[j] - lo) * inv);
        row[j] = static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
      }
      store_f32(row + l.dim, scale);
      store_f32(row + l.dim + 4, lo);
      break;
    }
    default: LEANEMB_CHECK(false, "not a row dtype");
  }
}

void ref_load_elem_state(const RowLayout& l, const uint8_t* row, int k, float* out) {
  const uint8_t* p = row + l.state_offset(k);
  switch (l.optimizer.state_dtype) {
    case DType::kF32:
      for (int64_t j = 0; j < l.dim; ++j) out[j] = load_f32(p + 4 * j);
      break;
    case DType::kBF16:
      for (int64_t j = 0; j < l.dim; ++j) out[j] = bf16_to_f32(load_u16(p + 2 * j));
      break;
    case DType::kInt8Blockwise:
      for (int64_t b = 0; b < l.num_blocks; ++b) {
        const int64_t j0 = b * kQuantBlockSize;
        const int64_t n = std::min(kQuantBlockSize, l.dim - j0);
        dequantize_block(p + j0, n, l.state_signed(k), load_f32(row + l.state_scale_offset(k) + 4 * b), out + j0);
      }
      break;
    case DType::kInt4Blockwise:
      quant4_load_array(p, row + l.state_scale_offset(k), l.dim, l.state_signed(k), out);
      break;
    default: LEANEMB_CHECK(false, "not an optimizer state dtype");
  }
}

float ref_load_rowwise_state(const RowLayout& l, const uint8_t* row) { return load_f32(row + l.rowwise_offset); }

float sum_squares(const float* g, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t j = 0; j < n; ++j) s[j % 8] += g[j] * g[j];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

void ref_pooled_lookup(const TableView& t, const PooledArgs& a) {
  const RowLayout& l = *t.layout;
  for (int64_t b = 0; b < a.batch_size; ++b) {
    float* out = a.out + b * a.ldo;
    for (int64_t j = 0; j < l.dim; ++j) out[j] = 0.0f;
    const int64_t begin = a.offsets[b], end = a.offsets[b + 1];
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* row = t.base + static_cast<size_t>(a.ids[i]) * l.stride_bytes;
      for (int64_t j = 0; j < l.dim; ++j) {
        const float x = load_weight(l, row, j);
        out[j] += a.weights ? a.weights[i] * x : x;
      }
    }
    if (a.pooling == PoolingMode::kMean && end > begin) {
      const float n = static_cast<float>(end - begin);
      for (int64_t j = 0; j < l.dim; ++j) out[j] /= n;
    }
  }
}

void ref_sequence_lookup(const TableView& t, const int64_t* ids, int64_t nnz, float* out) {
  const RowLayout& l = *t.layout;
  for (int64_t i = 0; i < nnz; ++i)
    ref_load_weights(l, t.base + static_cast<size_t>(ids[i]) * l.stride_bytes, out + i * l.dim);
}

bool ref_reduce_segments(const SegmentSource& s, int64_t u0, int64_t u1, float* out) {
  bool finite = true;
  for (int64_t u = u0; u < u1; ++u) {
    float* g = out + (u - u0) * s.dim;
    for (int64_t j = 0; j < s.dim; ++j) {
      float acc = 0.0f;
      for (int64_t k = s.seg[u]; k < s.seg[u + 1]; ++k) acc += s.scale[k] * s.ptr[k][j];
      g[j] = acc * s.multiplier;
      finite = finite && std::isfinite(g[j]);
    }
  }
  return finite;
}

void ref_update_row(const TableView& t, int64_t row_id, const float* grad, const UpdateStep& s) {
  const RowLayout& l = *t.layout;
  const OptimizerOptions& o = l.optimizer;
  const int64_t d = l.dim;
  uint8_t* row = t.base + static_cast<size_t>(row_id) * l.stride_bytes;
  const uint32_t key = row_key(s.seed, static_cast<uint64_t>(s.step), t.table_index, t.key_row(row_id));

  std::vector<float> w(d), g(d), m(d), v(d);
  ref_load_weights(l, row, w.data());
  for (int64_t j = 0; j < d; ++j) g[j] = o.weight_decay > 0.0f ? grad[j] + o.weight_decay * w[j] : grad[j];
  const float nlr = -o.learning_rate;

  switch (o.kind) {
    case OptimizerKind::kSgd:
      for (int64_t j = 0; j < d; ++j) w[j] = w[j] + nlr * g[j];
      break;
    case OptimizerKind::kAdagrad:
      ref_load_elem_state(l, row, 0, m.data());
      for (int64_t j = 0; j < d; ++j) {
        m[j] = m[j] + g[j] * g[j];
        w[j] = w[j] + nlr * (g[j] / (std::sqrt(m[j]) + o.eps));
      }
      store_elem_state(l, row, 0, m.data(), key);
      break;
    case OptimizerKind::kRowwiseAdagrad: {
      const float s_new = load_f32(row + l.rowwise_offset) + sum_squares(g.data(), d) / static_cast<float>(d);
      const float mult = o.learning_rate / (std::sqrt(s_new) + o.eps);
      for (int64_t j = 0; j < d; ++j) w[j] = w[j] - mult * g[j];
      store_f32(row + l.rowwise_offset, s_new);
      break;
    }
    case OptimizerKind::kSm3: {
      // SM3-II: every row reads the column accumulators of before the step and raises the
      // step's new ones to its nu (kernels.h, TableView::sm3_col).
      LEANEMB_CHECK(t.sm3_col != nullptr && t.sm3_col_next != nullptr, "sm3 update without column state");
      const float row_acc = load_f32(row + l.rowwise_offset);
      float row_new = 0.0f;
      for (int64_t j = 0; j < d; ++j) {
        const float nu = std::min(row_acc, t.sm3_col[j]) + g[j] * g[j];
        w[j] = w[j] + nlr * (g[j] / (std::sqrt(nu) + o.eps));
        row_new = std::max(row_new, nu);
        t.sm3_col_next[j] = std::max(t.sm3_col_next[j], nu);
      }
      store_f32(row + l.rowwise_offset, row_new);
      break;
    }
    case OptimizerKind::kAdam: {
      const float nstep = -adam_step_size(o, s.step);
      const float c1 = one_minus(o.beta1), c2 = one_minus(o.beta2);
      ref_load_elem_state(l, row, 0, m.data());
      ref_load_elem_state(l, row, 1, v.data());
      for (int64_t j = 0; j < d; ++j) {
        m[j] = m[j] + (g[j] - m[j]) * c1;
        v[j] = v[j] + (g[j] * g[j] - v[j]) * c2;
        w[j] = w[j] + nstep * (m[j] / (std::sqrt(v[j]) + o.eps));
      }
      store_elem_state(l, row, 0, m.data(), key);
      store_elem_state(l, row, 1, v.data(), key);
      break;
    }
    case OptimizerKind::kPartialRowwiseAdam: {
      const float nstep = -adam_step_size(o, s.step);
      const float c1 = one_minus(o.beta1), c2 = one_minus(o.beta2);
      const float v_old = load_f32(row + l.rowwise_offset);
      const float v_new = v_old + (sum_squares(g.data(), d) / static_cast<float>(d) - v_old) * c2;
      const float denom = std::sqrt(v_new) + o.eps;
      ref_load_elem_state(l, row, 0, m.data());
      for (int64_t j = 0; j < d; ++j) {
        m[j] = m[j] + (g[j] - m[j]) * c1;
        w[j] = w[j] + nstep * (m[j] / denom);
      }
      store_elem_state(l, row, 0, m.data(), key);
      store_f32(row + l.rowwise_offset, v_new);
      break;
    }
  }
  store_row_weights_sr(l, row, w.data(), key);
}

}  // namespace leanemb::kernels
