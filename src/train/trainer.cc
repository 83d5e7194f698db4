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
#include "train/config_diff.h"
#include "train/divergence.h"
#include "train/input_check.h"
#include "train/run_dir.h"
#include "train/stop_signal.h"

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
                                                                      const amp::LossScaler& scaler, const Counters& k,
                                                                      const ConfigRecord& config) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> b;
  json tables = json::array();  // the collection's table order (the training digest follows it)
  for (const TableOptions& t : m.embeddings().options().tables) tables.push_back(t.name);
  const json st = {{"step", k.step}, {"samples", k.samples}, {"skipped_steps", k.skipped},
                   {"collection_step", m.embeddings().step()}, {"format", "leanemb-train-1"}, {"tables", tables}};
  b.emplace_back("train/state", to_bytes(st));
  b.emplace_back("train/config", encode_config_record(config));
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
                        const amp::LossScaler& scaler, const Counters& k, ckpt::Env* env, std::string* path) {
  const auto blobs = train_blobs(m, reader, scaler, k, c.record);
  if (dist::ShardedEmbeddingCollection* sh = m.sharded()) {
    std::vector<dist::ShardedBlob> sb;
    for (const auto& [name, bytes] : blobs) sb.push_back({name, bytes});
    dist::ShardedSaveOptions so;
    so.keep_last = c.keep_checkpoints;
    so.env = env;
    LEANEMB_ASSIGN_OR_RETURN(dist::ShardedSaveInfo info, dist::save_sharded_checkpoint(out, k.step, *sh, sb, so));
    for (const auto& warning : info.warnings) std::fprintf(stderr, "leanemb: warning: %s\n", warning.c_str());
    *path = info.global_dir;
    return Status();
  }
  ckpt::WriterOptions wo;
  wo.keep_last = c.keep_checkpoints;
  wo.env = env;
  LEANEMB_ASSIGN_OR_RETURN(auto w, ckpt::CheckpointWriter::create(out, k.step, wo));
  const EmbeddingCollection& emb = m.embeddings();
  for (const auto& [name, bytes] : blobs) LEANEMB_RETURN_IF_ERROR(w->add_blob(name, bytes));
  std::vector<uint8_t> rows;
  for (int t = 0; t < emb.num_tables(); ++t) {
    const RowLayout& l = emb.layout(t);
    const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
    const json meta = {{"dim", l.dim}, {"dtype", std::string(dtype_name(l.weight_dtype))},
                       {"optimizer", std::string(optimizer_name(l.optimizer.kind))},
                       {"state_dtype", std::string(state_dtype_name(l.optimizer.state_dtype))},
                       {"stride_bytes", l.stride_bytes}};
    const std::string name = "emb/" + to.name;
    LEANEMB_RETURN_IF_ERROR(w->add_table(name, l.stride_bytes, to.num_rows, to_bytes(meta)));
    for (int64_t r0 = 0; r0 < to.num_rows; r0 += kCkptChunkRows) {
      const int64_t n = std::min(kCkptChunkRows, to.num_rows - r0);
      rows.resize(static_cast<size_t>(n) * l.stride_bytes);
      LEANEMB_RETURN_IF_ERROR(emb.read_raw_rows(t, r0, n, rows));
      LEANEMB_RETURN_IF_ERROR(w->append_rows(name, r0, rows));
    }
  }
  LEANEMB_ASSIGN_OR_RETURN(ckpt::CommitInfo info, w->commit());
  for (const auto& warning : info.warnings) std::fprintf(stderr, "leanemb: warning: %s\n", warning.c_str());
  for (const auto& moved : info.set_aside) std::fprintf(stderr, "leanemb: warning: not a complete checkpoint, moved aside: %s\n", moved.c_str());
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

// The rows of a plain checkpoint's tables "emb/<name>" into the model. A sharded model (P ranks
// resuming a run of one process) copies the global rows this rank owns, in runs of consecutive
// local rows.
Status load_plain_tables(const ckpt::CheckpointReader& r, model::CtrModel& m) {
  EmbeddingCollection& emb = m.embeddings();
  const dist::ShardedEmbeddingCollection* sh = m.sharded();
  const int rank = sh ? sh->communicator().rank() : 0;
  std::vector<uint8_t> rows, run;
  for (int t = 0; t < emb.num_tables(); ++t) {
    const RowLayout& l = emb.layout(t);
    const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
    const int64_t global_rows = sh ? sh->plan().num_rows(t) : to.num_rows;
    const std::string name = "emb/" + to.name;
    const ckpt::EntryInfo* e = r.find(name);
    if (!e || e->row_bytes != l.stride_bytes || e->total_rows != global_rows)
      return invalid_argument("table " + to.name + " in the checkpoint does not match the config (rows, dim, dtype or optimizer changed?)");
    for (int64_t r0 = 0; r0 < global_rows; r0 += kCkptChunkRows) {
      const int64_t n = std::min(kCkptChunkRows, global_rows - r0);
      rows.resize(static_cast<size_t>(n) * l.stride_bytes);
      LEANEMB_RETURN_IF_ERROR(r.read_rows(name, r0, n, rows));
      if (!sh) {
        LEANEMB_RETURN_IF_ERROR(emb.write_raw_rows(t, r0, n, rows));
        continue;
      }
      int64_t run_start = -1, run_len = 0;
      auto flush = [&]() -> Status {
        if (run_len > 0) LEANEMB_RETURN_IF_ERROR(emb.write_raw_rows(t, run_start, run_len, run));
        run.clear();
        run_len = 0;
        return Status();
      };
      for (int64_t i = 0; i < n; ++i) {
        const int64_t g = r0 + i;
        if (sh->plan().owner(t, g) != rank) continue;
        const int64_t local = sh->plan().local_row(t, g);
        if (run_len > 0 && local != run_start + run_len) LEANEMB_RETURN_IF_ERROR(flush());
        if (run_len == 0) run_start = local;
        const auto* row = rows.data() + static_cast<size_t>(i) * l.stride_bytes;
        run.insert(run.end(), row, row + l.stride_bytes);
        ++run_len;
      }
      LEANEMB_RETURN_IF_ERROR(flush());
    }
  }
  return Status();
}

// The counters of blob "train/state", checked: integers, >= 0, skipped <= step, and the step
// the checkpoint's manifest records. Errors: DataLoss naming the field.
Result<Counters> parse_train_state(std::span<const uint8_t> bytes, int64_t manifest_step, int64_t* collection_step) {
  const json st = json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (st.is_discarded() || !st.is_object()) return data_loss("train/state is not a JSON object");
  int64_t v[4] = {};
  const char* keys[4] = {"step", "samples", "skipped_steps", "collection_step"};
  for (int i = 0; i < 4; ++i) {
    if (!st.contains(keys[i]) || !st[keys[i]].is_number_integer() || st[keys[i]].get<int64_t>() < 0)
      return data_loss(std::string("train/state: \"") + keys[i] + "\" is missing or not an integer >= 0");
    v[i] = st[keys[i]].get<int64_t>();
  }
  if (v[0] != manifest_step)
    return data_loss("train/state says step " + std::to_string(v[0]) + ", the checkpoint's manifest step " + std::to_string(manifest_step));
  if (v[2] > v[0]) return data_loss("train/state: skipped_steps " + std::to_string(v[2]) + " exceeds step " + std::to_string(v[0]));
  *collection_step = v[3];
  return Counters{v[0], v[1], v[2]};
}

// Resumes from checkpoint `dir`, plain or sharded (global directory), whichever the model is: a
// sharded checkpoint needs a sharded model (any world size); a plain one loads into either. The
// saved configuration is compared with `c` first (train/config_diff.h).
Status load_checkpoint(const std::string& dir, bool sharded_ckpt, const TrainConfig& c, ckpt::Env* env, bool lead,
                       model::CtrModel& m, data::DataReader& reader, amp::LossScaler& scaler, Counters* k) {
  auto ctx = [&](const Status& s) { return Status(s.code(), "resuming from " + dir + ": " + s.message()); };
  dist::ShardedEmbeddingCollection* sh = m.sharded();
  // With sharded tables every rank fails if any rank failed (dist::agree), so none goes on alone.
  auto agree = [&](const Status& mine) { return sh ? dist::agree(sh->communicator(), mine, "resuming from " + dir) : (mine.ok() ? mine : ctx(mine)); };
  auto opened = ckpt::CheckpointReader::open(dir, env);
  LEANEMB_RETURN_IF_ERROR(agree(opened.status()));
  const ckpt::CheckpointReader& r = *opened.value();
  if (r.find("train/config") != nullptr) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> cfg, r.read_blob("train/config"));
    LEANEMB_RETURN_IF_ERROR(check_resume_config(cfg, c.record, dir, lead));
  } else if (lead) {
    std::fprintf(stderr, "leanemb: note: %s holds no saved configuration (an older version wrote it): not compared\n", dir.c_str());
  }
  int64_t collection_step = 0;
  Counters saved;
  {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> stb, r.read_blob("train/state"));
    auto parsed = parse_train_state(stb, r.step(), &collection_step);
    if (!parsed.ok()) return ctx(parsed.status());
    saved = parsed.value();
  }
  // Embedding tables.
  if (sharded_ckpt) {
    if (!sh) return ctx(invalid_argument("a sharded checkpoint needs a sharded model"));
    dist::ShardedLoadOptions lo;
    lo.env = env;
    auto loaded = dist::load_sharded_checkpoint(dir, *sh, lo);
    if (!loaded.ok()) return ctx(loaded.status());
  } else {
    Status s = load_plain_tables(r, m);
    if (s.ok()) m.embeddings().set_step(collection_step);
    LEANEMB_RETURN_IF_ERROR(agree(s));
  }
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
  *k = saved;
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
                                                  {"planned_budget", p.tier[t].budget_bytes},
                                                  {"measured_peak", stats[t].peak_bytes},
                                                  {"planned_peak_phase", p.tier[t].peak_phase},
                                                  {"categories", cats}};
  }
  return out;
}

RunDirOptions run_dir_options(const RunOptions& ro) {
  RunDirOptions o;
  o.out_dir = ro.out_dir;
  o.resume = ro.resume;
  o.overwrite = ro.overwrite;
  o.start_fresh = ro.start_fresh;
  o.env = ro.ckpt_env;
  return o;
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
  // The output directory, locked for the run, and where the run starts (train/run_dir.h).
  std::unique_ptr<RunDir> run_dir;
  LEANEMB_ASSIGN_OR_RETURN(const ResumePoint resume_at, open_run_dir(run_dir_options(ro), comm, &run_dir));

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
    if (have) LEANEMB_RETURN_IF_ERROR(check_generated_data(c));
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

  LEANEMB_RETURN_IF_ERROR(check_data_files(c));  // every input before the first step

  // The memory plan of this run (src/plan): reserved up front when a device budget is set and
  // memory.reserve is not, and compared with the measured peaks at the end.
  LEANEMB_ASSIGN_OR_RETURN(plan::Workload workload, plan::workload_from_config(c));
  // Several ranks: the plan of one rank (its share of the rows; docs/dist.md says what it leaves out).
  workload.num_shards = world;
  LEANEMB_ASSIGN_OR_RETURN(plan::Prediction planned, plan::predict_memory(workload));
  MemorySystemOptions mso = c.memory;
  if (mso.device_budget_bytes > 0 && mso.reserve_bytes == 0) {
    // The reserved segment serves every request (include/leanemb/device_arena.h): reserve the
    // planned peak as the arena rounds it, or the whole budget when that is less.
    const size_t need = planned.device().budget_bytes;
    if (need > 0) {
      mso.reserve_bytes = std::min(need, mso.device_budget_bytes / 512 * 512);  // the arena's granule
      say("reserving " + format_bytes(mso.reserve_bytes) + " of device memory up front (plan: peak " +
          format_bytes(planned.device().peak_bytes) + " in " + planned.device().peak_phase + ", a budget of " +
          format_bytes(need) + " with the arena's rounding)");
    }
    if (need > mso.device_budget_bytes) {
      std::fprintf(stderr, "leanemb: warning: the plan needs a device budget of %s, over the budget of %s (leanemb plan "
                   "--config FILE proposes settings that fit)\n", format_bytes(need).c_str(),
                   format_bytes(mso.device_budget_bytes).c_str());
    }
  }
  LEANEMB_ASSIGN_OR_RETURN(auto mem, MemorySystem::create(mso));
  if (c.row_cache.enabled() && c.row_cache.store == "file") {
    std::error_code dir_ec;
    std::filesystem::create_directories(c.store_dir, dir_ec);
    if (dir_ec) return io_error("cannot create embedding.store_dir '" + c.store_dir + "': " + dir_ec.message());
  }
  // The checkpoint to resume from decides, with the world size, whether the tables are sharded:
  // with several ranks always; in one process only to resume a sharded checkpoint (over a
  // world of one rank, so that its rows reshard into one process).
  const std::string& resume_dir = resume_at.dir;
  const bool resume_sharded = resume_at.sharded;
  std::shared_ptr<dist::LocalWorld> solo_world;
  std::unique_ptr<dist::Communicator> solo_comm;
  model::CtrModelOptions mo = model_options(c);
  mo.grad_groups = c.grad_groups;
  if (world > 1) {
    mo.comm = comm;
  } else if (resume_sharded) {
    if (comm) {
      mo.comm = comm;
    } else {
      LEANEMB_ASSIGN_OR_RETURN(solo_world, dist::LocalWorld::create(1));
      LEANEMB_ASSIGN_OR_RETURN(solo_comm, solo_world->communicator(0));
      mo.comm = solo_comm.get();
    }
  }
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
      say("no checkpoint in " + ro.out_dir + "/checkpoints: starting from the beginning");
    } else {
      LEANEMB_RETURN_IF_ERROR(load_checkpoint(resume_dir, resume_sharded, c, ro.ckpt_env, lead, *model, *reader, scaler, &k));
      resumed_from = k.step;
      say("resumed from " + resume_dir + " (step " + std::to_string(k.step) + (resume_sharded ? ", sharded" : "") + ")");
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
  std::string last_ckpt = resume_dir;
  int64_t last_ckpt_step = resumed_from;  // a resumed step is not written again
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

  DivergenceMonitor divergence({c.max_consecutive_skipped, true});
  std::string diverged;  // "diverged at step N: ..." once the run diverged
  bool stopped = false;  // a signal (StopSignal) stopped the run after a step
  while (c.steps == 0 || k.step < c.steps) {
    if (ro.stop) {  // every rank stops after the same step
      LEANEMB_ASSIGN_OR_RETURN(stopped, ro.stop->agree_stop(comm));
      if (stopped) break;
    }
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
    if (auto why = divergence.observe(k.step, s.skipped, model->dense_parameters())) {
      diverged = *why;
      break;
    }
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
      LEANEMB_RETURN_IF_ERROR(write_checkpoint(ro.out_dir, c, *model, *reader, scaler, k, ro.ckpt_env, &last_ckpt));
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
  dist::ShardedTotals train_emb;
  uint64_t train_comm_bytes = 0;
  double train_comm_seconds = 0;
  if (dist::ShardedEmbeddingCollection* sh = model->sharded()) {
    train_emb = sh->totals();
    train_comm_bytes = sh->communicator().stats().bytes_sent;
    train_comm_seconds = sh->communicator().stats().seconds;
  }
  if (loss_n > 0) last_loss = loss_sum / static_cast<double>(loss_n);
  // A diverged run keeps its last finite checkpoint; a stopped one skips the final evaluation.
  if (k.step != last_ckpt_step && k.step > 0 && diverged.empty())
    LEANEMB_RETURN_IF_ERROR(write_checkpoint(ro.out_dir, c, *model, *reader, scaler, k, ro.ckpt_env, &last_ckpt));
  if (!c.eval_files.empty() && !stopped && diverged.empty()) {
    say("evaluating on " + c.eval_files[0] + (c.eval_files.size() > 1 ? " ..." : ""));
    LEANEMB_ASSIGN_OR_RETURN(last_eval, evaluate(c, *model));
    metrics << json{{"step", k.step}, {"eval", last_eval}, {"final", true}}.dump() << "\n";
  }
  line(true);

  json sum;
  sum["outcome"] = !diverged.empty() ? "diverged" : stopped ? "stopped" : "completed";
  if (!diverged.empty()) sum["diverged"] = {{"step", k.step}, {"message", diverged}};
  if (stopped) sum["stopped"] = {{"step", k.step}, {"signal", ro.stop->signal_name()}};
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
  if (dist::ShardedEmbeddingCollection* sh = model->sharded()) {
    const dist::Communicator& cm = sh->communicator();
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
