// Reading a trained model back from its checkpoint (see saved_model.h).
#include "serve/saved_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "leanemb/json.h"

#include "dist/sharded_checkpoint.h"
#include "model/ctr_model.h"
#include "train/config_diff.h"
#include "ctr/ctr_serving.h"
#include "ctr/table_rows.h"
#include "serve/task_registry.h"

namespace leanemb::serve {

using nlohmann::json;

namespace {

constexpr int64_t kChunkRows = 65536;

Status with_context(const Status& s, const std::string& what) {
  return s.ok() ? s : Status(s.code(), what + ": " + s.message());
}

// A loader's guard: the saved run holds a model of its task (`what`: "a CTR model").
Status check_task(const SavedRun& run, std::string_view task, const char* what) {
  if (run.task == task) return Status();
  return invalid_argument(run.checkpoint + " holds a " + run.task + " model, not " + what);
}

Status load_tables(const SavedRun& run, EmbeddingTables& tables) {
  TablesLoadOptions lo;
  lo.chunk_rows = kChunkRows;
  lo.collection_step = run.collection_step;
  auto loaded = tables.load(run.checkpoint, lo);
  return with_context(loaded.status(), "loading the tables of " + run.checkpoint);
}

// A pruned serving export's kept rows (blob "serve/kept/<table>" per table, serve/export.h), in
// the order of serve/format's "pruned_tables"; empty when the export is not pruned. Each list
// is checked: ascending and below the table's trained rows (trained_rows[t]).
Result<std::vector<PrunedRows>> read_pruned(const SavedRun& run, const std::vector<std::string>& names,
                                            const std::vector<int64_t>& trained_rows) {
  std::vector<PrunedRows> out;
  if (!run.serving) return out;
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> fb, run.reader->read_blob("serve/format"));
  const json fmt = parse_json_or_discarded(fb.data(), fb.size());
  if (fmt.is_discarded() || !fmt.is_object()) return data_loss(run.checkpoint + ": serve/format is not a JSON object");
  if (!fmt.contains("pruned_tables")) return out;
  const json& pt = fmt["pruned_tables"];
  if (!pt.is_array() || pt.size() != names.size())
    return data_loss(run.checkpoint + ": serve/format's pruned_tables does not list the model's " + std::to_string(names.size()) +
                     " tables");
  for (size_t t = 0; t < names.size(); ++t) {
    const std::string blob = "serve/kept/" + names[t];
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> b, run.reader->read_blob(blob));
    if (b.size() % sizeof(int64_t)) return data_loss(run.checkpoint + ": blob " + blob + " is not an int64 array");
    std::vector<int64_t> kept(b.size() / sizeof(int64_t));
    std::memcpy(kept.data(), b.data(), b.size());
    for (size_t i = 0; i < kept.size(); ++i)
      if (kept[i] < 0 || kept[i] >= trained_rows[t] || (i > 0 && kept[i] <= kept[i - 1]))
        return data_loss(run.checkpoint + ": blob " + blob + " is not an ascending list of rows below " + std::to_string(trained_rows[t]));
    out.emplace_back(std::move(kept));
  }
  return out;
}

// model.table_rows = "auto" (ctr/table_rows.h): the sizes training chose, from the checkpoint
// itself: a pruned serving export's "pruned_tables" (trained rows), else each table's rows as
// stored (emb/C<f>), else the run directory's table_rows.json.
Status auto_table_rows(const SavedRun& run, ctr::CtrConfig* c) {
  if (!c->table_rows_auto) return Status();
  std::vector<int64_t> rows;
  if (run.serving) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> fb, run.reader->read_blob("serve/format"));
    const json fmt = parse_json_or_discarded(fb.data(), fb.size());
    if (!fmt.is_discarded() && fmt.contains("pruned_tables") && fmt["pruned_tables"].is_array())
      for (const auto& t : fmt["pruned_tables"]) rows.push_back(t.value("rows", int64_t{0}));
  }
  if (rows.empty()) {
    for (int f = 0; f < c->num_sparse; ++f) {
      const ckpt::EntryInfo* e = run.reader->find("emb/" + model::ctr_table_name(f));
      if (e != nullptr) {
        rows.push_back(e->total_rows);
        continue;
      }
      // An incremental checkpoint or a sparse base: the table's rows are in its meta.
      e = run.reader->find("delta/" + model::ctr_table_name(f));
      if (e == nullptr) break;
      const json m = parse_json_or_discarded(e->meta.data(), e->meta.size());
      if (!m.is_object() || !m.contains("table_rows") || !m["table_rows"].is_number_integer()) break;
      rows.push_back(m["table_rows"].get<int64_t>());
    }
  }
  if (static_cast<int>(rows.size()) != c->num_sparse) {
    const std::filesystem::path run_dir = std::filesystem::path(run.checkpoint).parent_path().parent_path();
    auto from_file = ctr::read_table_rows_file((run_dir / "table_rows.json").string(), c->num_sparse);
    rows = from_file.ok() ? from_file.value() : std::vector<int64_t>{};
  }
  if (static_cast<int>(rows.size()) != c->num_sparse || std::any_of(rows.begin(), rows.end(), [](int64_t r) { return r < 1; }))
    return data_loss(run.checkpoint + ": trained with model.table_rows = \"auto\", and neither its tables nor the run "
                     "directory's table_rows.json give " + std::to_string(c->num_sparse) + " table sizes");
  c->table_rows = rows;
  return Status();
}

}  // namespace

void make_serving(DType* dtype, OptimizerOptions* optimizer) {
  *dtype = DType::kInt8Rowwise;
  *optimizer = OptimizerOptions{};  // SGD: no state
}

std::string config_record_toml(const std::string& task, const train::ConfigRecord& record) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> sections;
  for (const auto& [key, value] : record) {
    const size_t dot = key.rfind('.');
    if (dot == std::string::npos) continue;  // every key is section.key
    // A default the record describes instead of giving ("(default)" for an absent enum key
    // without a name function, train/toml_section.h; dense.eps when unset, ctr/ctr_config.cc) is
    // left out: the parser applies the same default again.
    if (value == "\"(default)\"" || value == "\"the optimizer's default\"") continue;
    sections[key.substr(0, dot)].emplace_back(key.substr(dot + 1), value);
  }
  std::string out = "task = \"" + task + "\"\n";
  for (const auto& [name, keys] : sections) {
    out += "\n[" + name + "]\n";
    for (const auto& [k, v] : keys) out += k + " = " + v + "\n";
  }
  return out;
}

Result<SavedRun> open_saved_run(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found("no checkpoint or run directory '" + path + "'");
  SavedRun run;
  // Every kind of corruption is handled alike, the way `train --resume` does (docs/serve.md):
  // the checkpoint is verified whole (manifest, every block, every shard; a data file of another
  // checkpoint fails its checksums) before anything is read. A run directory falls back to its
  // newest checkpoint that verifies, with a warning per newer one skipped; a checkpoint named
  // directly is used or refused (DataLoss, exit 4), never replaced by another.
  if (std::filesystem::exists(path + "/MANIFEST", ec)) {
    auto verified = dist::verify_tables_checkpoint(path);
    if (!verified.ok()) return with_context(verified.status(), "checkpoint " + path + " does not verify");
    run.checkpoint = path;
  } else {
    auto latest = dist::find_latest_tables_checkpoint(path);  // verify_blocks: every block, every shard
    if (!latest.ok()) {
      auto refs = ckpt::list_checkpoints(path);
      const bool some = refs.ok() && !refs->empty();
      return Status(some && latest.status().code() == StatusCode::kNotFound ? StatusCode::kDataLoss : latest.status().code(),
                    "'" + path + "' is neither a checkpoint directory (no MANIFEST) nor a run directory with a complete "
                    "checkpoint: " + latest.status().message());
    }
    run.checkpoint = latest.value().ref.path;
  }
  auto reader = ckpt::CheckpointReader::open(run.checkpoint);
  if (!reader.ok()) return with_context(reader.status(), "reading checkpoint " + run.checkpoint);
  run.reader = std::move(reader).value();
  const ckpt::CheckpointReader& r = *run.reader;
  if (r.find("train/state") == nullptr)
    return invalid_argument(run.checkpoint + " is not a checkpoint of `leanemb train` (no train/state blob)");
  if (r.find("train/config") == nullptr)
    return invalid_argument(run.checkpoint + " holds no saved configuration (an older version wrote it): it cannot be served");
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> stb, r.read_blob("train/state"));
  const json st = parse_json_or_discarded(stb.data(), stb.size());
  if (st.is_discarded() || !st.is_object() || !st.contains("step") || !st["step"].is_number_integer())
    return data_loss(run.checkpoint + ": train/state is not the trainer's JSON object");
  run.step = st["step"].get<int64_t>();
  run.collection_step = st.value("collection_step", int64_t{0});
  run.task = st.value("task", std::string(default_task().name));  // older checkpoints name no task: CTR ones
  if (auto task = find_task(run.task); !task.ok()) return with_context(task.status(), run.checkpoint + ": train/state");
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> cfg, r.read_blob("train/config"));
  auto record = train::decode_config_record(cfg);
  if (!record.ok()) return with_context(record.status(), run.checkpoint);
  run.config_toml = config_record_toml(run.task, record.value());
  run.origin = "the configuration saved in " + run.checkpoint;
  run.serving = r.find("serve/format") != nullptr;
  return run;
}

Result<std::unique_ptr<LoadedCtr>> load_ctr(const SavedRun& run, std::span<const std::string> sets, bool state) {
  LEANEMB_RETURN_IF_ERROR(check_task(run, "ctr", "a CTR model"));
  if (run.serving && state) return invalid_argument(run.checkpoint + " is a serving export: it holds no optimizer state");
  auto out = std::make_unique<LoadedCtr>();
  LEANEMB_ASSIGN_OR_RETURN(out->config, ctr::parse_ctr_config(run.config_toml, run.origin, sets));
  LEANEMB_RETURN_IF_ERROR(auto_table_rows(run, &out->config));
  // Serving creates no data and keeps the model's file stores apart from the trainer's.
  out->config.generate = false;
  LEANEMB_ASSIGN_OR_RETURN(out->memory, MemorySystem::create(out->config.memory));
  model::CtrModelOptions mo = ctr::ctr_model_options(out->config);
  if (run.serving) {
    make_serving(&mo.row_dtype, &mo.row_optimizer);
    mo.frozen_tables = true;
    std::vector<std::string> names;
    for (int f = 0; f < mo.num_sparse; ++f) names.push_back(model::ctr_table_name(f));
    LEANEMB_ASSIGN_OR_RETURN(mo.pruned_rows, read_pruned(run, names, mo.table_rows));
    for (size_t f = 0; f < mo.pruned_rows.size(); ++f) mo.table_rows[f] = std::max<int64_t>(1, mo.pruned_rows[f].num_kept());
  }
  LEANEMB_ASSIGN_OR_RETURN(out->model, model::CtrModel::create(mo, out->memory.get()));
  LEANEMB_RETURN_IF_ERROR(load_tables(run, out->model->embeddings()));
  LEANEMB_RETURN_IF_ERROR(with_context(ctr::load_ctr_dense(*out->model, *run.reader, state), run.checkpoint));
  return out;
}

Result<std::unique_ptr<LoadedText>> load_text(const SavedRun& run, std::span<const std::string> sets, bool state) {
  LEANEMB_RETURN_IF_ERROR(check_task(run, "text", "a text model"));
  if (run.serving && state) return invalid_argument(run.checkpoint + " is a serving export: it holds no optimizer state");
  auto out = std::make_unique<LoadedText>();
  LEANEMB_ASSIGN_OR_RETURN(out->config, text::parse_text_config(run.config_toml, run.origin, sets));
  const text::TextConfig& c = out->config;
  auto dict = text::Dictionary::build(c.train_files, c.data);
  if (!dict.ok())
    return with_context(dict.status(), "rebuilding the vocabulary of " + run.checkpoint + " from its training files");
  out->dict = std::move(dict).value();
  // The checkpoint's position blob records the model's shape: the files must give the same one.
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> pb, run.reader->read_blob("train/reader"));
  const json pos = parse_json_or_discarded(pb.data(), pb.size());
  text::TextModelOptions mo = c.model;
  mo.input_rows = out->dict.input_rows(c.data);
  mo.num_labels = out->dict.num_labels();
  if (pos.is_discarded() || pos.value("input_rows", int64_t{-1}) != mo.input_rows ||
      pos.value("labels", int64_t{-1}) != mo.num_labels)
    return invalid_argument("the training files named by " + run.origin + " give " + std::to_string(mo.input_rows) +
                            " input rows and " + std::to_string(mo.num_labels) + " labels, the checkpoint's model " +
                            (pos.is_discarded() ? std::string("(unreadable)")
                                                : std::to_string(pos.value("input_rows", int64_t{-1})) + " and " +
                                                      std::to_string(pos.value("labels", int64_t{-1}))) +
                            ": the files changed since training");
  if (run.serving) {
    make_serving(&mo.dtype, &mo.row_optimizer);
    mo.frozen = true;
    LEANEMB_ASSIGN_OR_RETURN(std::vector<PrunedRows> pr, read_pruned(run, {"input"}, {mo.input_rows}));  // TextModel's table
    if (!pr.empty()) {
      mo.pruned = true;
      mo.pruned_rows = std::move(pr[0]);
      mo.input_rows = std::max<int64_t>(1, mo.pruned_rows.num_kept());
    }
  }
  LEANEMB_ASSIGN_OR_RETURN(out->memory, MemorySystem::create(c.memory));
  LEANEMB_ASSIGN_OR_RETURN(out->model, text::TextModel::create(mo, out->memory.get()));
  LEANEMB_RETURN_IF_ERROR(load_tables(run, out->model->tables()));
  std::vector<std::vector<float>> store;
  std::vector<nn::NamedTensor> params, st;
  const auto want_p = out->model->dense_parameters(), want_s = out->model->dense_optimizer_state();
  store.reserve(want_p.size() + want_s.size());
  auto read = [&](const std::string& name) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> v, run.reader->read_blob(name));
    if (v.size() % 4) return data_loss(run.checkpoint + ": blob " + name + " is not a float array");
    store.emplace_back(v.size() / 4);
    std::memcpy(store.back().data(), v.data(), v.size());
    return Status();
  };
  for (const auto& t : want_p) {
    LEANEMB_RETURN_IF_ERROR(read("dense/param/" + t.name));
    params.push_back({t.name, store.back()});
  }
  for (const auto& t : want_s) {
    if (state) {
      LEANEMB_RETURN_IF_ERROR(read("dense/opt/" + t.name));
    } else {
      store.emplace_back(t.values.begin(), t.values.end());
    }
    st.push_back({t.name, store.back()});
  }
  LEANEMB_RETURN_IF_ERROR(with_context(out->model->load_dense(params, st), run.checkpoint));
  return out;
}

}  // namespace leanemb::serve
