// The memory plan of a set of tables: every byte their training step allocates, per tier
// (device, host) and category (weights, optimizer state, gradients, ...), predicted before
// anything is allocated, from the same size functions the allocating code calls (src/plan's
// memory model; docs/plan.md). leanemb.plan() in Python is this function.
//
//   plan::TablesWorkload w;
//   w.tables.push_back({.name = "user", .num_rows = 1000000, .dim = 64});
//   w.batch_size = 4096;
//   auto p = plan::predict_tables_memory(w, plan::Estimate::kWorstCase);
//   p->device().peak_bytes, p->table_bytes, ...
//
// Only the tables and their lookups are counted (the model downstream of the embedding is not:
// its output and the output's gradient are). The full model of `leanemb train` (dense layers,
// shards, micro-batches, the planner's search) is the CLI's `leanemb plan`.
//
// Thread safety: plain functions of their inputs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "leanemb/dtype.h"
#include "leanemb/memory.h"
#include "leanemb/memory_system.h"
#include "leanemb/optimizer.h"
#include "leanemb/status.h"
#include "leanemb/table_options.h"

namespace leanemb::plan {

// One table and the feature that looks it up (one feature per table).
struct TableSpec {
  std::string name;
  int64_t num_rows = 0;
  int64_t dim = 0;
  PoolingMode pooling = PoolingMode::kSum;
  int64_t max_ids_per_sample = 1;      // longest bag (pooled) or the sequence length (kNone)
  double mean_ids_per_sample = 1.0;    // mean ids per sample (what sizes a typical step)
  double expected_unique_rows = -1.0;  // distinct rows per step; < 0: unknown (worst case used)
  double zipf = 0.0;                   // id skew (0 = uniform), for the cache hit rate
  int64_t vocab = 0;                   // distinct ids drawn (0: num_rows), for the cache's misses
  TableDynamicOptions dynamic;         // enabled: a dynamic vocabulary of num_rows rows (docs/tiered.md)
};

// How step sizes are chosen: kExpected uses mean ids per sample and the expected unique rows
// (what a run measures); kWorstCase uses the longest bags and unique = min(ids, rows) (what a
// budget must hold).
enum class Estimate : uint8_t { kExpected, kWorstCase };

using CategoryBytesArray = std::array<size_t, kNumCategories>;

struct TierPrediction {
  CategoryBytesArray peak{};  // per category, the largest bytes over the phases
  size_t peak_bytes = 0;      // the largest sum over the phases (bytes requested, as MemoryStats counts)
  // The budget that holds the run: device tier, the largest sum over the phases of the
  // allocations rounded as the DeviceArena rounds them (512 bytes) plus alignment headroom, so
  // that a device budget (and reserve) of budget_bytes runs; host tier, peak_bytes.
  size_t budget_bytes = 0;
  std::string peak_phase;     // where the tier's peak happens
  size_t small_request_bytes = 0;  // bytes of requests <= 1 MiB at the peak (arena small pool)
};

// The disk a run of file-store tables needs at its peak (plan::predict_run_disk; docs/plan.md,
// "The disk over the run"): at the commit of a checkpoint, before keep_checkpoints removes the
// oldest, the stores' files plus the segment files only kept checkpoints still hold plus the
// kept checkpoints' own bytes. Per device (shard); `leanemb train`'s train.disk_check needs it
// free.
struct RunDiskPrediction {
  bool known = false;         // the run's steps and every file-store table's ids are known
  bool linked = false;        // checkpoints keep the stores' rows by hard links (train.link_store_rows)
  int64_t peak_step = 0;      // the step of the checkpoint at whose commit the disk peaks (the run's end without checkpoints)
  int kept_checkpoints = 0;   // checkpoints on disk then (the chains a kept one needs included)
  double rows_written = 0;    // rows in the stores then (the rows touched so far)
  double records = 0;         // records the logs appended by then (rows written again when evicted or checkpointed)
  // The stores' files then: a log holds every record appended (live or not) until its bound
  // (ceil(2 x live / records per segment) + 4 segments) makes it compact; in place, the blocks
  // the rows touched fall in; mapped, the whole table.
  double store_bytes = 0;
  // Linked: segment files compaction freed since the oldest kept checkpoint that kept checkpoints
  // still link (at most what compaction freed in that time; 0 while the logs never compact).
  double pinned_bytes = 0;
  // The kept checkpoints' own bytes: a linked table's places (7 bytes a written row in each kept
  // checkpoint), plus, for the tables whose rows are copied, the largest sparse base (incremental)
  // or a full checkpoint.
  double checkpoint_bytes = 0;
  double peak_bytes = 0;      // store_bytes + pinned_bytes + checkpoint_bytes
  // What the checkpoints need when the rows cannot be linked after all (the store on another file
  // system than the checkpoints): the largest sparse base (incremental) or a full checkpoint.
  double copy_checkpoint_bytes = 0;
};

struct Prediction {
  std::array<TierPrediction, 2> tier;  // device, host
  const TierPrediction& device() const { return tier[0]; }
  const TierPrediction& host() const { return tier[1]; }
  // Bytes that cross the host link per step (both directions), and all-to-all bytes per device.
  double host_link_bytes_per_step = 0;
  double comm_bytes_per_step = 0;
  double device_bytes_moved_per_step = 0;  // HBM traffic estimate (rows, activations, grads)
  double cache_hit_rate = 1.0;
  int64_t ids_per_step = 0;      // all tables
  int64_t unique_per_step = 0;   // all tables
  size_t table_bytes = 0;        // rows of every table (weights + state), all tiers
  // Cached tables, per device, in the cache's steady state (the LRU model lru_misses_per_step
  // over the step's ids, capacity and the table's zipf): the misses; of them, the rows touched
  // for the first time, which are initialized, not read (first_touches_per_step over the run's
  // second half; 0 when the run's length or the ids' vocabulary and skew are unknown); the rows
  // the store reads (the other misses); and the rows it writes back (one per miss: every fetched
  // row is updated, so every victim is dirty).
  double store_misses_per_step = 0;
  double store_first_touches_per_step = 0;
  double store_rows_read_per_step = 0;
  double store_rows_written_per_step = 0;
  // File-store tables: the table files' sizes (the most they can hold on disk: in place, num_rows
  // x row bytes rounded up to the block; a log, log_store_max_file_bytes), and the I/O requests
  // per step at most (in place: a read per miss, a write per write-back and the read-modify-write
  // read before it, docs/tiered.md "Writes"; a log: a read per miss and the write-backs' bytes in
  // 1 MiB appends).
  size_t disk_bytes = 0;
  double store_requests_per_step = 0;
  // Over the whole run (Workload::run_steps and the file-store tables' vocabulary and skew known;
  // else -1 and disk_bytes): the expected distinct rows the file-store tables' steps touch (each
  // written to the store once it is evicted), and their files' bytes then (a log: those records,
  // with the stale copies its bound allows; in place: the blocks they fall in).
  double run_rows_touched = -1;
  size_t disk_bytes_run = 0;
  // The largest sparse base of the run (train.incremental_checkpoints, docs/formats/checkpoint.md
  // "Chains": the rows changed since the initial rows, with their row numbers), every table; -1
  // when the run's steps or a table's ids are unknown.
  double sparse_base_bytes = -1;
  // The disk at the run's peak: filled by plan::predict_run_disk (`leanemb plan`, `leanemb
  // train`'s disk check), not by the predict functions.
  RunDiskPrediction run_disk;
};

// The tables of an embedding-only workload and their row format (one format for every table).
struct TablesWorkload {
  std::vector<TableSpec> tables;   // one feature per table
  int64_t batch_size = 1024;       // samples per step
  DType row_dtype = DType::kF32;   // a DType of DTypeUse::kRows
  OptimizerOptions row_optimizer;  // kind and state dtype (learning rates do not change bytes)
  Placement placement;             // the tier of each category (empty: the default placement)
  double cache_fraction = 1.0;     // < 1: rows live in a host row store behind a device cache
  int num_threads = 0;             // CPU threads of the fused update (0 = OpenMP's default)
};

// Validates and predicts. Errors: InvalidArgument (no tables, a bad dim, row count or batch
// size, an optimizer the row dtype cannot train, a placement the engine refuses).
Result<Prediction> predict_tables_memory(const TablesWorkload& w, Estimate estimate = Estimate::kExpected);

}  // namespace leanemb::plan
