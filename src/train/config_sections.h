// The config sections every task's config shares ([memory] and [dist], docs/train.md), and the
// top-level keys and [train] keys they share, read the same way for `task = "ctr"`
// (train/config.cc) and `task = "text"` (text/text_config.cc).
// C is a config struct with the fields named below (TrainConfig, text::TextConfig).
#pragma once

#include <set>
#include <string>
#include <string_view>

#include "dist/payload.h"
#include "dist/shard_plan.h"
#include "leanemb/memory_system.h"
#include "train/toml_section.h"

namespace leanemb::train {

// Checks a config's top-level keys: `task`, when given, must be `task`; every other key must be
// one of the sections. Errors: InvalidArgument "origin: " + task_error, or naming the unknown key
// followed by "(" + known + ")".
inline Status check_top_level_keys(const toml::table& doc, const std::string& origin, std::string_view task,
                                   std::string_view task_error, std::string_view known) {
  static const std::set<std::string> kSections = {"data", "model", "embedding", "dense", "train", "memory", "dist"};
  for (const auto& [k, node] : doc) {
    if (k.str() == "task") {
      if (node.value<std::string>() != std::optional<std::string>(std::string(task)))
        return invalid_argument(origin + ": " + std::string(task_error));
      continue;
    }
    if (!node.is_table() || !kSections.count(std::string(k.str())))
      return invalid_argument(origin + ": unknown section or top-level key '" + std::string(k.str()) + "' (" +
                              std::string(known) + ")");
  }
  return Status();
}

// The top-level table `name` of a config, or null when absent (or not a table).
inline const toml::table* config_section(const toml::table& doc, const char* name) {
  return doc.get(name) ? doc.get(name)->as_table() : nullptr;
}

// The [train] keys of the evaluation and checkpoint cadence.
template <typename C>
Status read_train_cadence_keys(Section& t, C* c) {
  LEANEMB_RETURN_IF_ERROR(t.read("eval_every", &c->eval_every, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("eval_every_epochs", &c->eval_every_epochs, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("checkpoint_every", &c->checkpoint_every, -1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("keep_checkpoints", &c->keep_checkpoints, 0, 1000));
  LEANEMB_RETURN_IF_ERROR(t.read("incremental_checkpoints", &c->incremental_checkpoints));
  LEANEMB_RETURN_IF_ERROR(t.read("full_checkpoint_every", &c->full_checkpoint_every, 1, 1000000));
  LEANEMB_RETURN_IF_ERROR(t.read("max_delta_fraction", &c->max_delta_fraction, 1e-6, 1.0));
  return t.read("disk_check", &c->disk_check);
}

// The [train] keys of the guard against non-finite and diverging steps.
template <typename C>
Status read_train_guard_keys(Section& t, C* c) {
  LEANEMB_RETURN_IF_ERROR(t.read("max_consecutive_skipped", &c->max_consecutive_skipped, 0, INT64_MAX));
  return t.read("max_loss_growth", &c->max_loss_growth, 0, 1e300);
}

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
