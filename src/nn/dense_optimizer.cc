// Dense optimizers (SGD, Adagrad, Adam) with torch's fp32 operation order; see the header.
#include "nn/dense_optimizer.h"

#include <cmath>
#include <set>
#include <string>

#include "amp/loss_scaler.h"
#include "core/parallel.h"
#include "kernels/isa_builds.h"

namespace leanemb::nn {
namespace {

constexpr double kLimb = 16777216.0;  // 2^24

bool finite_nonneg(double x) { return std::isfinite(x) && x >= 0.0; }

Status check_options(const DenseOptimizerOptions& o) {
  if (!finite_nonneg(o.learning_rate))
    return invalid_argument("dense optimizer '" + o.name + "': learning_rate " + std::to_string(o.learning_rate) +
                            " (must be finite and >= 0)");
  if (!finite_nonneg(o.weight_decay))
    return invalid_argument("dense optimizer '" + o.name + "': weight_decay " + std::to_string(o.weight_decay) +
                            " (must be finite and >= 0)");
  if (o.eps && !finite_nonneg(*o.eps))
    return invalid_argument("dense optimizer '" + o.name + "': eps " + std::to_string(*o.eps) +
                            " (must be finite and >= 0)");
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0) || !(o.beta2 >= 0.0 && o.beta2 < 1.0))
    return invalid_argument("dense optimizer '" + o.name + "': betas (" + std::to_string(o.beta1) + ", " +
                            std::to_string(o.beta2) + ") must be in [0, 1)");
  if (!finite_nonneg(o.initial_accumulator_value))
    return invalid_argument("dense optimizer '" + o.name + "': initial_accumulator_value " +
                            std::to_string(o.initial_accumulator_value) + " (must be finite and >= 0)");
  return Status();
}

// State array names per kind, in the order of state1_ / state2_.
const char* state_suffix(DenseOptimizerKind k, int which) {
  if (k == DenseOptimizerKind::kAdagrad) return ".sum";
  return which == 0 ? ".exp_avg" : ".exp_avg_sq";
}

// Everything one element-wise update needs, computed once per parameter.
struct UpdateArgs {
  DenseOptimizerKind kind = DenseOptimizerKind::kSgd;
  float* p = nullptr;
  const float* grad = nullptr;
  float* s1 = nullptr;  // Adagrad sum / Adam exp_avg
  float* s2 = nullptr;  // Adam exp_avg_sq
  float mult = 1.0f, wd = 0.0f, eps = 0.0f;
  bool decay = false;
  float neg_step = 0.0f;  // SGD, Adagrad: -lr; Adam: -lr / bias_correction1
  float b1 = 0.0f, one_minus_b1 = 0.0f, b2 = 0.0f, one_minus_b2 = 0.0f, bc2_sqrt = 1.0f;
};

// Elements [begin, end) of one parameter. std::fma exactly where torch's CPU kernels fuse:
// add(other, alpha) is vec::fmadd(other, alpha, self) and addcmul(t1, t2, value) is
// self + (value * t1) * t2 contracted to fma(value * t1, t2, self); mul, sqrt, division and
// addcdiv are not fused. std::fma is exactly rounded, so the AVX2 build (a vfmadd instruction)
// and the baseline build (a libm call) give the same bits (one build per ISA:
// kernels/isa_builds.h, LEANEMB_ISA_KERNEL).
inline void update_range_impl(const UpdateArgs& a, int64_t begin, int64_t end) {
  float* p = a.p;
  const float* grad = a.grad;
  switch (a.kind) {
    case DenseOptimizerKind::kSgd:
      for (int64_t j = begin; j < end; ++j) {
        float g = grad[j] * a.mult;
        if (a.decay) g = std::fma(a.wd, p[j], g);  // grad.add(p, alpha=wd)
        p[j] = std::fma(a.neg_step, g, p[j]);      // p.add_(g, alpha=-lr)
      }
      return;
    case DenseOptimizerKind::kAdagrad:
      for (int64_t j = begin; j < end; ++j) {
        float g = grad[j] * a.mult;
        if (a.decay) g = std::fma(a.wd, p[j], g);
        a.s1[j] = std::fma(g, g, a.s1[j]);            // state_sum.addcmul_(g, g, value=1)
        const float std_dev = std::sqrt(a.s1[j]) + a.eps;  // state_sum.sqrt().add_(eps)
        p[j] = p[j] + (a.neg_step * g) / std_dev;     // p.addcdiv_(g, std, value=-clr)
      }
      return;
    case DenseOptimizerKind::kAdam:
      for (int64_t j = begin; j < end; ++j) {
        float g = grad[j] * a.mult;
        if (a.decay) g = std::fma(a.wd, p[j], g);
        a.s1[j] = std::fma(a.one_minus_b1, g, a.s1[j] * a.b1);        // exp_avg.mul_(b1).add_(g, alpha=1-b1)
        a.s2[j] = std::fma(a.one_minus_b2 * g, g, a.s2[j] * a.b2);    // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
        const float denom = std::sqrt(a.s2[j]) / a.bc2_sqrt + a.eps;  // (sqrt(v) / bc2_sqrt).add_(eps)
        p[j] = p[j] + (a.neg_step * a.s1[j]) / denom;                 // p.addcdiv_(m, denom, value=-step_size)
      }
      return;
  }
}

LEANEMB_ISA_KERNEL(void, update_range, (const UpdateArgs& a, int64_t begin, int64_t end), (a, begin, end))

}  // namespace

int dense_state_arrays(DenseOptimizerKind k) {
  return k == DenseOptimizerKind::kAdam ? 2 : (k == DenseOptimizerKind::kAdagrad ? 1 : 0);
}

Result<DenseOptimizer> DenseOptimizer::create(const DenseOptimizerOptions& options, std::vector<DenseParam> params,
                                              Allocator* alloc) {
  LEANEMB_RETURN_IF_ERROR(check_options(options));
  std::set<std::string> names;
  for (const DenseParam& p : params) {
    if (p.value.empty() || p.value.size() != p.grad.size())
      return invalid_argument("dense optimizer '" + options.name + "': parameter '" + p.name + "' has " +
                              std::to_string(p.value.size()) + " values and " + std::to_string(p.grad.size()) +
                              " gradients (need equal, >= 1)");
    if (!names.insert(p.name).second)
      return invalid_argument("dense optimizer '" + options.name + "': parameter '" + p.name + "' given twice");
  }
  DenseOptimizer opt;
  opt.options_ = options;
  if (!opt.options_.eps) opt.options_.eps = options.kind == DenseOptimizerKind::kAdagrad ? 1e-10 : 1e-8;
  const int num_states = dense_state_arrays(options.kind);
  for (const DenseParam& p : params) {
    if (num_states >= 1) {
      LEANEMB_ASSIGN_OR_RETURN(Allocation a, allocate_floats(alloc, p.value.size(), Category::kOptimizerState));
      const float init = options.kind == DenseOptimizerKind::kAdagrad
                             ? static_cast<float>(options.initial_accumulator_value) : 0.0f;
      std::fill_n(a.as<float>(), p.value.size(), init);
      opt.state1_.push_back(std::move(a));
    }
    if (num_states >= 2) {
      LEANEMB_ASSIGN_OR_RETURN(Allocation a, allocate_floats(alloc, p.value.size(), Category::kOptimizerState));
      std::fill_n(a.as<float>(), p.value.size(), 0.0f);
      opt.state2_.push_back(std::move(a));
    }
  }
  LEANEMB_ASSIGN_OR_RETURN(opt.step_limbs_, allocate_floats(alloc, kStepLimbFloats, Category::kOptimizerState));
  opt.step_limbs_.as<float>()[0] = opt.step_limbs_.as<float>()[1] = 0.0f;
  opt.params_ = std::move(params);
  return opt;
}

void DenseOptimizer::zero_grad() {
  for (DenseParam& p : params_) std::fill(p.grad.begin(), p.grad.end(), 0.0f);
}

bool DenseOptimizer::any_nonfinite_grad() const {
  for (const DenseParam& p : params_)
    if (amp::found_nonfinite(p.grad)) return true;
  return false;
}

Status DenseOptimizer::step(float grad_multiplier) {
  if (!std::isfinite(grad_multiplier) || grad_multiplier <= 0.0f)
    return invalid_argument("dense optimizer '" + options_.name + "': grad_multiplier " +
                            std::to_string(grad_multiplier) + " (must be finite and > 0)");
  ++step_;
  for (size_t i = 0; i < params_.size(); ++i) update(i, grad_multiplier);
  step_limbs_.as<float>()[0] = static_cast<float>(step_ % (int64_t{1} << 24));
  step_limbs_.as<float>()[1] = static_cast<float>(step_ >> 24);
  return Status();
}

void DenseOptimizer::update(size_t i, float mult) {
  UpdateArgs a;
  a.kind = options_.kind;
  a.p = params_[i].value.data();
  a.grad = params_[i].grad.data();
  a.s1 = state1_.empty() ? nullptr : state1_[i].as<float>();
  a.s2 = state2_.empty() ? nullptr : state2_[i].as<float>();
  a.mult = mult;
  a.decay = options_.weight_decay != 0.0;
  a.wd = static_cast<float>(options_.weight_decay);
  a.eps = static_cast<float>(*options_.eps);
  const double lr = options_.learning_rate;
  // SGD: -lr; Adagrad: -clr with clr = lr / (1 + (t - 1) * lr_decay) = lr (lr_decay 0).
  a.neg_step = static_cast<float>(-lr);
  if (options_.kind == DenseOptimizerKind::kAdam) {
    const double b1 = options_.beta1, b2 = options_.beta2, t = static_cast<double>(step_);
    a.b1 = static_cast<float>(b1);
    a.one_minus_b1 = static_cast<float>(1.0 - b1);
    a.b2 = static_cast<float>(b2);
    a.one_minus_b2 = static_cast<float>(1.0 - b2);
    const double bias_correction1 = 1.0 - std::pow(b1, t);
    const double bias_correction2 = 1.0 - std::pow(b2, t);
    a.neg_step = static_cast<float>(-(lr / bias_correction1));  // -step_size
    a.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  }
  const int64_t n = static_cast<int64_t>(params_[i].value.size());
  // Elements are independent: chunks of 16k elements (a few microseconds) on parallel_for.
  parallel_for(n, kChunkWork, [&](int64_t begin, int64_t end, int) { update_range(a, begin, end); });
}

std::vector<NamedTarget> DenseOptimizer::state_arrays() const {
  std::vector<NamedTarget> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const size_t n = params_[i].value.size();
    const std::string& name = params_[i].name;
    if (!state1_.empty()) out.push_back({name + state_suffix(options_.kind, 0), {state1_[i].as<float>(), n}});
    if (!state2_.empty()) out.push_back({name + state_suffix(options_.kind, 1), {state2_[i].as<float>(), n}});
  }
  return out;
}

std::vector<NamedTensor> DenseOptimizer::state() const {
  std::vector<NamedTensor> out;
  for (NamedTarget& t : state_arrays()) out.push_back({std::move(t.name), t.values});
  out.push_back({options_.name + ".step", {step_limbs_.as<const float>(), 2}});
  return out;
}

Status DenseOptimizer::load_state(std::span<const NamedTensor> tensors) {
  const std::string what = "dense optimizer '" + options_.name + "'";
  const std::string step_name = options_.name + ".step";
  float limbs[2] = {0.0f, 0.0f};
  std::vector<NamedTarget> dst = state_arrays();
  // Value checks run on the source tensors, before load_named copies anything.
  for (const NamedTensor& t : tensors) {
    if (t.name == step_name && t.values.size() == 2) {
      for (float l : t.values) {
        if (!(l >= 0.0f && l < kLimb && std::floor(l) == l))
          return invalid_argument(what + ": step limb " + std::to_string(l) + " is not an integer in [0, 2^24)");
      }
    }
    const bool nonneg_state = t.name.ends_with(".sum") || t.name.ends_with(".exp_avg_sq");
    for (size_t j = 0; nonneg_state && j < t.values.size(); ++j) {
      if (!(t.values[j] >= 0.0f))
        return invalid_argument(what + ": '" + t.name + "'[" + std::to_string(j) + "] = " +
                                std::to_string(t.values[j]) + " (must be >= 0)");
    }
  }
  dst.push_back({step_name, {limbs, 2}});
  LEANEMB_RETURN_IF_ERROR(load_named(tensors, dst, what));
  step_ = static_cast<int64_t>(limbs[0]) + (static_cast<int64_t>(limbs[1]) << 24);
  step_limbs_.as<float>()[0] = limbs[0];
  step_limbs_.as<float>()[1] = limbs[1];
  return Status();
}

Status DenseOptimizer::set_learning_rate(double lr) {
  if (!std::isfinite(lr) || lr < 0.0)
    return invalid_argument("dense optimizer '" + options_.name + "': learning_rate " + std::to_string(lr) + " (must be finite and >= 0)");
  options_.learning_rate = lr;
  return Status();
}

}  // namespace leanemb::nn
