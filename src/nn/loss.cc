// Binary cross-entropy with logits.
#include "nn/loss.h"

#include <cmath>
#include <string>

namespace leanemb::nn {

Result<float> bce_with_logits(std::span<const float> logits, std::span<const float> labels, float grad_scale,
                              std::span<float> dlogits) {
  const size_t n = logits.size();
  if (n == 0 || labels.size() != n || dlogits.size() != n)
    return invalid_argument("bce_with_logits: " + std::to_string(n) + " logits, " + std::to_string(labels.size()) +
                            " labels, " + std::to_string(dlogits.size()) + " gradient slots (need equal, > 0)");
  if (!std::isfinite(grad_scale) || grad_scale <= 0.0f)
    return invalid_argument("bce_with_logits: grad_scale " + std::to_string(grad_scale) + " (must be finite and > 0)");
  for (size_t i = 0; i < n; ++i) {
    if (!(labels[i] >= 0.0f && labels[i] <= 1.0f))
      return invalid_argument("bce_with_logits: label[" + std::to_string(i) + "] = " + std::to_string(labels[i]) +
                              " is not in [0, 1]");
  }
  const double g_mul = static_cast<double>(grad_scale) / static_cast<double>(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double x = logits[i], y = labels[i];
    total += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::fabs(x)));
    // sigmoid without overflow: exp of a non-positive number only.
    const double e = std::exp(-std::fabs(x));
    const double sig = x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    dlogits[i] = static_cast<float>((sig - y) * g_mul);
  }
  return static_cast<float>(total / static_cast<double>(n));
}

}  // namespace leanemb::nn
