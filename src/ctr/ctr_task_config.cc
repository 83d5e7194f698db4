// The CTR task behind train::TaskConfig (train/task_config.h): what `leanemb train` and `leanemb
// plan` do with a CTR config, found through the task registry (serve/task_registry.h).
#include <cstdio>
#include <filesystem>

#include "ctr/ctr_config.h"
#include "ctr/ctr_plan.h"
#include "ctr/ctr_task.h"
#include "ctr/table_rows.h"
#include "leanemb/memory.h"
#include "tiered/row_store.h"
#include "train/task_config.h"

namespace leanemb::ctr {

namespace {

using nlohmann::json;
using train::format_text;

class CtrTaskConfig final : public train::TaskConfig {
 public:
  explicit CtrTaskConfig(CtrConfig c) : c_(std::move(c)) {}

  const train::RunConfig& run() const override { return c_; }
  const std::vector<std::string>& train_files() const override { return c_.train_files; }
  const std::vector<std::string>& eval_files() const override { return c_.eval_files; }
  Result<json> train(const train::RunOptions& ro) const override { return run_ctr_training(ro, c_); }

  std::string summary_text(const json& s) const override {
    std::string out;
    if (s["resumed_from_step"].is_null())
      out += format_text("\ntrained %lld steps (%lld samples) in %.1f s: %.0f samples/s; %lld skipped steps\n",
                         static_cast<long long>(s["steps"].get<int64_t>()), static_cast<long long>(s["samples"].get<int64_t>()),
                         s["train_seconds"].get<double>(), s["samples_per_s"].get<double>(),
                         static_cast<long long>(s["skipped_steps"].get<int64_t>()));
    else
      out += format_text("\n%strained in %.1f s: %.0f samples/s (this run's samples over this run's time); %lld skipped steps in all\n",
                         train::resumed_part(s, "samples").c_str(), s["train_seconds"].get<double>(), s["samples_per_s"].get<double>(),
                         static_cast<long long>(s["skipped_steps"].get<int64_t>()));
    if (!s["eval"].is_null()) {
      const std::string teacher =
          s["teacher_auc"].is_null() ? "" : " (teacher AUC " + std::to_string(s["teacher_auc"].get<double>()).substr(0, 6) + ")";
      out += format_text("eval: AUC %.4f, logloss %.4f on %lld rows%s\n", s["eval"]["auc"].get<double>(),
                         s["eval"]["logloss"].get<double>(), static_cast<long long>(s["eval"]["rows"].get<int64_t>()), teacher.c_str());
    }
    return out;
  }

  // model.table_rows = "auto" is counted from the training files, as `leanemb train` does
  // (ctr/table_rows.h); a file store's block size is probed in the nearest existing directory.
  Result<plan::Workload> plan_workload(std::string* what) override {
    if (c_.table_rows_auto) {
      for (const std::string& f : c_.train_files) {
        std::error_code ec;
        if (!std::filesystem::exists(f, ec))
          return invalid_argument(c_.origin + ": model.table_rows = \"auto\" is derived from the training data, and '" + f +
                                  "' does not exist" +
                                  (c_.generate ? " (data.generate: `leanemb train` generates it first)" : "") +
                                  "; plan needs the data, or the sizes: --set 'model.table_rows=[...]'");
      }
      std::string said;
      LEANEMB_RETURN_IF_ERROR(resolve_table_rows(&c_, "", false, false, &said));
      std::fprintf(stderr, "leanemb: %s\n", said.c_str());
    }
    LEANEMB_ASSIGN_OR_RETURN(plan::Workload w, ctr_workload(c_));
    if (w.file_store) {
      std::filesystem::path d = c_.store_dir.empty() ? std::filesystem::path(".") : std::filesystem::path(c_.store_dir);
      std::error_code ec;
      while (!d.empty() && !std::filesystem::is_directory(d, ec)) d = d.parent_path();
      w.file_block_bytes = tiered::file_store_block_bytes(d.empty() ? "." : d.string());
    }
    *what = "CTR model of " + c_.origin + ": " + std::to_string(c_.num_sparse) + " tables, dim " +
            std::to_string(c_.embedding_dim) + ", batch " + std::to_string(c_.batch_size);
    return w;
  }

  bool writes_planned_config() const override { return true; }
  Result<std::string> planned_config(const plan::Workload& c, size_t device_budget_bytes) const override {
    CtrConfig out = c_;
    if (c.cache_fraction < 1.0) {
      out.row_cache.fraction = c.cache_fraction;  // a host store behind the cache (docs/tiered.md)
      out.row_cache.store = StoreKind::kHost;
      out.cache_min_rows = c.cache_min_rows;  // the tables the plan cached
    }
    out.row_dtype = c.row_dtype;
    if (out.row_optimizer.kind != c.row_optimizer.kind) out.row_optimizer.eps = default_eps(c.row_optimizer.kind);
    out.row_optimizer.kind = c.row_optimizer.kind;
    out.row_optimizer.state_dtype = c.row_optimizer.state_dtype;
    out.precision = c.precision;
    out.micro_batches = c.micro_batches;
    out.checkpoint_activations = c.checkpoint_activations;
    out.memory.placement = c.placement;
    if (device_budget_bytes) out.memory.device_budget_bytes = device_budget_bytes;
    return config_to_toml(out);
  }

 private:
  CtrConfig c_;
};

}  // namespace

Result<std::unique_ptr<train::TaskConfig>> parse_task_config(std::string_view toml_text, const std::string& origin,
                                                             std::span<const std::string> sets) {
  LEANEMB_ASSIGN_OR_RETURN(CtrConfig c, parse_ctr_config(toml_text, origin, sets));
  return std::unique_ptr<train::TaskConfig>(std::make_unique<CtrTaskConfig>(std::move(c)));
}

}  // namespace leanemb::ctr
