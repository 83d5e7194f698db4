// LossScaler: dynamic loss scaling for fp16 training, with the semantics of PyTorch's
// torch.cuda.amp.GradScaler, and found_nonfinite(), the check that decides whether a step runs.
//
// One training step with a scaler:
//   loss gradient *= scale()                 (e.g. nn::bce_with_logits(..., grad_scale = scale()))
//   backward                                 (all gradients are now scaled by scale())
//   found = found_nonfinite(every gradient)  (dense grads and the pooled-embedding gradient)
//   if (!found) optimizers step with grad_multiplier = inv_scale()
//   update(found)                            (skipped step: scale *= backoff_factor)
// update(found_inf), as torch's _amp_update_scale_:
//   found_inf:  scale *= backoff_factor; growth_tracker = 0; ++num_skipped_steps
//   otherwise:  ++growth_tracker; if growth_tracker == growth_interval:
//                 scale *= growth_factor (kept only if finite); growth_tracker = 0
// scale is an fp32 number; each product is computed in double and rounded to fp32, as torch
// does with its fp32 scale tensor and Python-float factors.
//
// Ownership: a LossScaler is a small value (copyable). Thread safety: none; one thread at a time.
// found_nonfinite() is a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::amp {

struct LossScalerOptions {
  float init_scale = 65536.0f;    // 2^16, torch's default
  double growth_factor = 2.0;     // > 1
  double backoff_factor = 0.5;    // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows, >= 1
  // false: scale() stays 1 and never changes (no scaling, e.g. fp32 or bf16); update() still
  // counts skipped steps.
  bool enabled = true;
};

class LossScaler {
 public:
  // Errors: InvalidArgument for init_scale not finite or <= 0, growth_factor <= 1,
  // backoff_factor outside (0, 1), growth_interval < 1 (the message names the field).
  static Result<LossScaler> create(const LossScalerOptions& options = {});

  // The current multiplier of the loss gradient (1 when disabled).
  float scale() const { return options_.enabled ? scale_ : 1.0f; }
  // 1 / scale() computed in double and rounded to fp32 (torch: scale.double().reciprocal().float()):
  // the grad_multiplier for the optimizer step.
  float inv_scale() const;
  // Records the outcome of one step (see the header comment).
  void update(bool found_inf);

  int64_t growth_tracker() const { return growth_tracker_; }     // clean steps since the last change
  int64_t num_skipped_steps() const { return num_skipped_; }     // update(true) calls
  int64_t num_updates() const { return num_updates_; }           // all update() calls
  const LossScalerOptions& options() const { return options_; }

  // The whole state (options, scale, growth tracker, counters) as bytes for a checkpoint:
  // format version 1, little-endian, 54 bytes:
  //   u8 version = 1, u8 enabled, f32 scale, f64 growth_factor, f64 backoff_factor,
  //   i64 growth_interval, i64 growth_tracker, i64 num_skipped_steps, i64 num_updates.
  std::vector<uint8_t> save() const;
  // Restores what save() wrote, options included (as torch's load_state_dict; init_scale is not
  // state and keeps its value). All-or-nothing:
  // on error the scaler is unchanged.
  // Errors: Unimplemented for a version newer than 1; DataLoss for version 0, a wrong size or
  // values that save() cannot have written (scale not finite or <= 0, tracker outside
  // [0, growth_interval), negative counters, more skipped steps than updates, bad options).
  Status load(std::span<const uint8_t> bytes);

 private:
  explicit LossScaler(const LossScalerOptions& o) : options_(o), scale_(o.init_scale) {}
  LossScalerOptions options_;
  float scale_ = 65536.0f;
  int64_t growth_tracker_ = 0;
  int64_t num_skipped_ = 0;
  int64_t num_updates_ = 0;
};

// True when any value is +-Inf or NaN. One branch-free pass (an unsigned max over the
// exponent-and-mantissa bits), so GCC vectorizes it. Empty span: false.
bool found_nonfinite(std::span<const float> values);

}  // namespace leanemb::amp
