// The config sections every task's config shares ([memory] and [dist], docs/train.md), read
// the same way for `task = "ctr"` (train/config.cc) and `task = "text"` (text/text_config.cc).
// C is a config struct with the fields named below (TrainConfig, text::TextConfig).
#pragma once

#include <string>

#include "dist/payload.h"
#include "dist/shard_plan.h"
#include "leanemb/memory_system.h"
#include "train/toml_section.h"

namespace leanemb::train {

template <typename C>
Status read_memory_section(Section& mem, C* c) {
  LEANEMB_RETURN_IF_ERROR(mem.read_bytes("device_budget", &c->memory.device_budget_bytes));
  LEANEMB_RETURN_IF_ERROR(mem.read_bytes("host_budget", &c->memory.host_budget_bytes));
  LEANEMB_RETURN_IF_ERROR(mem.read_bytes("max_split", &c->memory.max_split_bytes));
  LEANEMB_RETURN_IF_ERROR(mem.read_bytes("reserve", &c->memory.reserve_bytes));
  std::string placement = c->memory.placement.to_string();
  LEANEMB_RETURN_IF_ERROR(mem.read("placement", &placement));
  if (!placement.empty()) {
    auto p = parse_placement(placement);
    if (!p.ok()) return mem.error("placement", p.status().message());
    c->memory.placement = p.value();
  }
  return mem.check_unknown();
}

template <typename C>
Status read_dist_section(Section& ds, C* c) {
  LEANEMB_RETURN_IF_ERROR(ds.read("backend", &c->dist_backend));
  if (c->dist_backend != "auto" && c->dist_backend != "local" && c->dist_backend != "mpi")
    return ds.error("backend", "expected auto, local or mpi, got '" + c->dist_backend + "'");
  LEANEMB_RETURN_IF_ERROR(ds.read("timeout_ms", &c->dist_timeout_ms, 1, int64_t{1} << 40));
  LEANEMB_RETURN_IF_ERROR(ds.read_enum("sharding", &c->sharding, dist::parse_sharding_kind, dist::sharding_kind_name));
  LEANEMB_RETURN_IF_ERROR(ds.read_dtype("forward_payload", &c->forward_payload, DTypeUse::kPayload));
  LEANEMB_RETURN_IF_ERROR(ds.read_dtype("backward_payload", &c->backward_payload, DTypeUse::kPayload));
  LEANEMB_RETURN_IF_ERROR(ds.read("grad_groups", &c->grad_groups, 0, 1 << 16));
  LEANEMB_RETURN_IF_ERROR(ds.read("inject_exit_rank", &c->inject_exit_rank, -1, 1 << 20));
  LEANEMB_RETURN_IF_ERROR(ds.read("inject_exit_step", &c->inject_exit_step, 0, INT64_MAX));
  return ds.check_unknown();
}

}  // namespace leanemb::train
