// ReLU, the activation of the MLPs, as two in-place element-wise functions (torch.relu and its
// backward, threshold_backward). Pure functions over caller buffers; single-threaded loops that
// GCC vectorizes.
#pragma once

#include <cstdint>
#include <span>

namespace leanemb::nn {

// x[i] := max(x[i], 0) for x [n]; NaN stays NaN (as torch.relu), so a later non-finite check
// still sees it.
inline void relu_inplace(std::span<float> x) {
  float* v = x.data();
  const size_t n = x.size();
  for (size_t i = 0; i < n; ++i) v[i] = v[i] < 0.0f ? 0.0f : v[i];
}

// dy[i] := y[i] > 0 ? dy[i] : 0, where y [n] is the ReLU's output (so y > 0 exactly where the
// input was > 0) and dy [n] the gradient of that output.
inline void relu_backward_inplace(std::span<const float> y, std::span<float> dy) {
  const float* m = y.data();
  float* g = dy.data();
  const size_t n = dy.size();
  for (size_t i = 0; i < n; ++i) g[i] = m[i] > 0.0f ? g[i] : 0.0f;
}

// relu_backward_inplace with the ReLU's output stored as bf16 bit patterns y [n]: y > 0 exactly
// when the sign bit is clear and the value is neither zero nor NaN.
inline void relu_backward_inplace_bf16(std::span<const uint16_t> y, std::span<float> dy) {
  const uint16_t* m = y.data();
  float* g = dy.data();
  const size_t n = dy.size();
  for (size_t i = 0; i < n; ++i) g[i] = (m[i] != 0 && m[i] <= 0x7f80u) ? g[i] : 0.0f;
}

}  // namespace leanemb::nn
