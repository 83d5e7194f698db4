// The disk a run of file-store tables needs over its course (plan/memory_model.h:
// predict_run_disk, log_run_disk; docs/plan.md "The disk over the run"). Split from
// memory_model.cc (the memory of one step) and access_model.cc (the id stream's model).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "leanemb/optimizer.h"
#include "plan/memory_model.h"
#include "tiered/sizes.h"

namespace leanemb::plan {

namespace {

// The places a linked checkpoint holds per written row (table/linked_tables.h: three varints, the
// row's gap, its file and its offset: 5-7 bytes), as checkpoint_bytes counts them.
constexpr double kPlaceBytes = 7.0;
// Checkpoints whose places are summed one by one; with more, a kept range's places are bounded
// by its count x the newest one's rows (the rows written only grow).
constexpr int64_t kMostSummedCheckpoints = 256;
// The last commits evaluated one by one (besides the last that keeps a whole old chain).
constexpr int64_t kLastCommits = 8;

// One table at one checkpoint: rows written, records appended, the log's files, and the bytes of
// the segments it has begun (slots), each counted whole.
struct TableAt {
  double rows = 0, records = 0, files = 0, slots = 0;
};

TableAt table_at(const LogTableRun& t, int64_t step, int64_t k) {
  TableAt a;
  a.rows = t.rows_written(step);
  // Each missed row is written once (evicted, or found cached by a checkpoint), and the rows each
  // earlier checkpoint wrote that the cache then updated again once more.
  a.records = std::max(a.rows, t.misses_per_step * static_cast<double>(step)) +
              static_cast<double>(std::max<int64_t>(k - 1, 0)) * t.rehits_per_checkpoint;
  const auto segments = tiered::log_max_segments(static_cast<int64_t>(std::ceil(a.rows)), t.segment_records);
  const double seg = static_cast<double>(t.segment_bytes);
  // A flush (each checkpoint's) writes the group being filled whole: the rest of it stays unused,
  // at most a group less one record's share of it.
  const double unused = static_cast<double>(k) * std::max(0.0, t.group_bytes - t.record_bytes);
  a.files = std::min(a.records * t.record_bytes + unused, static_cast<double>(segments) * seg);
  // Each checkpoint seals the segment being appended (link_rows: the next write begins a new one),
  // so its k checkpoints leave at most k segments part written; the log compacts once the
  // segments begun reach its bound less the reserve only compaction may take.
  a.slots = std::min(a.records * t.record_bytes + static_cast<double>(k) * seg,
                     static_cast<double>(segments - tiered::kLogReserveSegments) * seg);
  return a;
}

// What compaction freed between checkpoint c0 (`old`) and checkpoint k (`now`), `n` = k - c0
// checkpoints later: 0 while the log never compacted. In whole segments it freed the segments
// begun then + those begun since - the segments begun now, and those begun since hold the records
// appended, one part-written segment per checkpoint and the records compaction moved: freed <=
// excess + moved, with excess the first three less the segments begun now. A pass's victims are
// at most half live, so moved <= freed / 2: freed <= 2 x excess and moved <= excess. In bytes it
// freed the files then + the bytes appended since + the bytes moved - the files now: at most the
// files then + the appended + excess - the files now.
double freed_since(const LogTableRun& t, const TableAt& old, const TableAt& now, int64_t n) {
  const double appended = (now.records - old.records) * t.record_bytes +
                          static_cast<double>(n) * std::max(0.0, t.group_bytes - t.record_bytes);
  const double excess =
      std::max(0.0, old.slots + (now.records - old.records) * t.record_bytes + static_cast<double>(n) * static_cast<double>(t.segment_bytes) - now.slots);
  return std::max(0.0, std::min(2.0 * excess, old.files + appended + excess - now.files));
}

}  // namespace

int64_t checkpoint_count(const CheckpointSchedule& c) {
  if (c.every < 0 || c.run_steps <= 0) return 0;
  if (c.every == 0) return 1;
  return c.run_steps / c.every + (c.run_steps % c.every != 0 ? 1 : 0);
}

int64_t checkpoint_step(const CheckpointSchedule& c, int64_t k) {
  return c.every > 0 && k <= c.run_steps / c.every ? k * c.every : c.run_steps;
}

int64_t oldest_kept_checkpoint(const CheckpointSchedule& c, int64_t k) {
  // After checkpoint k - 1's commit the keep newest stay (with their chains); k joins them.
  const int64_t newest_old = c.keep <= 0 ? 1 : std::max<int64_t>(1, k - c.keep);
  const int64_t chain = c.incremental ? std::max(c.full_every, 1) : 1;
  return newest_old - (newest_old - 1) % chain;  // the root of its chain
}

RunDiskPrediction log_run_disk(const std::vector<LogTableRun>& tables, const CheckpointSchedule& c) {
  RunDiskPrediction out;
  out.known = true;
  const int64_t n = checkpoint_count(c);
  if (n == 0) {  // no checkpoint: the stores' files at the end
    out.peak_step = c.run_steps;
    for (const LogTableRun& t : tables) {
      const TableAt a = table_at(t, c.run_steps, 0);
      out.rows_written += a.rows;
      out.records += a.records;
      out.store_bytes += a.files;
    }
    out.peak_bytes = out.store_bytes;
    return out;
  }
  for (const LogTableRun& t : tables) out.linked = out.linked || t.linked;
  // The commits whose kept set can be the largest: the last ones, and the last at which the
  // keep-th newest before it ends a chain (its whole chain is kept: the oldest kept stays
  // longest). Between root changes everything only grows with k.
  const int64_t chain = c.incremental ? std::max(c.full_every, 1) : 1;
  std::vector<int64_t> commits;
  const int64_t chain_end = c.keep <= 0 ? 0 : c.keep + (n - c.keep) / chain * chain;
  if (chain_end >= 1 && chain_end < n - kLastCommits) commits.push_back(chain_end);
  for (int64_t k = std::max<int64_t>(1, n - kLastCommits); k <= n; ++k) commits.push_back(k);
  const int64_t lowest = oldest_kept_checkpoint(c, commits.front());
  // Each table at the checkpoints needed, computed once: every one from the lowest kept when
  // their places are summed, else the evaluated ones and the oldest each keeps.
  const bool sum_places = n - lowest < kMostSummedCheckpoints;
  std::map<int64_t, std::vector<TableAt>> at;
  auto need = [&](int64_t i) {
    auto& v = at[i];
    if (v.empty())
      for (const LogTableRun& t : tables) v.push_back(table_at(t, checkpoint_step(c, i), i));
  };
  for (int64_t k : commits) {
    need(k);
    need(oldest_kept_checkpoint(c, k));
  }
  if (sum_places)
    for (int64_t i = lowest; i <= n; ++i) need(i);
  for (int64_t k : commits) {
    const int64_t c0 = oldest_kept_checkpoint(c, k);
    RunDiskPrediction d = out;
    d.peak_step = checkpoint_step(c, k);
    d.kept_checkpoints = static_cast<int>(std::min<int64_t>(k - c0 + 1, std::numeric_limits<int>::max()));
    d.rows_written = d.records = d.store_bytes = d.pinned_bytes = d.checkpoint_bytes = 0;
    for (size_t t = 0; t < tables.size(); ++t) {
      const TableAt& now = at[k][t];
      const TableAt& old = at[c0][t];
      d.rows_written += now.rows;
      d.records += now.records;
      d.store_bytes += now.files;
      if (!tables[t].linked) continue;
      const double freed = freed_since(tables[t], old, now, k - c0);
      double older_files = 0, places = 0;
      if (sum_places) {
        for (int64_t j = c0; j < k; ++j) older_files += at[j][t].files;
        for (int64_t j = c0; j <= k; ++j) places += at[j][t].rows;
      } else {
        older_files = static_cast<double>(k - c0) * now.files;
        places = static_cast<double>(k - c0 + 1) * now.rows;
      }
      // Pinned: what compaction freed since c0, at most the files the older kept checkpoints link
      // (each one's files then).
      d.pinned_bytes += std::min(freed, older_files);
      d.checkpoint_bytes += kPlaceBytes * places;
    }
    d.peak_bytes = d.store_bytes + d.pinned_bytes + d.checkpoint_bytes;
    if (k == commits.front() || d.peak_bytes >= out.peak_bytes) out = d;
  }
  return out;
}

bool links_rows(const Workload& w, const TableSpec& t) {
  return w.link_store_rows && w.file_store && w.file_store_layout == FileStoreLayout::kLog && w.num_shards == 1 &&
         !t.dynamic.enabled && tiered::cache_applies(t.num_rows, w.cache_fraction, w.cache_min_rows);
}

namespace {

// The copies a checkpoint of `w`'s tables holds (those `pick` selects, none linked): the largest
// sparse base of the run when incremental, else a full checkpoint.
template <typename Pick>
Result<double> copy_checkpoint_bytes(const Workload& w, Pick pick) {
  Workload c = w;
  c.link_store_rows = false;
  c.tables.clear();
  for (const TableSpec& t : w.tables)
    if (pick(t)) c.tables.push_back(t);
  if (c.tables.empty()) return 0.0;
  LEANEMB_ASSIGN_OR_RETURN(const CheckpointBytes cb, checkpoint_bytes(c, 1));
  return (w.track_changed_rows && cb.sparse_base >= 0 ? cb.sparse_base : static_cast<double>(cb.full)) /
         static_cast<double>(w.num_shards);
}

// One log-store table of `w` over the run (this shard's share): LogTableRun's figures.
Result<LogTableRun> log_table_run(const Workload& w, const TableSpec& t) {
  LEANEMB_ASSIGN_OR_RETURN(const RowLayout l, make_row_layout(t.dim, w.row_dtype, w.row_optimizer));
  const int shards = w.num_shards;
  const int64_t rows = (t.num_rows + shards - 1) / shards;
  const size_t rb = l.stride_bytes, block = w.file_block_bytes;
  LogTableRun r;
  r.group_bytes = static_cast<double>(tiered::log_group_bytes(rb, block));
  r.record_bytes = r.group_bytes / static_cast<double>(tiered::log_group_records(rb, block));
  r.segment_bytes = tiered::log_segment_bytes(rows, rb, block);
  r.segment_records = tiered::log_segment_records(r.segment_bytes, rb, block);
  const int64_t cap = tiered::cache_capacity_rows(rows, w.cache_fraction);
  const auto step_ids = static_cast<int64_t>(std::llround(t.mean_ids_per_sample * static_cast<double>(w.batch_size)));
  const int64_t vocab = t.vocab > 0 ? t.vocab : t.num_rows;
  const LruSteadyState lru = lru_steady_state(step_ids, vocab, t.zipf, cap * shards);
  r.misses_per_step = lru.misses_per_step / shards;
  // Every row cached stays until the end when the ids fit the cache (no miss in the steady state):
  // each checkpoint then writes them all again. A checkpoint writes only the rows dirty then,
  // those updated since the one before: at most the distinct rows of `checkpoint_every` steps.
  r.rehits_per_checkpoint = lru.misses_per_step > 0
                                ? std::max(0.0, static_cast<double>(cap) - lru.cached_steps * r.misses_per_step)
                                : static_cast<double>(std::min<int64_t>(cap, std::min(vocab, t.num_rows)));
  if (w.checkpoint_every > 0) {
    const double ids = std::min(9e18, static_cast<double>(step_ids) * static_cast<double>(w.checkpoint_every));
    r.rehits_per_checkpoint =
        std::min(r.rehits_per_checkpoint, expected_unique_rows(static_cast<int64_t>(ids), vocab, t.zipf, t.num_rows) / shards);
  }
  const int64_t num_rows = t.num_rows;
  const double zipf = t.zipf;
  r.rows_written = [step_ids, vocab, zipf, num_rows, shards](int64_t step) {
    const double ids = std::min(9e18, static_cast<double>(step_ids) * static_cast<double>(step));
    return expected_unique_rows(static_cast<int64_t>(ids), vocab, zipf, num_rows) / shards;
  };
  r.linked = links_rows(w, t);
  return r;
}

}  // namespace

Status predict_run_disk(const Workload& w, Prediction* p) {
  p->run_disk = RunDiskPrediction{};
  if (!w.file_store || w.run_steps <= 0) return Status();
  auto stored = [&](const TableSpec& t) { return tiered::cache_applies(t.num_rows, w.cache_fraction, w.cache_min_rows); };
  for (const TableSpec& t : w.tables)
    if (stored(t) && t.vocab <= 0 && t.zipf <= 0) return Status();  // its rows over the run are unknown
  LEANEMB_ASSIGN_OR_RETURN(const double copies, copy_checkpoint_bytes(w, [](const TableSpec&) { return true; }));
  RunDiskPrediction& d = p->run_disk;
  if (w.file_store_layout != FileStoreLayout::kLog) {  // in place or mapped: their files over the run, a copy
    d.known = true;
    d.peak_step = w.run_steps;
    d.rows_written = p->run_rows_touched;
    d.store_bytes = static_cast<double>(p->disk_bytes_run);
    d.checkpoint_bytes = d.copy_checkpoint_bytes = copies;
    d.peak_bytes = d.store_bytes + d.checkpoint_bytes;
    return Status();
  }
  std::vector<LogTableRun> logs;
  for (const TableSpec& t : w.tables) {
    if (!stored(t)) continue;
    LEANEMB_ASSIGN_OR_RETURN(LogTableRun r, log_table_run(w, t));
    logs.push_back(std::move(r));
  }
  const CheckpointSchedule c{w.run_steps, w.checkpoint_every, w.keep_checkpoints, w.track_changed_rows, w.full_checkpoint_every};
  d = log_run_disk(logs, c);
  // The tables whose rows are copied (resident, dynamic, not linked): one copy, as before links.
  LEANEMB_ASSIGN_OR_RETURN(const double copied, copy_checkpoint_bytes(w, [&](const TableSpec& t) { return !links_rows(w, t); }));
  if (checkpoint_count(c) == 0) return Status();  // no checkpoint: the stores alone
  d.checkpoint_bytes += copied;
  d.peak_bytes += copied;
  d.copy_checkpoint_bytes = copies;
  return Status();
}

}  // namespace leanemb::plan
