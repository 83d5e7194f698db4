// LossScaler (torch GradScaler semantics) and the non-finite check.
#include "amp/loss_scaler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "core/half.h"
#include "kernels/kernels.h"

namespace leanemb::amp {
namespace {

constexpr uint8_t kFormatVersion = 1;
constexpr size_t kSavedBytes = 54;

Status check_options(const LossScalerOptions& o) {
  if (!std::isfinite(o.init_scale) || o.init_scale <= 0.0f)
    return invalid_argument("LossScalerOptions.init_scale must be finite and > 0, got " + std::to_string(o.init_scale));
  if (!std::isfinite(o.growth_factor) || o.growth_factor <= 1.0)
    return invalid_argument("LossScalerOptions.growth_factor must be > 1, got " + std::to_string(o.growth_factor));
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0))
    return invalid_argument("LossScalerOptions.backoff_factor must be in (0, 1), got " +
                            std::to_string(o.backoff_factor));
  if (o.growth_interval < 1)
    return invalid_argument("LossScalerOptions.growth_interval must be >= 1, got " + std::to_string(o.growth_interval));
  return Status();
}

// Little-endian writer / reader of fixed-size fields (the format does not depend on the host).
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) std::reverse(raw, raw + sizeof(T));
  out.insert(out.end(), raw, raw + sizeof(T));
}

template <typename T>
T get(const uint8_t*& p) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, p, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) std::reverse(raw, raw + sizeof(T));
  p += sizeof(T);
  T v;
  std::memcpy(&v, raw, sizeof(T));
  return v;
}

}  // namespace

Result<LossScaler> LossScaler::create(const LossScalerOptions& options) {
  LEANEMB_RETURN_IF_ERROR(check_options(options));
  return LossScaler(options);
}

float LossScaler::inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(scale())); }

void LossScaler::update(bool found_inf) {
  ++num_updates_;
  if (found_inf) {
    ++num_skipped_;
    growth_tracker_ = 0;
    if (options_.enabled) scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
    return;
  }
  // ">=" rather than torch's "==": identical for every state update() can produce, and robust
  // against a tracker that was restored together with a smaller interval.
  if (++growth_tracker_ >= options_.growth_interval) {
    growth_tracker_ = 0;
    const float grown = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
    if (options_.enabled && std::isfinite(grown)) scale_ = grown;  // never grow to Inf
  }
}

std::vector<uint8_t> LossScaler::save() const {
  std::vector<uint8_t> out;
  out.reserve(kSavedBytes);
  put<uint8_t>(out, kFormatVersion);
  put<uint8_t>(out, options_.enabled ? 1 : 0);
  put<float>(out, scale_);
  put<double>(out, options_.growth_factor);
  put<double>(out, options_.backoff_factor);
  put<int64_t>(out, options_.growth_interval);
  put<int64_t>(out, growth_tracker_);
  put<int64_t>(out, num_skipped_);
  put<int64_t>(out, num_updates_);
  return out;
}

Status LossScaler::load(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return Status(StatusCode::kDataLoss, "loss scaler state: empty");
  if (bytes[0] > kFormatVersion)
    return unimplemented("loss scaler state: format version " + std::to_string(bytes[0]) +
                         " is newer than this build (1)");
  if (bytes[0] != kFormatVersion)
    return Status(StatusCode::kDataLoss, "loss scaler state: bad format version " + std::to_string(bytes[0]));
  if (bytes.size() != kSavedBytes)
    return Status(StatusCode::kDataLoss, "loss scaler state: " + std::to_string(bytes.size()) + " bytes, expected " +
                                             std::to_string(kSavedBytes));
  const uint8_t* p = bytes.data() + 1;
  const uint8_t enabled = get<uint8_t>(p);
  LossScalerOptions o = options_;  // init_scale is not part of the state
  o.enabled = enabled == 1;
  const float scale = get<float>(p);
  o.growth_factor = get<double>(p);
  o.backoff_factor = get<double>(p);
  o.growth_interval = get<int64_t>(p);
  const int64_t tracker = get<int64_t>(p);
  const int64_t skipped = get<int64_t>(p);
  const int64_t updates = get<int64_t>(p);
  const bool scale_ok = std::isfinite(scale) && scale > 0.0f;
  const bool counters_ok = tracker >= 0 && tracker < o.growth_interval && skipped >= 0 && updates >= skipped;
  if (enabled > 1 || !scale_ok || !check_options(o).ok() || !counters_ok)
    return Status(StatusCode::kDataLoss, "loss scaler state: values out of range (scale " + std::to_string(scale) +
                                             ", growth tracker " + std::to_string(tracker) + ", skipped " +
                                             std::to_string(skipped) + " of " + std::to_string(updates) + ")");
  options_ = o;
  scale_ = scale;
  growth_tracker_ = tracker;
  num_skipped_ = skipped;
  num_updates_ = updates;
  return Status();
}

bool found_nonfinite(std::span<const float> values) {
  // |x| as bits is >= 0x7f800000 exactly for +-Inf and NaN.
  return kernels::max_abs_bits(values.data(), static_cast<int64_t>(values.size())) >= 0x7f800000u;
}

}  // namespace leanemb::amp
