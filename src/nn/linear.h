// Linear: a fully connected layer y = x W^T + b with fp32 master weights, as torch.nn.Linear.
//
// Shapes (row-major): W [out, in], b [out], x [B, in], y [B, out]. Gradients dW [out, in] and
// db [out] accumulate over backward calls until zero_grad() (gradient accumulation over
// micro-batches). Initialization as torch.nn.Linear: W and b uniform in [-1/sqrt(in), 1/sqrt(in)],
// drawn from a counter-based generator keyed by (seed, tensor, row, column), so the values depend
// on the seed and the shape only (never on threads).
//
// Precision (a DType of DTypeUse::kActivations, amp/precision.h): with bf16 / fp16, x, W and b are rounded to the 16-bit grid before
// the GEMM (fp32 accumulation), y is rounded after the bias add, dy is rounded before the
// backward GEMMs and dx after; dW and db are accumulated in fp32 from the rounded operands.
// The saved input takes 2 bytes per element instead of 4. bf16 GEMMs run natively where the CPU
// has AVX512_BF16 (nn/bf16_gemm.h: bf16 products, fp32 accumulation in VDPBF16PS's order), on
// fp32 sgemm of the rounded operands elsewhere (docs/nn.md, "bf16 compute").
//
// Memory: W, b in Category::kWeights and dW, db in kGradients for the layer's lifetime; the
// input saved by forward() in kActivations until backward() (or release_saved()); per-call
// scratch (rounded copies) in kWorkspace, freed before the call returns. All tensor memory comes
// from the Allocator given to create(), which must outlive the layer.
//
// Errors leave the layer usable: a failed forward() holds no saved input; a failed backward()
// changes no gradient and keeps the saved input, so it can be retried.
//
// Thread safety: none; one thread calls a layer at a time (the GEMMs use parallel_for inside, with
// results independent of the thread count, see nn/gemm.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "leanemb/memory.h"
#include "leanemb/status.h"
#include "nn/tensor.h"

namespace leanemb::nn {

struct LinearOptions {
  int64_t in_features = 0;   // >= 1
  int64_t out_features = 0;  // >= 1
  DType precision = DType::kF32;  // of the GEMM operands and saved activations
  uint64_t seed = 1;         // initializer seed
  std::string name = "linear";  // exported tensors are "<name>.weight" and "<name>.bias"
};

// Size functions (Linear allocates with them; the memory model in src/plan predicts with them):
// floats of W [out, in] and b [out]; dW and db have the same sizes.
inline size_t linear_weight_floats(const LinearOptions& o) { return static_cast<size_t>(o.out_features * o.in_features); }
inline size_t linear_bias_floats(const LinearOptions& o) { return static_cast<size_t>(o.out_features); }
// Whether calls take the native bf16 path (nn/bf16_gemm.h): kBF16 on a CPU with AVX512_BF16,
// unless switched off. Otherwise non-fp32 precisions run the emulation (round, fp32 sgemm).
bool linear_uses_native_bf16(const LinearOptions& o);
// kWorkspace floats of one forward or backward call on `batch` rows: 0 in fp32; with the
// emulation the rounded copies of W and b; on the native path the packed bf16 operands of the
// largest of the three GEMMs (forward, weight gradient, input gradient).
size_t linear_scratch_floats(const LinearOptions& o, int64_t batch);

class Linear {
 public:
  // Allocates and initializes W, b (kWeights) and zeroed dW, db (kGradients).
  // Errors: InvalidArgument for in/out features < 1 or above 2^31 - 1 elements per side;
  // ResourceExhausted from the allocator (nothing stays allocated).
  static Result<Linear> create(const LinearOptions& options, Allocator* alloc);

  Linear(Linear&&) noexcept = default;
  Linear& operator=(Linear&&) noexcept = default;

  // y [B, out] = x [B, in] W^T + b, with B = batch; saves x for backward (replacing any input
  // saved by an earlier forward).
  // Errors: InvalidArgument for batch outside [1, kMaxBatch] or wrong span sizes; ResourceExhausted (y is then
  // unspecified and nothing is saved).
  Status forward(int64_t batch, std::span<const float> x, std::span<float> y);
  // From dy [B, out] (B of the last forward): dW += dy^T x, db += sum over rows of dy, and, when
  // dx is not empty, dx [B, in] = dy W. Frees the saved input on success.
  // Errors: FailedPrecondition without a saved forward; InvalidArgument for wrong span sizes;
  // ResourceExhausted (no gradient changed, the saved input is kept).
  Status backward(std::span<const float> dy, std::span<float> dx);
  bool has_saved_input() const { return !saved_input_.empty(); }
  void release_saved() { saved_input_.reset(); }
  // dW := 0, db := 0.
  void zero_grad();

  const LinearOptions& options() const { return options_; }
  int64_t in_features() const { return options_.in_features; }
  int64_t out_features() const { return options_.out_features; }
  std::span<float> weight() { return {weight_.as<float>(), weight_numel()}; }            // [out, in]
  std::span<float> bias() { return {bias_.as<float>(), bias_numel()}; }                  // [out]
  std::span<float> weight_grad() { return {weight_grad_.as<float>(), weight_numel()}; }  // [out, in]
  std::span<float> bias_grad() { return {bias_grad_.as<float>(), bias_numel()}; }        // [out]
  std::span<const float> weight() const { return {weight_.as<const float>(), weight_numel()}; }
  std::span<const float> bias() const { return {bias_.as<const float>(), bias_numel()}; }
  std::span<const float> weight_grad() const { return {weight_grad_.as<const float>(), weight_numel()}; }
  std::span<const float> bias_grad() const { return {bias_grad_.as<const float>(), bias_numel()}; }
  // Bytes held for backward (0 without a saved forward).
  size_t saved_activation_bytes() const { return saved_input_.size_bytes(); }

  // {"<name>.weight", W, dW}, {"<name>.bias", b, db}: for a DenseOptimizer.
  std::vector<DenseParam> dense_params();
  // {"<name>.weight" [out * in], "<name>.bias" [out]}: for a checkpoint.
  std::vector<NamedTensor> parameters() const;
  // Copies W and b from tensors named as parameters() names them (all-or-nothing).
  // Errors: InvalidArgument for a missing, unexpected or wrongly sized tensor.
  Status load_parameters(std::span<const NamedTensor> tensors);

  // ---- stateless compute, for containers that manage activations themselves (Mlp) ------------
  // Floats of w_scratch that the two functions below need for `batch` rows
  // (linear_scratch_floats; 0 in fp32, when w_scratch may be null).
  size_t scratch_floats(int64_t batch) const;
  // y [B, out] = x [B, in] W'^T + b', rounded to the precision; W', b' = W, b rounded.
  // REQUIRES: x on the precision's grid; buffers of the stated sizes; y does not alias x.
  void forward_compute(int64_t batch, const float* x, float* y, float* w_scratch) const;
  // dW += dy^T x; db += column sums of dy; if dx != null: dx [B, in] = dy W', rounded.
  // REQUIRES: x [B, in] and dy [B, out] on the precision's grid; dx aliases neither.
  void backward_compute(int64_t batch, const float* x, const float* dy, float* dx, float* w_scratch);
  // backward_compute on the native bf16 path with x given as the bf16 bit patterns [B, in] it was
  // stored in (no unpacking). REQUIRES: linear_uses_native_bf16(options()).
  void backward_compute_bf16(int64_t batch, const uint16_t* x, const float* dy, float* dx, float* w_scratch);

 private:
  Linear() = default;
  size_t weight_numel() const { return linear_weight_floats(options_); }
  size_t bias_numel() const { return linear_bias_floats(options_); }
  // W' for the GEMMs: W itself in fp32, else W rounded into w_scratch (b' after it).
  const float* gemm_weight(float* w_scratch) const;
  // The native bf16 versions of forward_compute / backward_compute (w_scratch: packed operands).
  void forward_native_bf16(int64_t batch, const float* x, float* y, float* w_scratch) const;
  // x: fp32 [B, in], or null with x16 the bf16 bit patterns [B, in].
  void backward_native_bf16(int64_t batch, const float* x, const uint16_t* x16, const float* dy, float* dx,
                            float* w_scratch);

  LinearOptions options_;
  Allocator* alloc_ = nullptr;
  Allocation weight_, bias_, weight_grad_, bias_grad_;
  StoredTensor saved_input_;
  int64_t saved_batch_ = 0;
};

}  // namespace leanemb::nn
