// Mlp: forward, backward with optional recomputation of hidden activations (checkpointing).
//
// Buffer plan of one call (B = batch, W = the largest width):
//   forward:  two fp32 ping-pong buffers [B, W] (workspace) for hidden layers; the last layer
//             writes into the caller's y; stored activations in kActivations.
//   backward: two fp32 gradient ping-pong buffers [B, W] (workspace), which also serve as the
//             forward buffers of the recomputation; with bf16/fp16 one more [B, W] buffer to
//             unpack a stored activation, and the rounded weight copy.
#include "nn/mlp.h"

#include <algorithm>
#include <string>

#include "core/rng.h"
#include "nn/activation.h"

namespace leanemb::nn {

Result<Mlp> Mlp::create(const MlpOptions& options, Allocator* alloc) {
  if (options.widths.size() < 2)
    return invalid_argument("mlp '" + options.name + "': widths needs at least 2 entries (in, out), got " +
                            std::to_string(options.widths.size()));
  for (size_t i = 0; i < options.widths.size(); ++i) {
    if (options.widths[i] < 1)
      return invalid_argument("mlp '" + options.name + "': widths[" + std::to_string(i) + "] = " +
                              std::to_string(options.widths[i]) + " (must be >= 1)");
  }
  Mlp m;
  m.options_ = options;
  m.alloc_ = alloc;
  for (size_t i = 0; i + 1 < options.widths.size(); ++i) {
    LinearOptions lo;
    lo.in_features = options.widths[i];
    lo.out_features = options.widths[i + 1];
    lo.precision = options.precision;
    lo.seed = mix64(options.seed ^ (static_cast<uint64_t>(i + 1) << 32));
    lo.name = options.name + "." + std::to_string(i);
    LEANEMB_ASSIGN_OR_RETURN(Linear layer, Linear::create(lo, alloc));
    m.layers_.push_back(std::move(layer));
  }
  return m;
}

MlpCallSizes mlp_call_sizes(const MlpOptions& o, int64_t batch) {
  MlpCallSizes s;
  const int num_layers = static_cast<int>(o.widths.size()) - 1;
  const int64_t max_width = *std::max_element(o.widths.begin(), o.widths.end());
  const bool fp32 = o.precision == DType::kF32;
  s.saved_input_numel = batch * o.widths.front();
  for (int i = 0; i + 1 < num_layers; ++i) s.hidden_numel.push_back(batch * o.widths[static_cast<size_t>(i) + 1]);
  s.saved_output_numel = o.relu_after_last ? batch * o.widths.back() : 0;
  s.pingpong_floats = static_cast<size_t>(batch * max_width);
  s.forward_buffers = (num_layers > 1 ? 2 : (fp32 ? 0 : 1));
  s.backward_buffers = fp32 ? 2 : 3;
  for (int i = 0; i < num_layers; ++i) {
    LinearOptions lo;
    lo.in_features = o.widths[static_cast<size_t>(i)];
    lo.out_features = o.widths[static_cast<size_t>(i) + 1];
    lo.precision = o.precision;
    s.scratch_floats = std::max(s.scratch_floats, linear_scratch_floats(lo, batch));
  }
  return s;
}

size_t mlp_parameter_floats(const MlpOptions& o) {
  size_t n = 0;
  for (size_t i = 0; i + 1 < o.widths.size(); ++i) {
    LinearOptions lo;
    lo.in_features = o.widths[i];
    lo.out_features = o.widths[i + 1];
    n += linear_weight_floats(lo) + linear_bias_floats(lo);
  }
  return n;
}

int64_t Mlp::max_width() const { return *std::max_element(options_.widths.begin(), options_.widths.end()); }

void Mlp::release_saved() {
  saved_input_.reset();
  saved_hidden_.clear();
  saved_output_.reset();
  saved_batch_ = 0;
}

void Mlp::zero_grad() {
  for (Linear& l : layers_) l.zero_grad();
}

size_t Mlp::saved_activation_bytes() const {
  size_t n = saved_input_.size_bytes() + saved_output_.size_bytes();
  for (const StoredTensor& t : saved_hidden_) n += t.size_bytes();
  return n;
}

void Mlp::run_forward(int64_t batch, const float* x0, float* y, std::span<StoredTensor> hidden, float* buf_a,
                      float* buf_b, float* w_scratch) {
  const int last = num_layers() - 1;
  const float* cur = x0;
  for (int i = 0; i < last; ++i) {
    float* out = cur == buf_b ? buf_a : buf_b;
    layers_[i].forward_compute(batch, cur, out, w_scratch);
    const size_t n = static_cast<size_t>(batch * options_.widths[i + 1]);
    relu_inplace({out, n});
    if (!hidden.empty()) hidden[i].store({out, n});
    cur = out;
  }
  if (y == nullptr) return;
  layers_[last].forward_compute(batch, cur, y, w_scratch);
  if (options_.relu_after_last) relu_inplace({y, static_cast<size_t>(batch * out_features())});
}

Status Mlp::forward(int64_t batch, std::span<const float> x, std::span<float> y, ForwardMode mode) {
  release_saved();
  if (batch < 1 || batch > kMaxBatch || static_cast<int64_t>(x.size()) != batch * in_features() ||
      static_cast<int64_t>(y.size()) != batch * out_features())
    return invalid_argument("mlp '" + options_.name + "' forward: batch " + std::to_string(batch) + ", x has " +
                            std::to_string(x.size()) + " values (expected batch * " + std::to_string(in_features()) +
                            "), y has " + std::to_string(y.size()) + " (expected batch * " +
                            std::to_string(out_features()) + ")");
  const bool train = mode == ForwardMode::kTrain;
  const bool fp32 = options_.precision == DType::kF32;
  const MlpCallSizes sz = mlp_call_sizes(options_, batch);
  // Allocate everything first.
  StoredTensor saved_in, saved_out;
  std::vector<StoredTensor> hidden;
  if (train) {
    LEANEMB_ASSIGN_OR_RETURN(saved_in, StoredTensor::create(alloc_, sz.saved_input_numel, options_.precision));
    if (!options_.checkpoint_activations) {
      for (int64_t numel : sz.hidden_numel) {
        LEANEMB_ASSIGN_OR_RETURN(StoredTensor t, StoredTensor::create(alloc_, numel, options_.precision));
        hidden.push_back(std::move(t));
      }
    }
    if (sz.saved_output_numel > 0) {
      LEANEMB_ASSIGN_OR_RETURN(saved_out, StoredTensor::create(alloc_, sz.saved_output_numel, options_.precision));
    }
  }
  Allocation buf_a, buf_b, scratch;
  if (sz.forward_buffers >= 1) {
    LEANEMB_ASSIGN_OR_RETURN(buf_a, allocate_floats(alloc_, sz.pingpong_floats, Category::kWorkspace));
  }
  if (sz.forward_buffers >= 2) {
    LEANEMB_ASSIGN_OR_RETURN(buf_b, allocate_floats(alloc_, sz.pingpong_floats, Category::kWorkspace));
  }
  if (sz.scratch_floats > 0) {
    LEANEMB_ASSIGN_OR_RETURN(scratch, allocate_floats(alloc_, sz.scratch_floats, Category::kWorkspace));
  }

  const float* x0 = x.data();
  // The GEMM input is x on the precision's grid; the native bf16 path rounds as it packs (and the
  // stored copy is rounded as it is stored), so it needs no rounded copy.
  if (!fp32 && !linear_uses_native_bf16(layers_.front().options())) {
    amp::copy_rounded(x, options_.precision, buf_a.as<float>());
    x0 = buf_a.as<const float>();
  }
  if (train) saved_in.store({x0, x.size()});
  run_forward(batch, x0, y.data(), hidden, buf_a.as<float>(), buf_b.as<float>(), scratch.as<float>());
  if (!train) return Status();
  if (options_.relu_after_last) saved_out.store(y);
  saved_input_ = std::move(saved_in);
  saved_hidden_ = std::move(hidden);
  saved_output_ = std::move(saved_out);
  saved_batch_ = batch;
  return Status();
}

Status Mlp::backward(std::span<const float> dy, std::span<float> dx) {
  if (!has_saved_forward())
    return failed_precondition("mlp '" + options_.name + "' backward: no saved forward (call forward in kTrain mode)");
  const int64_t batch = saved_batch_;
  if (static_cast<int64_t>(dy.size()) != batch * out_features() ||
      (!dx.empty() && static_cast<int64_t>(dx.size()) != batch * in_features()))
    return invalid_argument("mlp '" + options_.name + "' backward: dy has " + std::to_string(dy.size()) +
                            " values (expected " + std::to_string(batch * out_features()) + "), dx has " +
                            std::to_string(dx.size()) + " (expected 0 or " + std::to_string(batch * in_features()) +
                            ")");
  const bool fp32 = options_.precision == DType::kF32;
  const int num = num_layers();
  const MlpCallSizes sz = mlp_call_sizes(options_, batch);
  // Allocate everything before the first gradient changes.
  Allocation g_a, g_b, unpacked, scratch;
  LEANEMB_ASSIGN_OR_RETURN(g_a, allocate_floats(alloc_, sz.pingpong_floats, Category::kWorkspace));
  LEANEMB_ASSIGN_OR_RETURN(g_b, allocate_floats(alloc_, sz.pingpong_floats, Category::kWorkspace));
  if (sz.backward_buffers >= 3) {
    LEANEMB_ASSIGN_OR_RETURN(unpacked, allocate_floats(alloc_, sz.pingpong_floats, Category::kWorkspace));
  }
  if (sz.scratch_floats > 0) {
    LEANEMB_ASSIGN_OR_RETURN(scratch, allocate_floats(alloc_, sz.scratch_floats, Category::kWorkspace));
  }
  std::vector<StoredTensor> recomputed;
  if (options_.checkpoint_activations) {
    for (int64_t numel : sz.hidden_numel) {
      LEANEMB_ASSIGN_OR_RETURN(StoredTensor t, StoredTensor::create(alloc_, numel, options_.precision));
      recomputed.push_back(std::move(t));
    }
  }
  // A stored activation as fp32: the stored values themselves, or unpacked into `unpacked`.
  auto as_f32 = [&](const StoredTensor& t) -> const float* {
    if (fp32) return t.f32_data();
    t.load({unpacked.as<float>(), static_cast<size_t>(t.numel())});
    return unpacked.as<const float>();
  };
  if (options_.checkpoint_activations && num > 1) {
    // Recompute a_1..a_{L-1} exactly as forward did (same inputs, same code: same bits).
    run_forward(batch, as_f32(saved_input_), nullptr, recomputed, g_a.as<float>(), g_b.as<float>(),
                scratch.as<float>());
  }
  const std::vector<StoredTensor>& hidden = options_.checkpoint_activations ? recomputed : saved_hidden_;

  // The native bf16 path reads stored activations as bf16 directly (no unpacking).
  const bool native16 = linear_uses_native_bf16(layers_.front().options());
  float* g = g_a.as<float>();
  amp::copy_rounded(dy, options_.precision, g);
  if (options_.relu_after_last) {
    if (native16) {
      relu_backward_inplace_bf16({saved_output_.bf16_data(), dy.size()}, {g, dy.size()});
    } else {
      relu_backward_inplace({as_f32(saved_output_), dy.size()}, {g, dy.size()});
    }
  }
  for (int i = num - 1; i >= 0; --i) {
    const StoredTensor& xs = i == 0 ? saved_input_ : hidden[static_cast<size_t>(i - 1)];
    const size_t n = static_cast<size_t>(xs.numel());
    float* dxi = i > 0 ? (g == g_a.as<float>() ? g_b.as<float>() : g_a.as<float>()) : (dx.empty() ? nullptr : dx.data());
    // a_i = relu(pre-activation of layer i-1): its positive entries are the ReLU mask.
    if (native16) {
      layers_[i].backward_compute_bf16(batch, xs.bf16_data(), g, dxi, scratch.as<float>());
      if (i > 0) relu_backward_inplace_bf16({xs.bf16_data(), n}, {dxi, n});
    } else {
      const float* xi = as_f32(xs);
      layers_[i].backward_compute(batch, xi, g, dxi, scratch.as<float>());
      if (i > 0) relu_backward_inplace({xi, n}, {dxi, n});
    }
    if (i > 0) g = dxi;
  }
  release_saved();
  return Status();
}

std::vector<DenseParam> Mlp::dense_params() {
  std::vector<DenseParam> out;
  for (Linear& l : layers_)
    for (DenseParam& p : l.dense_params()) out.push_back(std::move(p));
  return out;
}

std::vector<NamedTensor> Mlp::parameters() const {
  std::vector<NamedTensor> out;
  for (const Linear& l : layers_)
    for (NamedTensor& t : l.parameters()) out.push_back(std::move(t));
  return out;
}

Status Mlp::load_parameters(std::span<const NamedTensor> tensors) {
  std::vector<NamedTarget> dst;
  for (Linear& l : layers_) {
    dst.push_back({l.options().name + ".weight", l.weight()});
    dst.push_back({l.options().name + ".bias", l.bias()});
  }
  return load_named(tensors, dst, "mlp '" + options_.name + "'");
}

}  // namespace leanemb::nn
