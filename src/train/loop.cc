// The one step loop of `leanemb train` (train/task.h): output directory, memory plan and
// system, resume, steps, progress, metrics, checkpoints, divergence, graceful stop, summary.
#include <omp.h>
#include <map>
#include <sys/statvfs.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "dist/communicator.h"
#include "dist/sharded_checkpoint.h"
#include "tiered/sizes.h"
#include "train/divergence.h"
#include "train/metrics_log.h"
#include "leanemb/run_dir.h"
#include "train/stop_signal.h"
#include "train/task.h"
#include "leanemb/json.h"
#include "leanemb/progress.h"

namespace leanemb::train {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kCkptChunkRows = tiered::kCheckpointChunkRows;  // the planner's checkpoint phase

std::vector<uint8_t> to_bytes(const json& j) {
  const std::string s = dump_json(j);
  return {s.begin(), s.end()};
}

struct Counters {
  int64_t step = 0;
  int64_t samples = 0;
  int64_t skipped = 0;
};

// The counters of blob "train/state", checked: integers, >= 0, skipped <= step, and the step
// the checkpoint's manifest records. Errors: DataLoss naming the field.
Result<Counters> parse_train_state(std::span<const uint8_t> bytes, int64_t manifest_step, int64_t* collection_step) {
  const json st = parse_json_or_discarded(bytes.data(), bytes.size());
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

// What a run needs free on the file system of a directory.
struct DiskNeed {
  std::string dir, what;
  uint64_t bytes;
};

// Blocks the table files of an earlier run already hold under the store directory: reused as they
// are (in place), or removed when the store opens (a log's segment files, in <table>.rows.log/).
uint64_t held_store_bytes(const std::string& store_dir) {
  namespace fs = std::filesystem;
  uint64_t held = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(store_dir, ec)) {
    struct stat st {};
    if (e.is_regular_file(ec) && ::stat(e.path().c_str(), &st) == 0) held += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return held;
}

// The needs by the plan's disk over the run (plan::RunDiskPrediction, known): the stores' files at
// the run's peak, and the checkpoints: the files only kept checkpoints hold and their own bytes
// when the rows are linked (the store on out_dir's file system), else the copies.
std::vector<DiskNeed> run_disk_needs(const plan::RunDiskPrediction& d, uint64_t world, const std::string& store_dir,
                                     const std::string& out_dir) {
  auto all = [&](double b) { return static_cast<uint64_t>(std::max(0.0, b)) * world; };
  std::vector<DiskNeed> needs;
  char buf[400];
  if (!store_dir.empty() && d.store_bytes > 0) {
    const uint64_t files = all(d.store_bytes), held = held_store_bytes(store_dir);
    std::snprintf(buf, sizeof buf, "the file stores' files (%s at step %lld, the run's peak: %.3g rows written, %.3g records appended; %s already on disk)",
                  format_bytes(files).c_str(), static_cast<long long>(d.peak_step), d.rows_written * static_cast<double>(world),
                  d.records * static_cast<double>(world), format_bytes(held).c_str());
    needs.push_back({store_dir, buf, files > held ? files - held : 0});
  }
  struct stat a {}, b {};
  const bool one_fs = store_dir.empty() || ::stat(store_dir.c_str(), &a) != 0 || ::stat(out_dir.c_str(), &b) != 0 || a.st_dev == b.st_dev;
  if (d.linked && one_fs) {
    std::snprintf(buf, sizeof buf, "the %d checkpoints kept then (links to the stores' files: %s of segment files only they hold, %s of their own)",
                  d.kept_checkpoints, format_bytes(all(d.pinned_bytes)).c_str(), format_bytes(all(d.checkpoint_bytes)).c_str());
    needs.push_back({out_dir, buf, all(d.pinned_bytes) + all(d.checkpoint_bytes)});
  } else {
    const uint64_t copies = all(d.linked ? d.copy_checkpoint_bytes : d.checkpoint_bytes);
    needs.push_back({out_dir, "the largest checkpoint (its rows copied: " + format_bytes(copies) + ")", copies});
  }
  return needs;
}

// The needs without the run's disk (its steps or ids unknown): the file stores' table files at
// their planned size (plan's disk_bytes_run: the rows the run is expected to touch, when its steps
// and ids are known; else every row written, disk_bytes) less what the files already there hold,
// and one full checkpoint (the tables' rows; with incremental checkpoints the run's largest sparse
// base, when known).
std::vector<DiskNeed> table_disk_needs(const plan::Prediction& p, uint64_t world, const std::string& store_dir,
                                       const std::string& out_dir) {
  std::vector<DiskNeed> needs;
  if (p.disk_bytes > 0 && !store_dir.empty()) {
    const uint64_t held = held_store_bytes(store_dir);
    const bool run_known = p.run_rows_touched >= 0;
    const uint64_t files = static_cast<uint64_t>(run_known ? p.disk_bytes_run : p.disk_bytes) * world;
    char touched[64];
    std::snprintf(touched, sizeof touched, "%.3g", p.run_rows_touched * static_cast<double>(world));
    needs.push_back({store_dir,
                     "the file stores' table files (" + format_bytes(files) +
                         (run_known ? " for the " + std::string(touched) + " rows the run is expected to touch, " : " when every row is written, ") +
                         format_bytes(held) + " already on disk)",
                     files > held ? files - held : 0});
  }
  if (p.sparse_base_bytes >= 0) {
    const auto base = static_cast<uint64_t>(p.sparse_base_bytes) * world;
    needs.push_back({out_dir, "the largest checkpoint (a sparse base of the rows the run is expected to change: " + format_bytes(base) + ")", base});
  } else {
    needs.push_back({out_dir, "the first checkpoint (every row: " + format_bytes(p.table_bytes * world) + ")", p.table_bytes * world});
  }
  return needs;
}

// The disk space a run needs at least, against what the file systems of its store directory and
// its output directory have free (statvfs f_bavail): with the run's disk known
// (plan::predict_run_disk) its peak, else the table files and one checkpoint (table_disk_needs).
// One file system holding several needs needs their sum. Errors: IoError "not enough disk space"
// naming each part (train.disk_check = false skips the check).
Status check_disk_space(const plan::Prediction& p, int world, const std::string& store_dir, const std::string& out_dir) {
  const auto w = static_cast<uint64_t>(world);
  const std::vector<DiskNeed> needs =
      p.run_disk.known ? run_disk_needs(p.run_disk, w, store_dir, out_dir) : table_disk_needs(p, w, store_dir, out_dir);
  std::map<dev_t, std::pair<uint64_t, std::vector<const DiskNeed*>>> by_fs;  // free bytes, needs
  for (const DiskNeed& n : needs) {
    struct statvfs vs {};
    struct stat st {};
    if (::statvfs(n.dir.c_str(), &vs) != 0 || ::stat(n.dir.c_str(), &st) != 0) continue;  // unknown: no check
    auto& [free_bytes, list] = by_fs[st.st_dev];
    free_bytes = static_cast<uint64_t>(vs.f_bavail) * vs.f_frsize;
    list.push_back(&n);
  }
  for (const auto& [dev, fs_needs] : by_fs) {
    uint64_t total = 0;
    std::string parts;
    for (const DiskNeed* n : fs_needs.second) {
      total += n->bytes;
      parts += (parts.empty() ? "" : "; ") + n->what + " in " + n->dir;
    }
    if (total > fs_needs.first)
      return io_error("not enough disk space: this run needs at least " + format_bytes(total) + " but the file system holds " +
                      format_bytes(fs_needs.first) + " free (" + parts + "). Free space, move embedding.store_dir or --out, " +
                      "use fewer or smaller tables, or set train.disk_check = false if far fewer rows will be written");
  }
  return Status();
}

// Incremental checkpoints: the tables mark their changed rows from the start (a sharded run:
// each rank's local rows, for its shard chain); a no-op once tracking.
Status track_changes(const LoopSettings& ls, TrainTask& task) {
  if (!ls.incremental.enabled) return Status();
  EmbeddingCollection* local = task.tables().local_shard().local;
  return local != nullptr ? local->track_changes() : Status();
}

Status write_checkpoint(const std::string& out, const LoopSettings& ls, TrainTask& task, const Counters& k,
                        ckpt::Env* env, const std::function<void(int64_t, int64_t)>& progress, TablesSaveInfo* saved) {
  json tables = json::array();  // the collection's table order (the training digest follows it)
  for (const TableOptions& t : task.tables().options().tables) tables.push_back(t.name);
  const json st = {{"step", k.step},         {"samples", k.samples}, {"skipped_steps", k.skipped},
                   {"collection_step", task.tables().step()}, {"format", "leanemb-train-1"},
                   {"tables", tables},       {"task", ls.task}};
  Blobs blobs;
  blobs.emplace_back("train/state", to_bytes(st));
  blobs.emplace_back("train/config", encode_config_record(ls.record));
  LEANEMB_ASSIGN_OR_RETURN(Blobs more, task.checkpoint_blobs());
  for (auto& b : more) blobs.push_back(std::move(b));
  std::vector<CheckpointBlob> sb;
  for (const auto& [name, bytes] : blobs) sb.push_back({name, bytes});
  TablesSaveOptions so;
  so.keep_last = ls.keep_checkpoints;
  so.chunk_rows = kCkptChunkRows;
  so.env = env;
  so.progress = progress;
  so.incremental = ls.incremental;
  LEANEMB_RETURN_IF_ERROR(track_changes(ls, task));
  LEANEMB_ASSIGN_OR_RETURN(TablesSaveInfo info, task.tables().save(out, k.step, sb, so));
  for (const auto& warning : info.warnings) std::fprintf(stderr, "leanemb: warning: %s\n", warning.c_str());
  for (const auto& moved : info.set_aside) std::fprintf(stderr, "leanemb: warning: not a complete checkpoint, moved aside: %s\n", moved.c_str());
  *saved = std::move(info);
  return Status();
}

// Resumes from checkpoint `dir`, plain or sharded (global directory), at any world size. The
// saved configuration is compared with the run's first (train/config_diff.h).
Status load_checkpoint(const std::string& dir, const LoopSettings& ls, ckpt::Env* env, bool lead, TrainTask& task,
                       Counters* k) {
  auto ctx = [&](const Status& s) { return Status(s.code(), "resuming from " + dir + ": " + s.message()); };
  dist::Communicator* comm = task.tables().communicator();
  // With sharded tables every rank fails if any rank failed (dist::agree), so none goes on alone.
  auto agree = [&](const Status& mine) { return comm ? dist::agree(*comm, mine, "resuming from " + dir) : (mine.ok() ? mine : ctx(mine)); };
  auto opened = ckpt::CheckpointReader::open(dir, env);
  LEANEMB_RETURN_IF_ERROR(agree(opened.status()));
  const ckpt::CheckpointReader& r = *opened.value();
  if (r.find("train/config") != nullptr) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> cfg, r.read_blob("train/config"));
    LEANEMB_RETURN_IF_ERROR(check_resume_config(cfg, ls.record, dir, lead));
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
  // Embedding tables (either format, any world size; every rank fails if one does).
  TablesLoadOptions lo;
  lo.chunk_rows = kCkptChunkRows;
  lo.collection_step = collection_step;
  lo.env = env;
  if (Status s = track_changes(ls, task); !s.ok()) return ctx(s);
  if (auto loaded = task.tables().load(dir, lo); !loaded.ok()) return ctx(loaded.status());
  if (Status s = task.restore(r); !s.ok()) return ctx(s);
  *k = saved;
  return Status();
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

// Bytes that crossed tiers so far (MemorySystem::transfers: row cache fetches and write-backs,
// rows and state placed on the host) and, when tables have row caches or are dynamic, their
// counters summed over those tables: the "transfers", "row_cache" and "dynamic_rows" fields of
// metrics.jsonl lines and the summary (docs/train.md), the same for CTR and text models. Local to
// this rank (no collective).
void add_table_counters(const MemorySystem& mem, const EmbeddingTables& tables, json* j) {
  (*j)["transfers"] = parse_json(mem.transfers().to_json());
  RowCacheStats sum;
  bool cached = false;
  for (int t = 0; t < tables.num_tables(); ++t) {
    auto s = tables.cache_stats(t);
    if (!s.ok()) continue;  // a table without a cache
    cached = true;
    sum.bytes_read += s.value().bytes_read;
    sum.bytes_written += s.value().bytes_written;
    sum.hits += s.value().hits;
    sum.misses += s.value().misses;
    sum.evictions += s.value().evictions;
    sum.placed_rows += s.value().placed_rows;
    sum.prefetched_rows += s.value().prefetched_rows;
    sum.prefetches_taken += s.value().prefetches_taken;
    sum.fetch_seconds += s.value().fetch_seconds;
    sum.exposed_seconds += s.value().exposed_seconds;
    sum.store_gc_passes += s.value().store_gc_passes;
    sum.store_gc_rows_moved += s.value().store_gc_rows_moved;
  }
  if (cached)
    (*j)["row_cache"] = {{"fetched_bytes", sum.bytes_read}, {"written_back_bytes", sum.bytes_written}, {"hits", sum.hits},
                         {"misses", sum.misses}, {"evictions", sum.evictions}, {"prefetched_rows", sum.prefetched_rows},
                         {"prefetches_taken", sum.prefetches_taken}, {"fetch_seconds", sum.fetch_seconds},
                         {"exposed_seconds", sum.exposed_seconds}, {"placed_rows", sum.placed_rows},
                         {"store_gc_passes", sum.store_gc_passes}, {"store_gc_rows_moved", sum.store_gc_rows_moved}};
  DynamicTableStats dyn;
  bool dynamic = false;
  for (int t = 0; t < tables.num_tables(); ++t) {
    auto s = tables.dynamic_stats(t);
    if (!s.ok()) continue;  // a static table
    dynamic = true;
    dyn += s.value();
  }
  if (dynamic)
    (*j)["dynamic_rows"] = {{"live", dyn.live_rows},
                            {"admitted", dyn.admitted},
                            {"readmitted", dyn.readmitted},
                            {"rejected_min_count", dyn.rejected_min_count},
                            {"rejected_capacity", dyn.rejected_capacity},
                            {"evicted", dyn.evicted},
                            {"expired", dyn.expired},
                            {"idmap_bytes", dyn.held_bytes}};
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

// The memory plan: reserved up front when a device budget is set and memory.reserve is not.
void reserve_planned(const plan::Prediction& planned, MemorySystemOptions* mso, const std::function<void(const std::string&)>& say) {
  if (mso->device_budget_bytes == 0 || mso->reserve_bytes != 0) return;
  // The reserved segment serves every request (include/leanemb/device_arena.h): reserve the
  // planned peak as the arena rounds it, or the whole budget when that is less.
  const size_t need = planned.device().budget_bytes;
  if (need > 0) {
    mso->reserve_bytes = std::min(need, mso->device_budget_bytes / 512 * 512);  // the arena's granule
    say("reserving " + format_bytes(mso->reserve_bytes) + " of device memory up front (plan: peak " +
        format_bytes(planned.device().peak_bytes) + " in " + planned.device().peak_phase + ", a budget of " +
        format_bytes(need) + " with the arena's rounding)");
  }
  if (need > mso->device_budget_bytes) {
    std::fprintf(stderr, "leanemb: warning: the plan needs a device budget of %s, over the budget of %s (leanemb plan "
                 "--config FILE proposes settings that fit)\n", format_bytes(need).c_str(),
                 format_bytes(mso->device_budget_bytes).c_str());
  }
}

json dist_summary(const LoopSettings& ls, TrainTask& task, int64_t steps_run, size_t table_bytes, uint64_t train_comm_bytes,
                  double train_comm_seconds, const TablesCommTotals& train_emb) {
  const dist::Communicator* cmp = task.tables().communicator();
  if (cmp == nullptr) return {{"world_size", 1}, {"grad_groups", ls.grad_groups}};
  const dist::Communicator& cm = *cmp;
  const double n = static_cast<double>(std::max<int64_t>(1, steps_run));
  return {{"world_size", cm.size()}, {"rank", cm.rank()}, {"backend", std::string(cm.backend())},
          {"grad_groups", ls.grad_groups}, {"embedding_table_bytes", table_bytes},
          // rank 0's communicator over the whole run (steps, checkpoints, evaluation)
          {"bytes_sent", cm.stats().bytes_sent}, {"collective_seconds", cm.stats().seconds},
          // the training steps of this run: everything, then the embedding lookups and
          // updates, then of those the encoded rows and gradients (the payload dtypes' share)
          {"bytes_sent_per_step", static_cast<double>(train_comm_bytes) / n},
          {"collective_seconds_training", train_comm_seconds},
          {"embedding_bytes_sent_per_step", static_cast<double>(train_emb.bytes_sent) / n},
          {"embedding_payload_bytes_sent_per_step", static_cast<double>(train_emb.payload_bytes_sent) / n}};
}

// One run of the loop. run_loop calls its phases in order: open -> resume -> steps -> finish;
// they share the run's state here. Members are destroyed in reverse order: the task before the
// memory system it lives in, the run directory's lock last.
class Run {
 public:
  Run(const RunOptions& ro, LoopSettings ls) : ro_(ro), ls_(std::move(ls)), entered_(Clock::now()) {}

  // Settings, the output directory (locked), the memory plan and system, the task.
  Status open();
  // The checkpoint to continue from (--resume), the metrics log, the tables' sizes.
  Status resume();
  // Training steps until the step count, the end of the data, a stop signal or divergence.
  Status steps();
  // The final checkpoint and evaluation, then the summary.
  Result<json> finish();

 private:
  void say(const std::string& s) const {
    if (quiet_) return;
    if (tty_line_open_) std::fputc('\n', stderr);  // keep the progress line, print below it
    tty_line_open_ = false;
    std::fprintf(stderr, "%s%s\n", tag_.c_str(), s.c_str());
  }
  void log_metrics(const json& j) {
    if (metrics_) metrics_->append(dump_json(j), k_.step);
  }
  void progress_line(bool final_line) const;
  Status end_of_epoch(int64_t epoch);  // epoch (0-based) ended after step k_.step
  Status checkpoint();                 // of step k_.step, and its metrics.jsonl line
  // Runs step k_.step + 1 and everything after it (metrics, eval, checkpoint, progress).
  // False: the loop ends (no more data, or diverged).
  Result<bool> one_step(const std::set<int64_t>& inject);

  const RunOptions& ro_;
  LoopSettings ls_;
  const Clock::time_point entered_;  // the time to the first step counts from here
  dist::Communicator* comm_ = nullptr;
  int world_ = 1, rank_ = 0;
  bool lead_ = true;  // prints, writes metrics (every rank computes the same values)
  bool quiet_ = false;
  mutable bool tty_line_open_ = false;  // a terminal's progress line awaits its newline
  std::string tag_;
  std::unique_ptr<RunDir> run_dir_;
  ResumePoint resume_at_;
  plan::Prediction planned_;
  bool have_plan_ = false;
  MemorySystemOptions mso_;
  std::unique_ptr<MemorySystem> mem_;
  std::unique_ptr<TrainTask> task_;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0's metrics.jsonl: every write checked

  Counters k_;
  int64_t resumed_from_ = -1;
  size_t embedding_bytes_ = 0, table_bytes_ = 0;
  std::string last_ckpt_;
  int64_t last_ckpt_step_ = -1;  // a resumed step is not written again
  json last_eval_;
  double loss_sum_ = 0.0, last_loss_ = NAN;
  int64_t loss_n_ = 0, samples_run_ = 0;
  Clock::time_point t0_, last_print_;
  double startup_secs_ = 0, train_secs_ = 0;
  // Epochs (train.eval_every_epochs): an epoch ended when a batch of the next one arrives.
  int64_t steps_per_epoch_ = 0, cur_epoch_ = -1, epoch_start_step_ = 0;
  int64_t first_step_ = 0;  // a resumed run's rate and ETA count this process's steps
  std::unique_ptr<DivergenceMonitor> divergence_;
  std::string diverged_;  // "diverged at step N: ..." once the run diverged
  bool stopped_ = false;  // a signal (StopSignal) stopped the run after a step
  // The communicator's totals of the training steps alone (before the final checkpoint and
  // evaluation).
  TablesCommTotals train_emb_;
  uint64_t train_comm_bytes_ = 0;
  double train_comm_seconds_ = 0;
};

Status Run::open() {
  if (ro_.steps >= 0) ls_.steps = ro_.steps;
  if (ls_.threads > 0) omp_set_num_threads(ls_.threads);
  comm_ = ro_.comm;
  world_ = comm_ ? comm_->size() : 1;
  rank_ = comm_ ? comm_->rank() : 0;
  lead_ = rank_ == 0;
  quiet_ = ro_.quiet || !lead_;
  tag_ = "[" + ls_.task + "] ";
  if (ls_.grad_groups == 0) ls_.grad_groups = world_;
  if (ls_.grad_groups % world_ != 0)
    return invalid_argument(ls_.origin + ": dist.grad_groups (" + std::to_string(ls_.grad_groups) +
                            ") must be a multiple of the number of ranks (" + std::to_string(world_) + ")");
  // The output directory, locked for the run, and where the run starts (leanemb/run_dir.h).
  LEANEMB_ASSIGN_OR_RETURN(resume_at_, open_run_dir(run_dir_options(ro_), comm_, &run_dir_));
  // A run never goes back: a step count below the checkpoint's leaves nothing to do, and saying
  // "steps 21-20 in this run" with exit 0 hid that the flag was wrong (docs/train.md "Resuming").
  if (ls_.steps > 0 && resume_at_.step > ls_.steps)
    return invalid_argument("--resume: the checkpoint " + resume_at_.dir + " is at step " + std::to_string(resume_at_.step) +
                            ", " + (ro_.steps >= 0 ? "--steps " : "train.steps = ") + std::to_string(ls_.steps) +
                            " leaves nothing to train (a run does not go back): give more steps than " +
                            std::to_string(resume_at_.step) + " to continue, or --overwrite to train again from step 0");
  if (ls_.prepare) LEANEMB_RETURN_IF_ERROR(ls_.prepare(comm_, lead_));

  // The memory plan of this run (src/plan): one rank's share at this world size.
  have_plan_ = static_cast<bool>(ls_.plan);
  if (have_plan_) {
    LEANEMB_ASSIGN_OR_RETURN(planned_, ls_.plan(world_));
  }
  if (have_plan_ && lead_ && ls_.disk_check) LEANEMB_RETURN_IF_ERROR(check_disk_space(planned_, world_, ls_.store_dir, ro_.out_dir));
  mso_ = ls_.memory;
  if (have_plan_) reserve_planned(planned_, &mso_, [this](const std::string& s) { say(s); });
  LEANEMB_ASSIGN_OR_RETURN(mem_, MemorySystem::create(mso_));
  if (!ls_.store_dir.empty()) {
    std::error_code dir_ec;
    std::filesystem::create_directories(ls_.store_dir, dir_ec);
    if (dir_ec) return io_error("cannot create embedding.store_dir '" + ls_.store_dir + "': " + dir_ec.message());
  }
  TaskContext tc;
  tc.memory = mem_.get();
  tc.comm = world_ > 1 ? comm_ : nullptr;
  tc.say = [this](const std::string& s) { say(s); };
  tc.quiet = quiet_;
  LEANEMB_ASSIGN_OR_RETURN(task_, ls_.make_task(tc));
  return Status();
}

Status Run::resume() {
  const std::string& resume_dir = resume_at_.dir;  // plain or sharded: either loads at any world size
  // Before any row changes: the first checkpoint of a fresh run can then be a sparse base.
  LEANEMB_RETURN_IF_ERROR(track_changes(ls_, *task_));
  if (ro_.resume) {
    if (resume_dir.empty()) {
      say("no checkpoint in " + ro_.out_dir + "/checkpoints: starting from the beginning");
    } else {
      LEANEMB_RETURN_IF_ERROR(load_checkpoint(resume_dir, ls_, ro_.ckpt_env, lead_, *task_, &k_));
      resumed_from_ = k_.step;
      say("resumed from " + resume_dir + " (step " + std::to_string(k_.step) + ")");
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(ro_.out_dir, ec);
  if (ec) return io_error("cannot create output directory '" + ro_.out_dir + "': " + ec.message());
  // (no_silent_write_errors, train/metrics_log.h)
  if (lead_) {
    LEANEMB_ASSIGN_OR_RETURN(metrics_, MetricsLog::open(ro_.log_env, ro_.out_dir + "/metrics.jsonl"));
  }
  for (const MemoryStats& s : mem_->stats())
    embedding_bytes_ += s[Category::kWeights].current_bytes + s[Category::kOptimizerState].current_bytes;
  // Dense parameters are in kWeights too; report the embedding tables alone as well.
  const EmbeddingTables& tables = task_->tables();
  for (int t = 0; t < tables.num_tables(); ++t)  // this rank's rows
    table_bytes_ += tables.layout(t).stride_bytes * static_cast<size_t>(tables.local_num_rows(t));
  last_ckpt_ = resume_dir;
  last_ckpt_step_ = resumed_from_;
  return Status();
}

void Run::progress_line(bool final_line) const {
  const double secs = std::chrono::duration<double>(Clock::now() - t0_).count();
  const auto st = mem_->stats();
  char buf[320];
  std::snprintf(buf, sizeof buf, "step %lld | %.1fk %s/s | loss %.4f | eval %s | device (cpu) %s host %s",
                static_cast<long long>(k_.step), secs > 0 ? samples_run_ / secs / 1e3 : 0.0, ls_.progress_unit.c_str(),
                last_loss_, last_eval_.is_null() ? "-" : task_->eval_headline(last_eval_).c_str(),
                format_bytes(st[0].current_bytes).c_str(), format_bytes(st[1].current_bytes).c_str());
  if (quiet_) return;
  if (!ro_.progress_tty) {
    std::fprintf(stderr, "%s%s\n", tag_.c_str(), buf);
    return;
  }
  // A terminal: one line rewritten in place, with the share of the steps done, the rate and the
  // ETA (core/progress.h); the periodic lines above stay as they are everywhere else.
  const int64_t total =
      ls_.steps > 0 ? ls_.steps : steps_per_epoch_ > 0 && ls_.epochs > 0 ? steps_per_epoch_ * ls_.epochs : 0;
  std::string t = "step " + std::to_string(k_.step);
  if (total > 0) {
    char pct[48];
    std::snprintf(pct, sizeof pct, "/%lld (%d%%)", static_cast<long long>(total),
                  static_cast<int>(std::min<int64_t>(100, k_.step * 100 / total)));
    t += pct;
  }
  t += " | " + format_rate(secs > 0 ? samples_run_ / secs : 0.0, ls_.progress_unit);
  if (final_line) t += " | done in " + format_duration(secs);
  else if (total > 0) t += " | ETA " + format_duration(eta_seconds(k_.step - first_step_, total - first_step_, secs));
  const char* rest = std::strstr(buf, " | loss ");  // loss, eval, memory: as in the periodic line
  if (rest) t += rest;
  std::fputs(tty_line(tag_ + t, final_line).c_str(), stderr);
  tty_line_open_ = !final_line;
}

Status Run::end_of_epoch(int64_t epoch) {
  if (steps_per_epoch_ <= 0 && epoch_start_step_ == 0 && epoch == 0) {
    steps_per_epoch_ = k_.step;
    say("epoch 1 ended after " + std::to_string(k_.step) + " steps: " + std::to_string(k_.step) + " steps per epoch");
  }
  if (ls_.eval_every_epochs > 0 && (epoch + 1) % ls_.eval_every_epochs == 0 && task_->has_eval()) {
    LEANEMB_ASSIGN_OR_RETURN(last_eval_, task_->evaluate());
    log_metrics(json{{"step", k_.step}, {"epoch", epoch + 1}, {"eval", last_eval_}});
    say("epoch " + std::to_string(epoch + 1) + " (step " + std::to_string(k_.step) + "): eval " +
        task_->eval_headline(last_eval_));
  }
  return Status();
}

Status Run::checkpoint() {
  const auto c0 = Clock::now();
  // On a terminal: the rows written so far, with rate and ETA, on the progress line (the next
  // training line rewrites it).
  std::unique_ptr<TtyProgress> shown;
  std::function<void(int64_t, int64_t)> progress;
  if (ro_.progress_tty && !quiet_) {
    progress = [&](int64_t done, int64_t total) {
      if (!shown) shown = std::make_unique<TtyProgress>(stderr, tag_ + "checkpoint step " + std::to_string(k_.step), "rows",
                                                        static_cast<double>(total));
      shown->update(static_cast<double>(done));
      tty_line_open_ = tty_line_open_ || shown->printed();
    };
  }
  TablesSaveInfo saved;
  LEANEMB_RETURN_IF_ERROR(write_checkpoint(ro_.out_dir, ls_, *task_, k_, ro_.ckpt_env, progress, &saved));
  last_ckpt_ = saved.path;
  // checkpoint_rows / checkpoint_bytes: the embedding rows and the entries' bytes written;
  // checkpoint_extends: the step an incremental checkpoint extends (absent when full);
  // checkpoint_sparse_base: a full one that holds only the rows changed since the initial rows;
  // checkpoint_linked_rows / _tables: rows of tables kept by links (train.link_store_rows: every
  // row written to their stores, not copied).
  json line = {{"step", k_.step}, {"checkpoint", last_ckpt_}, {"checkpoint_seconds", std::chrono::duration<double>(Clock::now() - c0).count()},
               {"checkpoint_rows", saved.rows_written}, {"checkpoint_bytes", saved.entry_bytes}};
  if (saved.linked_tables > 0) {
    line["checkpoint_linked_rows"] = saved.rows_linked;
    line["checkpoint_linked_tables"] = saved.linked_tables;
  }
  if (saved.parent_step >= 0) line["checkpoint_extends"] = saved.parent_step;
  if (saved.sparse_base) line["checkpoint_sparse_base"] = true;
  log_metrics(line);
  if (metrics_) metrics_->sync(k_.step);  // the log is durable up to the checkpoint it names
  return Status();
}

Status Run::steps() {
  t0_ = Clock::now();
  last_print_ = t0_;
  // Start-up: the plan, the memory system, the task (its data and tables: a file store's table
  // file is created sparse, so this does not grow with the rows) and the resume.
  startup_secs_ = std::chrono::duration<double>(t0_ - entered_).count();
  {
    char buf[64];
    std::snprintf(buf, sizeof buf, "first step after %.2f s of start-up", startup_secs_);
    say(buf);
  }
  const std::set<int64_t> inject(ls_.inject_nonfinite_steps.begin(), ls_.inject_nonfinite_steps.end());
  steps_per_epoch_ = task_->steps_per_epoch();
  epoch_start_step_ = k_.step;
  first_step_ = k_.step;
  if (steps_per_epoch_ > 0) say(std::to_string(steps_per_epoch_) + " steps per epoch");
  DivergenceOptions dopt;
  dopt.max_consecutive_skipped = ls_.max_consecutive_skipped;
  dopt.max_loss_growth = ls_.max_loss_growth;
  divergence_ = std::make_unique<DivergenceMonitor>(dopt);
  while (ls_.steps == 0 || k_.step < ls_.steps) {
    if (ro_.stop) {  // every rank stops after the same step
      LEANEMB_ASSIGN_OR_RETURN(stopped_, ro_.stop->agree_stop(comm_));
      if (stopped_) break;
    }
    LEANEMB_ASSIGN_OR_RETURN(const bool go_on, one_step(inject));
    if (!go_on) break;
  }
  train_secs_ = std::chrono::duration<double>(Clock::now() - t0_).count();
  train_emb_ = task_->tables().comm_totals();
  if (const dist::Communicator* cm = task_->tables().communicator()) {
    train_comm_bytes_ = cm->stats().bytes_sent;
    train_comm_seconds_ = cm->stats().seconds;
  }
  return Status();
}

Result<bool> Run::one_step(const std::set<int64_t>& inject) {
  LEANEMB_ASSIGN_OR_RETURN(bool more, task_->next_batch());
  if (!more) return false;
  if (const int64_t e = task_->batch_epoch(); e >= 0) {
    if (cur_epoch_ >= 0 && e > cur_epoch_) {
      LEANEMB_RETURN_IF_ERROR(end_of_epoch(cur_epoch_));
      if (auto why = divergence_->observe_eval(k_.step, last_eval_)) {
        diverged_ = *why;
        return false;
      }
    }
    cur_epoch_ = e;
  }
  const int64_t step_no = k_.step + 1;
  LEANEMB_ASSIGN_OR_RETURN(TaskStep s, task_->train_step(step_no, inject.count(step_no) > 0));
  k_.step = step_no;
  k_.samples += s.samples;
  samples_run_ += s.samples;
  if (s.skipped) ++k_.skipped;
  loss_sum_ += s.loss;
  ++loss_n_;
  if (auto why = divergence_->observe(k_.step, s.skipped, s.loss, task_->dense_parameters())) {
    diverged_ = *why;
    return false;
  }
  if (k_.step % ls_.log_every == 0) {
    last_loss_ = loss_sum_ / static_cast<double>(loss_n_);
    const double secs = std::chrono::duration<double>(Clock::now() - t0_).count();
    json m = {{"step", k_.step}, {"loss", last_loss_}, {"samples_per_s", secs > 0 ? samples_run_ / secs : 0.0},
              {"loss_scale", task_->loss_scale()}, {"skipped_steps", k_.skipped}};
    add_table_counters(*mem_, task_->tables(), &m);
    log_metrics(m);
    loss_sum_ = 0;
    loss_n_ = 0;
  }
  if (ls_.eval_every > 0 && k_.step % ls_.eval_every == 0 && task_->has_eval()) {
    LEANEMB_ASSIGN_OR_RETURN(last_eval_, task_->evaluate());
    log_metrics(json{{"step", k_.step}, {"eval", last_eval_}});
    if (auto why = divergence_->observe_eval(k_.step, last_eval_)) {
      diverged_ = *why;
      return false;
    }
  }
  if (ls_.checkpoint_every > 0 && k_.step % ls_.checkpoint_every == 0) {
    LEANEMB_RETURN_IF_ERROR(checkpoint());
    last_ckpt_step_ = k_.step;
  }
  if (ro_.after_step) ro_.after_step(k_.step);
  if (rank_ == ls_.inject_exit_rank && k_.step == ls_.inject_exit_step) {
    std::fprintf(stderr, "leanemb: rank %d: dist.inject_exit_step: ending the process after step %lld (a simulated crash)\n",
                 rank_, static_cast<long long>(k_.step));
    std::_Exit(9);
  }
  const auto now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (ro_.progress_tty ? since > 0.25 : (k_.step % ls_.log_every == 0 || (ls_.log_every_s > 0 && since >= ls_.log_every_s))) {
    last_print_ = now;
    progress_line(false);
  }
  return true;
}

Result<json> Run::finish() {
  if (loss_n_ > 0) last_loss_ = loss_sum_ / static_cast<double>(loss_n_);
  // A diverged run keeps its last finite checkpoint; a stopped one skips the final evaluation.
  if (k_.step != last_ckpt_step_ && k_.step > 0 && diverged_.empty() && ls_.checkpoint_every >= 0)
    LEANEMB_RETURN_IF_ERROR(checkpoint());
  if (task_->has_eval() && !stopped_ && diverged_.empty()) {
    say("evaluating");
    LEANEMB_ASSIGN_OR_RETURN(last_eval_, task_->evaluate());
    log_metrics(json{{"step", k_.step}, {"eval", last_eval_}, {"final", true}});
    // The final checkpoint is written by now (its parameters are finite; a later run may
    // resume it with a lower learning rate); the run still ends "diverged", exit 1.
    if (auto why = divergence_->observe_eval(k_.step, last_eval_)) diverged_ = *why;
  }
  progress_line(true);
  if (metrics_) (void)metrics_->close(k_.step);  // a failure is in metrics_->summary(), below

  json sum;
  sum["task"] = ls_.task;
  sum["outcome"] = !diverged_.empty() ? "diverged" : stopped_ ? "stopped" : "completed";
  if (!diverged_.empty()) sum["diverged"] = {{"step", k_.step}, {"message", diverged_}};
  if (stopped_) sum["stopped"] = {{"step", k_.step}, {"signal", ro_.stop->signal_name()}};
  sum["steps"] = k_.step;
  sum["samples"] = k_.samples;
  sum["samples_this_run"] = samples_run_;
  sum["time_to_first_step_s"] = startup_secs_;
  sum["train_seconds"] = train_secs_;
  sum["samples_per_s"] = train_secs_ > 0 ? samples_run_ / train_secs_ : 0.0;
  sum["loss"] = std::isfinite(last_loss_) ? json(last_loss_) : json(nullptr);
  sum["eval"] = last_eval_.is_null() ? json(nullptr) : last_eval_;
  sum["skipped_steps"] = k_.skipped;
  sum["steps_per_epoch"] = steps_per_epoch_ > 0 ? json(steps_per_epoch_) : json(nullptr);
  sum["loss_scale"] = task_->loss_scale();
  sum["resumed_from_step"] = resumed_from_ >= 0 ? json(resumed_from_) : json(nullptr);
  sum["memory"] = memory_peaks(*mem_);
  sum["memory_detail"] = parse_json(mem_->to_json());
  add_table_counters(*mem_, task_->tables(), &sum);
  sum["embedding_table_bytes"] = table_bytes_;
  sum["weights_and_state_bytes"] = embedding_bytes_;
  sum["checkpoint"] = last_ckpt_;
  sum["checkpoints_enabled"] = ls_.checkpoint_every >= 0;
  // A run whose metrics.jsonl lost lines says so (leanemb train then exits 4).
  if (metrics_ && metrics_->lost()) sum["metrics_lost"] = metrics_->summary();
  const int64_t steps_run = k_.step - std::max<int64_t>(0, resumed_from_);
  sum["dist"] = dist_summary(ls_, *task_, steps_run, table_bytes_, train_comm_bytes_, train_comm_seconds_, train_emb_);
  if (task_->tables().communicator()) {  // the largest rank's table bytes
    int64_t most[1] = {static_cast<int64_t>(table_bytes_)};
    LEANEMB_RETURN_IF_ERROR(comm_->all_reduce(std::span<int64_t>(most, 1), dist::ReduceOp::kMax));
    sum["dist"]["embedding_table_bytes_max_rank"] = most[0];
  }
  task_->add_summary(&sum);
  sum["config"]["origin"] = ls_.origin;
  sum["config"]["placement"] = mem_->placement().to_string();
  sum["memory_summary_text"] = mem_->memory_summary();
  if (have_plan_) sum["plan"] = planned_vs_measured(planned_, *mem_);
  sum["reserved_bytes"] = mso_.reserve_bytes;
  task_.reset();  // before the memory system it lives in
  return sum;
}

}  // namespace

Result<json> run_loop(const RunOptions& ro, LoopSettings ls) {
  Run run(ro, std::move(ls));
  LEANEMB_RETURN_IF_ERROR(run.open());
  LEANEMB_RETURN_IF_ERROR(run.resume());
  LEANEMB_RETURN_IF_ERROR(run.steps());
  return run.finish();
}

}  // namespace leanemb::train
