// The shared config sections and RunConfig -> LoopSettings (see run_config.h).
#include "train/run_config.h"

#include "dist/payload.h"
#include "table/shard_plan.h"
#include "train/config_sections.h"
#include "train/task.h"

namespace leanemb::train {

Status read_train_cadence_keys(Section& t, RunConfig* c) {
  LEANEMB_RETURN_IF_ERROR(t.read("eval_every", &c->eval_every, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("eval_every_epochs", &c->eval_every_epochs, 0, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("checkpoint_every", &c->checkpoint_every, -1, INT64_MAX));
  LEANEMB_RETURN_IF_ERROR(t.read("keep_checkpoints", &c->keep_checkpoints, 0, 1000));
  LEANEMB_RETURN_IF_ERROR(t.read("incremental_checkpoints", &c->incremental_checkpoints));
  LEANEMB_RETURN_IF_ERROR(t.read("full_checkpoint_every", &c->full_checkpoint_every, 1, 1000000));
  LEANEMB_RETURN_IF_ERROR(t.read("max_delta_fraction", &c->max_delta_fraction, 1e-6, 1.0));
  LEANEMB_RETURN_IF_ERROR(t.read("link_store_rows", &c->link_store_rows));
  return t.read("disk_check", &c->disk_check);
}

Status read_train_guard_keys(Section& t, RunConfig* c) {
  LEANEMB_RETURN_IF_ERROR(t.read("max_consecutive_skipped", &c->max_consecutive_skipped, 0, INT64_MAX));
  return t.read("max_loss_growth", &c->max_loss_growth, 0, 1e300);
}

namespace {

Status read_memory_section(Section& mem, RunConfig* c) {
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

Status read_dist_section(Section& ds, RunConfig* c) {
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

}  // namespace

Status read_run_sections(const toml::table& doc, const std::string& origin, RunConfig* c) {
  Section mem(config_section(doc, "memory"), "memory", origin, &c->record);
  LEANEMB_RETURN_IF_ERROR(read_memory_section(mem, c));
  Section ds(config_section(doc, "dist"), "dist", origin, &c->record);
  return read_dist_section(ds, c);
}

LoopSettings loop_settings(const std::string& task, const RunConfig& c, const RunOptions& ro, bool has_eval) {
  LoopSettings ls;
  ls.task = task;
  ls.origin = c.origin;
  ls.steps = ro.steps >= 0 ? ro.steps : c.steps;
  ls.epochs = ls.steps > 0 ? 0 : c.epochs;
  ls.eval_every = has_eval ? c.eval_every : 0;
  ls.eval_every_epochs = has_eval ? c.eval_every_epochs : 0;
  ls.checkpoint_every = c.checkpoint_every;
  ls.keep_checkpoints = c.keep_checkpoints;
  ls.incremental = {c.incremental_checkpoints, c.full_checkpoint_every, c.max_delta_fraction, c.link_store_rows};
  ls.disk_check = c.disk_check;
  ls.log_every = c.log_every > 0 ? c.log_every : 1000;
  ls.log_every_s = c.log_every_s;
  ls.max_consecutive_skipped = c.max_consecutive_skipped;
  ls.max_loss_growth = c.max_loss_growth;
  ls.threads = c.threads;
  ls.grad_groups = c.grad_groups;
  ls.memory = c.memory;
  ls.inject_nonfinite_steps = c.inject_nonfinite_steps;
  ls.inject_exit_rank = c.inject_exit_rank;
  ls.inject_exit_step = c.inject_exit_step;
  ls.record = c.record;
  return ls;
}

}  // namespace leanemb::train
