// Tests of the dense optimizers: bit-for-bit agreement with scalar fp32 formulas written in
// torch's order of operations, agreement with double-precision textbook rules, state export and
// restore (a restored run continues bit-identically), error handling, accounting and threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/isa_testing.h"
#include "nn/dense_optimizer.h"
#include "nn/nn_testing.h"

namespace leanemb::nn {
namespace {

using testing::bit_equal;
using testing::random_floats;

// Scalar fp32 reference of one parameter element in torch's order of operations, with fused
// multiply-adds where torch's kernels fuse (see the header).
struct RefElem {
  float p, s1 = 0, s2 = 0;
};
void ref_step(RefElem& e, float grad, const DenseOptimizerOptions& o, int64_t t, float mult) {
  float g = grad * mult;
  if (o.weight_decay != 0.0) g = std::fma(static_cast<float>(o.weight_decay), e.p, g);
  switch (o.kind) {
    case DenseOptimizerKind::kSgd:
      e.p = std::fma(static_cast<float>(-o.learning_rate), g, e.p);
      break;
    case DenseOptimizerKind::kAdagrad: {
      e.s1 = std::fma(1.0f * g, g, e.s1);
      const float sd = std::sqrt(e.s1) + static_cast<float>(o.eps.value_or(1e-10));
      e.p = e.p + (static_cast<float>(-o.learning_rate) * g) / sd;
      break;
    }
    case DenseOptimizerKind::kAdam: {
      e.s1 = std::fma(static_cast<float>(1.0 - o.beta1), g, e.s1 * static_cast<float>(o.beta1));
      e.s2 = std::fma(static_cast<float>(1.0 - o.beta2) * g, g, e.s2 * static_cast<float>(o.beta2));
      const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
      const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
      const float denom = std::sqrt(e.s2) / static_cast<float>(std::sqrt(bc2)) + static_cast<float>(o.eps.value_or(1e-8));
      e.p = e.p + (static_cast<float>(-(o.learning_rate / bc1)) * e.s1) / denom;
      break;
    }
  }
}

// Double-precision textbook rules (PyTorch documentation's pseudocode).
struct TextbookElem {
  double p, s1 = 0, s2 = 0;
};
void textbook_step(TextbookElem& e, double g, const DenseOptimizerOptions& o, int64_t t, double mult) {
  g = g * mult + o.weight_decay * e.p;
  const double lr = o.learning_rate;
  if (o.kind == DenseOptimizerKind::kSgd) e.p -= lr * g;
  if (o.kind == DenseOptimizerKind::kAdagrad) {
    e.s1 += g * g;
    e.p -= lr * g / (std::sqrt(e.s1) + 1e-10);
  }
  if (o.kind == DenseOptimizerKind::kAdam) {
    e.s1 = o.beta1 * e.s1 + (1 - o.beta1) * g;
    e.s2 = o.beta2 * e.s2 + (1 - o.beta2) * g * g;
    const double m_hat = e.s1 / (1 - std::pow(o.beta1, t)), v_hat = e.s2 / (1 - std::pow(o.beta2, t));
    e.p -= lr * m_hat / (std::sqrt(v_hat) + 1e-8);
  }
}

constexpr int kSteps = 6;
const DenseOptimizerKind kKinds[] = {DenseOptimizerKind::kSgd, DenseOptimizerKind::kAdagrad,
                                     DenseOptimizerKind::kAdam};

DenseOptimizerOptions options_for(DenseOptimizerKind kind) {
  return {.kind = kind, .learning_rate = 0.05, .weight_decay = 0.01, .beta1 = 0.8, .beta2 = 0.95};
}

// kSteps steps of a 2-parameter optimizer against the fp32 scalar reference (bit-for-bit) and the
// double textbook rules (1e-5 relative), with a loss-scale multiplier of 1/1024, in every kernel
// build the CPU runs (kernels/isa.h).
TEST(NnDenseOptimizerTest, StepsMatchReferenceFormulas) {
  kernels::for_each_isa([] {
    for (DenseOptimizerKind kind : kKinds) {
      TrackingAllocator alloc;
      const DenseOptimizerOptions o = options_for(kind);
      auto w = random_floats(40, 1), b = random_floats(5, 2);
      std::vector<float> gw(40), gb(5);
      std::vector<RefElem> ref;
      std::vector<TextbookElem> book;
      for (float v : w) ref.push_back({v}), book.push_back({v});
      auto opt = DenseOptimizer::create(o, {{"w", w, gw}, {"b", b, gb}}, &alloc);
      ASSERT_TRUE(opt.ok()) << opt.status().to_string();
      for (int t = 1; t <= kSteps; ++t) {
        const auto g = random_floats(45, 100 + t, -1024.0f, 1024.0f);  // scaled gradients
        std::copy(g.begin(), g.begin() + 40, gw.begin());
        std::copy(g.begin() + 40, g.end(), gb.begin());
        ASSERT_TRUE(opt->step(1.0f / 1024).ok());
        for (size_t i = 0; i < 40; ++i) {
          ref_step(ref[i], gw[i], o, t, 1.0f / 1024);
          textbook_step(book[i], gw[i], o, t, 1.0 / 1024);
          ASSERT_EQ(w[i], ref[i].p) << "step " << t << " element " << i;
          ASSERT_TRUE(testing::close(w[i], book[i].p, 1e-5, 1e-6)) << "step " << t << " element " << i;
        }
      }
      EXPECT_EQ(opt->step_count(), kSteps);
    }
  });
}

// state() / load_state() round-trip: a run restored after 3 steps continues bit-identically.
TEST(NnDenseOptimizerTest, RestoredStateContinuesBitIdentically) {
  for (DenseOptimizerKind kind : kKinds) {
    TrackingAllocator alloc;
    auto w1 = random_floats(10, 3), w2 = w1;
    std::vector<float> g(10);
    auto a = DenseOptimizer::create(options_for(kind), {{"w", w1, g}}, &alloc);
    auto b = DenseOptimizer::create(options_for(kind), {{"w", w2, g}}, &alloc);
    ASSERT_TRUE(a.ok() && b.ok());
    for (int t = 0; t < kSteps; ++t) {
      const auto fresh = random_floats(10, 200 + t);
      std::copy(fresh.begin(), fresh.end(), g.begin());  // in place: the optimizers hold views of g
      ASSERT_TRUE(a->step().ok());
      if (t == 2) {  // checkpoint a, restore into b
        std::copy(w1.begin(), w1.end(), w2.begin());
        ASSERT_TRUE(b->load_state(a->state()).ok());
      } else if (t > 2) {
        ASSERT_TRUE(b->step().ok());
      }
    }
    EXPECT_EQ(b->step_count(), kSteps);
    EXPECT_TRUE(bit_equal(w1, w2));
  }
}

// The step count survives beyond 2^24 through its two limbs.
TEST(NnDenseOptimizerTest, StepCountBeyondTwoToTheTwentyFourRoundTrips) {
  TrackingAllocator alloc;
  std::vector<float> w(2), g(2);
  auto opt = DenseOptimizer::create({.kind = DenseOptimizerKind::kAdam, .name = "dense"}, {{"w", w, g}}, &alloc);
  ASSERT_TRUE(opt.ok());
  const std::vector<float> limbs = {5.0f, 3.0f}, m(2), v(2);
  const std::vector<NamedTensor> state = {{"w.exp_avg", m}, {"w.exp_avg_sq", v}, {"dense.step", limbs}};
  ASSERT_TRUE(opt->load_state(state).ok());
  EXPECT_EQ(opt->step_count(), 3 * (int64_t{1} << 24) + 5);
  ASSERT_TRUE(opt->step().ok());
  EXPECT_EQ(opt->state().back().values[0], 6.0f);
}

// Wrong names, sizes, negative second moments or bad step limbs are InvalidArgument, and the
// state stays as it was.
TEST(NnDenseOptimizerTest, LoadStateRejectsMismatches) {
  TrackingAllocator alloc;
  std::vector<float> w(3), g(3, 1.0f);
  auto opt = DenseOptimizer::create({.kind = DenseOptimizerKind::kAdam}, {{"w", w, g}}, &alloc);
  ASSERT_TRUE(opt.ok() && opt->step().ok());
  const std::vector<float> m(3), v(3), short_v(2), neg_v = {0, -1, 0}, limbs = {1, 0}, bad_limbs = {0.5f, 0};
  const auto expect_rejected = [&](std::vector<NamedTensor> t) {
    EXPECT_EQ(opt->load_state(t).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(opt->step_count(), 1);
  };
  expect_rejected({{"w.exp_avg", m}, {"w.exp_avg_sq", v}});                                   // no step
  expect_rejected({{"w.exp_avg", m}, {"w.exp_avg_sq", short_v}, {"optimizer.step", limbs}});  // size
  expect_rejected({{"w.exp_avg", m}, {"w.exp_avg_sq", neg_v}, {"optimizer.step", limbs}});    // v < 0
  expect_rejected({{"w.exp_avg", m}, {"w.exp_avg_sq", v}, {"optimizer.step", bad_limbs}});    // limb
  expect_rejected({{"w.exp_avg", m}, {"w.exp_avg_sq", v}, {"optimizer.step", limbs}, {"x", m}});  // extra
  EXPECT_NE(opt->state()[1].values[0], 0.0f);  // untouched
}

// Bad hyper-parameters, parameter lists and multipliers are InvalidArgument.
TEST(NnDenseOptimizerTest, BadOptionsAndMultipliersAreRejected) {
  TrackingAllocator alloc;
  std::vector<float> w(3), g(3), g_short(2);
  EXPECT_FALSE(DenseOptimizer::create({.learning_rate = -1}, {{"w", w, g}}, &alloc).ok());
  EXPECT_FALSE(DenseOptimizer::create({.kind = DenseOptimizerKind::kAdam, .beta2 = 1.0}, {{"w", w, g}}, &alloc).ok());
  EXPECT_FALSE(DenseOptimizer::create({}, {{"w", w, g_short}}, &alloc).ok());
  EXPECT_FALSE(DenseOptimizer::create({}, {{"w", w, g}, {"w", w, g}}, &alloc).ok());
  auto opt = DenseOptimizer::create({}, {{"w", w, g}}, &alloc);
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ(opt->step(0.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->step(INFINITY).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->step_count(), 0);
}

// any_nonfinite_grad() reports an Inf or NaN in any parameter's gradient.
TEST(NnDenseOptimizerTest, ReportsNonfiniteGradients) {
  TrackingAllocator alloc;
  std::vector<float> w(3), b(2), gw(3), gb(2);
  auto opt = DenseOptimizer::create({}, {{"w", w, gw}, {"b", b, gb}}, &alloc);
  ASSERT_TRUE(opt.ok());
  EXPECT_FALSE(opt->any_nonfinite_grad());
  gb[1] = NAN;
  EXPECT_TRUE(opt->any_nonfinite_grad());
  gb[1] = 0.0f;
  gw[0] = -INFINITY;
  EXPECT_TRUE(opt->any_nonfinite_grad());
}

// Adam's two state arrays (and the step) are accounted as optimizer_state; a failed allocation
// is ResourceExhausted and leaves nothing allocated.
TEST(NnDenseOptimizerTest, StateIsAccountedAndAllocationFailureIsReported) {
  TrackingAllocator alloc;
  std::vector<float> w(100), g(100);
  {
    auto opt = DenseOptimizer::create({.kind = DenseOptimizerKind::kAdam}, {{"w", w, g}}, &alloc);
    ASSERT_TRUE(opt.ok());
    EXPECT_EQ(alloc.memory_stats()[Category::kOptimizerState].current_bytes, 2 * 100 * 4u + 8u);
  }
  alloc.inject_failure(1);
  auto failed = DenseOptimizer::create({.kind = DenseOptimizerKind::kAdam}, {{"w", w, g}}, &alloc);
  EXPECT_EQ(failed.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(alloc.memory_stats().current_bytes, 0u);
}

// A parameter large enough to be updated by several threads gets the same bits with 1 and 2.
TEST(NnDenseOptimizerTest, ResultsDoNotDependOnThreadCount) {
  const size_t n = size_t{1} << 17;
  std::vector<float> results[2];
  for (int threads = 1; threads <= 2; ++threads) {
    omp_set_num_threads(threads);
    TrackingAllocator alloc;
    auto w = random_floats(n, 4);
    auto g = random_floats(n, 5);
    auto opt = DenseOptimizer::create({.kind = DenseOptimizerKind::kAdam}, {{"w", w, g}}, &alloc);
    ASSERT_TRUE(opt.ok() && opt->step().ok() && opt->step().ok());
    results[threads - 1] = w;
  }
  EXPECT_TRUE(bit_equal(results[0], results[1]));
}

}  // namespace
}  // namespace leanemb::nn
