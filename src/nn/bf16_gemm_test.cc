// Tests of the native bf16 path: the VDPBF16PS kernels against the scalar reference of the
// same contract (bit for bit, over tile and tail shapes, special values, 1 and 2 threads), the
// AMX tile kernels against the error bound of their contract (and bit for bit where they hand
// over to the VDPBF16PS chain), the reference against double precision, packing, the Linear
// layer on the native path (bit for bit against the reference composition, gradients against
// central differences) and the run-time switches. Kernel tests skip on CPUs without AVX512_BF16
// (AMX tests: without AMX-BF16).
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "core/half.h"
#include "kernels/isa_testing.h"
#include "leanemb/memory.h"
#include "nn/bf16_gemm.h"
#include "nn/linear.h"
#include "nn/nn_testing.h"

namespace leanemb::nn {
namespace {

using namespace testing;  // NOLINT: test helpers

struct Packed {
  std::vector<uint16_t> a;
  std::vector<uint32_t> b;
};

// A [m, k] and B [k, n] row-major fp32, packed.
Packed pack(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t n, int64_t k) {
  Packed p;
  p.a.resize(bf16_packed_a_bytes(m, k) / 2);
  p.b.resize(bf16_packed_b_bytes(k, n) / 4);
  bf16_pack_a(a.data(), m, k, k, 1, p.a.data());
  bf16_pack_b(b.data(), k, n, n, 1, p.b.data());
  return p;
}

// Bitwise equality, NaN equal to any NaN.
bool same_values(const std::vector<float>& x, const std::vector<float>& y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (f32_bits(x[i]) != f32_bits(y[i])) return false;
  }
  return true;
}

// Calls f(m, n, k, a, b, packed, c0) for every shape of ms x ns x ks: random A [m, k], B [k, n]
// (packed) and a starting C [m, n], seeded from `seed` on.
template <size_t M, size_t N, size_t K, typename F>
void for_each_gemm_case(const int64_t (&ms)[M], const int64_t (&ns)[N], const int64_t (&ks)[K], uint64_t seed, F&& f) {
  for (int64_t m : ms)
    for (int64_t n : ns)
      for (int64_t k : ks) {
        const auto a = random_floats(static_cast<size_t>(m * k), seed++), b = random_floats(static_cast<size_t>(k * n), seed++);
        const Packed p = pack(a, b, m, n, k);
        const auto c0 = random_floats(static_cast<size_t>(m * n), seed++);
        f(m, n, k, a, b, p, c0);
      }
}

#define SKIP_WITHOUT_NATIVE_BF16() \
  if (!bf16_native_supported()) GTEST_SKIP() << "CPU without AVX512_BF16"

// The kernel equals the reference bit for bit, storing and accumulating, over shapes that hit
// every micro-kernel height and width and the padding of odd k and of n % 16.
TEST(NnBf16GemmTest, KernelMatchesScalarReferenceBitForBit) {
  SKIP_WITHOUT_NATIVE_BF16();
  const AmxBf16Scope vdpbf16ps(false);
  const int64_t ms[] = {1, 5, 6, 7, 9, 48, 50, 97}, ns[] = {1, 15, 16, 17, 47, 64, 65, 130}, ks[] = {1, 2, 3, 13, 64, 367};
  for_each_gemm_case(ms, ns, ks, 1, [](int64_t m, int64_t n, int64_t k, auto&, auto&, const Packed& p, const auto& c0) {
    for (bool acc : {false, true}) {
      std::vector<float> fast = c0, ref = c0;
      bf16_gemm(m, n, k, p.a.data(), p.b.data(), fast.data(), n, acc);
      bf16_gemm_reference(m, n, k, p.a.data(), p.b.data(), ref.data(), n, acc);
      ASSERT_TRUE(bit_equal(fast, ref)) << m << "x" << n << "x" << k << " accumulate " << acc;
    }
  });
}

// The epilogues (bias add and rounding to the bf16 grid, rounding alone) in the kernels equal the
// reference's, and the reference's equal the two-pass composition they replace (the fp32 sum,
// then + bias, then bf16_to_f32(f32_to_bf16_rne(.))); the AMX kernels' equal that composition of
// their own stored sums. NaN and an overflow to infinity pass through the rounding.
TEST(NnBf16GemmTest, EpiloguesAddTheBiasAndRoundLikeTheTwoPassComposition) {
  SKIP_WITHOUT_NATIVE_BF16();
  auto rnd = [](float v) { return bf16_to_f32(f32_to_bf16_rne(v)); };
  uint64_t seed = 700;
  for (bool amx : {false, true}) {
    if (amx && !bf16_amx_supported()) continue;
    const AmxBf16Scope scope(amx);
    for (int64_t m : {1, 7, 16, 33, 64})
      for (int64_t n : {1, 17, 64, 367})
        for (int64_t k : {3, 64, 367}) {
          auto a = random_floats(static_cast<size_t>(m * k), seed++), b = random_floats(static_cast<size_t>(k * n), seed++);
          auto bias = random_floats(static_cast<size_t>(n), seed++);
          bias[0] = std::numeric_limits<float>::quiet_NaN();
          if (n > 1) bias[1] = 3.4e38f;  // sum + bias may overflow to infinity
          const Packed p = pack(a, b, m, n, k);
          std::vector<float> sum(static_cast<size_t>(m * n)), want_br(sum.size()), want_r(sum.size());
          bf16_gemm(m, n, k, p.a.data(), p.b.data(), sum.data(), n, false);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              const size_t o = static_cast<size_t>(i * n + j);
              want_br[o] = rnd(sum[o] + bias[static_cast<size_t>(j)]);
              want_r[o] = rnd(sum[o]);
            }
          std::vector<float> got_br(sum.size()), got_r(sum.size()), ref_br(sum.size());
          bf16_gemm(m, n, k, p.a.data(), p.b.data(), got_br.data(), n, Bf16Epilogue{.bias = bias.data(), .round_bf16 = true});
          bf16_gemm(m, n, k, p.a.data(), p.b.data(), got_r.data(), n, Bf16Epilogue{.round_bf16 = true});
          ASSERT_TRUE(same_values(got_br, want_br)) << m << "x" << n << "x" << k << " amx " << amx;
          ASSERT_TRUE(same_values(got_r, want_r)) << m << "x" << n << "x" << k << " amx " << amx;
          if (amx) continue;
          bf16_gemm_reference(m, n, k, p.a.data(), p.b.data(), ref_br.data(), n,
                              Bf16Epilogue{.bias = bias.data(), .round_bf16 = true});
          ASSERT_TRUE(same_values(ref_br, want_br)) << m << "x" << n << "x" << k;
        }
  }
}

// Subnormal inputs and results, overflow to infinity, infinities and NaN: as the reference says.
TEST(NnBf16GemmTest, SpecialValuesFollowTheContract) {
  SKIP_WITHOUT_NATIVE_BF16();
  const AmxBf16Scope vdpbf16ps(false);
  const int64_t m = 13, n = 33, k = 40;
  auto a = random_floats(static_cast<size_t>(m * k), 50), b = random_floats(static_cast<size_t>(k * n), 51);
  const float specials[] = {1e-39f, -3e-39f, 1e-20f, -1e-20f, 3e38f, -3e38f, std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, 1e20f};
  for (size_t i = 0; i < a.size(); i += 3) a[i] = specials[(i / 3) % std::size(specials)];
  for (size_t i = 1; i < b.size(); i += 4) b[i] = specials[(i / 4 + 5) % std::size(specials)];
  const Packed p = pack(a, b, m, n, k);
  std::vector<float> fast(static_cast<size_t>(m * n)), ref(fast.size());
  bf16_gemm(m, n, k, p.a.data(), p.b.data(), fast.data(), n, false);
  bf16_gemm_reference(m, n, k, p.a.data(), p.b.data(), ref.data(), n, false);
  EXPECT_TRUE(same_values(fast, ref));
}

// The reference is the bf16-rounded product summed in fp32: close to a double sum.
TEST(NnBf16GemmTest, ReferenceMatchesDoublePrecisionOfRoundedOperands) {
  const int64_t m = 7, n = 19, k = 367;
  const auto a = random_floats(static_cast<size_t>(m * k), 60), b = random_floats(static_cast<size_t>(k * n), 61);
  const Packed p = pack(a, b, m, n, k);
  std::vector<float> c(static_cast<size_t>(m * n));
  bf16_gemm_reference(m, n, k, p.a.data(), p.b.data(), c.data(), n, false);
  auto r = [](float x) { return static_cast<double>(bf16_to_f32(f32_to_bf16_rne(x))); };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < k; ++q) s += r(a[i * k + q]) * r(b[q * n + j]);
      EXPECT_NEAR(c[i * n + j], s, 2e-5) << i << "," << j;
    }
}

// Packing rounds to nearest even, honours both strides and zero-pads odd k and n % 16, in every
// kernel build the CPU runs.
TEST(NnBf16GemmTest, PackingRoundsToNearestEvenAndZeroPads) {
  kernels::for_each_isa([&] {
    const int64_t m = 3, k = 5, n = 18;
    const auto src = random_floats(static_cast<size_t>(k * n), 70);
    std::vector<uint16_t> a(bf16_packed_a_bytes(m, k) / 2, 0xffff);
    bf16_pack_a(src.data(), m, k, 1, n, a.data());  // A[i][j] = src[j * n + i] (a transpose)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < k; ++j) EXPECT_EQ(a[static_cast<size_t>(i * 6 + j)], f32_to_bf16_rne(src[static_cast<size_t>(j * n + i)]));
      EXPECT_EQ(a[static_cast<size_t>(i * 6 + 5)], 0);
    }
    std::vector<uint32_t> b(bf16_packed_b_bytes(k, n) / 4, 0xffffffffu);
    bf16_pack_b(src.data(), k, n, n, 1, b.data());
    ASSERT_EQ(b.size(), 3u * 32u);
    for (int64_t p = 0; p < 3; ++p)
      for (int64_t j = 0; j < 32; ++j) {
        const uint32_t w = b[static_cast<size_t>(p * 32 + j)];
        const bool col = j < n;
        EXPECT_EQ(w & 0xffffu, col ? f32_to_bf16_rne(src[static_cast<size_t>(2 * p * n + j)]) : 0u);
        EXPECT_EQ(w >> 16, col && 2 * p + 1 < k ? f32_to_bf16_rne(src[static_cast<size_t>((2 * p + 1) * n + j)]) : 0u);
      }
  });
}

// The transposed pack (dW's A = dy^T) in whole 16 x 32 blocks (transposed in registers where the
// CPU has AVX-512 BF16) and its edges: every element is f32_to_bf16_rne of its source, with
// ties, NaNs, infinities and subnormals among the values, and the pad column zero.
TEST(NnBf16GemmTest, TransposedPackingMatchesTheScalarRoundingInBlocksAndEdges) {
  kernels::for_each_isa([&] {
    for (auto [m, k] : {std::pair<int64_t, int64_t>{37, 70}, {32, 64}, {16, 33}, {15, 31}}) {
      const int64_t n = m + 3;  // the source's row stride (A's column stride)
      auto src = random_floats(static_cast<size_t>(k * n), 71);
      const float specials[] = {std::nanf(""), -INFINITY, INFINITY, 1e-40f, -1e-41f, 0.0f, -0.0f};
      for (size_t i = 0; i < src.size(); i += 5) src[i] = specials[(i / 5) % std::size(specials)];
      for (size_t i = 2; i < src.size(); i += 7) {  // exact ties between two bf16 values
        uint32_t u;
        std::memcpy(&u, &src[i], 4);
        u = (u & 0xffff0000u) | 0x8000u;
        std::memcpy(&src[i], &u, 4);
      }
      const int64_t kp = bf16_pad_k(k);
      std::vector<uint16_t> a(bf16_packed_a_bytes(m, k) / 2, 0xffff);
      bf16_pack_a(src.data(), m, k, 1, n, a.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          ASSERT_EQ(a[static_cast<size_t>(i * kp + j)], f32_to_bf16_rne(src[static_cast<size_t>(j * n + i)]))
              << "m " << m << " k " << k << " at " << i << "," << j;
        }
        if (kp != k) {
          EXPECT_EQ(a[static_cast<size_t>(i * kp + k)], 0);
        }
      }
    }
  });
}

// 1 and 2 threads give the same bits on a shape with many tiles.
TEST(NnBf16GemmTest, ResultsDoNotDependOnThreadCount) {
  SKIP_WITHOUT_NATIVE_BF16();
  const int64_t m = 300, n = 130, k = 201;
  const auto a = random_floats(static_cast<size_t>(m * k), 80), b = random_floats(static_cast<size_t>(k * n), 81);
  const Packed p = pack(a, b, m, n, k);
  std::vector<float> one(static_cast<size_t>(m * n)), two(one.size());
  omp_set_num_threads(1);
  bf16_gemm(m, n, k, p.a.data(), p.b.data(), one.data(), n, false);
  omp_set_num_threads(2);
  bf16_gemm(m, n, k, p.a.data(), p.b.data(), two.data(), n, false);
  EXPECT_TRUE(bit_equal(one, two));
}

#define SKIP_WITHOUT_AMX_BF16() \
  if (!bf16_amx_supported()) GTEST_SKIP() << "CPU (or OS) without AMX-BF16"

// The AMX kernels: every output within the contract's bound of the exact sum of its (daz'd)
// bf16 products, over shapes with row groups of 16 and tail rows, one and two column tiles,
// k-pairs in whole and partial chunks of 16; storing and accumulating. Rows past the last
// whole group of 16 and k < 32 run the VDPBF16PS chain: bit for bit the reference.
TEST(NnBf16GemmTest, AmxKernelIsWithinItsErrorBoundOfTheExactSum) {
  SKIP_WITHOUT_AMX_BF16();
  const int64_t ms[] = {1, 16, 17, 32, 47, 64, 100}, ns[] = {1, 16, 17, 33, 64, 130}, ks[] = {13, 32, 33, 64, 201, 1024};
  int64_t checked = 0, exact_tail = 0;
  for_each_gemm_case(ms, ns, ks, 500, [&](int64_t m, int64_t n, int64_t k, auto&, auto&, const Packed& p, const auto& c0) {
    std::vector<float> ref(static_cast<size_t>(m * n));
    bf16_gemm_reference(m, n, k, p.a.data(), p.b.data(), ref.data(), n, false);
    for (bool acc : {false, true}) {
      std::vector<float> fast = c0;
      bf16_gemm(m, n, k, p.a.data(), p.b.data(), fast.data(), n, acc);
      const int64_t kp = bf16_pad_k(k), pairs = kp / 2, m16 = m / 16 * 16;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const size_t o = static_cast<size_t>(i * n + j);
          const float got = acc ? fast[o] - c0[o] : fast[o];  // exact enough: checked below
          if (pairs < 16 || i >= m16) {
            const float want = acc ? c0[o] + ref[o] : ref[o];
            ASSERT_EQ(f32_bits(fast[o]), f32_bits(want)) << m << "x" << n << "x" << k << " (" << i << "," << j << ")";
            ++exact_tail;
            continue;
          }
          double exact = 0.0, magnitude = 0.0;
          for (int64_t q = 0; q < k; ++q) {
            const double x = static_cast<double>(bf16_to_f32(p.a[static_cast<size_t>(i * kp + q)]));
            const uint32_t w = p.b[static_cast<size_t>(q / 2 * bf16_pad_n(n) + j)];
            const double y = static_cast<double>(bf16_to_f32(static_cast<uint16_t>(q % 2 == 0 ? w : w >> 16)));
            exact += x * y;
            magnitude += std::fabs(x * y);
          }
          // fp32 accumulation over kp products (2^-24 per addition), plus the rounding of the
          // accumulating add and of got's subtraction.
          const double bound = (static_cast<double>(kp) + 4.0) * 0x1p-24 * magnitude +
                               (acc ? 0x1p-22 * (std::fabs(c0[o]) + std::fabs(exact)) : 0.0) + 1e-30;
          ASSERT_LE(std::fabs(static_cast<double>(got) - exact), bound)
              << m << "x" << n << "x" << k << " (" << i << "," << j << ") accumulate " << acc;
          ++checked;
        }
    }
  });
  EXPECT_GT(checked, 0);
  EXPECT_GT(exact_tail, 0);
}

// The AMX path differs from the VDPBF16PS chain in the last bits (its own order inside a chunk of
// 16 k-pairs), so the switch is observable; both stay deterministic.
TEST(NnBf16GemmTest, AmxSwitchSelectsTheVdpbf16psKernels) {
  SKIP_WITHOUT_AMX_BF16();
  const int64_t m = 64, n = 64, k = 367;
  const auto a = random_floats(static_cast<size_t>(m * k), 600), b = random_floats(static_cast<size_t>(k * n), 601);
  const Packed p = pack(a, b, m, n, k);
  std::vector<float> amx(static_cast<size_t>(m * n)), amx2(amx.size()), chain(amx.size()), ref(amx.size());
  EXPECT_TRUE(bf16_amx_enabled());
  bf16_gemm(m, n, k, p.a.data(), p.b.data(), amx.data(), n, false);
  bf16_gemm(m, n, k, p.a.data(), p.b.data(), amx2.data(), n, false);
  {
    const AmxBf16Scope off(false);
    EXPECT_FALSE(bf16_amx_enabled());
    bf16_gemm(m, n, k, p.a.data(), p.b.data(), chain.data(), n, false);
  }
  EXPECT_TRUE(bf16_amx_enabled());
  bf16_gemm_reference(m, n, k, p.a.data(), p.b.data(), ref.data(), n, false);
  EXPECT_TRUE(bit_equal(amx, amx2));
  EXPECT_TRUE(bit_equal(chain, ref));
  EXPECT_FALSE(bit_equal(amx, ref));
}

Linear make_bf16_linear(Allocator* alloc, int64_t in, int64_t out) {
  auto l = Linear::create({.in_features = in, .out_features = out, .precision = DType::kBF16, .seed = 3}, alloc);
  EXPECT_TRUE(l.ok());
  return std::move(l).value();
}

// On the native path, y = round(A B + round(b)) and dx = round(dy W'), dW = dy^T x exactly as the
// reference composes them from the packed operands.
TEST(NnBf16GemmTest, LinearNativePathEqualsReferenceComposition) {
  SKIP_WITHOUT_NATIVE_BF16();
  const AmxBf16Scope vdpbf16ps(false);  // the composition; the AMX GEMM is tested on its own
  TrackingAllocator alloc;
  const int64_t B = 37, in = 13, out = 21;
  Linear l = make_bf16_linear(&alloc, in, out);
  ASSERT_TRUE(linear_uses_native_bf16(l.options()));
  const auto x = random_floats(static_cast<size_t>(B * in), 90), g = random_floats(static_cast<size_t>(B * out), 91);
  std::vector<float> y(g.size()), dx(x.size());
  ASSERT_TRUE(l.forward(B, x, y).ok());
  ASSERT_TRUE(l.backward(g, dx).ok());
  std::vector<float> wt(static_cast<size_t>(in * out));  // W^T [in, out]
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) wt[static_cast<size_t>(i * out + o)] = l.weight()[static_cast<size_t>(o * in + i)];
  auto round = [](float v) { return bf16_to_f32(f32_to_bf16_rne(v)); };
  const Packed f = pack(x, wt, B, out, in);
  std::vector<float> want_y(y.size());
  bf16_gemm_reference(B, out, in, f.a.data(), f.b.data(), want_y.data(), out, false);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t o = 0; o < out; ++o) want_y[static_cast<size_t>(r * out + o)] = round(want_y[static_cast<size_t>(r * out + o)] + round(l.bias()[static_cast<size_t>(o)]));
  EXPECT_TRUE(bit_equal(y, want_y));
  std::vector<float> w(l.weight().begin(), l.weight().end()), gr(g.size());
  for (size_t i = 0; i < g.size(); ++i) gr[i] = round(g[i]);
  const Packed d = pack(gr, w, B, in, out);
  std::vector<float> want_dx(dx.size());
  bf16_gemm_reference(B, in, out, d.a.data(), d.b.data(), want_dx.data(), in, false);
  for (float& v : want_dx) v = round(v);
  EXPECT_TRUE(bit_equal(dx, want_dx));
  std::vector<float> gt(g.size());  // dy^T [out, B]
  for (int64_t r = 0; r < B; ++r)
    for (int64_t o = 0; o < out; ++o) gt[static_cast<size_t>(o * B + r)] = gr[static_cast<size_t>(r * out + o)];
  std::vector<float> xr(x.size());
  for (size_t i = 0; i < x.size(); ++i) xr[i] = round(x[i]);
  const Packed wg = pack(gt, xr, out, in, B);
  std::vector<float> want_dw(w.size(), 0.0f);
  bf16_gemm_reference(out, in, B, wg.a.data(), wg.b.data(), want_dw.data(), in, true);
  EXPECT_TRUE(bit_equal({l.weight_grad().begin(), l.weight_grad().end()}, want_dw));
}

// Native-path gradients of L = sum(y * G) match central differences of the double-precision
// layer, within bf16 rounding.
TEST(NnBf16GemmTest, LinearNativeGradientsMatchFiniteDifferences) {
  TrackingAllocator alloc;
  const int64_t B = 6, in = 9, out = 5;
  Linear l = make_bf16_linear(&alloc, in, out);
  const auto x = random_floats(static_cast<size_t>(B * in), 92), g = random_floats(static_cast<size_t>(B * out), 93);
  std::vector<float> y(g.size()), dx(x.size());
  ASSERT_TRUE(l.forward(B, x, y).ok());
  ASSERT_TRUE(l.backward(g, dx).ok());
  auto xd = to_double(x), wd = to_double(l.weight()), bd = to_double(l.bias());
  auto loss = [&] { return weighted_sum(ref_linear(xd, wd, bd, B, in, out), g); };
  for (size_t i = 0; i < wd.size(); ++i)
    EXPECT_TRUE(close(l.weight_grad()[i], central_difference(wd[i], 1e-3, loss), 3e-2, 3e-2)) << "dW " << i;
  for (size_t i = 0; i < bd.size(); ++i)
    EXPECT_TRUE(close(l.bias_grad()[i], central_difference(bd[i], 1e-3, loss), 3e-2, 3e-2)) << "db " << i;
  for (size_t i = 0; i < xd.size(); ++i) EXPECT_TRUE(close(dx[i], central_difference(xd[i], 1e-3, loss), 3e-2, 3e-2)) << "dx " << i;
}

// Switched off, bf16 layers run the emulation (scratch of the rounded weights); both paths agree
// to bf16 rounding (their outputs are rounded to bf16, so most are even bit-equal).
TEST(NnBf16GemmTest, SwitchSelectsTheEmulationFallback) {
  TrackingAllocator alloc;
  const int64_t B = 64, in = 367, out = 64;
  Linear l = make_bf16_linear(&alloc, in, out);
  const auto x = random_floats(static_cast<size_t>(B * in), 94);
  std::vector<float> native(static_cast<size_t>(B * out)), emulated(native.size());
  ASSERT_TRUE(l.forward(B, x, native).ok());
  set_bf16_native_enabled(false);
  EXPECT_FALSE(bf16_native_enabled());
  EXPECT_FALSE(linear_uses_native_bf16(l.options()));
  EXPECT_EQ(linear_scratch_floats(l.options(), B), static_cast<size_t>(out * in + out));
  ASSERT_TRUE(l.forward(B, x, emulated).ok());
  set_bf16_native_enabled(true);
  EXPECT_EQ(bf16_native_enabled(), bf16_native_supported());
  for (size_t i = 0; i < native.size(); ++i) EXPECT_TRUE(close(native[i], emulated[i], 1.6e-2, 1e-2)) << i;
}

}  // namespace
}  // namespace leanemb::nn
