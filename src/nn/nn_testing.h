// Test helpers for nn_test (tests only): seeded random data, double-precision reference
// implementations of the layers (written independently of src/nn, element by element), and a
// central-difference derivative.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "nn/bf16_gemm.h"

namespace leanemb::nn::testing {

// Selects the native bf16 path (where the CPU has it) or the emulation for a scope, then
// restores the native default.
struct NativeBf16Scope {
  explicit NativeBf16Scope(bool native) { set_bf16_native_enabled(native); }
  ~NativeBf16Scope() { set_bf16_native_enabled(true); }
  NativeBf16Scope(const NativeBf16Scope&) = delete;
  NativeBf16Scope& operator=(const NativeBf16Scope&) = delete;
};

// Selects the AMX tile kernels (where the CPU has them) or the VDPBF16PS kernels of the native
// path for a scope, then restores the default (AMX where supported).
struct AmxBf16Scope {
  explicit AmxBf16Scope(bool amx) { set_bf16_amx_enabled(amx); }
  ~AmxBf16Scope() { set_bf16_amx_enabled(true); }
  AmxBf16Scope(const AmxBf16Scope&) = delete;
  AmxBf16Scope& operator=(const AmxBf16Scope&) = delete;
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

inline std::vector<double> to_double(std::span<const float> v) { return std::vector<double>(v.begin(), v.end()); }

inline bool bit_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// y [B, out] = x [B, in] W^T [in, out] + b, in double.
inline std::vector<double> ref_linear(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& b, int64_t batch, int64_t in, int64_t out) {
  std::vector<double> y(static_cast<size_t>(batch * out));
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

// A double-precision MLP: weights[i] [w_{i+1}, w_i], biases[i] [w_{i+1}].
struct RefMlp {
  std::vector<int64_t> widths;
  std::vector<std::vector<double>> weights = {}, biases = {};
  bool relu_after_last = false;

  std::vector<double> forward(std::vector<double> x, int64_t batch) const {
    const size_t num = weights.size();
    for (size_t i = 0; i < num; ++i) {
      x = ref_linear(x, weights[i], biases[i], batch, widths[i], widths[i + 1]);
      if (i + 1 < num || relu_after_last)
        for (double& v : x) v = v > 0.0 ? v : 0.0;
    }
    return x;
  }
};

// Pairwise-dot interaction in double: out [B, d + (F+1)F/2] from z [B, d], emb [B, F*d].
inline std::vector<double> ref_dot_interaction(const std::vector<double>& z, const std::vector<double>& emb,
                                               int64_t batch, int64_t F, int64_t d) {
  const int64_t out_dim = d + (F + 1) * F / 2;
  std::vector<double> out(static_cast<size_t>(batch * out_dim));
  for (int64_t b = 0; b < batch; ++b) {
    auto row = [&](int64_t r) { return r == 0 ? &z[b * d] : &emb[b * F * d + (r - 1) * d]; };
    for (int64_t j = 0; j < d; ++j) out[b * out_dim + j] = z[b * d + j];
    int64_t k = d;
    for (int64_t i = 1; i <= F; ++i)
      for (int64_t j = 0; j < i; ++j) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += row(i)[c] * row(j)[c];
        out[b * out_dim + k++] = s;
      }
  }
  return out;
}

// sum_i y[i] * g[i]: the scalar loss whose gradient w.r.t. y is g.
inline double weighted_sum(const std::vector<double>& y, const std::vector<float>& g) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * g[i];
  return s;
}

// (f(x + h) - f(x - h)) / 2h, restoring x.
inline double central_difference(double& x, double h, const std::function<double()>& f) {
  const double x0 = x;
  x = x0 + h;
  const double fp = f();
  x = x0 - h;
  const double fm = f();
  x = x0;
  return (fp - fm) / (2 * h);
}

// Indices to check in a tensor of n elements: all when small, else an evenly spread subset.
inline std::vector<size_t> sample_indices(size_t n, size_t max_count = 24) {
  std::vector<size_t> idx;
  const size_t step = n <= max_count ? 1 : n / max_count;
  for (size_t i = 0; i < n; i += step) idx.push_back(i);
  return idx;
}

// |got - want| <= atol + rtol * |want|
inline bool close(double got, double want, double rtol, double atol) {
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

}  // namespace leanemb::nn::testing
