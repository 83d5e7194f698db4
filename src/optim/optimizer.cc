#include <cmath>
#include <string>

#include "leanemb/optimizer.h"

#include "core/enum_names.h"

namespace leanemb {

template <>
struct EnumNames<OptimizerKind> {
  static constexpr std::string_view kWhat = "optimizer";
  static constexpr EnumName<OptimizerKind> kNames[] = {
      {OptimizerKind::kSgd, "sgd", ""},
      {OptimizerKind::kAdagrad, "adagrad", ""},
      {OptimizerKind::kRowwiseAdagrad, "rowwise_adagrad", ""},
      {OptimizerKind::kAdam, "adam", "sparse_adam"},
      {OptimizerKind::kPartialRowwiseAdam, "partial_rowwise_adam", ""},
      {OptimizerKind::kSm3, "sm3", ""},
  };
};

std::string_view optimizer_name(OptimizerKind k) { return enum_name(k); }
Result<OptimizerKind> parse_optimizer(std::string_view s) { return parse_enum<OptimizerKind>(s); }

float default_eps(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kAdagrad:
    case OptimizerKind::kRowwiseAdagrad:
    case OptimizerKind::kSm3: return 1e-10f;
    default: return 1e-8f;
  }
}

namespace {
size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
}  // namespace

Result<RowLayout> make_row_layout(int64_t dim, DType weight_dtype, const OptimizerOptions& opt) {
  if (dim <= 0) return invalid_argument("dim must be > 0, got " + std::to_string(dim));
  if (!(opt.learning_rate >= 0.0f) || !std::isfinite(opt.learning_rate))
    return invalid_argument("learning_rate must be finite and >= 0");
  if (!(opt.eps >= 0.0f)) return invalid_argument("eps must be >= 0");
  if (!(opt.beta1 >= 0.0f && opt.beta1 < 1.0f) || !(opt.beta2 >= 0.0f && opt.beta2 < 1.0f))
    return invalid_argument("betas must be in [0, 1)");
  if (!(opt.weight_decay >= 0.0f)) return invalid_argument("weight_decay must be >= 0");
  LEANEMB_RETURN_IF_ERROR(check_dtype(DTypeUse::kRows, weight_dtype));
  LEANEMB_RETURN_IF_ERROR(check_dtype(DTypeUse::kOptimizerState, opt.state_dtype));

  RowLayout l;
  l.dim = dim;
  l.weight_dtype = weight_dtype;
  l.optimizer = opt;
  l.weight_bytes = dtype_row_bytes(weight_dtype, dim);

  const int elem_states = element_states(opt.kind);
  // One fp32 per row: RowwiseAdagrad's sum, PartialRowwiseAdam's v, SM3's row accumulator (SM3's
  // column accumulators are per table, outside the fat row: EmbeddingCollection).
  const bool rowwise = opt.kind == OptimizerKind::kRowwiseAdagrad || opt.kind == OptimizerKind::kPartialRowwiseAdam ||
                       opt.kind == OptimizerKind::kSm3;
  if (!dtype_traits(weight_dtype).trainable && opt.kind != OptimizerKind::kSgd)
    return invalid_argument(std::string(dtype_name(weight_dtype)) +
                            " rows are lookup-only; use optimizer sgd with frozen = true");

  // Components are placed with 4-byte alignment so fp32 scalars and scales are aligned.
  size_t off = align_up(l.weight_bytes, 4);
  l.has_rowwise = rowwise;
  if (rowwise) {
    l.rowwise_offset = off;
    off += 4;
  }
  l.num_elem_states = elem_states;
  if (elem_states > 0) {
    const DTypeTraits& st = dtype_traits(opt.state_dtype);
    // fp32 state gets 4-byte alignment; narrower types pack tightly.
    if (st.element_bits == 32) off = align_up(off, 4);
    // int4: two codes per byte, element j in byte j / 2 (low nibble for even j).
    l.elem_state_bytes = dtype_array_bytes(opt.state_dtype, dim);
    l.m_offset = off;
    off += l.elem_state_bytes;
    if (elem_states == 2) {
      l.v_offset = off;
      off += l.elem_state_bytes;
    }
    if (st.block_scales) {
      l.num_blocks = (dim + kQuantBlockSize - 1) / kQuantBlockSize;
      off = align_up(off, 4);
      l.m_scale_offset = off;
      off += static_cast<size_t>(l.num_blocks) * 4;
      if (elem_states == 2) {
        l.v_scale_offset = off;
        off += static_cast<size_t>(l.num_blocks) * 4;
      }
    }
  }
  const size_t align = dtype_traits(weight_dtype).row_alignment_bytes;  // 8, or 4 for fp8 and q8 rows
  l.stride_bytes = align_up(off, align);
  // State bytes: everything after the weights but the final padding.
  l.state_bytes = off - align_up(l.weight_bytes, 4);
  if (l.stride_bytes < l.weight_bytes + l.state_bytes) l.stride_bytes = align_up(l.weight_bytes + l.state_bytes, align);
  return l;
}

}  // namespace leanemb
