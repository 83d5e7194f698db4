// Tests of the dot-interaction kernels: the fast kernel against the scalar reference of the same
// contract (bit for bit, over shapes that hit every block and tail case), the reference against
// a double-precision computation, and the layer's results with 1 and 2 threads.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/isa.h"
#include "leanemb/memory.h"
#include "nn/dot_interaction.h"
#include "nn/interaction.h"
#include "nn/nn_testing.h"

namespace leanemb::nn {
namespace {

using namespace testing;  // NOLINT: test helpers

// Feature counts around the row blocks (4) and lane chunks (8), the DLRM default (26) and one
// past the stack buffer (the kernel then runs the reference itself).
const std::vector<DotShape>& shapes() {
  static const std::vector<DotShape> s = {{1, 1},  {1, 8},  {2, 3},   {3, 16},  {4, 7},   {5, 16},  {7, 9},
                                          {8, 16}, {9, 17}, {15, 24}, {26, 16}, {26, 13}, {33, 64}, {140, 4}};
  return s;
}

struct SampleData {
  std::vector<float> z, e, gz, g;
};

SampleData sample_data(const DotShape& s, uint64_t seed) {
  SampleData d;
  d.z = random_floats(static_cast<size_t>(s.dim), seed);
  d.e = random_floats(static_cast<size_t>(s.num_features * s.dim), seed + 1);
  d.gz = random_floats(static_cast<size_t>(s.dim), seed + 2);
  d.g = random_floats(static_cast<size_t>(dot_pair_count(s)), seed + 3);
  return d;
}

// Forward and backward of the fast kernel equal the reference bit for bit, in fp32 and with the
// inputs rounded to bf16 / fp16 as they are read.
TEST(NnDotInteractionTest, FastKernelMatchesScalarReferenceBitForBit) {
  // Every kernel build the CPU runs: the 16-lane kernels (x86-64-v4), the 8-lane ones below it.
  for (kernels::Isa isa : {kernels::Isa::kV4, kernels::Isa::kV3, kernels::Isa::kBaseline})
  for (DotShape s : shapes())
    for (DType p : {DType::kF32, DType::kBF16, DType::kF16}) {
    kernels::set_isa_limit(isa);
    s.precision = p;
    const SampleData d = sample_data(s, 100 + static_cast<uint64_t>(s.num_features * 1000 + s.dim));
    std::vector<float> fast(static_cast<size_t>(dot_pair_count(s)), -1.0f), ref(fast.size(), -2.0f);
    dot_forward_sample(s, d.z.data(), d.e.data(), fast.data());
    dot_forward_sample_reference(s, d.z.data(), d.e.data(), ref.data());
    EXPECT_TRUE(bit_equal(fast, ref)) << "forward F=" << s.num_features << " d=" << s.dim << " " << dtype_name(p)
                                      << " " << kernels::isa_name(isa);
    std::vector<float> dz(d.z.size(), -1.0f), de(d.e.size(), -1.0f), rdz(dz.size(), -2.0f), rde(de.size(), -2.0f);
    dot_backward_sample(s, d.z.data(), d.e.data(), d.gz.data(), d.g.data(), dz.data(), de.data());
    dot_backward_sample_reference(s, d.z.data(), d.e.data(), d.gz.data(), d.g.data(), rdz.data(), rde.data());
    EXPECT_TRUE(bit_equal(dz, rdz) && bit_equal(de, rde)) << "backward F=" << s.num_features << " d=" << s.dim << " "
                                                          << dtype_name(p) << " " << kernels::isa_name(isa);
  }
  kernels::set_isa_limit(kernels::Isa::kV4);
  EXPECT_FALSE(dot_fast_path_fits({140, 4}));  // the last shape exercises the fallback
  EXPECT_TRUE(dot_fast_path_fits({26, 16}));
}

// The reference computes T_i . T_j and S T (z's row adding gz) to fp32 accuracy of a double sum.
TEST(NnDotInteractionTest, ReferenceMatchesDoublePrecision) {
  const DotShape s{5, 11};
  const SampleData d = sample_data(s, 7);
  auto row = [&](int64_t r) { return r == 0 ? d.z.data() : d.e.data() + (r - 1) * s.dim; };
  std::vector<float> pairs(static_cast<size_t>(dot_pair_count(s))), dz(d.z.size()), de(d.e.size());
  dot_forward_sample_reference(s, d.z.data(), d.e.data(), pairs.data());
  dot_backward_sample_reference(s, d.z.data(), d.e.data(), d.gz.data(), d.g.data(), dz.data(), de.data());
  int64_t k = 0;
  std::vector<double> want_dt(static_cast<size_t>((s.num_features + 1) * s.dim));
  for (int64_t c = 0; c < s.dim; ++c) want_dt[static_cast<size_t>(c)] = d.gz[static_cast<size_t>(c)];
  for (int64_t i = 1; i <= s.num_features; ++i)
    for (int64_t j = 0; j < i; ++j, ++k) {
      double dot = 0;
      for (int64_t c = 0; c < s.dim; ++c) dot += static_cast<double>(row(i)[c]) * row(j)[c];
      EXPECT_NEAR(pairs[static_cast<size_t>(k)], dot, 1e-5) << i << "," << j;
      const double gk = d.g[static_cast<size_t>(k)];
      for (int64_t c = 0; c < s.dim; ++c) {
        want_dt[static_cast<size_t>(i * s.dim + c)] += gk * row(j)[c];
        want_dt[static_cast<size_t>(j * s.dim + c)] += gk * row(i)[c];
      }
    }
  for (int64_t c = 0; c < s.dim; ++c) EXPECT_NEAR(dz[static_cast<size_t>(c)], want_dt[static_cast<size_t>(c)], 1e-5);
  for (size_t x = 0; x < de.size(); ++x) EXPECT_NEAR(de[x], want_dt[x + static_cast<size_t>(s.dim)], 1e-5) << x;
}

// Inf in one embedding reaches exactly the outputs that use it, in both implementations alike.
TEST(NnDotInteractionTest, NonFiniteInputsGiveTheReferenceResult) {
  const DotShape s{9, 16};
  SampleData d = sample_data(s, 9);
  d.e[static_cast<size_t>(3 * s.dim + 5)] = std::numeric_limits<float>::infinity();
  std::vector<float> fast(static_cast<size_t>(dot_pair_count(s))), ref(fast.size());
  dot_forward_sample(s, d.z.data(), d.e.data(), fast.data());
  dot_forward_sample_reference(s, d.z.data(), d.e.data(), ref.data());
  int non_finite = 0;
  for (size_t i = 0; i < fast.size(); ++i) {
    EXPECT_EQ(std::isfinite(fast[i]), std::isfinite(ref[i])) << i;
    if (std::isfinite(ref[i])) {
      EXPECT_EQ(fast[i], ref[i]) << i;
    }
    non_finite += !std::isfinite(ref[i]);
  }
  EXPECT_EQ(non_finite, s.num_features);  // row 4 (embedding 3) pairs with each of the other 9 rows
}

// Rounding as the kernel reads equals rounding the inputs first and running the fp32 kernel.
TEST(NnDotInteractionTest, Bf16InputsAreRoundedBeforeTheProducts) {
  const DotShape s32{26, 16}, s16{26, 16, DType::kBF16};
  const SampleData d = sample_data(s32, 31);
  auto rounded = [](std::vector<float> v) {
    amp::round_to_precision(v, DType::kBF16);
    return v;
  };
  const SampleData r{rounded(d.z), rounded(d.e), rounded(d.gz), rounded(d.g)};
  std::vector<float> a(static_cast<size_t>(dot_pair_count(s32))), b(a.size());
  dot_forward_sample(s16, d.z.data(), d.e.data(), a.data());
  dot_forward_sample(s32, r.z.data(), r.e.data(), b.data());
  EXPECT_TRUE(bit_equal(a, b));
  std::vector<float> dz(d.z.size()), de(d.e.size()), rdz(dz.size()), rde(de.size());
  dot_backward_sample(s16, d.z.data(), d.e.data(), d.gz.data(), d.g.data(), dz.data(), de.data());
  dot_backward_sample(s32, r.z.data(), r.e.data(), r.gz.data(), r.g.data(), rdz.data(), rde.data());
  EXPECT_TRUE(bit_equal(dz, rdz) && bit_equal(de, rde));
}

// The layer's forward and backward give the same bits with 1 and 2 threads, in fp32 and bf16.
TEST(NnDotInteractionTest, LayerResultsDoNotDependOnThreadCount) {
  TrackingAllocator alloc;
  const int64_t B = 700, F = 26, D = 16;
  for (DType p : {DType::kF32, DType::kBF16}) {
    auto it = Interaction::create({.kind = InteractionKind::kDot, .num_features = F, .embedding_dim = D,
                                   .dense_dim = D, .precision = p},
                                  &alloc);
    ASSERT_TRUE(it.ok());
    const auto z = random_floats(B * D, 21), e = random_floats(B * F * D, 22);
    const auto g = random_floats(static_cast<size_t>(B * it->output_dim()), 23);
    std::vector<std::vector<float>> runs;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::vector<float> out(g.size()), dz(z.size()), de(e.size());
      ASSERT_TRUE(it->forward(B, z, e, out).ok());
      ASSERT_TRUE(it->backward(B, z, e, g, dz, de).ok());
      out.insert(out.end(), dz.begin(), dz.end());
      out.insert(out.end(), de.begin(), de.end());
      runs.push_back(std::move(out));
    }
    EXPECT_TRUE(bit_equal(runs[0], runs[1])) << dtype_name(p);
  }
}

}  // namespace
}  // namespace leanemb::nn
