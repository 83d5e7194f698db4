// MemoryModel: every byte a training run allocates, per tier x category, predicted before the run
// from the same size functions the allocating code calls:
//
//   embedding rows         make_row_layout (fat rows), split_weight_stride / split_state_stride
//   dedup / staging / grad table/step_sizes.h, kernels::reduce_and_update_scratch_floats
//   CTR model buffers      model::ctr_buffer_floats
//   dense layers           nn::mlp_call_sizes, nn::mlp_parameter_floats, nn::dense_state_arrays,
//                          nn::interaction_output_dim, nn::interaction_scratch_floats
//   row cache (issue 4)    tiered::cache_capacity_rows, tiered::row_cache_sizes
//
// The model replays one training step as a list of phases (emb forward, bottom MLP forward, ...,
// embedding update); each phase lists the allocations alive during it, persistent ones (tables,
// dense parameters, buffers kept between steps) included. The peak of a category is its largest
// bytes over the phases; the peak of a tier is the largest sum over the phases (not the sum of
// category peaks), as MemoryStats measures them. The steady state is modeled (step >= 2: the
// collection's step buffers, allocated in step 1's update, are alive during the next forward).
//
// Three workloads: kCtr (the DLRM model `leanemb train` runs; predictions are checked against
// measurement in memory_model_test.cc), kText (the text model of task = "text" configs: the
// workload comes from src/text's text_workload, checked in text_test.cc) and kEmbeddingOnly (tables and features alone, e.g. the
// seed's vocab x dim table with a sequence output; the model downstream of the embedding is not
// counted: its output and the output's gradient are). Shards divide the rows (row-wise) and add
// the sharded collection's communication buffers (dist/comm_sizes.h, the function that the
// collection reserves them with). A row cache (cache_fraction < 1) keeps the rows in a row store (docs/tiered.md).
//
// The types a prediction is made of (TableSpec, Estimate, TierPrediction, Prediction) and the
// embedding-only entry point (predict_tables_memory) are public: leanemb/plan.h.
//
// Thread safety: plain functions of their inputs.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "amp/precision.h"
#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "leanemb/optimizer.h"
#include "leanemb/plan.h"
#include "leanemb/table_options.h"
#include "leanemb/tables.h"
#include "leanemb/status.h"
#include "nn/dense_optimizer.h"
#include "nn/interaction.h"

namespace leanemb::plan {

enum class WorkloadKind : uint8_t { kCtr, kEmbeddingOnly, kText };

struct Workload {
  WorkloadKind kind = WorkloadKind::kCtr;
  std::vector<TableSpec> tables;
  int64_t batch_size = 1024;
  int micro_batches = 1;
  // kCtr: the dense part of the DLRM model (docs/train.md [model], [dense]).
  int num_dense = 13;
  std::vector<int64_t> bottom_mlp = {64, 16};
  std::vector<int64_t> top_mlp = {64, 32};
  nn::InteractionKind interaction = nn::InteractionKind::kDot;
  nn::DenseOptimizerKind dense_optimizer = nn::DenseOptimizerKind::kAdam;
  // kText: the fastText-style model (src/text/text_model.h): one table, mean-pooled, then a head
  // dim -> [hidden] -> num_labels; evaluation in batches of eval_batch_size examples.
  int64_t num_labels = 0;
  int64_t text_hidden = 0;
  int64_t eval_batch_size = 0;
  // Embedding rows and their optimizer.
  DType row_dtype = DType::kF32;
  OptimizerOptions row_optimizer;
  DType precision = DType::kF32;
  bool checkpoint_activations = false;
  Placement placement;
  double cache_fraction = 1.0;  // < 1: rows live in a row store behind a device cache
  bool file_store = false;      // cached: the store is a file (rows on disk) instead of host RAM
  size_t file_block_bytes = 4096;  // file store: the direct-I/O block (tiered::file_store_block_bytes)
  int file_queue_depth = 64;       // file store: requests in flight (RowStoreOptions::queue_depth)
  FileStoreLayout file_store_layout = TableCacheOptions{}.store_layout;  // file store: its layout
  int64_t cache_min_rows = 0;   // cached: smaller tables stay resident (tiered::cache_applies)
  CachePolicy cache_policy = CachePolicy::kLru;  // cached: the index's size depends on it
  bool cache_prefetch = false;  // cached: the trainer prefetches the next batch's rows (its buffers)
  // Incremental checkpoints of a one-process run (train.incremental_checkpoints): each table
  // marks its changed rows in a bitmap of one bit per row (host tier, category weights).
  bool track_changed_rows = false;
  // Checkpoints keep tables cached over a log-layout file store by hard links of the store's
  // files (train.link_store_rows): such a table's part of a checkpoint is where its written rows
  // are (about 7 bytes per row), not the rows.
  bool link_store_rows = false;
  // The checkpoints (docs/train.md [train]): every checkpoint_every steps and at the end (0: only
  // at the end; -1: none), the last keep_checkpoints kept (0: all) with the chains they extend,
  // a chain (track_changed_rows: incremental) at most full_checkpoint_every long. They size the
  // disk over the run (predict_run_disk).
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  int full_checkpoint_every = 8;
  // The run's optimizer steps (0: unknown): with each table's vocabulary and skew, the rows the
  // whole run touches (Prediction::run_rows_touched, disk_bytes_run, sparse_base_bytes).
  int64_t run_steps = 0;
  int num_shards = 1;           // row-wise shards; per-device figures
  DType forward_payload = DType::kF32;   // shards > 1: rows on the wire
  DType backward_payload = DType::kF32;  // shards > 1: gradients on the wire
  // kCtr: gradient groups (dist.grad_groups, a multiple of num_shards); the batch is then the
  // batch of all shards (each computes its groups' records), as `leanemb train` runs it.
  int grad_groups = 1;
  int num_threads = 0;          // CPU threads of the fused update (0 = OpenMP's default)
};

// Validates and predicts. Errors: InvalidArgument (empty tables, dims, batch, bad micro-batches,
// an optimizer the row dtype cannot train, a placement the engine refuses).
Result<Prediction> predict_memory(const Workload& w, Estimate estimate = Estimate::kExpected);

// The seed's naive baseline of the same workload, as PyTorch would run it: fp32 rows, a dense
// gradient of every table (rows x dim fp32), Adam (m, v fp32), fp32 activations, no
// micro-batches, no checkpointing, everything on the device.
Result<Prediction> predict_naive_baseline(const Workload& w);

// The naive baseline's workload (predict_naive_baseline predicts it): fp32 rows, Adam with fp32
// state, fp32 activations, one micro-batch, default placement, no cache, one shard.
Workload naive_workload(const Workload& w);

// Bytes per parameter of the tables' rows and optimizer state (issue 39), from the fat-row
// layout the tables allocate (make_row_layout; a table split across tiers: its two padded
// strides): per table the row's weights (dtype bytes, and an int8 row's scale), its optimizer
// state (per-element arrays, per-row accumulators, 8-bit block scales), the stride's padding and
// the table's own state (SM3: its column accumulators), each divided by rows x dim; total: all
// tables' bytes over all their parameters. Gradients, activations and buffers are not counted.
struct TableBytesPerParameter {
  std::string name;
  int64_t rows = 0, dim = 0;
  double row_bytes = 0, state_bytes = 0, padding_bytes = 0, table_state_bytes = 0;
  double total() const { return row_bytes + state_bytes + padding_bytes + table_state_bytes; }
};
struct BytesPerParameter {
  std::vector<TableBytesPerParameter> tables;
  int64_t parameters = 0;
  double total = 0;
};
// Errors: InvalidArgument from make_row_layout (a dtype the optimizer cannot train).
Result<BytesPerParameter> bytes_per_parameter(const Workload& w);

// What a checkpoint of the workload's tables writes (docs/plan.md, "Checkpoints"): a full one
// every row (rows x fat-row stride); an incremental one (train.incremental_checkpoints) the rows
// changed in `every` steps, each its fat row and its row number (a varint gap, 7 bits a byte of
// the mean gap): the distinct rows that many steps draw (expected_unique_rows of every x batch
// x mean ids per sample; the whole table when its id skew and vocabulary are unknown). Blobs
// (dense parameters, dynamic id maps) not counted.
struct CheckpointBytes {
  uint64_t full = 0;
  double incremental = 0;  // expected, per checkpoint interval
  // Expected, the largest sparse base of the run (the distinct rows of Workload::run_steps steps,
  // at most every row); -1 when run_steps is 0.
  double sparse_base = -1;
};
Result<CheckpointBytes> checkpoint_bytes(const Workload& w, int64_t every);

// Whether checkpoints keep table t of `w` by hard links of its store's files
// (Workload::link_store_rows): a table cached over a log-layout file store of a one-process run,
// not dynamic (table/linked_tables.h).
bool links_rows(const Workload& w, const TableSpec& t);

// The disk a run needs at its peak (RunDiskPrediction, docs/plan.md "The disk over the run"),
// into p->run_disk; p is predict_memory(w)'s (its disk_bytes_run, sparse_base_bytes and
// table_bytes are used). Not known (run_disk.known false) when the run's steps or a file-store
// table's ids are unknown, or there is no file store. Errors: checkpoint_bytes's.
Status predict_run_disk(const Workload& w, Prediction* p);

// The disk model of log-store tables over a run (predict_run_disk's core, on plain numbers).
// One table: its records' bytes on disk (a block's bytes over the records it packs), the block's
// bytes (a flush leaves the rest of its last one unused), segment
// size, the misses per step in the cache's steady state (each missed row is written to the log
// once, when evicted or when a checkpoint finds it cached), the rows a checkpoint writes that the
// cache then updates again before evicting them (written once more), the rows written by a step
// (its touched rows), and whether checkpoints link its files.
struct LogTableRun {
  double record_bytes = 0;
  double group_bytes = 0;  // a record group (a block of records): a flush writes its last one whole
  uint64_t segment_bytes = 0, segment_records = 0;
  double misses_per_step = 0;
  double rehits_per_checkpoint = 0;
  std::function<double(int64_t step)> rows_written;
  bool linked = false;
};
// The run's checkpoints, as Workload has them (incremental: chains of at most full_every).
struct CheckpointSchedule {
  int64_t run_steps = 0;
  int64_t every = 0;  // 0: only at the end; < 0: none
  int keep = 3;       // 0: all
  bool incremental = false;
  int full_every = 8;
};
// The checkpoints the run writes: every `every` steps, and at the last step when not one of them;
// checkpoint_step(c, k): the step of the k-th (1-based).
int64_t checkpoint_count(const CheckpointSchedule& c);
int64_t checkpoint_step(const CheckpointSchedule& c, int64_t k);
// The 1-based index of the oldest checkpoint on disk at the commit of checkpoint k (before
// keep_last removes any): the root of the chain of the keep-th newest before it.
int64_t oldest_kept_checkpoint(const CheckpointSchedule& c, int64_t k);
// At the commit of the last checkpoints (the last 9, and the last at which the keep-th newest
// before it ends a chain, so that the whole chain is kept: the kept sets that can be the
// largest; everything else only grows with the step): per table, the rows
// written W = max(rows_written(t), misses x t) + (k - 1) x rehits, the log's files min(W x
// record_bytes, its bound for rows_written(t) live rows), pinned (linked) at most what
// compaction freed since the oldest kept checkpoint c0: 2 x (files(c0) + (W - W(c0)) x
// record_bytes - files) (each pass re-appends at most half of what it frees), and at most the
// files the older kept checkpoints link (their files when each was written), and the kept
// checkpoints' places (linked, 7 bytes a row each). Returns the largest sum (known = true).
RunDiskPrediction log_run_disk(const std::vector<LogTableRun>& tables, const CheckpointSchedule& c);

// Expected distinct rows when `n` ids are drawn from a Zipf(zipf) law over `vocab` ranks (zipf 0:
// uniform) and hashed into `num_rows` rows: sum over ranks of 1 - (1 - p_r)^n, capped at num_rows.
double expected_unique_rows(int64_t n, int64_t vocab, double zipf, int64_t num_rows);
// Gradient accumulation's traffic beyond one pass over the step: `micro_batches` micro-batches
// of `n` ids each touch their own distinct rows' sums, where one pass touches each of the step's
// `unique` distinct rows once. The rows of sums touched beyond those (the expected count for the
// table's id law with kExpected when rows repeat; the worst case: min(n, unique) a micro-batch).
double accumulation_extra_rows(const TableSpec& t, int64_t rows, int64_t ids, int64_t unique, int64_t n,
                               int64_t micro_batches, Estimate est);
// Rows touched for the first time per step, averaged over the second half of a run of
// `run_steps` steps of `n` ids each (expected_unique_rows after the run less after its first
// half, over the second half's steps): a cache miss on such a row initializes it instead of
// reading the store. 0 when run_steps <= 0.
double first_touches_per_step(int64_t n, int64_t run_steps, int64_t vocab, double zipf, int64_t num_rows);
// Share of the id mass on the `cached_rows` hottest of `vocab` ranks (the cache's hit rate).
double zipf_head_mass(int64_t vocab, double zipf, int64_t cached_rows);
// Rows an LRU row cache of `capacity` rows misses per step in its steady state, when each step
// draws `n` ids from Zipf(zipf) over `vocab` ranks (one row each) and asks the cache for the
// step's distinct rows, as the row cache does. Che's approximation of LRU under independent
// references, per step: rank i is requested in a step with probability q_i = 1 - (1 - p_i)^n;
// a row stays cached for T steps after its last request, where T solves
// sum_i 1 - (1 - q_i)^T = capacity; a request misses when the row's previous one was more than
// T steps before, so misses per step = sum_i q_i (1 - q_i)^T. 0 when capacity >= vocab.
double lru_misses_per_step(int64_t n, int64_t vocab, double zipf, int64_t capacity);
// The same model's steady state: the misses per step and T, the steps a row stays cached after
// its last request. Of the `capacity` cached rows at any time, capacity - T x misses are requested
// again before they leave (sum over ranks of 1 - (1 - q)^T - T q (1 - q)^T): the rows a
// checkpoint writes to the store and the cache dirties again.
struct LruSteadyState {
  double misses_per_step = 0;
  double cached_steps = 0;  // T
};
LruSteadyState lru_steady_state(int64_t n, int64_t vocab, double zipf, int64_t capacity);

}  // namespace leanemb::plan
