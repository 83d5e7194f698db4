// Tests of Mlp: finite-difference gradients, activation checkpointing (bit-identical gradients,
// fewer bytes held, lower activation peak over a DLRM step), bf16/fp16 emulation (close to fp32,
// half the activation bytes), thread-count determinism, allocation failures, parameter export.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "amp/loss_scaler.h"
#include "core/half.h"
#include "nn/dense_optimizer.h"
#include "nn/interaction.h"
#include "nn/loss.h"
#include "nn/mlp.h"
#include "nn/nn_testing.h"

namespace leanemb::nn {
namespace {

using namespace testing;  // NOLINT: test helpers

Mlp make_mlp(Allocator* alloc, std::vector<int64_t> widths, bool ckpt = false, DType p = DType::kF32,
             bool relu_after_last = false) {
  MlpOptions o{.widths = std::move(widths), .relu_after_last = relu_after_last, .checkpoint_activations = ckpt,
               .precision = p, .seed = 5, .name = "top"};
  auto m = Mlp::create(o, alloc);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(m).value();
}

RefMlp reference_of(const Mlp& m) {
  RefMlp r{.widths = m.options().widths, .relu_after_last = m.options().relu_after_last};
  for (int i = 0; i < m.num_layers(); ++i) {
    r.weights.push_back(to_double(m.layer(i).weight()));
    r.biases.push_back(to_double(m.layer(i).bias()));
  }
  return r;
}

// Gradients of one forward/backward with dy = g: every layer's {dW, db}, then dx.
std::vector<std::vector<float>> run_grads(Mlp& m, int64_t batch, const std::vector<float>& x,
                                          const std::vector<float>& g) {
  std::vector<float> y(g.size()), dx(x.size());
  m.zero_grad();
  EXPECT_TRUE(m.forward(batch, x, y).ok());
  EXPECT_TRUE(m.backward(g, dx).ok());
  std::vector<std::vector<float>> out;
  for (int i = 0; i < m.num_layers(); ++i) {
    out.emplace_back(m.layer(i).weight_grad().begin(), m.layer(i).weight_grad().end());
    out.emplace_back(m.layer(i).bias_grad().begin(), m.layer(i).bias_grad().end());
  }
  out.push_back(y);
  out.push_back(dx);
  return out;
}

// Every parameter gradient and dx match central differences of L = sum(y * G) of a double MLP
// (with and without ReLU after the last layer).
TEST(NnMlpTest, GradientsMatchFiniteDifferences) {
  TrackingAllocator alloc;
  const int64_t B = 4;
  for (bool relu_last : {false, true}) {
    Mlp m = make_mlp(&alloc, {6, 9, 8, 3}, false, DType::kF32, relu_last);
    const auto x = random_floats(B * 6, 1), g = random_floats(B * 3, 2);
    const auto grads = run_grads(m, B, x, g);
    RefMlp ref = reference_of(m);
    auto xd = to_double(x);
    auto loss = [&] { return weighted_sum(ref.forward(xd, B), g); };
    for (int i = 0; i < m.num_layers(); ++i) {
      for (size_t j : sample_indices(ref.weights[i].size()))
        EXPECT_TRUE(close(grads[2 * i][j], central_difference(ref.weights[i][j], 1e-6, loss), 1e-4, 1e-5))
            << "layer " << i << " dW[" << j << "]";
      for (size_t j : sample_indices(ref.biases[i].size()))
        EXPECT_TRUE(close(grads[2 * i + 1][j], central_difference(ref.biases[i][j], 1e-6, loss), 1e-4, 1e-5))
            << "layer " << i << " db[" << j << "]";
    }
    for (size_t j = 0; j < xd.size(); ++j)
      EXPECT_TRUE(close(grads.back()[j], central_difference(xd[j], 1e-6, loss), 1e-4, 1e-5)) << "dx[" << j << "]";
  }
}

// With checkpointing, outputs, dx and every gradient are bit-identical to the run without it,
// in fp32 and in bf16, with and without ReLU after the last layer.
TEST(NnMlpTest, CheckpointingGivesBitIdenticalGradients) {
  TrackingAllocator alloc;
  const int64_t B = 150;  // several GEMM panels
  for (auto [p, native] : {std::pair{DType::kF32, true}, {DType::kBF16, true}, {DType::kBF16, false}}) {
    NativeBf16Scope scope(native);
    for (bool relu_last : {false, true}) {
      Mlp plain = make_mlp(&alloc, {13, 64, 48, 16}, false, p, relu_last);
      Mlp ckpt = make_mlp(&alloc, {13, 64, 48, 16}, true, p, relu_last);
      const auto x = random_floats(B * 13, 3), g = random_floats(B * 16, 4);
      const auto a = run_grads(plain, B, x, g), b = run_grads(ckpt, B, x, g);
      for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bit_equal(a[i], b[i])) << "tensor " << i;
    }
  }
}

// Between forward and backward, a checkpointed MLP holds only its input (and its output when
// ReLU follows the last layer); without checkpointing it also holds every hidden activation.
TEST(NnMlpTest, CheckpointingHoldsOnlyInputAndOutputBetweenForwardAndBackward) {
  TrackingAllocator alloc;
  const int64_t B = 32;
  Mlp plain = make_mlp(&alloc, {13, 64, 48, 16}, false, DType::kF32, true);
  Mlp ckpt = make_mlp(&alloc, {13, 64, 48, 16}, true, DType::kF32, true);
  const auto x = random_floats(B * 13, 5);
  std::vector<float> y(B * 16);
  ASSERT_TRUE(ckpt.forward(B, x, y).ok());
  EXPECT_EQ(ckpt.saved_activation_bytes(), B * (13 + 16) * 4u);
  EXPECT_EQ(alloc.memory_stats()[Category::kActivations].current_bytes, B * (13 + 16) * 4u);
  ASSERT_TRUE(plain.forward(B, x, y).ok());
  EXPECT_EQ(plain.saved_activation_bytes(), B * (13 + 64 + 48 + 16) * 4u);
  ASSERT_TRUE(ckpt.backward(std::vector<float>(B * 16, 1.0f), {}).ok());
  ASSERT_TRUE(plain.backward(std::vector<float>(B * 16, 1.0f), {}).ok());
  EXPECT_EQ(alloc.memory_stats()[Category::kActivations].current_bytes, 0u);  // all freed after backward
}

// Peak activation bytes over one DLRM step (bottom MLP, dot interaction, top MLP, BCE, and the
// backward of all three) with `ckpt` on both MLPs.
size_t dlrm_step_activation_peak(bool ckpt) {
  TrackingAllocator alloc;
  const int64_t B = 64, F = 4, d = 16;
  Mlp bottom = make_mlp(&alloc, {13, 128, 64, d}, ckpt, DType::kF32, true);
  auto inter = Interaction::create({.num_features = F, .embedding_dim = d, .dense_dim = d}, &alloc);
  Mlp top = make_mlp(&alloc, {inter->output_dim(), 128, 64, 1}, ckpt);
  const auto dense = random_floats(B * 13, 6), emb = random_floats(B * F * d, 7);
  std::vector<float> labels(B, 1.0f), z(B * d), r(B * inter->output_dim()), logit(B), dlogit(B);
  std::vector<float> dr(r.size()), dz(z.size()), demb(emb.size());
  alloc.reset_peaks();
  EXPECT_TRUE(bottom.forward(B, dense, z).ok());
  EXPECT_TRUE(inter->forward(B, z, emb, r).ok());
  EXPECT_TRUE(top.forward(B, r, logit).ok());
  EXPECT_TRUE(bce_with_logits(logit, labels, 1.0f, dlogit).ok());
  EXPECT_TRUE(top.backward(dlogit, dr).ok());
  EXPECT_TRUE(inter->backward(B, z, emb, dr, dz, demb).ok());
  EXPECT_TRUE(bottom.backward(dz, {}).ok());
  return alloc.memory_stats()[Category::kActivations].peak_bytes;
}

// Checkpointing both MLPs lowers the activation peak of a whole DLRM step.
TEST(NnMlpTest, CheckpointingLowersActivationPeakOfADlrmStep) {
  const size_t plain = dlrm_step_activation_peak(false), ckpt = dlrm_step_activation_peak(true);
  EXPECT_LT(ckpt, plain);
  EXPECT_LT(ckpt, plain * 3 / 4);
}

// bf16 (native and emulated) and fp16 store activations in half the bytes and stay close to fp32
// (outputs, gradients).
TEST(NnMlpTest, HalfPrecisionHalvesActivationBytesAndStaysCloseToFp32) {
  TrackingAllocator alloc;
  const int64_t B = 16;
  for (auto [p, native] : {std::pair{DType::kBF16, true}, {DType::kBF16, false}, {DType::kF16, false}}) {
    NativeBf16Scope scope(native);
    Mlp f32 = make_mlp(&alloc, {13, 64, 32, 8}), half = make_mlp(&alloc, {13, 64, 32, 8}, false, p);
    const auto x = random_floats(B * 13, 8);
    std::vector<float> y(B * 8);
    ASSERT_TRUE(f32.forward(B, x, y).ok() && half.forward(B, x, y).ok());
    EXPECT_EQ(half.saved_activation_bytes() * 2, f32.saved_activation_bytes());
    const auto g = random_floats(B * 8, 9);
    const auto a = run_grads(f32, B, x, g), b = run_grads(half, B, x, g);
    const std::vector<float>& y_half = b[b.size() - 2];
    EXPECT_FALSE(bit_equal(y_half, a[a.size() - 2]));  // rounding did happen
    if (p == DType::kBF16) {
      for (float v : y_half) EXPECT_EQ(f32_bits(v) & 0xffffu, 0u);  // outputs on the bf16 grid
    }
    const double tol = p == DType::kBF16 ? 3e-2 : 4e-3;  // a few units of 2^-8 / 2^-11, relative
    for (size_t t = 0; t < a.size(); ++t) {
      double max_abs = 0, max_err = 0;
      for (size_t i = 0; i < a[t].size(); ++i) {
        max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[t][i])));
        max_err = std::max(max_err, std::fabs(static_cast<double>(a[t][i]) - b[t][i]));
      }
      EXPECT_LE(max_err, tol * max_abs) << dtype_name(p) << " native " << native << " tensor " << t;
    }
  }
}

// fp16 with a too-large loss scale: the scaled gradients overflow to Inf, the check catches it,
// the step is skipped (weights unchanged) and the scaler backs off until a step is finite.
TEST(NnMlpTest, Fp16OverflowIsCaughtAndLossScalerBacksOff) {
  TrackingAllocator alloc;
  const int64_t B = 4;
  Mlp m = make_mlp(&alloc, {6, 16, 1}, false, DType::kF16);
  auto opt = DenseOptimizer::create({.kind = DenseOptimizerKind::kAdam}, m.dense_params(), &alloc);
  auto scaler = amp::LossScaler::create({.init_scale = 1u << 24});
  ASSERT_TRUE(opt.ok() && scaler.ok());
  const auto x = random_floats(B * 6, 15);
  const std::vector<float> labels = {1, 0, 1, 0};
  const std::vector<float> w0(m.layer(0).weight().begin(), m.layer(0).weight().end());
  std::vector<float> logits(B), dlogits(B);
  bool stepped = false;
  for (int attempt = 0; attempt < 20 && !stepped; ++attempt) {
    opt->zero_grad();
    ASSERT_TRUE(m.forward(B, x, logits).ok());
    ASSERT_TRUE(bce_with_logits(logits, labels, scaler->scale(), dlogits).ok());
    ASSERT_TRUE(m.backward(dlogits, {}).ok());
    const bool found = opt->any_nonfinite_grad();
    if (found) {
      EXPECT_TRUE(bit_equal(m.layer(0).weight(), w0));  // nothing stepped yet
    } else {
      stepped = opt->step(scaler->inv_scale()).ok();
    }
    scaler->update(found);
  }
  EXPECT_TRUE(stepped);
  EXPECT_GE(scaler->num_skipped_steps(), 1);
  EXPECT_LT(scaler->scale(), static_cast<float>(1u << 24));
  EXPECT_FALSE(bit_equal(m.layer(0).weight(), w0));
}

// Outputs and gradients are bit-identical with 1 and 2 OpenMP threads (fp32, bf16 native and
// emulated).
TEST(NnMlpTest, ResultsDoNotDependOnThreadCount) {
  TrackingAllocator alloc;
  const int64_t B = 300;
  for (auto [p, native] : {std::pair{DType::kF32, true}, {DType::kBF16, true}, {DType::kBF16, false}}) {
    NativeBf16Scope scope(native);
    Mlp m = make_mlp(&alloc, {13, 256, 128, 1}, false, p);
    const auto x = random_floats(B * 13, 10), g = random_floats(B, 11);
    omp_set_num_threads(1);
    const auto one = run_grads(m, B, x, g);
    omp_set_num_threads(2);
    const auto two = run_grads(m, B, x, g);
    for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bit_equal(one[i], two[i])) << "tensor " << i << " native " << native;
  }
}

// Every allocation of a checkpointed bf16 forward + backward can fail: ResourceExhausted, no
// gradient changed, and the MLP still trains to the same gradients afterwards.
TEST(NnMlpTest, AllocationFailureReturnsResourceExhaustedAndMlpStaysUsable) {
  TrackingAllocator alloc;
  const int64_t B = 8;
  Mlp ref = make_mlp(&alloc, {5, 16, 12, 3}, true, DType::kBF16, true);
  Mlp m = make_mlp(&alloc, {5, 16, 12, 3}, true, DType::kBF16, true);
  const auto x = random_floats(B * 5, 12), g = random_floats(B * 3, 13);
  const auto want = run_grads(ref, B, x, g);
  std::vector<float> y(B * 3), dx(B * 5);
  int failures = 0;
  for (int64_t k = 0; k < 30; ++k) {
    alloc.inject_failure(k);
    Status st = m.forward(B, x, y);
    const bool forward_ok = st.ok();
    if (st.ok()) st = m.backward(g, dx);
    alloc.inject_failure(-1);
    if (st.ok()) break;
    ++failures;
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
    EXPECT_EQ(m.has_saved_forward(), forward_ok);  // failed backward keeps the saved forward
    for (float v : m.layer(0).weight_grad()) ASSERT_EQ(v, 0.0f);
    EXPECT_TRUE(bit_equal(run_grads(m, B, x, g)[0], want[0]));
    m.zero_grad();
  }
  EXPECT_GE(failures, 10);
  EXPECT_EQ(alloc.memory_stats()[Category::kWorkspace].current_bytes, 0u);
}

// kEval saves nothing, and backward after it is FailedPrecondition.
TEST(NnMlpTest, EvalForwardSavesNothing) {
  TrackingAllocator alloc;
  Mlp m = make_mlp(&alloc, {4, 8, 2});
  const auto x = random_floats(12, 14);
  std::vector<float> y(6), y_train(6);
  ASSERT_TRUE(m.forward(3, x, y, ForwardMode::kEval).ok());
  EXPECT_EQ(alloc.memory_stats()[Category::kActivations].current_bytes, 0u);
  EXPECT_EQ(m.backward(std::vector<float>(6), {}).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m.forward(3, x, y_train).ok());
  EXPECT_TRUE(bit_equal(y, y_train));
}

// parameters() names are "<name>.<layer>.weight|bias" and load_parameters() restores them.
TEST(NnMlpTest, ParametersRoundTripThroughNamedTensors) {
  TrackingAllocator alloc;
  Mlp a = make_mlp(&alloc, {4, 8, 2});
  MlpOptions o = a.options();
  o.seed = 77;
  auto b = Mlp::create(o, &alloc);
  ASSERT_TRUE(b.ok());
  const auto params = a.parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[0].name, "top.0.weight");
  EXPECT_EQ(params[3].name, "top.1.bias");
  EXPECT_EQ(b->load_parameters(std::span(params).first(3)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(b->load_parameters(params).ok());
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(bit_equal(a.layer(i).weight(), b->layer(i).weight()));
  EXPECT_EQ(Mlp::create({.widths = {4}}, &alloc).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leanemb::nn
