// DenseOptimizer: SGD, Adagrad and Adam over the dense parameters (MLP weights and biases),
// with PyTorch's update rules in PyTorch's order of fp32 operations (torch 1.13,
// single-tensor implementations, maximize=False):
//
//   every kind:  g = grad * grad_multiplier            (GradScaler.unscale_: grad.mul_(inv_scale))
//                g = fma(wd, p, g)                      (if weight_decay != 0: grad.add(p, alpha=wd))
//   kSgd      (torch.optim.SGD, momentum 0):
//                p = fma(-lr, g, p)                     (p.add_(g, alpha=-lr))
//   kAdagrad  (torch.optim.Adagrad, lr_decay 0):
//                s = fma(g, g, s)                       (state_sum.addcmul_(g, g, value=1))
//                std = sqrt(s) + eps                    (state_sum.sqrt().add_(eps))
//                p = p + ((-lr) * g) / std              (p.addcdiv_(g, std, value=-clr), clr = lr)
//   kAdam     (torch.optim.Adam, amsgrad False):
//                m = fma(1 - b1, g, m * b1)             (exp_avg.mul_(b1).add_(g, alpha=1-b1))
//                v = fma((1 - b2) * g, g, v * b2)       (exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2))
//                bc1 = 1 - b1^t; bc2 = 1 - b2^t          (double, t = step count from 1)
//                denom = sqrt(v) / sqrt(bc2) + eps      (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
//                p = p + ((-lr / bc1) * m) / denom      (p.addcdiv_(m, denom, value=-step_size))
// fma(a, b, c) is a*b + c rounded once (std::fma). It appears exactly where torch's CPU kernels
// fuse: add with alpha is vec::fmadd, and GCC contracts addcmul's self + (value * t1) * t2;
// mul, sqrt, division and addcdiv round each operation. Hyper-parameters are doubles (as Python
// floats in torch); each scalar is computed in double and rounded to fp32 where torch passes it
// to an fp32 kernel. With this, the results agree bit for bit with torch 1.13's AVX2 kernels
// on this machine's steps (src/nn/torch_optim_parity_test.py checks 1e-6 relative; a torch
// built without FMA kernels would differ in the last bit of some elements).
//
// step() does not check gradients for Inf/NaN: with a loss scaler, ask any_nonfinite_grad()
// (and amp::found_nonfinite() for the embedding gradient) first and skip step() (see
// amp/loss_scaler.h).
//
// Ownership: the optimizer holds views of the parameters (DenseParam); the modules that own them
// must outlive it. Its state (Adagrad: sum; Adam: exp_avg, exp_avg_sq; fp32, one array per
// parameter) is allocated at create() in Category::kOptimizerState. Thread safety: none; one
// thread at a time. step() is element-wise (parallel_for over elements), so results do not depend on
// the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "leanemb/memory.h"
#include "leanemb/status.h"
#include "nn/tensor.h"

namespace leanemb::nn {

enum class DenseOptimizerKind : uint8_t { kSgd, kAdagrad, kAdam };

struct DenseOptimizerOptions {
  DenseOptimizerKind kind = DenseOptimizerKind::kSgd;
  double learning_rate = 0.01;  // >= 0
  double weight_decay = 0.0;    // L2 added to the gradient (torch's weight_decay; not AdamW), >= 0
  std::optional<double> eps = std::nullopt;  // unset: torch's default, 1e-10 for Adagrad, 1e-8 for Adam
  double beta1 = 0.9;           // Adam, in [0, 1)
  double beta2 = 0.999;         // Adam, in [0, 1)
  double initial_accumulator_value = 0.0;  // Adagrad's initial sum, >= 0
  std::string name = "optimizer";  // the step counter is exported as "<name>.step"
};

// Size functions (create() allocates with them; the memory model in src/plan predicts with them):
// fp32 state arrays per parameter (Adam 2, Adagrad 1, SGD 0), each as large as the parameter,
// plus kStepLimbFloats floats for the step count.
int dense_state_arrays(DenseOptimizerKind k);
inline constexpr size_t kStepLimbFloats = 2;

class DenseOptimizer {
 public:
  // Takes views of `params` (names must be unique, value and grad of equal size >= 1) and
  // allocates their state.
  // Errors: InvalidArgument for bad hyper-parameters or params (the message names which);
  // ResourceExhausted from the allocator (nothing stays allocated).
  static Result<DenseOptimizer> create(const DenseOptimizerOptions& options, std::vector<DenseParam> params,
                                       Allocator* alloc);

  DenseOptimizer(DenseOptimizer&&) noexcept = default;
  DenseOptimizer& operator=(DenseOptimizer&&) noexcept = default;

  // One update of every parameter from its gradient times grad_multiplier (1 / loss scale under
  // loss scaling, else 1). Increments step_count(). Gradients are left as they are (call
  // zero_grad()).
  // Errors: InvalidArgument for grad_multiplier not finite or <= 0 (nothing changes).
  Status step(float grad_multiplier = 1.0f);
  // Every parameter's grad := 0.
  void zero_grad();
  // True when any gradient holds Inf or NaN (amp::found_nonfinite over every grad): with a loss
  // scaler, skip step() then.
  bool any_nonfinite_grad() const;
  int64_t step_count() const { return step_; }
  // Changes the learning rate of later steps (a schedule, e.g. linear decay). State is kept.
  // Errors: InvalidArgument for a rate not finite or < 0 (nothing changes).
  Status set_learning_rate(double lr);
  const DenseOptimizerOptions& options() const { return options_; }
  std::span<const DenseParam> params() const { return params_; }

  // The state for a checkpoint: per parameter "<param>.sum" (Adagrad) or "<param>.exp_avg" and
  // "<param>.exp_avg_sq" (Adam), each [n]; and "<name>.step" [2], the step count as two exact
  // 24-bit limbs {step mod 2^24, step / 2^24} (fp32 holds integers up to 2^24 exactly; steps up
  // to 2^48). SGD exports only the step.
  std::vector<NamedTensor> state() const;
  // Restores what state() exports (all-or-nothing).
  // Errors: InvalidArgument for a missing, unexpected or wrongly sized tensor, a step limb that
  // is not an integer in [0, 2^24), or a negative state value where the rule needs >= 0
  // (Adagrad sum, Adam exp_avg_sq).
  Status load_state(std::span<const NamedTensor> tensors);

 private:
  DenseOptimizer() = default;
  void update(size_t i, float grad_multiplier);
  // The per-parameter state arrays with their exported names (without the step).
  std::vector<NamedTarget> state_arrays() const;

  DenseOptimizerOptions options_;
  std::vector<DenseParam> params_;
  std::vector<Allocation> state1_;  // per param: Adagrad sum / Adam exp_avg
  std::vector<Allocation> state2_;  // per param: Adam exp_avg_sq
  int64_t step_ = 0;
  Allocation step_limbs_;  // [2] floats: the step count as state() exports it, kept current
};

}  // namespace leanemb::nn
