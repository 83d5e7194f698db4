// The training loop, eval, checkpoints and metrics of `leanemb train`. See trainer.h.
#include "train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "data/metrics.h"
#include "data/reader.h"
#include "dist/local_comm.h"
#include "dist/sharded_checkpoint.h"
#include "dist/sharded_collection.h"
#include "leanemb/checkpoint.h"
#include "model/ctr_model.h"
#include "plan/memory_model.h"
#include "plan/workload.h"

namespace leanemb::train {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kCkptChunkRows = 65536;

model::CtrModelOptions model_options(const TrainConfig& c) {
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
  return o;
}

Result<data::ReaderOptions> reader_options(const TrainConfig& c, const std::vector<std::string>& files, bool train) {
  data::ReaderOptions r;
  r.files = files;
  const auto rows = model_options(c).table_rows;
  LEANEMB_ASSIGN_OR_RETURN(r.schema, data::make_schema(c.num_dense, c.num_sparse, rows, c.max_len));
  for (const DynamicTableConfig& d : c.dynamic_tables)  // raw hashed values: the IdMap gives rows
    r.schema.sparse[static_cast<size_t>(std::stoi(d.table.substr(1)) - 1)].raw_ids = true;
  r.batch_size = c.batch_size;
  r.shuffle_buffer = train ? c.shuffle_buffer : 0;
  r.seed = c.seed;
  r.num_epochs = train ? (c.steps > 0 ? 0 : c.epochs) : 1;
  r.malformed.max_rate = c.max_malformed_rate;
  return r;
}

bool file_exists(const std::string& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

// ---- checkpoint content --------------------------------------------------------------------------

std::span<const uint8_t> as_bytes(std::span<const float> v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4};
}

std::vector<uint8_t> to_bytes(const json& j) {
  const std::string s = j.dump();
  return {s.begin(), s.end()};
}

struct Counters {
  int64_t step = 0;
  int64_t samples = 0;
  int64_t skipped = 0;
};

// The checkpoint's blobs (everything but the tables), the same for plain and sharded checkpoints.
std::vector<std::pair<std::string, std::vector<uint8_t>>> train_blobs(const model::CtrModel& m, const data::DataReader& reader,
                                                                      const amp::LossScaler& scaler, const Counters& k) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> b;
  json tables = json::array();  // the collection's table order (the training digest follows it)
  for (const TableOptions& t : m.embeddings().options().tables) tables.push_back(t.name);
  const json st = {{"step", k.step}, {"samples", k.samples}, {"skipped_steps", k.skipped},
                   {"collection_step", m.embeddings().step()}, {"format", "leanemb-train-1"}, {"tables", tables}};
  b.emplace_back("train/state", to_bytes(st));
  b.emplace_back("train/reader", reader.save_state());
  b.emplace_back("amp/loss_scaler", scaler.save());
  auto floats = [](std::span<const float> v) {
    const auto bytes = as_bytes(v);
    return std::vector<uint8_t>(bytes.begin(), bytes.end());
  };
  for (const auto& t : m.dense_parameters()) b.emplace_back("dense/param/" + t.name, floats(t.values));
  for (const auto& t : m.dense_optimizer_state()) b.emplace_back("dense/opt/" + t.name, floats(t.values));
  return b;
}

Status write_checkpoint(const std::string& out, const TrainConfig& c, model::CtrModel& m, const data::DataReader& reader,
                        const amp::LossScaler& scaler, const Counters& k, std::string* path) {
  const auto blobs = train_blobs(m, reader, scaler, k);
  std::vector<dist::ShardedBlob> sb;
  for (const auto& [name, bytes] : blobs) sb.push_back({name, bytes});
  dist::TablesSaveOptions so;
  so.keep_last = c.keep_checkpoints;
  so.chunk_rows = kCkptChunkRows;
  LEANEMB_ASSIGN_OR_RETURN(dist::TablesSaveInfo info, dist::save_tables_checkpoint(out, k.step, m.embeddings(), sb, so));
  for (const auto& warning : info.warnings) std::fprintf(stderr, "leanemb: warning: %s\n", warning.c_str());
  *path = info.path;
  return Status();
}

Result<std::vector<float>> read_floats(const ckpt::CheckpointReader& r, const std::string& name) {
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> b, r.read_blob(name));
  if (b.size() % 4) return data_loss("checkpoint blob " + name + " is not a float array");
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// Resumes from checkpoint `dir`, plain or sharded (global directory), at any world size.
Status load_checkpoint(const std::string& dir, model::CtrModel& m, data::DataReader& reader, amp::LossScaler& scaler,
                       Counters* k) {
  auto ctx = [&](const Status& s) { return Status(s.code(), "resuming from " + dir + ": " + s.message()); };
  dist::Communicator* comm = m.embeddings().communicator();
  // With sharded tables every rank fails if any rank failed (dist::agree), so none goes on alone.
  auto agree = [&](const Status& mine) { return comm ? dist::agree(*comm, mine, "resuming from " + dir) : (mine.ok() ? mine : ctx(mine)); };
  auto opened = ckpt::CheckpointReader::open(dir);
  LEANEMB_RETURN_IF_ERROR(agree(opened.status()));
  const ckpt::CheckpointReader& r = *opened.value();
  json st;
  {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> stb, r.read_blob("train/state"));
    st = json::parse(stb.begin(), stb.end(), nullptr, false);
    if (st.is_discarded() || !st.contains("step")) return data_loss("resuming from " + dir + ": bad train/state");
  }
  // Embedding tables (either format, any world size; every rank fails if one does).
  dist::TablesLoadOptions lo;
  lo.chunk_rows = kCkptChunkRows;
  lo.collection_step = st["collection_step"].get<int64_t>();
  if (auto loaded = dist::load_tables_checkpoint(dir, m.embeddings(), lo); !loaded.ok()) return ctx(loaded.status());
  // Dense parameters and state: names from the model, values from the checkpoint.
  std::vector<std::vector<float>> store;
  std::vector<nn::NamedTensor> params, state;
  const auto want_p = m.dense_parameters(), want_s = m.dense_optimizer_state();
  store.reserve(want_p.size() + want_s.size());
  for (const auto& t : want_p) {
    auto v = read_floats(r, "dense/param/" + t.name);
    if (!v.ok()) return ctx(v.status());
    store.push_back(std::move(v).value());
    params.push_back({t.name, store.back()});
  }
  for (const auto& t : want_s) {
    auto v = read_floats(r, "dense/opt/" + t.name);
    if (!v.ok()) return ctx(v.status());
    store.push_back(std::move(v).value());
    state.push_back({t.name, store.back()});
  }
  if (Status s = m.load_dense(params, state); !s.ok()) return ctx(s);
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> sc, r.read_blob("amp/loss_scaler"));
  if (Status s = scaler.load(sc); !s.ok()) return ctx(s);
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> rd, r.read_blob("train/reader"));
  if (Status s = reader.restore_state(rd); !s.ok()) return ctx(s);
  k->step = st["step"].get<int64_t>();
  k->samples = st["samples"].get<int64_t>();
  k->skipped = st["skipped_steps"].get<int64_t>();
  return Status();
}

// ---- eval -----------------------------------------------------------------------------------------

Result<json> evaluate(const TrainConfig& c, model::CtrModel& m) {
  LEANEMB_ASSIGN_OR_RETURN(data::ReaderOptions ro, reader_options(c, c.eval_files, false));
  LEANEMB_ASSIGN_OR_RETURN(auto reader, data::DataReader::open(ro));
  data::Batch batch;
  std::vector<float> labels, probs, p;
  while (c.eval_rows == 0 || static_cast<int64_t>(labels.size()) < c.eval_rows) {
    LEANEMB_ASSIGN_OR_RETURN(bool more, reader->next(&batch));
    if (!more) break;
    p.resize(static_cast<size_t>(batch.batch_size));
    LEANEMB_RETURN_IF_ERROR(m.predict(batch, p, c.micro_batches));
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
    probs.insert(probs.end(), p.begin(), p.end());
  }
  if (c.eval_rows > 0 && static_cast<int64_t>(labels.size()) > c.eval_rows) {
    labels.resize(static_cast<size_t>(c.eval_rows));
    probs.resize(static_cast<size_t>(c.eval_rows));
  }
  LEANEMB_ASSIGN_OR_RETURN(double auc, data::roc_auc(labels, probs));
  LEANEMB_ASSIGN_OR_RETURN(double ll, data::mean_logloss(labels, probs));
  return json{{"auc", auc}, {"logloss", ll}, {"rows", labels.size()}};
}

json memory_peaks(const MemorySystem& mem) {
  json out = json::object();
  for (const MemoryStats& s : mem.stats()) {
    json cats = json::object();
    for (int c = 0; c < kNumCategories; ++c)
      if (s.by_category[static_cast<size_t>(c)].peak_bytes)
        cats[std::string(category_name(static_cast<Category>(c)))] = s.by_category[static_cast<size_t>(c)].peak_bytes;
    out[std::string(tier_name(s.tier))] = cats;
  }
  return out;
}

// {"device": {"planned_peak", "measured_peak", "categories": {cat: {"planned", "measured"}}}, "host": ...}
json planned_vs_measured(const plan::Prediction& p, const MemorySystem& mem) {
  json out = json::object();
  const auto stats = mem.stats();
  for (size_t t = 0; t < 2; ++t) {
    json cats = json::object();
    for (int c = 0; c < kNumCategories; ++c) {
      const size_t planned = p.tier[t].peak[static_cast<size_t>(c)];
      const size_t measured = stats[t].by_category[static_cast<size_t>(c)].peak_bytes;
      if (planned || measured)
        cats[std::string(category_name(static_cast<Category>(c)))] = {{"planned", planned}, {"measured", measured}};
    }
    out[std::string(tier_name(stats[t].tier))] = {{"planned_peak", p.tier[t].peak_bytes},
                                                  {"measured_peak", stats[t].peak_bytes},
                                                  {"planned_peak_phase", p.tier[t].peak_phase},
                                                  {"categories", cats}};
  }
  return out;
}

}  // namespace

Result<json> run_training(const RunOptions& ro) {
  TrainConfig c = ro.config;
  if (ro.steps >= 0) c.steps = ro.steps;
  if (c.threads > 0) omp_set_num_threads(c.threads);
  dist::Communicator* comm = ro.comm;
  const int world = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  const bool lead = rank == 0;  // prints, writes metrics (every rank computes the same values)
  const bool quiet = ro.quiet || !lead;
  auto say = [&](const std::string& s) {
    if (!quiet) std::fprintf(stderr, "[train] %s\n", s.c_str());
  };
  if (c.grad_groups == 0) c.grad_groups = world;
  if (c.grad_groups % world != 0)
    return invalid_argument(c.origin + ": dist.grad_groups (" + std::to_string(c.grad_groups) + ") must be a multiple of the number of ranks (" +
                            std::to_string(world) + ")");

  // Data: generate when asked and missing (with several ranks: rank 0 generates, the others
  // wait for its meta.json, written last, then meet it at a barrier).
  double teacher_auc = std::nan("");
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
    if (!have) {
      say("generating synthetic data into " + c.data_dir + " (" + std::to_string(c.gen.train_rows) + " train + " +
          std::to_string(c.gen.eval_rows) + " eval rows)");
      data::GenOptions g = c.gen;
      g.num_threads = c.threads;
      if (!ro.quiet) g.progress = [&](const std::string& line) { say(line); };
      LEANEMB_ASSIGN_OR_RETURN(data::GenReport rep, data::generate_dataset(g));
      say("generated in " + std::to_string(rep.seconds).substr(0, 5) + " s; teacher AUC on eval " +
          std::to_string(rep.teacher_auc).substr(0, 6));
    }
    if (generating && world > 1) LEANEMB_RETURN_IF_ERROR(comm->barrier());
    std::ifstream meta(c.data_dir + "/meta.json");
    if (meta) {
      const json mj = json::parse(meta, nullptr, false);
      if (!mj.is_discarded() && mj.contains("teacher_auc") && mj["teacher_auc"].is_number())
        teacher_auc = mj["teacher_auc"].get<double>();
    }
  }

  // The memory plan of this run (src/plan): reserved up front when a device budget is set and
  // memory.reserve is not, and compared with the measured peaks at the end.
  LEANEMB_ASSIGN_OR_RETURN(plan::Workload workload, plan::workload_from_config(c));
  // Several ranks: the plan of one rank (its share of the rows; docs/dist.md says what it leaves out).
  workload.num_shards = world;
  LEANEMB_ASSIGN_OR_RETURN(plan::Prediction planned, plan::predict_memory(workload));
  MemorySystemOptions mso = c.memory;
  if (mso.device_budget_bytes > 0 && mso.reserve_bytes == 0) {
    // Requests <= 1 MiB come from the arena's small pool (2 MiB segments) outside the reserved
    // segment: leave room for them.
    const size_t small = (planned.device().small_request_bytes + (size_t{4} << 20)) / (size_t{2} << 20) * (size_t{2} << 20);
    const size_t large = planned.device().peak_bytes > planned.device().small_request_bytes
                             ? planned.device().peak_bytes - planned.device().small_request_bytes : 0;
    if (large > 0 && large + small <= mso.device_budget_bytes) {
      mso.reserve_bytes = large;
      say("reserving the planned " + format_bytes(large) + " of device memory up front (plan: peak " +
          format_bytes(planned.device().peak_bytes) + " in " + planned.device().peak_phase + ")");
    } else if (planned.device().peak_bytes > mso.device_budget_bytes) {
      std::fprintf(stderr, "leanemb: warning: the plan predicts a device peak of %s, over the budget of %s (leanemb plan "
                   "--config FILE proposes settings that fit)\n", format_bytes(planned.device().peak_bytes).c_str(),
                   format_bytes(mso.device_budget_bytes).c_str());
    }
  }
  LEANEMB_ASSIGN_OR_RETURN(auto mem, MemorySystem::create(mso));
  if (c.row_cache.enabled() && c.row_cache.store == "file") {
    std::error_code dir_ec;
    std::filesystem::create_directories(c.store_dir, dir_ec);
    if (dir_ec) return io_error("cannot create embedding.store_dir '" + c.store_dir + "': " + dir_ec.message());
  }
  // The newest complete checkpoint, plain or sharded: either loads at any world size.
  std::string resume_dir;
  if (ro.resume) {
    auto latest = dist::find_latest_tables_checkpoint(ro.out_dir);
    if (!latest.ok() && latest.status().code() != StatusCode::kNotFound) return latest.status();
    if (latest.ok()) resume_dir = latest.value().ref.path;
  }
  model::CtrModelOptions mo = model_options(c);
  mo.grad_groups = c.grad_groups;
  if (world > 1) mo.comm = comm;
  LEANEMB_ASSIGN_OR_RETURN(auto model, model::CtrModel::create(mo, mem.get()));
  LEANEMB_ASSIGN_OR_RETURN(data::ReaderOptions tro, reader_options(c, c.train_files, true));
  LEANEMB_ASSIGN_OR_RETURN(auto reader, data::DataReader::open(tro));
  amp::LossScalerOptions lso;
  lso.enabled = c.precision == amp::Precision::kFp16;
  LEANEMB_ASSIGN_OR_RETURN(amp::LossScaler scaler, amp::LossScaler::create(lso));

  Counters k;
  int64_t resumed_from = -1;
  if (ro.resume) {
    if (resume_dir.empty()) {
      say("no complete checkpoint in " + ro.out_dir + "/checkpoints: starting from the beginning");
    } else {
      LEANEMB_RETURN_IF_ERROR(load_checkpoint(resume_dir, *model, *reader, scaler, &k));
      resumed_from = k.step;
      say("resumed from " + resume_dir + " (step " + std::to_string(k.step) + ")");
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(ro.out_dir, ec);
  if (ec) return io_error("cannot create output directory '" + ro.out_dir + "': " + ec.message());
  std::ofstream metrics;  // rank 0's
  if (lead) metrics.open(ro.out_dir + "/metrics.jsonl", std::ios::app);

  const auto embedding_bytes = [&] {
    size_t b = 0;
    for (const MemoryStats& s : mem->stats()) b += s[Category::kWeights].current_bytes + s[Category::kOptimizerState].current_bytes;
    return b;
  }();
  // Dense parameters are in kWeights too; report the embedding tables alone as well.
  size_t table_bytes = 0;
  for (int t = 0; t < model->embeddings().num_tables(); ++t)
    table_bytes += model->embeddings().layout(t).stride_bytes * static_cast<size_t>(model->embeddings().options().tables[static_cast<size_t>(t)].num_rows);

  data::Batch batch;
  std::string last_ckpt;
  int64_t last_ckpt_step = -1;
  json last_eval;
  double loss_sum = 0.0, last_loss = NAN;
  int64_t loss_n = 0, samples_run = 0;
  const auto t0 = Clock::now();
  auto last_print = t0;
  auto line = [&](bool final_line) {
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto st = mem->stats();
    char buf[320];
    std::snprintf(buf, sizeof buf, "step %lld | %.1fk samples/s | loss %.4f | eval auc %s | device %s host %s",
                  static_cast<long long>(k.step), secs > 0 ? samples_run / secs / 1e3 : 0.0, last_loss,
                  last_eval.contains("auc") ? std::to_string(last_eval["auc"].get<double>()).substr(0, 6).c_str() : "-",
                  format_bytes(st[0].current_bytes).c_str(), format_bytes(st[1].current_bytes).c_str());
    if (quiet) return;
    if (ro.progress_tty) std::fprintf(stderr, "\r[train] %s\033[K%s", buf, final_line ? "\n" : "");
    else std::fprintf(stderr, "[train] %s\n", buf);
  };
  const std::set<int64_t> inject(c.inject_nonfinite_steps.begin(), c.inject_nonfinite_steps.end());

  while (c.steps == 0 || k.step < c.steps) {
    LEANEMB_ASSIGN_OR_RETURN(bool more, reader->next(&batch));
    if (!more) break;
    const int64_t step_no = k.step + 1;
    LEANEMB_ASSIGN_OR_RETURN(model::StepStats s, model->train_step(batch, c.micro_batches, scaler, inject.count(step_no) > 0));
    k.step = step_no;
    k.samples += s.samples;
    samples_run += s.samples;
    if (s.skipped) ++k.skipped;
    loss_sum += s.loss;
    ++loss_n;
    if (k.step % c.log_every == 0) {
      last_loss = loss_sum / static_cast<double>(loss_n);
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      metrics << json{{"step", k.step}, {"loss", last_loss}, {"samples_per_s", secs > 0 ? samples_run / secs : 0.0},
                      {"loss_scale", scaler.scale()}, {"skipped_steps", k.skipped}}.dump()
              << "\n";
      metrics.flush();
      loss_sum = 0;
      loss_n = 0;
    }
    if (c.eval_every > 0 && k.step % c.eval_every == 0 && !c.eval_files.empty()) {
      LEANEMB_ASSIGN_OR_RETURN(last_eval, evaluate(c, *model));
      metrics << json{{"step", k.step}, {"eval", last_eval}}.dump() << "\n";
      metrics.flush();
    }
    if (c.checkpoint_every > 0 && k.step % c.checkpoint_every == 0) {
      LEANEMB_RETURN_IF_ERROR(write_checkpoint(ro.out_dir, c, *model, *reader, scaler, k, &last_ckpt));
      last_ckpt_step = k.step;
    }
    if (ro.after_step) ro.after_step(k.step);
    if (rank == c.inject_exit_rank && k.step == c.inject_exit_step) {
      std::fprintf(stderr, "leanemb: rank %d: dist.inject_exit_step: ending the process after step %lld (a simulated crash)\n",
                   rank, static_cast<long long>(k.step));
      std::_Exit(9);
    }
    const auto now = Clock::now();
    if (ro.progress_tty ? std::chrono::duration<double>(now - last_print).count() > 0.25 : k.step % c.log_every == 0) {
      last_print = now;
      line(false);
    }
  }
  const double train_secs = std::chrono::duration<double>(Clock::now() - t0).count();
  // Bytes of the training steps alone (before the final checkpoint and evaluation).
  const TablesCommTotals train_emb = model->embeddings().comm_totals();
  uint64_t train_comm_bytes = 0;
  double train_comm_seconds = 0;
  if (const dist::Communicator* cm = model->embeddings().communicator()) {
    train_comm_bytes = cm->stats().bytes_sent;
    train_comm_seconds = cm->stats().seconds;
  }
  if (loss_n > 0) last_loss = loss_sum / static_cast<double>(loss_n);
  if (k.step != last_ckpt_step && k.step > 0)
    LEANEMB_RETURN_IF_ERROR(write_checkpoint(ro.out_dir, c, *model, *reader, scaler, k, &last_ckpt));
  if (!c.eval_files.empty()) {
    say("evaluating on " + c.eval_files[0] + (c.eval_files.size() > 1 ? " ..." : ""));
    LEANEMB_ASSIGN_OR_RETURN(last_eval, evaluate(c, *model));
    metrics << json{{"step", k.step}, {"eval", last_eval}, {"final", true}}.dump() << "\n";
  }
  line(true);

  json sum;
  sum["steps"] = k.step;
  sum["samples"] = k.samples;
  sum["samples_this_run"] = samples_run;
  sum["train_seconds"] = train_secs;
  sum["samples_per_s"] = train_secs > 0 ? samples_run / train_secs : 0.0;
  sum["loss"] = std::isfinite(last_loss) ? json(last_loss) : json(nullptr);
  sum["eval"] = last_eval.is_null() ? json(nullptr) : last_eval;
  sum["teacher_auc"] = std::isfinite(teacher_auc) ? json(teacher_auc) : json(nullptr);
  sum["skipped_steps"] = k.skipped;
  sum["loss_scale"] = scaler.scale();
  sum["resumed_from_step"] = resumed_from >= 0 ? json(resumed_from) : json(nullptr);
  sum["memory"] = memory_peaks(*mem);
  sum["memory_detail"] = json::parse(mem->to_json());
  sum["embedding_table_bytes"] = table_bytes;
  sum["weights_and_state_bytes"] = embedding_bytes;
  sum["checkpoint"] = last_ckpt;
  if (const dist::Communicator* cmp = model->embeddings().communicator()) {
    const dist::Communicator& cm = *cmp;
    // Per-rank table bytes: this rank's and the largest of any rank.
    int64_t most[1] = {static_cast<int64_t>(table_bytes)};
    LEANEMB_RETURN_IF_ERROR(mo.comm->all_reduce(std::span<int64_t>(most, 1), dist::ReduceOp::kMax));
    const double steps_run = static_cast<double>(std::max<int64_t>(1, k.step - std::max<int64_t>(0, resumed_from)));
    sum["dist"] = {{"world_size", cm.size()}, {"rank", cm.rank()}, {"backend", std::string(cm.backend())},
                   {"sharding", std::string(dist::sharding_kind_name(c.sharding))},
                   {"forward_payload", std::string(dist::payload_dtype_name(c.forward_payload))},
                   {"backward_payload", std::string(dist::payload_dtype_name(c.backward_payload))},
                   {"grad_groups", c.grad_groups}, {"embedding_table_bytes_max_rank", most[0]},
                   // rank 0's communicator over the whole run (steps, checkpoints, evaluation)
                   {"bytes_sent", cm.stats().bytes_sent}, {"collective_seconds", cm.stats().seconds},
                   // the training steps of this run: everything, then the embedding lookups and
                   // updates, then of those the encoded rows and gradients (the payload dtypes' share)
                   {"bytes_sent_per_step", static_cast<double>(train_comm_bytes) / steps_run},
                   {"collective_seconds_training", train_comm_seconds},
                   {"embedding_bytes_sent_per_step", static_cast<double>(train_emb.bytes_sent) / steps_run},
                   {"embedding_payload_bytes_sent_per_step", static_cast<double>(train_emb.payload_bytes_sent) / steps_run}};
  } else {
    sum["dist"] = {{"world_size", 1}, {"grad_groups", c.grad_groups}};
  }
  sum["data"] = {{"records", reader->stats().records}, {"malformed", reader->stats().malformed},
                 {"truncated_values", reader->stats().truncated_values}};
  sum["config"] = {{"origin", c.origin}, {"row_dtype", std::string(dtype_name(c.row_dtype))},
                   {"row_optimizer", std::string(optimizer_name(c.row_optimizer.kind))},
                   {"state_dtype", std::string(state_dtype_name(c.row_optimizer.state_dtype))},
                   {"precision", std::string(amp::precision_name(c.precision))},
                   {"micro_batches", c.micro_batches}, {"checkpoint_activations", c.checkpoint_activations},
                   {"placement", mem->placement().to_string()}};
  sum["memory_summary_text"] = mem->memory_summary();
  sum["plan"] = planned_vs_measured(planned, *mem);
  sum["reserved_bytes"] = mso.reserve_bytes;
  model.reset();  // before the memory system it lives in
  return sum;
}

}  // namespace leanemb::train
