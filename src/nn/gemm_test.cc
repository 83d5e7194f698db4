// Tests of the deterministic GEMM wrapper: correctness for every transpose combination and
// bit-identical results across thread counts and buffer alignments on the shapes of a DLRM
// (the property activation checkpointing and thread-count determinism rest on).
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "nn/gemm.h"
#include "nn/nn_testing.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace leanemb::nn {
namespace {

using testing::bit_equal;
using testing::random_floats;

// Element (i, j) of op(M) for a row-major M with leading dimension ld.
double op_at(const std::vector<float>& m, Trans t, int64_t ld, int64_t i, int64_t j) {
  return t == Trans::kNo ? m[i * ld + j] : m[j * ld + i];
}

// C = alpha op(A) op(B) + beta C agrees with a double loop for all four transpose pairs,
// row and column counts that are not multiples of the panel, and k = 0.
// Shapes: 3 row panels (64, 64 and 5 rows), and a short C cut into column panels (64 and 3).
TEST(NnGemmTest, MatchesDoubleReferenceForEveryTransposeCombination) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{133, 7}, {9, 131}}) {
    for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{33}}) {
      for (Trans ta : {Trans::kNo, Trans::kYes}) {
        for (Trans tb : {Trans::kNo, Trans::kYes}) {
          const int64_t lda = ta == Trans::kNo ? k : m, ldb = tb == Trans::kNo ? n : k;
          const auto a = random_floats(static_cast<size_t>(m * k), 1), b = random_floats(static_cast<size_t>(k * n), 2);
          auto c = random_floats(static_cast<size_t>(m * n), 3);
          const auto c0 = c;
          gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), n);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double s = 0;
              for (int64_t p = 0; p < k; ++p) s += op_at(a, ta, lda, i, p) * op_at(b, tb, ldb, p, j);
              ASSERT_NEAR(c[i * n + j], 0.5 * s + 2.0 * c0[i * n + j], 1e-5) << i << "," << j << " k=" << k;
            }
        }
      }
    }
  }
  EXPECT_EQ(gemm_panel_rows(133), 64);
  EXPECT_EQ(gemm_panel_cols(133, 7), 7);
  EXPECT_EQ(gemm_panel_cols(9, 131), 64);
  EXPECT_EQ(gemm_panel_cols(64, 367), 64);
}

struct Shape {
  int64_t batch, in, out;
};
// Layers of a DLRM (bottom 13-256-64, top 415-256-1) at batch 512, as forward (x W^T), weight
// gradient (dy^T x) and input gradient (dy W) GEMMs.
// The main job's widest layer (367 -> 64) adds a weight gradient cut into column panels.
const Shape kDlrmShapes[] = {{512, 13, 256}, {512, 256, 64}, {512, 415, 256}, {512, 256, 1}, {1024, 367, 64}};

std::vector<std::vector<float>> run_layer_gemms(const Shape& s, int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(2);  // gemm() must override OpenBLAS's own threading
  const auto x = random_floats(static_cast<size_t>(s.batch * s.in), 4);
  const auto w = random_floats(static_cast<size_t>(s.out * s.in), 5);
  const auto dy = random_floats(static_cast<size_t>(s.batch * s.out), 6);
  std::vector<float> y(static_cast<size_t>(s.batch * s.out)), dw(static_cast<size_t>(s.out * s.in), 0.25f),
      dx(static_cast<size_t>(s.batch * s.in));
  gemm(Trans::kNo, Trans::kYes, s.batch, s.out, s.in, 1.0f, x.data(), s.in, w.data(), s.in, 0.0f, y.data(), s.out);
  gemm(Trans::kYes, Trans::kNo, s.out, s.in, s.batch, 1.0f, dy.data(), s.out, x.data(), s.in, 1.0f, dw.data(), s.in);
  gemm(Trans::kNo, Trans::kNo, s.batch, s.in, s.out, 1.0f, dy.data(), s.out, w.data(), s.in, 0.0f, dx.data(), s.in);
  return {y, dw, dx};
}

// Every GEMM of a DLRM layer gives the same bits with 1 and 2 OpenMP threads (raw OpenBLAS
// 0.3.21 does not: see docs/nn.md).
TEST(NnGemmTest, ResultsAreBitIdenticalWithOneAndTwoThreads) {
  for (const Shape& s : kDlrmShapes) {
    const auto one = run_layer_gemms(s, 1);
    const auto two = run_layer_gemms(s, 2);
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_TRUE(bit_equal(one[i], two[i])) << "gemm " << i << " of shape " << s.batch << "x" << s.in << "->" << s.out;
  }
  omp_set_num_threads(2);
}

// The same values at different addresses (alignment offsets of 1..3 floats) give the same bits:
// recomputed activations live in other buffers than the original ones.
TEST(NnGemmTest, ResultsDoNotDependOnBufferAddresses) {
  const int64_t m = 300, n = 96, k = 415;
  const auto a = random_floats(static_cast<size_t>(m * k), 7), b = random_floats(static_cast<size_t>(n * k), 8);
  std::vector<float> ref(static_cast<size_t>(m * n));
  gemm(Trans::kNo, Trans::kYes, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, ref.data(), n);
  for (size_t off = 1; off < 4; ++off) {
    std::vector<float> a2(a.size() + off), b2(b.size() + off), c2(ref.size() + off);
    std::copy(a.begin(), a.end(), a2.begin() + static_cast<long>(off));
    std::copy(b.begin(), b.end(), b2.begin() + static_cast<long>(off));
    gemm(Trans::kNo, Trans::kYes, m, n, k, 1.0f, a2.data() + off, k, b2.data() + off, k, 0.0f, c2.data() + off, n);
    EXPECT_TRUE(bit_equal(ref, std::span<const float>(c2).subspan(off))) << "offset " << off;
  }
}

}  // namespace
}  // namespace leanemb::nn
