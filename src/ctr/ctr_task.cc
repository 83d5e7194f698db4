// `task = "ctr"`: the DLRM-style CTR model and its data as a TrainTask of the one loop
// (train/task.h). See ctr_task.h.
#include "ctr/ctr_task.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "data/metrics.h"
#include "data/reader.h"
#include "dist/communicator.h"
#include "model/ctr_model.h"
#include "plan/memory_model.h"
#include "ctr/ctr_plan.h"
#include "ctr/ctr_serving.h"
#include "ctr/table_rows.h"
#include "ctr/input_check.h"
#include "tiered/row_store.h"
#include "tiered/sizes.h"
#include "train/run_config.h"
#include "train/task.h"
#include "leanemb/json.h"
#include "leanemb/progress.h"

namespace leanemb::ctr {

using train::Blobs;
using train::LoopSettings;
using train::TaskContext;
using train::TaskStep;
using train::TrainTask;

using nlohmann::json;

namespace {

Result<std::vector<float>> read_floats(const ckpt::CheckpointReader& r, const std::string& name);

}  // namespace

model::CtrModelOptions ctr_model_options(const CtrConfig& c) {
  model::CtrModelOptions o;
  o.num_dense = c.num_dense;
  o.num_sparse = c.num_sparse;
  o.embedding_dim = c.embedding_dim;
  o.table_rows = c.table_rows.size() == 1 ? std::vector<int64_t>(static_cast<size_t>(c.num_sparse), c.table_rows[0])
                                          : c.table_rows;
  if (!c.dynamic_tables.empty()) {
    o.table_dynamic.resize(static_cast<size_t>(c.num_sparse));
    for (const DynamicTableConfig& d : c.dynamic_tables) {
      const auto f = static_cast<size_t>(std::stoi(d.table.substr(1)) - 1);
      o.table_dynamic[f] = d.options;
      if (d.capacity_rows > 0) o.table_rows[f] = d.capacity_rows;
    }
  }
  o.row_dtype = c.row_dtype;
  o.row_optimizer = c.row_optimizer;
  o.row_init = c.row_init;
  o.row_cache = c.row_cache;
  o.cache_min_rows = c.cache_min_rows;
  o.store_dir = c.store_dir;
  o.pooling = c.pooling;
  o.bottom_hidden = c.bottom_mlp;
  o.top_hidden = c.top_mlp;
  o.interaction = c.interaction;
  o.precision = c.precision;
  o.checkpoint_activations = c.checkpoint_activations;
  o.dense_optimizer = c.dense_optimizer;
  o.seed = c.seed;
  o.num_threads = c.threads;
  o.sharding = c.sharding;
  o.forward_payload = c.forward_payload;
  o.backward_payload = c.backward_payload;
  o.batch_size = c.batch_size;
  o.max_ids_per_field = max_ids_per_field(c);
  return o;
}

Result<data::ReaderOptions> ctr_reader_options(const CtrConfig& c, const std::vector<std::string>& files, bool train) {
  data::ReaderOptions r;
  r.files = files;
  const auto rows = ctr_model_options(c).table_rows;
  LEANEMB_ASSIGN_OR_RETURN(r.schema, data::make_schema(c.num_dense, c.num_sparse, rows, c.max_len));
  for (const DynamicTableConfig& d : c.dynamic_tables)  // raw hashed values: the IdMap gives rows
    r.schema.sparse[static_cast<size_t>(std::stoi(d.table.substr(1)) - 1)].raw_ids = true;
  r.schema.string_values = c.string_values;
  r.batch_size = c.batch_size;
  r.shuffle_buffer = train ? c.shuffle_buffer : 0;
  r.seed = c.seed;
  r.num_epochs = train ? (c.steps > 0 ? 0 : c.epochs) : 1;
  r.malformed.max_rate = c.max_malformed_rate;
  return r;
}

Result<data::DataStats> predict_ctr(model::CtrModel& model, const CtrConfig& c, const std::vector<std::string>& files,
                                    int64_t max_rows,
                                    const std::function<Status(const data::Batch&, std::span<const float>)>& on_batch,
                                    const std::function<void(int64_t bytes_read)>& on_read) {
  LEANEMB_ASSIGN_OR_RETURN(data::ReaderOptions ro, ctr_reader_options(c, files, false));
  LEANEMB_ASSIGN_OR_RETURN(auto reader, data::DataReader::open(ro));
  data::Batch batch;
  std::vector<float> p;
  int64_t rows = 0;
  while (max_rows == 0 || rows < max_rows) {
    LEANEMB_ASSIGN_OR_RETURN(bool more, reader->next(&batch));
    if (!more) break;
    p.resize(static_cast<size_t>(batch.batch_size));
    LEANEMB_RETURN_IF_ERROR(model.predict(batch, p, c.micro_batches));
    const int64_t take = max_rows == 0 ? batch.batch_size : std::min(batch.batch_size, max_rows - rows);
    if (take < batch.batch_size) {  // the first records only
      batch.batch_size = take;
      batch.labels.resize(static_cast<size_t>(take));
      p.resize(static_cast<size_t>(take));
    }
    rows += take;
    LEANEMB_RETURN_IF_ERROR(on_batch(batch, p));
    if (on_read) on_read(reader->stats().bytes_read);
  }
  return reader->stats();
}

Result<json> evaluate_ctr(model::CtrModel& model, const CtrConfig& c, const std::vector<std::string>& files, int64_t max_rows,
                          data::DataStats* stats) {
  std::vector<float> labels, probs;
  LEANEMB_ASSIGN_OR_RETURN(data::DataStats st, predict_ctr(model, c, files, max_rows, [&](const data::Batch& b, std::span<const float> p) {
                             labels.insert(labels.end(), b.labels.begin(), b.labels.begin() + b.batch_size);
                             probs.insert(probs.end(), p.begin(), p.end());
                             return Status();
                           }));
  if (stats) *stats = st;
  LEANEMB_ASSIGN_OR_RETURN(double auc, data::roc_auc(labels, probs));
  LEANEMB_ASSIGN_OR_RETURN(double ll, data::mean_logloss(labels, probs));
  return json{{"auc", auc}, {"logloss", ll}, {"rows", labels.size()}};
}

Status load_ctr_dense(model::CtrModel& model, const ckpt::CheckpointReader& r, bool with_state) {
  // Names from the model, values from the checkpoint.
  std::vector<std::vector<float>> store;
  std::vector<nn::NamedTensor> params, state;
  const auto want_p = model.dense_parameters(), want_s = model.dense_optimizer_state();
  store.reserve(want_p.size() + want_s.size());
  for (const auto& t : want_p) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<float> v, read_floats(r, "dense/param/" + t.name));
    store.push_back(std::move(v));
    params.push_back({t.name, store.back()});
  }
  if (with_state) {
    for (const auto& t : want_s) {
      LEANEMB_ASSIGN_OR_RETURN(std::vector<float> v, read_floats(r, "dense/opt/" + t.name));
      store.push_back(std::move(v));
      state.push_back({t.name, store.back()});
    }
  } else {
    for (const auto& t : want_s) {  // the model's own (fresh) state, copied: no aliasing
      store.emplace_back(t.values.begin(), t.values.end());
      state.push_back({t.name, store.back()});
    }
  }
  return model.load_dense(params, state);
}

namespace {

bool file_exists(const std::string& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

std::span<const uint8_t> as_bytes(std::span<const float> v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4};
}

Result<std::vector<float>> read_floats(const ckpt::CheckpointReader& r, const std::string& name) {
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> b, r.read_blob(name));
  if (b.size() % 4) return data_loss("checkpoint blob " + name + " is not a float array");
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// Data: generate when asked and missing (with several ranks: rank 0 generates, the others wait
// for its meta.json, written last, then meet it at a barrier); then every input is checked.
Status prepare_data(const CtrConfig& c, dist::Communicator* comm, bool lead, bool quiet, bool tty, double* teacher_auc) {
  const int world = comm ? comm->size() : 1;
  auto say = [&](const std::string& s) {
    if (!quiet && lead) std::fprintf(stderr, "[ctr] %s\n", s.c_str());
  };
  if (c.generate) {
    bool have = true;
    for (const auto& f : c.train_files) have = have && file_exists(f);
    for (const auto& f : c.eval_files) have = have && file_exists(f);
    uint8_t generating = !have;
    if (generating && lead && world > 1) {  // a stale meta.json must not release the other ranks early
      std::error_code rm_ec;
      std::filesystem::remove(c.data_dir + "/meta.json", rm_ec);
    }
    if (world > 1) LEANEMB_RETURN_IF_ERROR(comm->broadcast(std::span<uint8_t>(&generating, 1), 0));
    if (generating && !lead) {
      while (!file_exists(c.data_dir + "/meta.json")) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      have = true;
    }
    if (have) LEANEMB_RETURN_IF_ERROR(check_generated_data(c));
    if (!have) {
      say("generating synthetic data into " + c.data_dir + " (" + std::to_string(c.gen.train_rows) + " train + " +
          std::to_string(c.gen.eval_rows) + " eval rows)");
      data::GenOptions g = c.gen;
      g.num_threads = c.threads;
      PhasedProgress bar(stderr, "[ctr] generating", "rows");  // a terminal: one line per split
      if (!quiet && lead && tty) g.progress_rows = [&](const char* split, int64_t done, int64_t rows) { bar.update(split, done, rows); };
      else if (!quiet) g.progress = [&](const std::string& line) { say(line); };
      auto generated = data::generate_dataset(g);
      bar.finish();
      LEANEMB_ASSIGN_OR_RETURN(data::GenReport rep, std::move(generated));
      say("generated in " + std::to_string(rep.seconds).substr(0, 5) + " s; teacher AUC on eval " +
          std::to_string(rep.teacher_auc).substr(0, 6));
    }
    if (generating && world > 1) LEANEMB_RETURN_IF_ERROR(comm->barrier());
    std::ifstream meta(c.data_dir + "/meta.json");
    if (meta) {
      const json mj = parse_json_or_discarded(meta);
      if (!mj.is_discarded() && mj.contains("teacher_auc") && mj["teacher_auc"].is_number())
        *teacher_auc = mj["teacher_auc"].get<double>();
    }
  }
  return check_data_files(c);  // every input before the first step
}

// Which tables embedding.cache_fraction gave a row cache (a note), and a warning when a cache
// was asked for and no table got one: every table below embedding.cache_min_rows used to
// leave the run silently resident ("row_cache": null).
void say_row_caches(const model::CtrModelOptions& mo, const TaskContext& tc) {
  const double fraction = mo.row_cache.fraction;
  if (!(fraction > 0.0)) return;
  std::string cached, resident;
  int64_t largest = -1;
  std::string largest_name;
  for (size_t f = 0; f < mo.table_rows.size(); ++f) {
    const int64_t rows = mo.table_rows[f];
    const std::string name = model::ctr_table_name(static_cast<int>(f));
    if (rows > largest) {
      largest = rows;
      largest_name = name;
    }
    if (tiered::cache_applies(rows, fraction, mo.cache_min_rows))
      cached += (cached.empty() ? "" : ", ") + name + " (" + std::to_string(tiered::cache_capacity_rows(rows, fraction)) + " of " +
                std::to_string(rows) + " rows)";
    else
      resident += (resident.empty() ? "" : ", ") + name;
  }
  if (cached.empty()) {
    std::fprintf(stderr,
                 "leanemb: warning: embedding.cache_fraction = %g asks for row caches, but no table got one: every table is "
                 "below embedding.cache_min_rows = %lld rows (the largest, %s, has %lld); lower embedding.cache_min_rows to "
                 "cache them, or drop embedding.cache_fraction\n",
                 fraction, static_cast<long long>(mo.cache_min_rows), largest_name.c_str(), static_cast<long long>(largest));
    return;
  }
  char frac[32];
  std::snprintf(frac, sizeof frac, "%g", fraction);
  if (tc.say)
    tc.say("row caches (embedding.cache_fraction = " + std::string(frac) + "): " + cached +
           (resident.empty() ? "" : "; resident (below embedding.cache_min_rows = " + std::to_string(mo.cache_min_rows) + "): " + resident));
}

// The CTR model over the Criteo-format reader.
class CtrTask final : public TrainTask {
 public:
  static Result<std::unique_ptr<TrainTask>> create(const CtrConfig& c, int grad_groups, double teacher_auc,
                                                   const TaskContext& tc) {
    auto t = std::unique_ptr<CtrTask>(new CtrTask(c, teacher_auc));
    model::CtrModelOptions mo = ctr_model_options(c);
    mo.grad_groups = grad_groups;
    mo.comm = tc.comm;
    LEANEMB_ASSIGN_OR_RETURN(t->model_, model::CtrModel::create(mo, tc.memory));
    if (tc.comm == nullptr || tc.comm->rank() == 0) say_row_caches(mo, tc);
    LEANEMB_ASSIGN_OR_RETURN(data::ReaderOptions tro, ctr_reader_options(c, c.train_files, true));
    LEANEMB_ASSIGN_OR_RETURN(t->reader_, data::DataReader::open(tro));
    amp::LossScalerOptions lso;
    lso.enabled = c.precision == DType::kF16;
    LEANEMB_ASSIGN_OR_RETURN(amp::LossScaler scaler, amp::LossScaler::create(lso));
    t->scaler_ = std::make_unique<amp::LossScaler>(std::move(scaler));
    return std::unique_ptr<TrainTask>(std::move(t));
  }

  EmbeddingTables& tables() override { return model_->embeddings(); }
  // With a row cache (and embedding.cache_prefetch), the task reads one batch ahead and starts
  // fetching its rows before the current batch's step, so that the fetch overlaps the step
  // (CtrModel::prefetch, the pipelined order of docs/tiered.md). The look-ahead is invisible
  // to the run: the checkpointed reader position, the data statistics and a read error are
  // those of the batches handed out (an error of the batch read ahead surfaces when that batch
  // is due), and the prefetch is a hint (its error is dropped: the step's forward fetches the
  // rows itself and reports what it finds).
  Result<bool> next_batch() override {
    if (!lookahead_) return reader_->next(&batch_);
    if (!primed_) {
      primed_ = true;
      read_ahead();
    }
    if (!ahead_.ok()) return ahead_.status();
    if (!ahead_.value()) return false;
    std::swap(batch_, next_);
    position_ = reader_->save_state();
    stats_ = reader_->stats();
    read_ahead();
    return true;
  }
  Result<TaskStep> train_step(int64_t, bool inject_nonfinite) override {
    LEANEMB_ASSIGN_OR_RETURN(model::StepStats s, model_->train_step(batch_, c_.micro_batches, *scaler_, inject_nonfinite));
    return TaskStep{s.loss, s.samples, s.skipped};
  }
  bool has_eval() const override { return !c_.eval_files.empty(); }
  Result<json> evaluate() override { return evaluate_ctr(*model_, c_, c_.eval_files, c_.eval_rows); }
  std::string eval_headline(const json& e) const override {
    return e.contains("auc") ? "auc " + std::to_string(e["auc"].get<double>()).substr(0, 6) : "-";
  }
  Result<Blobs> checkpoint_blobs() const override {
    Blobs b;
    b.emplace_back("train/reader", primed_ ? position_ : reader_->save_state());
    b.emplace_back("amp/loss_scaler", scaler_->save());
    auto floats = [](std::span<const float> v) {
      const auto bytes = as_bytes(v);
      return std::vector<uint8_t>(bytes.begin(), bytes.end());
    };
    for (const auto& t : model_->dense_parameters()) b.emplace_back("dense/param/" + t.name, floats(t.values));
    for (const auto& t : model_->dense_optimizer_state()) b.emplace_back("dense/opt/" + t.name, floats(t.values));
    return b;
  }
  Status restore(const ckpt::CheckpointReader& r) override {
    LEANEMB_RETURN_IF_ERROR(load_ctr_dense(*model_, r, true));
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> sc, r.read_blob("amp/loss_scaler"));
    LEANEMB_RETURN_IF_ERROR(scaler_->load(sc));
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> rd, r.read_blob("train/reader"));
    primed_ = false;  // the next batch is read from the restored position
    return reader_->restore_state(rd);
  }
  std::vector<nn::NamedTensor> dense_parameters() const override { return model_->dense_parameters(); }
  double loss_scale() const override { return scaler_->scale(); }
  int64_t batch_epoch() const override { return batch_.epoch; }
  int64_t steps_per_epoch() const override {  // known for generated data (its row count)
    return c_.generate ? (c_.gen.train_rows + c_.batch_size - 1) / c_.batch_size : -1;
  }
  void add_summary(json* sum) const override {
    (*sum)["teacher_auc"] = std::isfinite(teacher_auc_) ? json(teacher_auc_) : json(nullptr);
    (*sum)["sparse_table_rows"] = ctr_model_options(c_).table_rows;  // per feature (derived with table_rows = "auto")
    (*sum)["table_rows_derived"] = c_.table_rows_auto;
    const data::DataStats& ds = primed_ ? stats_ : reader_->stats();
    (*sum)["data"] = {{"records", ds.records}, {"malformed", ds.malformed}, {"truncated_values", ds.truncated_values}};
    (*sum)["cache_prefetch"] = lookahead_;
    (*sum)["config"] = {{"row_dtype", std::string(dtype_name(c_.row_dtype))},
                        {"row_optimizer", std::string(optimizer_name(c_.row_optimizer.kind))},
                        {"state_dtype", std::string(dtype_name(c_.row_optimizer.state_dtype))},
                        {"precision", std::string(dtype_name(c_.precision))},
                        {"micro_batches", c_.micro_batches}, {"checkpoint_activations", c_.checkpoint_activations}};
    if (model_->embeddings().communicator()) {
      (*sum)["dist"]["sharding"] = std::string(dist::sharding_kind_name(c_.sharding));
      (*sum)["dist"]["forward_payload"] = std::string(dtype_name(c_.forward_payload));
      (*sum)["dist"]["backward_payload"] = std::string(dtype_name(c_.backward_payload));
    }
  }

 private:
  CtrTask(const CtrConfig& c, double teacher_auc)
      : c_(c), teacher_auc_(teacher_auc), lookahead_(c.row_cache.enabled() && c.cache_prefetch) {}
  // Reads the batch after batch_ into next_ and starts its prefetch.
  void read_ahead() {
    ahead_ = reader_->next(&next_);
    if (ahead_.ok() && ahead_.value()) (void)model_->prefetch(next_, c_.micro_batches);
  }
  CtrConfig c_;
  double teacher_auc_;
  std::unique_ptr<model::CtrModel> model_;
  std::unique_ptr<data::DataReader> reader_;
  std::unique_ptr<amp::LossScaler> scaler_;
  data::Batch batch_;
  // The look-ahead (next_batch): on, started, the batch after batch_ and its read's result, and
  // the reader's position and statistics after batch_.
  bool lookahead_ = false, primed_ = false;
  data::Batch next_;
  Result<bool> ahead_ = false;
  std::vector<uint8_t> position_;
  data::DataStats stats_;
};

}  // namespace

Result<json> run_ctr_training(const train::RunOptions& ro, const CtrConfig& config) {
  CtrConfig c = config;
  if (ro.steps >= 0) c.steps = ro.steps;  // the reader's epochs follow it (reader_options)
  LoopSettings ls = train::loop_settings("ctr", c, ro, !c.eval_files.empty());
  if (c.row_cache.enabled() && c.row_cache.store == StoreKind::kFile) ls.store_dir = c.store_dir;
  auto teacher_auc = std::make_shared<double>(std::nan(""));
  // model.table_rows = "auto": sized after the data is there (generated or checked), before the
  // plan and the model; `shared` carries the sizes to the plan and the task (ctr/table_rows.h).
  auto shared = std::make_shared<CtrConfig>(c);
  ls.prepare = [shared, teacher_auc, quiet = ro.quiet, tty = ro.progress_tty, out = ro.out_dir,
                resume = ro.resume](dist::Communicator* comm, bool lead) -> Status {
    LEANEMB_RETURN_IF_ERROR(prepare_data(*shared, comm, lead, quiet, tty, teacher_auc.get()));
    std::string said;
    LEANEMB_RETURN_IF_ERROR(resolve_table_rows(shared.get(), out, resume, lead, &said));
    if (!said.empty() && lead && !quiet) std::fprintf(stderr, "[ctr] %s\n", said.c_str());
    return Status();
  };
  ls.plan = [shared](int world) -> Result<plan::Prediction> {
    const CtrConfig& c = *shared;
    LEANEMB_ASSIGN_OR_RETURN(plan::Workload workload, ctr_workload(c));
    workload.num_shards = world;  // the plan of one rank (its share of the rows; docs/dist.md)
    workload.grad_groups = c.grad_groups == 0 ? world : c.grad_groups;
    if (workload.file_store) {  // the block size the row files will get (the store directory exists by now)
      std::error_code ec;
      std::filesystem::create_directories(c.store_dir, ec);
      workload.file_block_bytes = tiered::file_store_block_bytes(c.store_dir);
    }
    LEANEMB_ASSIGN_OR_RETURN(plan::Prediction p, plan::predict_memory(workload));
    LEANEMB_RETURN_IF_ERROR(plan::predict_run_disk(workload, &p));  // the disk over the run (train.disk_check)
    return p;
  };
  const int world = ro.comm ? ro.comm->size() : 1;
  const int grad_groups = c.grad_groups == 0 ? world : c.grad_groups;
  ls.make_task = [shared, grad_groups, teacher_auc](const TaskContext& tc) {
    return CtrTask::create(*shared, grad_groups, *teacher_auc, tc);
  };
  return train::run_loop(ro, std::move(ls));
}

}  // namespace leanemb::ctr
