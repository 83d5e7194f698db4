// Losses. Binary cross-entropy with logits, mean over the batch, as
// torch.nn.functional.binary_cross_entropy_with_logits(x, y, reduction="mean").
//
// Pure functions over caller buffers; thread safety: may run concurrently on distinct buffers.
#pragma once

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

}  // namespace leanemb::nn
