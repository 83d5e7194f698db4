// Mlp: a stack of Linear layers with ReLU between them (the bottom and top MLPs of DLRM), with
// optional activation checkpointing.
//
// widths = {w0, w1, ..., wL} makes L layers, layer i: Linear(w_i -> w_{i+1}); ReLU follows every
// layer but the last, and the last too when relu_after_last (DLRM's bottom MLP; its top MLP
// ends in a logit without ReLU). x [B, w0] -> y [B, wL], row-major.
//
// What forward() keeps for backward (Category::kActivations, in the precision's format):
//   without checkpointing: the input x, each hidden activation a_i [B, w_i] (i = 1..L-1, after
//     ReLU: it is both the next layer's GEMM input and the ReLU mask), and y when ReLU follows
//     the last layer (its mask);
//   with checkpoint_activations: only x (and y when ReLU follows the last layer). backward()
//     first recomputes a_1..a_{L-1} from x with the same code and the same inputs, so its
//     gradients are bit-identical to the run without checkpointing, then frees them.
// Checkpointing lowers the bytes held between forward and backward (the saving that matters
// when the bottom and the top MLP, or several micro-batches, are alive at once); the
// recomputation briefly holds one MLP's hidden activations during its backward, as
// torch.utils.checkpoint does. Activation gradients and rounded copies are per-call scratch in
// kWorkspace; parameters kWeights; gradients kGradients.
//
// Errors leave the Mlp usable: a failed forward() holds no saved activations; a failed backward()
// changes no gradient and keeps what forward saved (retry works). Every allocation of a call is
// made before any gradient changes.
//
// Thread safety: none; one thread at a time. Results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "leanemb/memory.h"
#include "leanemb/status.h"
#include "leanemb/table_options.h"
#include "nn/linear.h"
#include "nn/tensor.h"

namespace leanemb::nn {

struct MlpOptions {
  std::vector<int64_t> widths;   // {in, hidden..., out}: at least 2 entries, each >= 1
  bool relu_after_last = false;  // true: ReLU also after the last layer (DLRM bottom MLP)
  bool checkpoint_activations = false;  // keep only the input; recompute hidden ones in backward
  DType precision = DType::kF32;  // of GEMM operands and stored activations
  uint64_t seed = 1;             // layer i is initialized from a seed derived from (seed, i)
  std::string name = "mlp";      // exported tensors: "<name>.<i>.weight", "<name>.<i>.bias"
};

// The allocation plan of one Mlp call on `batch` rows: forward() and backward() allocate with
// it, and the memory model in src/plan predicts with it. Element counts; stored activations take
// amp::precision_bytes(precision) bytes per element, everything else 4.
struct MlpCallSizes {
  int64_t saved_input_numel = 0;          // kActivations, kept from a kTrain forward to backward
  std::vector<int64_t> hidden_numel;      // kActivations: a_1..a_{L-1}; saved by a kTrain forward
                                          // without checkpointing, recomputed in backward with it
  int64_t saved_output_numel = 0;         // kActivations (only with relu_after_last)
  size_t pingpong_floats = 0;             // kWorkspace: one [batch, max width] fp32 buffer
  int forward_buffers = 0;                // ping-pong buffers held during forward (0..2)
  int backward_buffers = 0;               // during backward: 2, 3 when unpacking 16-bit activations
  size_t scratch_floats = 0;              // kWorkspace: the largest linear_scratch_floats, fwd and bwd
};
MlpCallSizes mlp_call_sizes(const MlpOptions& options, int64_t batch);
// Floats of every layer's W and b (kWeights); dW and db (kGradients) are as many.
size_t mlp_parameter_floats(const MlpOptions& options);

// Whether forward() saves activations for a backward (kTrain) or not (kEval: inference only).
// The tables' enum (leanemb/table_options.h): one mode goes from a model to its tables.
using ForwardMode = ::leanemb::ForwardMode;

class Mlp {
 public:
  // Creates the layers (see Linear::create for initialization and memory).
  // Errors: InvalidArgument for fewer than 2 widths or a width < 1; ResourceExhausted.
  static Result<Mlp> create(const MlpOptions& options, Allocator* alloc);

  Mlp(Mlp&&) noexcept = default;
  Mlp& operator=(Mlp&&) noexcept = default;

  // y [B, wL] = MLP(x [B, w0]), B = batch. kTrain saves activations (replacing earlier ones);
  // kEval saves nothing and frees earlier saved activations.
  // Errors: InvalidArgument for batch outside [1, kMaxBatch] or wrong span sizes; ResourceExhausted (y is then
  // unspecified and nothing is saved).
  Status forward(int64_t batch, std::span<const float> x, std::span<float> y, ForwardMode mode = ForwardMode::kTrain);
  // From dy [B, wL]: accumulates every layer's dW, db; writes dx [B, w0] when dx is not empty
  // (leave it empty for the bottom MLP, whose input is data). Frees the saved activations on
  // success.
  // Errors: FailedPrecondition without a saved kTrain forward; InvalidArgument for wrong span
  // sizes; ResourceExhausted (no gradient changed, the saved activations are kept).
  Status backward(std::span<const float> dy, std::span<float> dx);
  bool has_saved_forward() const { return saved_batch_ > 0; }
  void release_saved();
  void zero_grad();  // every layer's dW, db := 0

  const MlpOptions& options() const { return options_; }
  int64_t in_features() const { return options_.widths.front(); }
  int64_t out_features() const { return options_.widths.back(); }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Linear& layer(int i) { return layers_[static_cast<size_t>(i)]; }
  const Linear& layer(int i) const { return layers_[static_cast<size_t>(i)]; }
  // Bytes held for backward now (kActivations), 0 without a saved forward.
  size_t saved_activation_bytes() const;

  // Every layer's {weight, bias} with gradients, in layer order: for a DenseOptimizer.
  std::vector<DenseParam> dense_params();
  // "<name>.<i>.weight" [w_{i+1} * w_i] and "<name>.<i>.bias" [w_{i+1}] for each layer i.
  std::vector<NamedTensor> parameters() const;
  // Loads what parameters() exports (all-or-nothing).
  // Errors: InvalidArgument for a missing, unexpected or wrongly sized tensor.
  Status load_parameters(std::span<const NamedTensor> tensors);

 private:
  Mlp() = default;
  bool relu_after(int layer) const { return layer + 1 < num_layers() || options_.relu_after_last; }
  int64_t max_width() const;
  // Runs layers [0, L-1) from `x0` (on the precision's grid), storing each hidden activation in
  // hidden[i] when hidden is not empty; then the last layer into y when y != null.
  void run_forward(int64_t batch, const float* x0, float* y, std::span<StoredTensor> hidden, float* buf_a,
                   float* buf_b, float* w_scratch);

  MlpOptions options_;
  Allocator* alloc_ = nullptr;
  std::vector<Linear> layers_;
  // Saved by a kTrain forward: input, hidden activations (empty when checkpointing), output
  // (only when ReLU follows the last layer).
  StoredTensor saved_input_;
  std::vector<StoredTensor> saved_hidden_;
  StoredTensor saved_output_;
  int64_t saved_batch_ = 0;
};

}  // namespace leanemb::nn
