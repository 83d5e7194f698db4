// Tests of the single layers: Linear (forward, finite-difference gradients, accumulation,
// initialization, errors, allocation failure, parameter export), the DLRM interactions (dot and
// cat: layout and finite-difference gradients) and the BCE-with-logits loss.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/half.h"
#include "nn/activation.h"
#include "nn/interaction.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/nn_testing.h"

namespace leanemb::nn {
namespace {

using namespace testing;  // NOLINT: test helpers

constexpr int64_t kB = 5, kIn = 7, kOut = 3;

Linear make_linear(Allocator* alloc, DType p = DType::kF32) {
  LinearOptions o;
  o.in_features = kIn;
  o.out_features = kOut;
  o.precision = p;
  o.seed = 11;
  auto l = Linear::create(o, alloc);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return std::move(l).value();
}

// The layer's output equals x W^T + b computed in double.
TEST(NnLinearTest, ForwardMatchesDoubleReference) {
  TrackingAllocator alloc;
  Linear l = make_linear(&alloc);
  const auto x = random_floats(kB * kIn, 1);
  std::vector<float> y(kB * kOut);
  ASSERT_TRUE(l.forward(kB, x, y).ok());
  const auto want = ref_linear(to_double(x), to_double(l.weight()), to_double(l.bias()), kB, kIn, kOut);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << i;
}

// dx, dW and db equal central differences of L = sum(y * G) evaluated in double.
TEST(NnLinearTest, GradientsMatchFiniteDifferences) {
  TrackingAllocator alloc;
  Linear l = make_linear(&alloc);
  const auto x = random_floats(kB * kIn, 2), g = random_floats(kB * kOut, 3);
  std::vector<float> y(kB * kOut), dx(kB * kIn);
  ASSERT_TRUE(l.forward(kB, x, y).ok());
  ASSERT_TRUE(l.backward(g, dx).ok());
  auto xd = to_double(x), wd = to_double(l.weight()), bd = to_double(l.bias());
  auto loss = [&] { return weighted_sum(ref_linear(xd, wd, bd, kB, kIn, kOut), g); };
  for (size_t i = 0; i < xd.size(); ++i) EXPECT_NEAR(dx[i], central_difference(xd[i], 1e-3, loss), 1e-5) << "dx " << i;
  for (size_t i = 0; i < wd.size(); ++i)
    EXPECT_NEAR(l.weight_grad()[i], central_difference(wd[i], 1e-3, loss), 1e-5) << "dW " << i;
  for (size_t i = 0; i < bd.size(); ++i)
    EXPECT_NEAR(l.bias_grad()[i], central_difference(bd[i], 1e-3, loss), 1e-5) << "db " << i;
}

// Two backward passes of the same micro-batch accumulate twice the gradient; zero_grad clears.
TEST(NnLinearTest, GradientsAccumulateUntilZeroGrad) {
  TrackingAllocator alloc;
  Linear l = make_linear(&alloc);
  const auto x = random_floats(kB * kIn, 4), g = random_floats(kB * kOut, 5);
  std::vector<float> y(kB * kOut);
  ASSERT_TRUE(l.forward(kB, x, y).ok());
  ASSERT_TRUE(l.backward(g, {}).ok());
  const std::vector<float> once(l.weight_grad().begin(), l.weight_grad().end());
  ASSERT_TRUE(l.forward(kB, x, y).ok());
  ASSERT_TRUE(l.backward(g, {}).ok());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(l.weight_grad()[i], 2 * once[i]);
  l.zero_grad();
  for (float v : l.weight_grad()) EXPECT_EQ(v, 0.0f);
  for (float v : l.bias_grad()) EXPECT_EQ(v, 0.0f);
}

// Weights and biases lie in torch.nn.Linear's [-1/sqrt(in), 1/sqrt(in)], depend on the seed only.
TEST(NnLinearTest, InitializationIsSeededAndWithinTorchBound) {
  TrackingAllocator alloc;
  LinearOptions o{.in_features = 64, .out_features = 32, .seed = 3};
  auto a = Linear::create(o, &alloc), b = Linear::create(o, &alloc);
  o.seed = 4;
  auto c = Linear::create(o, &alloc);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(bit_equal(a->weight(), b->weight()));
  EXPECT_FALSE(bit_equal(a->weight(), c->weight()));
  double sum = 0;
  for (float v : a->weight()) {
    EXPECT_LE(std::fabs(v), 0.125f);
    sum += v;
  }
  for (float v : a->bias()) EXPECT_LE(std::fabs(v), 0.125f);
  EXPECT_NEAR(sum / 2048.0, 0.0, 0.01);  // uniform, centred
}

// Misuse is reported: backward before forward, wrong sizes, bad shapes.
TEST(NnLinearTest, MisuseReturnsErrors) {
  TrackingAllocator alloc;
  Linear l = make_linear(&alloc);
  std::vector<float> x(kB * kIn), y(kB * kOut), g(kB * kOut);
  EXPECT_EQ(l.backward(g, {}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(l.forward(kB, {x.data(), x.size() - 1}, y).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(l.forward(0, {}, {}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(l.forward(kB, x, y).ok());
  EXPECT_EQ(l.backward(g, {x.data(), 3}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Linear::create({.in_features = 0, .out_features = 2}, &alloc).status().code(), StatusCode::kInvalidArgument);
}

// Memory goes to the right categories: W, b weights; dW, db gradients; saved x activations.
TEST(NnLinearTest, BytesAreAccountedPerCategory) {
  TrackingAllocator alloc;
  Linear l = make_linear(&alloc);
  std::vector<float> x(kB * kIn), y(kB * kOut);
  ASSERT_TRUE(l.forward(kB, x, y).ok());
  const MemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s[Category::kWeights].current_bytes, (kOut * kIn + kOut) * 4u);
  EXPECT_EQ(s[Category::kGradients].current_bytes, (kOut * kIn + kOut) * 4u);
  EXPECT_EQ(s[Category::kActivations].current_bytes, kB * kIn * 4u);
  EXPECT_EQ(l.saved_activation_bytes(), kB * kIn * 4u);
}

// Every allocation of forward and backward (bf16: the most allocations) can fail with
// ResourceExhausted; the failed call changes no gradient and a retry gives the normal result.
TEST(NnLinearTest, AllocationFailureReturnsResourceExhaustedAndLayerStaysUsable) {
  TrackingAllocator alloc;
  Linear ref = make_linear(&alloc, DType::kBF16), l = make_linear(&alloc, DType::kBF16);
  const auto x = random_floats(kB * kIn, 6), g = random_floats(kB * kOut, 7);
  std::vector<float> y(kB * kOut), dx(kB * kIn);
  ASSERT_TRUE(ref.forward(kB, x, y).ok() && ref.backward(g, dx).ok());
  int failures = 0;
  for (int64_t k = 0; k < 8; ++k) {
    alloc.inject_failure(k);
    Status st = l.forward(kB, x, y);
    if (st.ok()) st = l.backward(g, dx);
    alloc.inject_failure(-1);
    if (st.ok()) break;  // k is past the last allocation
    ++failures;
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
    for (float v : l.weight_grad()) ASSERT_EQ(v, 0.0f);
    if (l.has_saved_input()) ASSERT_TRUE(l.backward(g, dx).ok());  // backward failed: retry works
    else ASSERT_TRUE(l.forward(kB, x, y).ok() && l.backward(g, dx).ok());
    EXPECT_TRUE(bit_equal(l.weight_grad(), ref.weight_grad()));
    l.zero_grad();
  }
  EXPECT_GE(failures, 5);  // 3 in forward, 3 in backward in bf16
  EXPECT_EQ(alloc.memory_stats()[Category::kWorkspace].current_bytes, 0u);
}

// parameters() / load_parameters() round-trip; wrong names or sizes are InvalidArgument and
// change nothing.
TEST(NnLinearTest, ParametersRoundTripAndMismatchesAreRejected) {
  TrackingAllocator alloc;
  Linear a = make_linear(&alloc);
  LinearOptions o = a.options();
  o.seed = 99;
  auto b = Linear::create(o, &alloc);
  ASSERT_TRUE(b.ok());
  const std::vector<float> before(b->weight().begin(), b->weight().end());
  std::vector<NamedTensor> t = a.parameters();
  t[1].name = "linear.bias_typo";
  EXPECT_EQ(b->load_parameters(t).code(), StatusCode::kInvalidArgument);
  t = a.parameters();
  t[0].values = t[0].values.subspan(1);
  EXPECT_EQ(b->load_parameters(t).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(bit_equal(b->weight(), before));
  ASSERT_TRUE(b->load_parameters(a.parameters()).ok());
  EXPECT_TRUE(bit_equal(b->weight(), a.weight()));
  EXPECT_TRUE(bit_equal(b->bias(), a.bias()));
}

// ---- interaction -------------------------------------------------------------------------------

constexpr int64_t kF = 3, kD = 5;

Interaction make_interaction(Allocator* alloc, InteractionKind kind, DType p = DType::kF32) {
  auto it = Interaction::create({.kind = kind, .num_features = kF, .embedding_dim = kD, .dense_dim = kD,
                                 .precision = p}, alloc);
  EXPECT_TRUE(it.ok()) << it.status().to_string();
  return std::move(it).value();
}

// dot: [z, T_1.T_0, T_2.T_0, T_2.T_1, T_3.T_0, ...] per sample (torch.tril_indices order).
TEST(NnInteractionTest, DotOutputIsZThenStrictLowerTriangleRowMajor) {
  TrackingAllocator alloc;
  Interaction it = make_interaction(&alloc, InteractionKind::kDot);
  ASSERT_EQ(it.output_dim(), kD + 6);
  const auto z = random_floats(kB * kD, 1), e = random_floats(kB * kF * kD, 2);
  std::vector<float> out(kB * it.output_dim());
  ASSERT_TRUE(it.forward(kB, z, e, out).ok());
  const auto want = ref_dot_interaction(to_double(z), to_double(e), kB, kF, kD);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-6) << i;
}

// Gradients of z and of the pooled embeddings match central differences (dot and cat).
TEST(NnInteractionTest, GradientsMatchFiniteDifferences) {
  TrackingAllocator alloc;
  for (InteractionKind kind : {InteractionKind::kDot, InteractionKind::kCat}) {
    Interaction it = make_interaction(&alloc, kind);
    const auto z = random_floats(kB * kD, 3), e = random_floats(kB * kF * kD, 4);
    const auto g = random_floats(static_cast<size_t>(kB * it.output_dim()), 5);
    std::vector<float> out(g.size()), dz(z.size()), de(e.size());
    ASSERT_TRUE(it.forward(kB, z, e, out).ok());
    ASSERT_TRUE(it.backward(kB, z, e, g, dz, de).ok());
    auto zd = to_double(z), ed = to_double(e);
    auto loss = [&] {
      if (kind == InteractionKind::kDot) return weighted_sum(ref_dot_interaction(zd, ed, kB, kF, kD), g);
      double s = 0;  // cat: out = [z, e] per sample
      for (int64_t b = 0; b < kB; ++b) {
        for (int64_t j = 0; j < kD; ++j) s += zd[b * kD + j] * g[b * it.output_dim() + j];
        for (int64_t j = 0; j < kF * kD; ++j) s += ed[b * kF * kD + j] * g[b * it.output_dim() + kD + j];
      }
      return s;
    };
    for (size_t i = 0; i < zd.size(); ++i) EXPECT_NEAR(dz[i], central_difference(zd[i], 1e-3, loss), 1e-5) << i;
    for (size_t i = 0; i < ed.size(); ++i) EXPECT_NEAR(de[i], central_difference(ed[i], 1e-3, loss), 1e-5) << i;
  }
}

// bf16 interaction output is on the bf16 grid and within bf16 rounding of fp32.
TEST(NnInteractionTest, Bf16OutputIsRoundedAndCloseToFp32) {
  TrackingAllocator alloc;
  Interaction f32 = make_interaction(&alloc, InteractionKind::kDot);
  Interaction b16 = make_interaction(&alloc, InteractionKind::kDot, DType::kBF16);
  const auto z = random_floats(kB * kD, 6), e = random_floats(kB * kF * kD, 7);
  std::vector<float> o32(kB * f32.output_dim()), o16(o32.size());
  ASSERT_TRUE(f32.forward(kB, z, e, o32).ok() && b16.forward(kB, z, e, o16).ok());
  for (size_t i = 0; i < o16.size(); ++i) {
    EXPECT_EQ(f32_bits(o16[i]) & 0xffffu, 0u) << i;  // on the bf16 grid
    EXPECT_TRUE(close(o16[i], o32[i], 2e-2, 2e-2)) << i << ": " << o16[i] << " vs " << o32[i];
  }
}

// dot needs equal dims; sizes are checked.
TEST(NnInteractionTest, BadShapesAreInvalidArgument) {
  TrackingAllocator alloc;
  EXPECT_EQ(Interaction::create({.num_features = 2, .embedding_dim = 4, .dense_dim = 3}, &alloc).status().code(),
            StatusCode::kInvalidArgument);
  auto cat = Interaction::create(
      {.kind = InteractionKind::kCat, .num_features = 2, .embedding_dim = 4, .dense_dim = 3}, &alloc);
  ASSERT_TRUE(cat.ok());
  EXPECT_EQ(cat->output_dim(), 3 + 8);
  std::vector<float> z(6), e(16), out(22);
  EXPECT_TRUE(cat->forward(2, z, e, out).ok());
  EXPECT_EQ(cat->forward(2, z, {e.data(), 15}, out).code(), StatusCode::kInvalidArgument);
}

// The bf16 ReLU mask equals the fp32 one on every bf16 value (zeros, negatives, Inf, NaN).
TEST(NnActivationTest, Bf16ReluMaskEqualsFp32Mask) {
  std::vector<uint16_t> y16(65536);
  std::vector<float> y32(y16.size()), g(y16.size(), 1.0f), g16 = g;
  for (size_t i = 0; i < y16.size(); ++i) {
    y16[i] = static_cast<uint16_t>(i);
    y32[i] = bf16_to_f32(y16[i]);
  }
  relu_backward_inplace(y32, g);
  relu_backward_inplace_bf16(y16, g16);
  EXPECT_TRUE(bit_equal(g, g16));
}

// ---- loss --------------------------------------------------------------------------------------

// Loss equals the textbook mean BCE; dlogits equals central differences of it, times grad_scale.
TEST(NnLossTest, BceMatchesFormulaAndFiniteDifferences) {
  const auto x = random_floats(8, 1, -4.0f, 4.0f);
  const std::vector<float> y = {0, 1, 1, 0, 0.25f, 1, 0, 1};
  std::vector<float> dl(8), dl_scaled(8);
  auto xd = to_double(x);
  auto loss_d = [&] {
    double s = 0;
    for (size_t i = 0; i < 8; ++i) {
      const double p = 1.0 / (1.0 + std::exp(-xd[i]));
      s -= y[i] * std::log(p) + (1 - y[i]) * std::log(1 - p);
    }
    return s / 8;
  };
  auto loss = bce_with_logits(x, y, 1.0f, dl);
  ASSERT_TRUE(loss.ok());
  EXPECT_NEAR(*loss, loss_d(), 1e-6);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(dl[i], central_difference(xd[i], 1e-4, loss_d), 1e-7) << i;
  ASSERT_TRUE(bce_with_logits(x, y, 1024.0f, dl_scaled).ok());
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(dl_scaled[i], 1024.0f * dl[i]) << i;  // power of two: exact
}

// Huge logits give a finite loss and gradient (no exp overflow).
TEST(NnLossTest, BceIsFiniteForHugeLogits) {
  const std::vector<float> x = {1000.0f, -1000.0f, 100.0f, -100.0f}, y = {0, 1, 1, 0};
  std::vector<float> dl(4);
  auto loss = bce_with_logits(x, y, 1.0f, dl);
  ASSERT_TRUE(loss.ok());
  EXPECT_NEAR(*loss, (1000.0 + 1000.0 + 0.0 + 0.0) / 4, 1e-3);
  EXPECT_FLOAT_EQ(dl[0], 0.25f);
  EXPECT_FLOAT_EQ(dl[1], -0.25f);
  EXPECT_NEAR(dl[2], 0.0f, 1e-30);
}

// Labels outside [0, 1], NaN labels, size mismatches and bad scales are InvalidArgument.
TEST(NnLossTest, BceRejectsBadInput) {
  std::vector<float> x(3), dl(3);
  EXPECT_EQ(bce_with_logits(x, std::vector<float>{0, 2, 1}, 1.0f, dl).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bce_with_logits(x, std::vector<float>{0, NAN, 1}, 1.0f, dl).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bce_with_logits(x, std::vector<float>{0, 1}, 1.0f, dl).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bce_with_logits(x, std::vector<float>{0, 1, 1}, 0.0f, dl).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace leanemb::nn
