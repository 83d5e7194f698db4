// Losses. Binary cross-entropy with logits, mean over the batch, as
// torch.nn.functional.binary_cross_entropy_with_logits(x, y, reduction="mean"); and the
// multi-class losses of text classifiers (fastText's softmax and one-vs-all), summed over the
// batch.
//
// Pure functions over caller buffers; thread safety: may run concurrently on distinct buffers.
#pragma once

#include <cstdint>
#include <span>

#include "leanemb/status.h"

namespace leanemb::nn {

// For logits x [B] and labels y [B] (each in [0, 1]):
//   loss     = (1/B) sum_b [ max(x_b, 0) - x_b y_b + log1p(exp(-|x_b|)) ]   (no overflow for any x)
//   dlogits_b = grad_scale * (sigmoid(x_b) - y_b) / B                        (written to dlogits [B])
// grad_scale is the loss-scaling multiplier (amp::LossScaler::scale(); 1 without scaling); the
// returned loss is unscaled. Sums and sigmoid are computed in double, each result rounded once
// to fp32, the batch summed in order (deterministic). Non-finite logits are not an error: they
// give a non-finite loss and gradient, which the loss scaler's check then catches.
// Errors: InvalidArgument for an empty batch, mismatched sizes, a label outside [0, 1] or NaN
// (the message names the index), or grad_scale not finite or <= 0.
Result<float> bce_with_logits(std::span<const float> logits, std::span<const float> labels, float grad_scale,
                              std::span<float> dlogits);

// Multi-class targets of a batch of B rows over C classes, CSR: row b's classes are
// classes[offsets[b] .. offsets[b+1]) ([B + 1] offsets, each class in [0, C), at least one per
// row, no duplicates within a row).
struct ClassTargets {
  std::span<const int64_t> offsets;
  std::span<const int32_t> classes;
};

// Softmax cross-entropy against the uniform distribution over each row's classes (one class:
// the usual cross-entropy, as torch.nn.functional.cross_entropy(x, y, reduction="sum"); several:
// the expectation of fastText's choice of one label at random), summed over the batch:
//   p = softmax(x_b);  loss += logsumexp(x_b) - (1/k_b) sum_{c in y_b} x_bc
//   dlogits_bc = grad_scale * (p_c - [c in y_b] / k_b)
// In double, each result rounded once to fp32, rows in order (deterministic).
// logits and dlogits are [B, C] row-major. Errors: InvalidArgument for mismatched sizes, a row
// without a class, a class out of range (naming the row), grad_scale not finite or <= 0.
Result<float> softmax_cross_entropy(std::span<const float> logits, int64_t num_classes, ClassTargets targets,
                                    float grad_scale, std::span<float> dlogits);

// One-vs-all: an independent binary logistic loss per class (fastText's -loss ova, for
// multi-label data), summed over classes and the batch:
//   loss += sum_c [ max(x, 0) - x y + log1p(exp(-|x|)) ],  y = [c in y_b]
//   dlogits_bc = grad_scale * (sigmoid(x_bc) - y)
// Errors: as softmax_cross_entropy.
Result<float> one_vs_all_logistic(std::span<const float> logits, int64_t num_classes, ClassTargets targets,
                                  float grad_scale, std::span<float> dlogits);

}  // namespace leanemb::nn
