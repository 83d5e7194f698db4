// Losses: binary cross-entropy with logits, softmax cross-entropy, one-vs-all logistic.
#include "nn/loss.h"

#include <algorithm>
#include <cmath>
#include <vector>
#include <string>

namespace leanemb::nn {

namespace {

// One logit x against a target y in [0, 1]: the binary logistic loss
// max(x, 0) - x y + log1p(exp(-|x|)) (no overflow for any x) and sigmoid(x), in double.
struct Logistic {
  double loss, sigmoid;
};
Logistic logistic(double x, double y) {
  const double e = std::exp(-std::fabs(x));  // exp of a non-positive number only
  return {std::max(x, 0.0) - x * y + std::log1p(e), x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e)};
}

}  // namespace

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
    const double y = labels[i];
    const Logistic l = logistic(logits[i], y);
    total += l.loss;
    dlogits[i] = static_cast<float>((l.sigmoid - y) * g_mul);
  }
  return static_cast<float>(total / static_cast<double>(n));
}

namespace {

Status check_targets(const char* what, size_t num_logits, int64_t num_classes, ClassTargets t, float grad_scale,
                     size_t num_dlogits) {
  if (num_classes < 1 || t.offsets.empty() || num_logits != (t.offsets.size() - 1) * static_cast<size_t>(num_classes) ||
      num_dlogits != num_logits || num_logits == 0)
    return invalid_argument(std::string(what) + ": " + std::to_string(num_logits) + " logits, " +
                            std::to_string(num_dlogits) + " gradient slots, " + std::to_string(num_classes) +
                            " classes and " + std::to_string(t.offsets.size()) + " offsets do not fit [B, C] with B >= 1");
  if (!std::isfinite(grad_scale) || grad_scale <= 0.0f)
    return invalid_argument(std::string(what) + ": grad_scale " + std::to_string(grad_scale) + " (must be finite and > 0)");
  if (t.offsets[0] != 0 || t.offsets.back() != static_cast<int64_t>(t.classes.size()))
    return invalid_argument(std::string(what) + ": offsets must start at 0 and end at the number of classes given");
  for (size_t b = 0; b + 1 < t.offsets.size(); ++b) {
    if (t.offsets[b + 1] <= t.offsets[b])
      return invalid_argument(std::string(what) + ": row " + std::to_string(b) + " has no target class");
    for (int64_t i = t.offsets[b]; i < t.offsets[b + 1]; ++i) {
      const int32_t c = t.classes[static_cast<size_t>(i)];
      if (c < 0 || c >= num_classes)
        return invalid_argument(std::string(what) + ": row " + std::to_string(b) + ": class " + std::to_string(c) +
                                " outside [0, " + std::to_string(num_classes) + ")");
    }
  }
  return Status();
}

}  // namespace

Result<float> softmax_cross_entropy(std::span<const float> logits, int64_t num_classes, ClassTargets targets,
                                    float grad_scale, std::span<float> dlogits) {
  LEANEMB_RETURN_IF_ERROR(check_targets("softmax_cross_entropy", logits.size(), num_classes, targets, grad_scale, dlogits.size()));
  const size_t B = targets.offsets.size() - 1, C = static_cast<size_t>(num_classes);
  std::vector<double> p(C);
  double total = 0.0;
  for (size_t b = 0; b < B; ++b) {
    const float* x = logits.data() + b * C;
    double mx = -INFINITY;
    for (size_t c = 0; c < C; ++c) mx = std::max(mx, static_cast<double>(x[c]));
    double sum = 0.0;
    for (size_t c = 0; c < C; ++c) sum += (p[c] = std::exp(static_cast<double>(x[c]) - mx));
    const double lse = mx + std::log(sum);
    const int64_t k = targets.offsets[b + 1] - targets.offsets[b];
    const double w = 1.0 / static_cast<double>(k);
    double picked = 0.0;
    for (int64_t i = targets.offsets[b]; i < targets.offsets[b + 1]; ++i) picked += x[targets.classes[static_cast<size_t>(i)]];
    total += lse - w * picked;
    float* g = dlogits.data() + b * C;
    for (size_t c = 0; c < C; ++c) g[c] = static_cast<float>(grad_scale * (p[c] / sum));
    for (int64_t i = targets.offsets[b]; i < targets.offsets[b + 1]; ++i) {
      const size_t c = static_cast<size_t>(targets.classes[static_cast<size_t>(i)]);
      g[c] = static_cast<float>(grad_scale * (p[c] / sum - w));
    }
  }
  return static_cast<float>(total);
}

Result<float> one_vs_all_logistic(std::span<const float> logits, int64_t num_classes, ClassTargets targets,
                                  float grad_scale, std::span<float> dlogits) {
  LEANEMB_RETURN_IF_ERROR(check_targets("one_vs_all_logistic", logits.size(), num_classes, targets, grad_scale, dlogits.size()));
  const size_t B = targets.offsets.size() - 1, C = static_cast<size_t>(num_classes);
  std::vector<uint8_t> y(C);
  double total = 0.0;
  for (size_t b = 0; b < B; ++b) {
    std::fill(y.begin(), y.end(), uint8_t{0});
    for (int64_t i = targets.offsets[b]; i < targets.offsets[b + 1]; ++i) y[static_cast<size_t>(targets.classes[static_cast<size_t>(i)])] = 1;
    for (size_t c = 0; c < C; ++c) {
      const double t = y[c];
      const Logistic l = logistic(logits[b * C + c], t);
      total += l.loss;
      dlogits[b * C + c] = static_cast<float>(grad_scale * (l.sigmoid - t));
    }
  }
  return static_cast<float>(total);
}

}  // namespace leanemb::nn
