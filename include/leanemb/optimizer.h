// Sparse optimizers for embedding rows and the "fat row" layout that stores a row's optimizer
// state next to its weights.
//
// Update rules (g = the row's gradient summed over the batch in fp32, t = the table's step
// count starting at 1, wd = weight_decay added as L2: g += wd * w before the rule):
//   kSgd                w -= lr * g                                          (torch.optim.SGD)
//   kAdagrad            s += g*g; w -= lr * g / (sqrt(s) + eps)              (torch.optim.Adagrad,
//                                                                             lr_decay = 0)
//   kRowwiseAdagrad     s += mean_j(g_j^2) (one fp32 per row);
//                       w -= lr * g / (sqrt(s) + eps)                        (FBGEMM rowwise)
//   kAdam               m += (1-b1)(g - m); v += (1-b2)(g*g - v);
//                       w -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)
//                                                            (torch.optim.SparseAdam, touched rows)
//   kPartialRowwiseAdam m += (1-b1)(g - m) per element; v += (1-b2)(mean_j(g_j^2) - v) per row;
//                       w -= lr * sqrt(1-b2^t)/(1-b1^t) * m / (sqrt(v) + eps)
//   kSm3                SM3-II (Anil et al., 2019) with the cover {rows} u {columns}: one fp32
//                       accumulator per row (in the fat row) and one per column (per table, outside
//                       the rows: EmbeddingCollection::column_state). For each updated row i:
//                       nu_j = min(row_acc, col_acc_j) + g_j^2; w_j -= lr * g_j / (sqrt(nu_j) + eps);
//                       row_acc = max_j nu_j. After the step col_acc_j = max(col_acc_j, nu_ij over
//                       the step's rows i): every row reads the columns of before the step.
// Rows not in the batch are not touched (lazy/sparse semantics, as SparseAdam).
//
// Per-element state (Adagrad s, Adam m and v, PartialRowwiseAdam m) is stored in `state_dtype`, a
// DType of DTypeUse::kOptimizerState (leanemb/dtype.h):
//   kF32, kBF16 (stochastic rounding), kInt8Blockwise (blocks of kQuantBlockSize elements, an fp32
//   absmax per block, codes from a dynamic-exponent map as in 8-bit optimizers). Per-row scalars
//   are always fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "leanemb/dtype.h"
#include "leanemb/status.h"

namespace leanemb {

enum class OptimizerKind : uint8_t { kSgd, kAdagrad, kRowwiseAdagrad, kAdam, kPartialRowwiseAdam, kSm3 };

inline constexpr int64_t kQuantBlockSize = 64;  // elements per 8-bit and 4-bit state block
inline constexpr size_t kRowAlignmentBytes = 8;  // fat-row stride alignment (fp8 and q8 rows: 4, dtype_traits)

std::string_view optimizer_name(OptimizerKind k);  // "sgd", "adagrad", "rowwise_adagrad", ...
Result<OptimizerKind> parse_optimizer(std::string_view s);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  float learning_rate = 0.01f;
  // Added to the denominator: torch defaults are 1e-10 for Adagrad and 1e-8 for Adam.
  float eps = 1e-8f;
  float beta1 = 0.9f;    // Adam first-moment decay
  float beta2 = 0.999f;  // Adam second-moment decay
  float weight_decay = 0.0f;  // L2 coefficient on touched rows (0 = off)
  DType state_dtype = DType::kF32;  // DTypeUse::kOptimizerState: kF32, kBF16, kInt8Blockwise, kInt4Blockwise
};

// The per-element state arrays of optimizer k, the part of its state that
// OptimizerOptions::state_dtype stores: Adagrad's sum (1), Adam's m and v (2), partial row-wise
// Adam's m (1); sgd, rowwise_adagrad and sm3 keep none (their state is fp32 scalars).
constexpr int element_states(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kAdagrad: return 1;
    case OptimizerKind::kAdam: return 2;
    case OptimizerKind::kPartialRowwiseAdam: return 1;
    case OptimizerKind::kSgd:
    case OptimizerKind::kRowwiseAdagrad:
    case OptimizerKind::kSm3: return 0;
  }
  return 0;
}

// Byte layout of one fat row: [weights | int8 scale,bias] [per-row fp32 scalar] [m] [v]
// [m block scales] [v block scales] [padding to kRowAlignmentBytes]. Offsets are from the start
// of the row; a component that the optimizer lacks has size 0.
struct RowLayout {
  int64_t dim = 0;
  DType weight_dtype = DType::kF32;
  OptimizerOptions optimizer;
  size_t weight_bytes = 0;      // dim * element bytes + dtype overhead
  size_t rowwise_offset = 0;    // one fp32 (RowwiseAdagrad sum, PartialRowwiseAdam v, SM3 row acc)
  bool has_rowwise = false;
  size_t m_offset = 0;          // per-element state #1 (Adagrad sum, Adam m, PRAdam m)
  size_t v_offset = 0;          // per-element state #2 (Adam v)
  int num_elem_states = 0;      // 0, 1 or 2
  size_t elem_state_bytes = 0;  // bytes of one per-element state array (dim * dtype bytes; int4: (dim + 1) / 2)
  size_t m_scale_offset = 0;    // int8 / int4 state: fp32 absmax per block of m
  size_t v_scale_offset = 0;    // int8 / int4 state: fp32 absmax per block of v
  int64_t num_blocks = 0;       // int8 / int4 state: blocks per array
  size_t state_bytes = 0;       // all optimizer state of one row
  size_t stride_bytes = 0;      // distance between consecutive rows

  size_t padding_bytes() const { return stride_bytes - weight_bytes - state_bytes; }
  // Per-element state array k (0: m_*, 1: v_*): its offset, its block scales' offset, and
  // whether it holds signed values (Adam's and partial row-wise Adam's m; Adagrad sums and
  // Adam's v are not negative).
  size_t state_offset(int k) const { return k == 0 ? m_offset : v_offset; }
  size_t state_scale_offset(int k) const { return k == 0 ? m_scale_offset : v_scale_offset; }
  bool state_signed(int k) const {
    return k == 0 && (optimizer.kind == OptimizerKind::kAdam || optimizer.kind == OptimizerKind::kPartialRowwiseAdam);
  }
};

// The size function every allocation and every memory prediction uses.
// Errors: InvalidArgument for dim <= 0, a non-trainable dtype with a stateful optimizer, or bad
// hyper-parameters (lr < 0, betas outside [0, 1), eps < 0).
Result<RowLayout> make_row_layout(int64_t dim, DType weight_dtype, const OptimizerOptions& opt);

// Default eps for an optimizer as torch uses it.
float default_eps(OptimizerKind k);

}  // namespace leanemb
