// The text task behind train::TaskConfig (train/task_config.h): what `leanemb train` and
// `leanemb plan` do with a text config, found through the task registry (serve/task_registry.h).
#include "leanemb/memory.h"
#include "text/text_config.h"
#include "text/text_plan.h"
#include "text/text_trainer.h"
#include "train/task_config.h"

namespace leanemb::text {

namespace {

using train::format_text;

class TextTaskConfig final : public train::TaskConfig {
 public:
  explicit TextTaskConfig(TextConfig c) : c_(std::move(c)) {}

  const train::RunConfig& run() const override { return c_; }
  const std::vector<std::string>& train_files() const override { return c_.train_files; }
  const std::vector<std::string>& eval_files() const override { return c_.eval_files; }
  Result<nlohmann::json> train(const train::RunOptions& ro) const override { return run_text_training(ro, c_); }

  std::string summary_text(const nlohmann::json& s) const override {
    std::string out = format_text(
        "\n%strained %.3g epochs (%lld steps) in %.1f s: %.0f lines/s, %.0f tokens/s%s; input table %s (%lld rows of %lld)\n",
        train::resumed_part(s, "lines").c_str(), s["epochs_trained"].get<double>(), static_cast<long long>(s["steps"].get<int64_t>()),
        s["train_seconds"].get<double>(), s["examples_per_s"].get<double>(), s["tokens_per_s"].get<double>(),
        s["resumed_from_step"].is_null() ? "" : " (this run's lines and tokens over this run's time)",
        format_bytes(s["table_bytes"].get<size_t>()).c_str(), static_cast<long long>(s["table_rows"].get<int64_t>()),
        static_cast<long long>(s["input_rows"].get<int64_t>()));
    if (!s["eval"].is_null())
      out += format_text("eval: P@1 %.4f, R@1 %.4f, accuracy %.4f on %lld lines\n", s["eval"]["precision_at_1"].get<double>(),
                         s["eval"]["recall_at_1"].get<double>(), s["eval"]["accuracy"].get<double>(),
                         static_cast<long long>(s["eval"]["examples"].get<int64_t>()));
    out += format_text("peak RSS %s\n", format_bytes(s["peak_rss_bytes"].get<size_t>()).c_str());
    return out;
  }

  // The data is read (dictionary rows, ids per line) to size the model.
  Result<plan::Workload> plan_workload(std::string* what) override {
    LEANEMB_ASSIGN_OR_RETURN(auto data, read_text_data(c_));
    LEANEMB_ASSIGN_OR_RETURN(plan::Workload w, text_workload(c_, *data));
    *what = "text model of " + c_.origin + ": " + std::to_string(w.tables[0].num_rows) + " rows x dim " +
            std::to_string(w.tables[0].dim) + ", " + std::to_string(w.num_labels) + " labels, batch " + std::to_string(w.batch_size);
    return w;
  }

 private:
  TextConfig c_;
};

}  // namespace

Result<std::unique_ptr<train::TaskConfig>> parse_task_config(std::string_view toml_text, const std::string& origin,
                                                             std::span<const std::string> sets) {
  LEANEMB_ASSIGN_OR_RETURN(TextConfig c, parse_text_config(toml_text, origin, sets));
  return std::unique_ptr<train::TaskConfig>(std::make_unique<TextTaskConfig>(std::move(c)));
}

}  // namespace leanemb::text
