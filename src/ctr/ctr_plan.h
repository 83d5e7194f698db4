// The memory model's view of a `leanemb train` config (docs/train.md): tables, ids per sample
// (from the synthetic data's multi_hot_max, max_len and missing rate), expected unique rows per
// step (from its vocabulary and Zipf exponent), the dense model, precision and placement.
//
// Thread safety: plain functions.
#pragma once

#include "leanemb/status.h"
#include "plan/memory_model.h"
#include "ctr/ctr_config.h"

// The CTR task's contribution to the memory model (as text/text_plan.h is the text task's):
// plan/ depends on no task.
namespace leanemb::ctr {

// Errors: InvalidArgument (a config the memory model cannot describe).
Result<plan::Workload> ctr_workload(const CtrConfig& c);

// Writes the config back with the fields a plan decides replaced (row dtype, state dtype,
// optimizer, precision, micro-batches, activation checkpointing, placement, reserve), as TOML
// that parse_ctr_config accepts.
std::string config_to_toml(const CtrConfig& c);

}  // namespace leanemb::ctr
