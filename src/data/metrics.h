// Evaluation metrics for binary classification: exact ROC AUC and mean log loss. Used by the
// trainer's eval and by gen-data for the teacher's own scores.
//
// roc_auc is exact: it sorts the scores (O(n log n)) and counts, for every positive, the
// negatives scored below it; a negative with an equal score counts one half (the
// Mann-Whitney U statistic divided by P * N, equal to sklearn's roc_auc_score).
//
// Thread safety: pure functions.
#pragma once

#include <span>

#include "leanemb/status.h"

namespace leanemb::data {

// labels [n], each exactly 0 or 1; scores [n] finite (probabilities or logits: only the order
// matters). Returns AUC in [0, 1].
// Errors: InvalidArgument for different lengths, n = 0, a label other than 0/1, a non-finite
// score, or labels of one class only (AUC undefined).
Result<double> roc_auc(std::span<const float> labels, std::span<const float> scores);

// Mean binary cross-entropy: -1/n * sum(y log p + (1 - y) log(1 - p)) with p clipped to
// [eps, 1 - eps]. labels [n] in [0, 1] (soft labels allowed), probs [n] in [0, 1].
// Errors: InvalidArgument for different lengths, n = 0, a label or probability outside [0, 1]
// or NaN, eps outside (0, 0.5).
Result<double> mean_logloss(std::span<const float> labels, std::span<const float> probs, double eps = 1e-7);

}  // namespace leanemb::data
