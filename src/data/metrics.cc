#include "data/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace leanemb::data {

Result<double> roc_auc(std::span<const float> labels, std::span<const float> scores) {
  if (labels.size() != scores.size())
    return invalid_argument("roc_auc: " + std::to_string(labels.size()) + " labels but " + std::to_string(scores.size()) +
                            " scores");
  if (labels.empty()) return invalid_argument("roc_auc: no samples");
  std::vector<std::pair<float, bool>> v(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f)
      return invalid_argument("roc_auc: label " + std::to_string(labels[i]) + " at index " + std::to_string(i) + " is not 0 or 1");
    if (!std::isfinite(scores[i])) return invalid_argument("roc_auc: score at index " + std::to_string(i) + " is not finite");
    v[i] = {scores[i], labels[i] == 1.0f};
  }
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // twice_u = 2 * sum over positives of (negatives below + half the negatives tied).
  unsigned __int128 twice_u = 0;
  uint64_t neg_below = 0, pos_total = 0;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    uint64_t pos = 0, neg = 0;
    for (; j < v.size() && v[j].first == v[i].first; ++j) (v[j].second ? pos : neg) += 1;
    twice_u += static_cast<unsigned __int128>(pos) * (2 * neg_below + neg);
    neg_below += neg;
    pos_total += pos;
    i = j;
  }
  if (pos_total == 0 || neg_below == 0)
    return invalid_argument(std::string("roc_auc: all ") + std::to_string(v.size()) + " labels are " +
                            (pos_total == 0 ? "0" : "1") + "; AUC is undefined");
  return static_cast<double>(twice_u) / (2.0 * static_cast<double>(pos_total) * static_cast<double>(neg_below));
}

Result<double> mean_logloss(std::span<const float> labels, std::span<const float> probs, double eps) {
  if (labels.size() != probs.size())
    return invalid_argument("mean_logloss: " + std::to_string(labels.size()) + " labels but " +
                            std::to_string(probs.size()) + " probabilities");
  if (labels.empty()) return invalid_argument("mean_logloss: no samples");
  if (!(eps > 0.0 && eps < 0.5)) return invalid_argument("mean_logloss: eps must be in (0, 0.5)");
  double sum = 0.0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double y = labels[i], p = probs[i];
    if (!(y >= 0.0 && y <= 1.0)) return invalid_argument("mean_logloss: label at index " + std::to_string(i) + " is not in [0, 1]");
    if (!(p >= 0.0 && p <= 1.0))
      return invalid_argument("mean_logloss: probability at index " + std::to_string(i) + " is not in [0, 1]");
    const double q = std::clamp(p, eps, 1.0 - eps);
    sum -= y * std::log(q) + (1.0 - y) * std::log1p(-q);
  }
  return sum / static_cast<double>(labels.size());
}

}  // namespace leanemb::data
