// MemoryModel: a replay of one training step's allocations, phase by phase. See memory_model.h.
//
// Every size below comes from a size function of the allocating code; this file only decides
// which allocations are alive in which phase (mirroring CtrModel::train_step, Mlp::forward /
// backward, Interaction and EmbeddingCollection::backward_update) and in which tier.
#include "plan/memory_model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

#include "dist/comm_sizes.h"
#include "kernels/kernels.h"
#include "model/ctr_model.h"
#include "nn/grad_groups.h"
#include "nn/mlp.h"
#include "table/step_sizes.h"
#include "tiered/sizes.h"

namespace leanemb::plan {

namespace {

constexpr size_t kSmallRequestBytes = size_t{1} << 20;  // DeviceArena's small pool
constexpr size_t kArenaGranule = 512;                     // DeviceArena's block granule
constexpr size_t kArenaItemHeadroom = 1024;               // per modelled allocation (see finish)

struct Item {
  Tier tier;
  Category category;
  size_t bytes;
};

// Allocations alive in one phase (persistent ones are added by the caller).
struct Phase {
  std::string name;
  std::vector<Item> items;
};

class Replay {
 public:
  explicit Replay(const Placement& p) : placement_(p) {}
  // An allocation in the tier `placed_as`'s placement gives, counted as `category`.
  Item item(Category category, size_t bytes, Category placed_as) const {
    return Item{placement_[placed_as], category, bytes};
  }
  Item item(Category category, size_t bytes) const { return item(category, bytes, category); }
  void persist(Item i) { persistent_.push_back(i); }
  void phase(std::string name, std::vector<Item> items) { phases_.push_back(Phase{std::move(name), std::move(items)}); }

  void finish(Prediction* out) const {
    for (int t = 0; t < 2; ++t) {
      TierPrediction& tp = out->tier[static_cast<size_t>(t)];
      tp = TierPrediction{};
      for (const Phase& ph : phases_) {
        CategoryBytesArray cats{};
        size_t small = 0, rounded = 0;
        auto add = [&](const Item& i) {
          if (static_cast<int>(i.tier) != t) return;
          cats[static_cast<size_t>(i.category)] += i.bytes;
          if (i.bytes <= kSmallRequestBytes) small += i.bytes;
          // Rounded to the granule, plus one granule of headroom: an item can stand for a few
          // allocations (each rounded) and aligned ones take up to alignment - 512 more.
          rounded += (i.bytes + kArenaGranule - 1) / kArenaGranule * kArenaGranule + kArenaItemHeadroom;
        };
        for (const Item& i : persistent_) add(i);
        for (const Item& i : ph.items) add(i);
        size_t sum = 0;
        for (int c = 0; c < kNumCategories; ++c) {
          tp.peak[static_cast<size_t>(c)] = std::max(tp.peak[static_cast<size_t>(c)], cats[static_cast<size_t>(c)]);
          sum += cats[static_cast<size_t>(c)];
        }
        tp.budget_bytes = std::max(tp.budget_bytes, t == 0 ? rounded : sum);  // the device tier is a DeviceArena
        if (sum > tp.peak_bytes || tp.peak_phase.empty()) {
          tp.peak_bytes = sum;
          tp.peak_phase = ph.name;
          tp.small_request_bytes = small;
        }

      }
    }
  }

 private:
  Placement placement_;
  std::vector<Item> persistent_;
  std::vector<Phase> phases_;
};

// One table's per-device figures for a step.
struct TableStep {
  RowLayout layout;
  int64_t rows = 0;    // rows on this device (after sharding)
  int64_t ids = 0;     // ids of the step
  int64_t unique = 0;  // distinct rows of the step
  bool cached = false;  // a row cache in front of the rows (tiered::cache_applies)
  bool split = false;  // weights and state in different tiers: staged update
};

// a * b * ... without overflow, or false.
bool checked_product(std::initializer_list<int64_t> factors, uint64_t* out) {
  uint64_t p = 1;
  for (int64_t f : factors)
    if (f < 0 || __builtin_mul_overflow(p, static_cast<uint64_t>(f), &p)) return false;
  *out = p;
  return true;
}

// Byte counts that fit comfortably in 64 bits: every size the replay adds up stays below 2^63
// when each table's bytes and each step's activations are below kMaxBytes.
constexpr uint64_t kMaxBytes = uint64_t{1} << 58;  // 256 PiB

Status check_sizes(const Workload& w) {
  uint64_t total = 0;
  for (const TableSpec& t : w.tables) {
    // An upper bound of a table's bytes: 16 bytes per value (weights and the largest state) plus
    // 64 per row (row-wise state, alignment).
    uint64_t values = 0, rows = 0, ids = 0;
    const bool ok = checked_product({t.num_rows, t.dim, 16}, &values) && checked_product({t.num_rows, 64}, &rows) &&
                    checked_product({w.batch_size, std::max<int64_t>(1, t.max_ids_per_sample), t.dim, 16}, &ids) &&
                    !__builtin_add_overflow(values, rows, &values) && values <= kMaxBytes && ids <= kMaxBytes &&
                    !__builtin_add_overflow(total, values, &total) && total <= kMaxBytes;
    if (!ok)
      return invalid_argument("memory model: table '" + t.name + "' (" + std::to_string(t.num_rows) + " rows x dim " + std::to_string(t.dim) +
                              ", batch " + std::to_string(w.batch_size) + " x " + std::to_string(t.max_ids_per_sample) +
                              " ids) exceeds 256 PiB: its byte counts would overflow");
  }
  return Status();
}

Status validate(const Workload& w) {
  if (w.tables.empty()) return invalid_argument("memory model: no tables");
  if (w.batch_size < 1) return invalid_argument("memory model: batch size must be >= 1, got " + std::to_string(w.batch_size));
  if (w.micro_batches < 1 || w.micro_batches > w.batch_size)
    return invalid_argument("memory model: micro-batches must be in [1, batch size], got " + std::to_string(w.micro_batches));
  if (w.num_shards < 1) return invalid_argument("memory model: shard count must be >= 1");
  if (w.kind != WorkloadKind::kEmbeddingOnly && (w.grad_groups < 1 || w.grad_groups % w.num_shards != 0))
    return invalid_argument("memory model: gradient groups (" + std::to_string(w.grad_groups) +
                            ") must be a positive multiple of the shard count (" + std::to_string(w.num_shards) + ")");
  if (!(w.cache_fraction > 0.0 && w.cache_fraction <= 1.0))
    return invalid_argument("memory model: cache fraction must be in (0, 1], got " + std::to_string(w.cache_fraction));
  LEANEMB_RETURN_IF_ERROR(validate_placement(w.placement));
  for (const TableSpec& t : w.tables) {
    if (t.num_rows < 1 || t.dim < 1)
      return invalid_argument("memory model: table '" + t.name + "' needs rows >= 1 and dim >= 1");
    if (t.max_ids_per_sample < 0 || t.mean_ids_per_sample < 0)
      return invalid_argument("memory model: table '" + t.name + "' has a negative id count");
  }
  LEANEMB_RETURN_IF_ERROR(check_sizes(w));
  if (w.kind == WorkloadKind::kCtr) {
    for (const TableSpec& t : w.tables) {
      if (t.dim != w.tables[0].dim) return invalid_argument("memory model: the CTR model needs one embedding dim for every table");
      if (t.pooling == PoolingMode::kNone) return invalid_argument("memory model: the CTR model pools every feature");
    }
    if (w.bottom_mlp.empty()) return invalid_argument("memory model: the bottom MLP needs at least one layer");
    if (w.num_dense < 1) return invalid_argument("memory model: the CTR model needs >= 1 dense feature");
  }
  if (w.kind != WorkloadKind::kCtr && w.precision != DType::kF32 && (w.precision != DType::kBF16 || w.num_shards > 1))
    return invalid_argument("memory model: an embedding-only or text workload's output is fp32, or bf16 on one shard (forward_bf16)");
  if (w.kind == WorkloadKind::kText && (w.tables.size() != 1 || w.num_labels < 1 || w.text_hidden < 0))
    return invalid_argument("memory model: the text model has one table, >= 1 label and a hidden width >= 0");
  return Status();
}

int64_t ids_per_step(const TableSpec& t, int64_t batch, Estimate e) {
  const double per = e == Estimate::kExpected ? t.mean_ids_per_sample : static_cast<double>(t.max_ids_per_sample);
  return static_cast<int64_t>(std::llround(per * static_cast<double>(batch)));
}

// The kCommBuffers allocations of the rank that needs the most (dist::comm_buffer_counts), for
// calls of `bags` records per rank.
Result<std::vector<size_t>> comm_allocations(const Workload& w, int64_t bags, Estimate est) {
  dist::ShardPlanOptions po;
  po.world_size = w.num_shards;
  std::vector<uint32_t> partitions;
  for (const TableSpec& t : w.tables) {
    // A dynamic table's rows are blocks of whole id partitions (ShardedEmbeddingCollection).
    po.tables.push_back({t.num_rows, t.dim, t.dynamic.enabled ? dist::ShardingKind::kRowRange : dist::ShardingKind::kRowModulo, -1});
    partitions.push_back(t.dynamic.enabled ? t.dynamic.partitions : 0);
  }
  LEANEMB_ASSIGN_OR_RETURN(const dist::ShardPlan plan, dist::ShardPlan::create(po));
  dist::CommShape shape;
  shape.world = w.num_shards;
  for (size_t i = 0; i < w.tables.size(); ++i) {
    const TableSpec& t = w.tables[i];
    const int64_t ids = w.kind == WorkloadKind::kCtr ? bags * t.max_ids_per_sample : ids_per_step(t, bags, est);
    const bool seq = t.pooling == PoolingMode::kNone;
    shape.features.push_back({static_cast<int>(i), seq ? ids : bags, ids, t.dim, seq, t.pooling == PoolingMode::kMean});
  }
  shape.owner_share = dist::owner_shares(plan, partitions);
  shape.id_bytes = dist::wire_id_bytes(plan, partitions, false);
  shape.forward_payload = w.forward_payload;
  shape.backward_payload = w.backward_payload;
  std::vector<size_t> most;
  size_t most_bytes = 0;
  for (int rank = 0; rank < w.num_shards; ++rank) {
    shape.rank = rank;
    const dist::CommBufferCounts c = dist::comm_buffer_counts(shape);
    if (const size_t b = dist::comm_buffer_bytes(c); b > most_bytes || most.empty()) {
      most_bytes = b;
      most = dist::comm_buffer_allocations(c);
    }
  }
  return most;
}

// ---- the residencies (src/table/residency.h): each kind's rows, buffers and traffic ---------
// One function per kind, as make_residency chooses them: a new residency adds one here.
struct ResidencyPlan {
  const Workload& w;
  const TableSpec& t;
  const TableStep& s;
  int64_t slice;      // the records this shard computes per step
  Replay& r;
  Prediction& out;
  size_t& ckpt_bulk;  // a checkpoint's largest file-store bulk call (host io_buffers)
  int64_t micro = 0;  // records of the largest micro-batch
  bool by_row = false;  // the step accumulates its gradients by row (StepShape::by_row)
  Estimate est = Estimate::kExpected;  // how the step's sizes were chosen
};

// What the collection records per step for rows read and updated in place off the device
// (docs/memory.md, Transfers).
void plan_in_place_link(const ResidencyPlan& p) {
  const Placement& pl = p.w.placement;
  const TableStep& s = p.s;
  if (pl[Category::kWeights] != Tier::kDevice)
    p.out.host_link_bytes_per_step += static_cast<double>(s.ids + 2 * s.unique) * static_cast<double>(s.layout.weight_bytes);
  if (pl[Category::kOptimizerState] != Tier::kDevice && s.layout.state_bytes)
    p.out.host_link_bytes_per_step += 2.0 * static_cast<double>(s.unique) * static_cast<double>(s.layout.state_bytes);
}

// ResidentRows: one fat-row allocation in the weights tier, its state part counted as
// optimizer state.
void plan_resident_rows(const ResidencyPlan& p) {
  const size_t nr = static_cast<size_t>(p.s.rows);
  const RowLayout& l = p.s.layout;
  p.r.persist(p.r.item(Category::kWeights, nr * (l.stride_bytes - l.state_bytes)));
  if (l.state_bytes) p.r.persist(p.r.item(Category::kOptimizerState, nr * l.state_bytes, Category::kWeights));
  plan_in_place_link(p);
}

// SplitRows: weights and state in their own tiers (the update's staging is a step phase, below).
void plan_split_rows(const ResidencyPlan& p) {
  const size_t nr = static_cast<size_t>(p.s.rows);
  p.r.persist(p.r.item(Category::kWeights, nr * split_weight_stride(p.s.layout.weight_bytes)));
  p.r.persist(p.r.item(Category::kOptimizerState, nr * split_state_stride(p.s.layout.state_bytes)));
  plan_in_place_link(p);
}

// A file-store table over the whole run (Prediction::run_rows_touched, disk_bytes_run): the
// distinct rows of run_steps steps of `step_ids` ids, this shard's share, and the file's bytes
// then; the worst case (`most`, the file's largest size) when the run or the ids are unknown.
void plan_run_disk(const Workload& w, const TableSpec& t, const TableStep& s, double step_ids, size_t most, Prediction* out) {
  if (w.run_steps <= 0 || (t.vocab <= 0 && t.zipf <= 0)) {
    out->disk_bytes_run += most;
    return;
  }
  const double ids = std::min(9e18, step_ids * static_cast<double>(w.run_steps));
  const double touched = expected_unique_rows(static_cast<int64_t>(ids), t.vocab > 0 ? t.vocab : t.num_rows, t.zipf, t.num_rows) /
                         static_cast<double>(w.num_shards);
  out->run_rows_touched = std::max(0.0, out->run_rows_touched) + touched;
  const size_t rb = s.layout.stride_bytes, block = w.file_block_bytes;
  size_t bytes = 0;
  if (w.file_store_layout == FileStoreLayout::kMapped) {
    bytes = most;  // every block allocated when the file is opened
  } else if (w.file_store_layout == FileStoreLayout::kLog) {
    const uint64_t seg = tiered::log_segment_bytes(s.rows, rb, block);
    bytes = tiered::log_max_segments(static_cast<int64_t>(std::ceil(touched)), tiered::log_segment_records(seg, rb, block)) * seg;
  } else {
    // In place: a block is allocated once any row in it is written (rows uniform over the table).
    const double per_block = rb <= block ? static_cast<double>(block / rb) : 1.0;
    const double blocks = std::ceil(static_cast<double>(s.rows) / per_block) * (rb <= block ? 1.0 : std::ceil(static_cast<double>(rb) / static_cast<double>(block)));
    const double hit = 1.0 - std::pow(1.0 - std::min(1.0, touched / static_cast<double>(s.rows)), per_block);
    bytes = static_cast<size_t>(blocks * hit) * block;
  }
  out->disk_bytes_run += std::min(bytes, most);
}

// CachedRows: the row store, the device-tier cache and its buffers, and the store's traffic.
void plan_cached_rows(const ResidencyPlan& p) {
  const Workload& w = p.w;
  const TableSpec& t = p.t;
  const TableStep& s = p.s;
  Replay& r = p.r;
  Prediction& out = p.out;
  const int shards = w.num_shards;
  const size_t nr = static_cast<size_t>(s.rows);
  // The row store (src/tiered/row_store.cc): a host store holds every fat row in host RAM
  // (category weights); a file store keeps them on disk (a mapped one in the page cache, which
  // no budget holds). Both keep a presence bit per row, but the log layout, whose index (every
  // page made) says where each row is.
  const bool log = w.file_store && w.file_store_layout == FileStoreLayout::kLog;
  const bool mapped = w.file_store && w.file_store_layout == FileStoreLayout::kMapped;
  const size_t rb = s.layout.stride_bytes;
  r.persist(Item{Tier::kHost, Category::kWeights,
                 log ? tiered::log_store_index_bytes(s.rows, rb, w.file_block_bytes)
                     : (w.file_store ? 0 : nr * rb) + tiered::presence_bitmap_bytes(s.rows)});
  const int64_t cap = tiered::cache_capacity_rows(s.rows, w.cache_fraction);
  const tiered::RowCacheSizes cs = tiered::row_cache_sizes(cap, s.rows, s.layout.stride_bytes, w.cache_policy);
  r.persist(Item{Tier::kDevice, Category::kRowCache, cs.device_bytes()});
  // The fetch's per-call scratch: the owner's, and the prefetch thread's when the trainer
  // prefetches (embedding.cache_prefetch). Its arrays are kept between calls at the largest
  // call's size, so they are planned for the most ids a step can bring (each sample's most),
  // over the step's expected distinct rows.
  const int64_t most_ids = ids_per_step(t, p.slice, Estimate::kWorstCase);
  r.persist(r.item(Category::kIoBuffers, tiered::row_cache_scratch_bytes(most_ids, s.unique)));
  if (w.cache_prefetch) r.persist(r.item(Category::kIoBuffers, tiered::row_cache_prefetch_scratch_bytes(most_ids, s.unique)));
  if (log) {  // its buffers; checkpoints go through read_rows / write_rows (no bulk buffer)
    r.persist(Item{Tier::kHost, Category::kIoBuffers,
                   tiered::log_store_staging_bytes(s.rows, rb, w.file_block_bytes, w.file_queue_depth)});
  } else if (w.file_store && !mapped) {  // a mapping copies rows with no buffer
    r.persist(Item{Tier::kHost, Category::kIoBuffers,
                   tiered::file_store_staging_bytes(s.layout.stride_bytes, w.file_block_bytes, w.file_queue_depth)});
    p.ckpt_bulk = std::max(p.ckpt_bulk, tiered::file_store_bulk_bytes(std::min(tiered::kCheckpointChunkRows, s.rows),
                                                                      s.layout.stride_bytes, w.file_block_bytes));
  }
  if (s.ids > 0)
    for (int b = 0; b < kCacheRemapBuffers + (w.cache_prefetch ? 1 : 0); ++b)
      r.persist(r.item(Category::kWorkspace, step_buffer_alloc_bytes(cache_remap_buffer_bytes(s.ids))));
  // The store's traffic: the step's ids over every shard, the caches of every shard.
  const int64_t step_ids = ids_per_step(t, w.batch_size, Estimate::kExpected);
  // Ids hashed into fewer rows than the vocabulary are taken as ranks of their own (the
  // collisions are ignored: a few percent at the example configs' vocab / rows).
  const int64_t vocab = t.vocab > 0 ? t.vocab : t.num_rows;
  const double misses = lru_misses_per_step(step_ids, vocab, t.zipf, cap * shards) / shards;
  // A miss on a row no step touched before initializes it: no read (known when the run's length
  // and the ids' vocabulary or skew are).
  const bool ids_known = w.run_steps > 0 && (t.vocab > 0 || t.zipf > 0);
  const double first = ids_known ? std::min(misses, first_touches_per_step(step_ids, w.run_steps, vocab, t.zipf, t.num_rows) / shards) : 0.0;
  const double reads = misses - first;
  out.store_misses_per_step += misses;
  out.store_first_touches_per_step += first;
  out.store_rows_read_per_step += reads;
  out.store_rows_written_per_step += misses;
  const size_t file_bytes_before = out.disk_bytes;
  if (log) {
    out.disk_bytes += tiered::log_store_max_file_bytes(s.rows, rb, w.file_block_bytes);
    out.store_requests_per_step += reads + misses * static_cast<double>(rb) / static_cast<double>(tiered::kBulkTransferBytes);
  } else if (mapped) {  // the page cache serves the copies: no request while the file fits in RAM
    out.disk_bytes += nr * rb;
  } else if (w.file_store) {
    out.disk_bytes += (nr * s.layout.stride_bytes + w.file_block_bytes - 1) / w.file_block_bytes * w.file_block_bytes;
    out.store_requests_per_step += reads + 2.0 * misses;
  }
  if (w.file_store) plan_run_disk(w, t, s, static_cast<double>(step_ids), out.disk_bytes - file_bytes_before, &out);
  const double hit = zipf_head_mass(t.num_rows, t.zipf, cap * shards);
  out.cache_hit_rate = std::min(out.cache_hit_rate, hit);
  out.host_link_bytes_per_step += 2.0 * (1.0 - hit) * static_cast<double>(s.unique) * static_cast<double>(s.layout.stride_bytes);
}

// ---- the step's shape -----------------------------------------------------------------------
struct StepShape {
  int64_t slice = 0;        // the records a shard computes per step (the largest share)
  int64_t groups_here = 1;  // that shard's gradient groups
  int64_t n = 0;            // records of the largest micro-batch (the text model: of a group)
  // The tables sum each micro-batch's gradient into per-row sums as it comes
  // (EmbeddingTables::begin_accumulation): a local collection (one shard) and more than one
  // micro-batch pass (the CTR model: model::ctr_accumulates; the embedding-only workload: its
  // micro-batches, or bf16 output: backward_update_bf16 accumulates). The text model only with a
// bf16 output (its update: one backward_update_bf16 of the slice).
  bool by_row = false;
};

// ---- bf16 outputs (EmbeddingTables::forward_bf16 / accumulate_bf16) ---------------------------
// The embedding-only workload (or the text model) with a bf16 output passes chunks of bags
// through an fp32 scratch: kBf16ScratchFloats, or the largest bag's outputs when larger (what the
// bench and TextModel allocate).
bool bf16_output(const Workload& w) { return w.kind != WorkloadKind::kCtr && w.precision == DType::kBF16; }
int64_t largest_bag_floats(const Workload& w) {
  int64_t f = 0;
  for (const TableSpec& t : w.tables) {
    const auto ids = std::max<int64_t>(t.max_ids_per_sample, static_cast<int64_t>(std::ceil(t.mean_ids_per_sample)));
    f += t.pooling == PoolingMode::kNone ? ids * t.dim : t.dim;
  }
  return std::max<int64_t>(f, 1);
}
size_t bf16_scratch_floats(const Workload& w) {
  return static_cast<size_t>(std::max(EmbeddingTables::kBf16ScratchFloats, largest_bag_floats(w)));
}
// Bags of a chunk: as many whole bags as fit in the scratch (at least one).
int64_t bf16_chunk_bags(const Workload& w) {
  return std::max<int64_t>(1, static_cast<int64_t>(bf16_scratch_floats(w)) / largest_bag_floats(w));
}

// kCtr: the batch is every shard's; a shard computes its gradient groups' records (CtrModel's
// slice), the largest share over the shards, in micro-batches of at most n records.
StepShape step_shape(const Workload& w) {
  const int shards = w.num_shards;
  const int64_t B = w.batch_size;
  const int64_t k = w.micro_batches;
  StepShape sh;
  sh.n = (B + k - 1) / k;
  sh.slice = B;
  if (w.kind == WorkloadKind::kText) {  // TextModel::train_step: nn::group_slice, groups of at most n
    sh.slice = 0;
    for (int r = 0; r < shards; ++r) {
      const nn::GroupSlice sl = nn::group_slice(B, w.grad_groups, r, shards);
      sh.slice = std::max(sh.slice, sl.hi - sl.lo);
      sh.groups_here = std::max(sh.groups_here, sl.g1 - sl.g0);
    }
    sh.n = (B + w.grad_groups - 1) / w.grad_groups;
    sh.by_row = shards == 1 && bf16_output(w);  // backward_update_bf16 accumulates
  }
  if (w.kind == WorkloadKind::kCtr) {
    sh.slice = 0;
    for (int r = 0; r < shards; ++r) {
      const model::CtrSlice sl = model::ctr_slice(B, static_cast<int>(k), w.grad_groups, r, shards);
      sh.slice = std::max(sh.slice, sl.hi - sl.lo);
      sh.groups_here = std::max(sh.groups_here, sl.g1 - sl.g0);
      sh.n = sl.max_micro;
      sh.by_row = sh.by_row || model::ctr_accumulates(sl, shards == 1);
    }
  }
  if (w.kind == WorkloadKind::kEmbeddingOnly) sh.by_row = shards == 1 && (k > 1 || bf16_output(w));
  return sh;
}

// ---- tables: rows, step buffers, staging ------------------------------------------------------
// Table t's per-device figures for a step of `slice` records.
Result<TableStep> table_step(const Workload& w, const TableSpec& t, int64_t slice, Estimate est) {
  const int shards = w.num_shards;
  const Placement& pl = w.placement;
  TableStep s;
  auto layout = make_row_layout(t.dim, w.row_dtype, w.row_optimizer);
  if (!layout.ok()) return Status(layout.status().code(), "table '" + t.name + "': " + layout.status().message());
  s.layout = layout.value();
  s.rows = (t.num_rows + shards - 1) / shards;
  s.ids = ids_per_step(t, slice, est);
  const int64_t bound = std::min(s.ids, s.rows);
  s.unique = est == Estimate::kExpected && t.expected_unique_rows >= 0
                 ? std::min<int64_t>(bound, static_cast<int64_t>(std::llround(t.expected_unique_rows / shards)))
                 : bound;
  if (s.ids > 0 && s.unique < 1) s.unique = 1;
  s.cached = tiered::cache_applies(t.num_rows, w.cache_fraction, w.cache_min_rows);
  s.split = s.layout.state_bytes > 0 && pl[Category::kWeights] != pl[Category::kOptimizerState] && !s.cached;
  return s;
}

// A table whose step accumulates by row (accumulate.cc): the dedup buffers of a micro-batch's
// ids but the keys, where begin_accumulation sorts the step's ids; the step's distinct rows
// (kWorkspace) and their sums (kGradients, from the workspace allocator), kept between steps
// with headroom up to the most rows a step can touch.
// A bf16 output (bf16_output) calls accumulate once per chunk of bags: the calls are the chunks.
void plan_accumulation(const ResidencyPlan& p) {
  const TableStep& s = p.s;
  const int64_t micros = (p.slice + p.micro - 1) / std::max<int64_t>(1, p.micro);
  const int64_t bags = bf16_output(p.w) ? std::min(p.micro, bf16_chunk_bags(p.w)) : p.micro;  // of a call
  const int64_t calls = micros * ((p.micro + bags - 1) / bags);
  const int64_t n = std::min(s.ids, std::max<int64_t>(1, static_cast<int64_t>(std::llround(
                                        static_cast<double>(s.ids) * static_cast<double>(bags) / static_cast<double>(p.slice)))));
  const DedupBufferBytes step = dedup_buffer_bytes(s.ids, s.unique), d = dedup_buffer_bytes(n, std::min(n, s.unique));
  for (size_t b : {step.keys, d.runs, d.src_ptr, d.scale, d.sorted_ptr, d.sorted_scale, d.rows})
    p.r.persist(p.r.item(Category::kWorkspace, step_buffer_alloc_bytes(b)));
  const int64_t kernel_rows = s.cached ? tiered::cache_capacity_rows(s.rows, p.w.cache_fraction) : s.rows;
  const int64_t most = std::min(s.ids, kernel_rows);
  const AccumulationBytes a = accumulation_bytes(std::min(s.unique, most), s.layout.dim), cap = accumulation_bytes(most, s.layout.dim);
  p.r.persist(p.r.item(Category::kWorkspace, step_buffer_alloc_bytes(a.rows, cap.rows)));
  p.r.persist(p.r.item(Category::kGradients, step_buffer_alloc_bytes(a.sums, cap.sums), Category::kWorkspace));
  // Each call reads and writes the sums of its own distinct rows (access_model.cc).
  const double extra_rows = accumulation_extra_rows(p.t, s.rows, s.ids, s.unique, n, calls, p.est);
  p.out.device_bytes_moved_per_step += 2.0 * extra_rows * static_cast<double>(s.layout.dim) * 4;
}

// One table's allocations kept between steps (its rows as its residency holds them, the
// changed-rows bitmap, a dynamic table's maps and id buffers, the dedup buffers) and its share
// of the step's figures.
void plan_table(const ResidencyPlan& p, bool dense_table_gradient) {
  const Workload& w = p.w;
  const TableSpec& t = p.t;
  const TableStep& s = p.s;
  Replay& r = p.r;
  Prediction& out = p.out;
  const int shards = w.num_shards;
  const size_t nr = static_cast<size_t>(s.rows);
  out.table_bytes += nr * s.layout.stride_bytes;
  if (dense_table_gradient) r.persist(r.item(Category::kGradients, nr * static_cast<size_t>(t.dim) * 4));
  // The table's residency (src/table/residency.h), as make_residency chooses it.
  if (s.cached) plan_cached_rows(p);
  else if (s.split) plan_split_rows(p);
  else plan_resident_rows(p);
  // The TrackedRows layer's bitmap (table/residency.h ChangedRows): one process only.
  if (w.track_changed_rows && shards == 1) r.persist(Item{Tier::kHost, Category::kWeights, std::max<size_t>((nr + 63) / 64, 1) * 8});
  if (t.dynamic.enabled) {
    // The IdMaps of the partitions held here and the row keys (host, row_cache), the id
    // buffers of forward and backward (kWorkspace).
    const uint32_t held = static_cast<uint32_t>(std::max<int64_t>(1, t.dynamic.partitions / shards));
    r.persist(Item{Tier::kHost, Category::kRowCache, dynamic_table_host_bytes(t.dynamic, s.rows, held)});
    for (int b = 0; b < kDynamicIdBuffers; ++b)
      r.persist(r.item(Category::kWorkspace, step_buffer_alloc_bytes(dynamic_id_buffer_bytes(s.ids))));
  }
  if (s.ids > 0 && !p.by_row) {
    // The collection's dedup buffers (kWorkspace, kept between steps, with headroom).
    const DedupBufferBytes d = dedup_buffer_bytes(s.ids, s.unique);
    for (size_t b : {d.keys, d.runs, d.src_ptr, d.scale, d.sorted_ptr, d.sorted_scale, d.rows})
      r.persist(r.item(Category::kWorkspace, step_buffer_alloc_bytes(b)));
  } else if (s.ids > 0) {
    plan_accumulation(p);
  }
  out.ids_per_step += s.ids;
  out.unique_per_step += s.unique;
  out.device_bytes_moved_per_step += static_cast<double>(s.ids) * static_cast<double>(s.layout.weight_bytes) +
                                     2.0 * static_cast<double>(s.unique) * static_cast<double>(s.layout.stride_bytes);
}

// Every table's figures and allocations, then what they share: a checkpoint's bulk transfer and
// the fused update's scratch.
Result<std::vector<TableStep>> plan_tables(const Workload& w, const StepShape& sh, Estimate est, bool dense_table_gradient,
                                           Replay& r, Prediction& out) {
  std::vector<TableStep> ts;
  int64_t max_dim = 0;
  size_t ckpt_bulk = 0;  // a checkpoint's largest file-store bulk call (save or restore), host io_buffers
  for (const TableSpec& t : w.tables) {
    LEANEMB_ASSIGN_OR_RETURN(const TableStep s, table_step(w, t, sh.slice, est));
    max_dim = std::max(max_dim, t.dim);
    // The text model's update is one call over its slice (n is a gradient group's records).
    const int64_t micro = w.kind == WorkloadKind::kText ? sh.slice : sh.n;
    plan_table(ResidencyPlan{w, t, s, sh.slice, r, out, ckpt_bulk, micro, sh.by_row, est}, dense_table_gradient);
    ts.push_back(s);
  }
  // A checkpoint save or restore (between steps: nothing of a step is alive) reads or writes a
  // file store's rows kCheckpointChunkRows at a time through a bulk staging buffer.
  if (ckpt_bulk > 0) r.phase("checkpoint (file store bulk transfer)", {Item{Tier::kHost, Category::kIoBuffers, ckpt_bulk}});
  // The fused update's scratch (kGradients, one StepBuffers slot, from the workspace allocator);
  // a step accumulated by row updates from its sums instead.
  const int threads = w.num_threads > 0 ? w.num_threads : omp_get_max_threads();
  if (!sh.by_row)
    r.persist(r.item(Category::kGradients, step_buffer_alloc_bytes(kernels::reduce_and_update_scratch_floats(max_dim, threads) * 4),
                     Category::kWorkspace));
  return ts;
}

// The staged update's buffers of the split tables (alive in the "embedding update" phase).
std::vector<Item> update_staging(const std::vector<TableStep>& ts, const Replay& r) {
  std::vector<Item> staging;
  for (const TableStep& s : ts) {
    if (!s.split || s.unique == 0) continue;
    const StagingBytes sb = staging_bytes(s.unique, s.layout.stride_bytes);
    staging.push_back(r.item(Category::kWorkspace, sb.fat));
    staging.push_back(r.item(Category::kWorkspace, sb.slots));
  }
  return staging;
}

// ---- the embedding output a step hands to the model -----------------------------------------
struct OutputFloats {
  size_t batch = 0;  // of the whole batch
  size_t micro = 0;  // of the largest micro-batch (n records)
};

// Pooled features give dim floats per record, sequence features dim per id.
OutputFloats output_floats(const Workload& w, int64_t n, Estimate est) {
  OutputFloats of;
  for (size_t i = 0; i < w.tables.size(); ++i) {
    const TableSpec& t = w.tables[i];
    const int64_t per = t.pooling == PoolingMode::kNone ? ids_per_step(t, 1, est) : 1;
    of.batch += static_cast<size_t>(w.batch_size * per * t.dim);
    of.micro += static_cast<size_t>(n * per * t.dim);
  }
  return of;
}

// ---- the shards' exchange ---------------------------------------------------------------------
// With shards, the sharded collection's message and routing buffers (dist/comm_sizes.h), on the
// rank that needs the most, and the step's bytes between shards. A CTR run reserves them for its
// largest slice at the longest bags (CtrModel: DistributionOptions::max_call); other runs grow
// them to their calls, sized here from this estimate's ids.
Status plan_comm(const Workload& w, int64_t slice, Estimate est, size_t out_floats_batch, Replay& r, Prediction& out) {
  const int shards = w.num_shards;
  if (shards <= 1) return Status();
  LEANEMB_ASSIGN_OR_RETURN(const std::vector<size_t> comm, comm_allocations(w, slice, est));
  for (size_t bytes : comm) r.persist(r.item(Category::kCommBuffers, bytes));
  const double share = static_cast<double>(shards - 1) / shards;
  out.comm_bytes_per_step = share * (static_cast<double>(out.ids_per_step) * 8 + 2.0 * static_cast<double>(out_floats_batch) * 4);
  return Status();
}

// ---- the dense parts: the text model, the CTR model (or none) ---------------------------------
// The allocations of one Mlp call of `rows` records (Mlp::forward / backward).
struct MlpItems {
  std::vector<Item> saved;  // kept from the forward to the backward
  std::vector<Item> fwd;    // the forward's own
  std::vector<Item> bwd;    // the backward's own (recomputed activations included)
};

MlpItems mlp_items(const Replay& r, const nn::MlpOptions& o, int64_t rows, size_t pb) {
  MlpItems m;
  const nn::MlpCallSizes s = nn::mlp_call_sizes(o, rows);
  m.saved.push_back(r.item(Category::kActivations, static_cast<size_t>(s.saved_input_numel) * pb));
  if (s.saved_output_numel) m.saved.push_back(r.item(Category::kActivations, static_cast<size_t>(s.saved_output_numel) * pb));
  for (int64_t h : s.hidden_numel) {
    const Item it = r.item(Category::kActivations, static_cast<size_t>(h) * pb);
    (o.checkpoint_activations ? m.bwd : m.saved).push_back(it);
  }
  for (int i = 0; i < s.forward_buffers; ++i) m.fwd.push_back(r.item(Category::kWorkspace, s.pingpong_floats * 4));
  for (int i = 0; i < s.backward_buffers; ++i) m.bwd.push_back(r.item(Category::kWorkspace, s.pingpong_floats * 4));
  if (s.scratch_floats) {
    m.fwd.push_back(r.item(Category::kWorkspace, s.scratch_floats * 4));
    m.bwd.push_back(r.item(Category::kWorkspace, s.scratch_floats * 4));
  }
  return m;
}

// The items of `parts`, one after another.
std::vector<Item> concat(std::initializer_list<const std::vector<Item>*> parts) {
  std::vector<Item> v;
  for (const auto* p : parts) v.insert(v.end(), p->begin(), p->end());
  return v;
}

// The text model (TextModel::train_step, predict): the head's parameters, gradients, state and
// buffers, and a step's phases (and an evaluation's).
void plan_text_model(const Workload& w, const StepShape& sh, const std::vector<Item>& staging, Replay& r, Prediction& out) {
  const int shards = w.num_shards;
  const int64_t slice = sh.slice, n = sh.n;
  const int64_t D = w.tables[0].dim, C = w.num_labels;
  nn::MlpOptions head;
  head.widths = {D};
  if (w.text_hidden > 0) head.widths.push_back(w.text_hidden);
  head.widths.push_back(C);
  const size_t params = nn::mlp_parameter_floats(head);  // the head is fp32 at any output precision
  r.persist(r.item(Category::kWeights, params * 4, Category::kActivations));
  r.persist(r.item(Category::kGradients, params * 4, Category::kActivations));
  r.persist(r.item(Category::kOptimizerState,
                   (static_cast<size_t>(nn::dense_state_arrays(w.dense_optimizer)) * params + nn::kStepLimbFloats) * 4));
  // Gradient groups: a slot per group here plus their sum (nn/grad_groups.h), always made.
  r.persist(r.item(Category::kGradients, static_cast<size_t>(sh.groups_here + 1) * params * 4, Category::kActivations));
  // The pooled buffer, kept: the larger of a step's slice and an evaluation batch's.
  int64_t eval_slice = 0, eval_group = 0;
  if (w.eval_batch_size > 0) {
    for (int rk = 0; rk < shards; ++rk) {
      const nn::GroupSlice es = nn::group_slice(w.eval_batch_size, w.grad_groups, rk, shards);
      eval_slice = std::max(eval_slice, es.hi - es.lo);
    }
    eval_group = (w.eval_batch_size + w.grad_groups - 1) / w.grad_groups;
  }
  // In the output's precision (pb); a bf16 output adds a group's rows widened to fp32 (the
  // larger of a step's and an evaluation's group), their fp32 gradient and the tables' scratch.
  const size_t pb = amp::precision_bytes(w.precision);
  r.persist(r.item(Category::kActivations, static_cast<size_t>(std::max(slice, eval_slice) * D) * pb));
  r.persist(r.item(Category::kActivations, static_cast<size_t>(n * C) * 4));  // logits of a group
  r.persist(r.item(Category::kWorkspace, static_cast<size_t>(n * C) * 4));    // their gradient
  r.persist(r.item(Category::kWorkspace, static_cast<size_t>(slice * D) * pb));  // the pooled gradient
  if (bf16_output(w)) {
    r.persist(r.item(Category::kActivations, static_cast<size_t>(std::max(n, eval_group) * D) * 4));
    r.persist(r.item(Category::kWorkspace, static_cast<size_t>(n * D) * 4));
    r.persist(r.item(Category::kWorkspace, bf16_scratch_floats(w) * 4));
  }
  const MlpItems h = mlp_items(r, head, n, 4);
  r.phase("embedding forward", {});
  r.phase("head forward", concat({&h.saved, &h.fwd}));
  r.phase("head backward", concat({&h.saved, &h.bwd}));
  r.phase("embedding update", staging);
  if (eval_group > 0) {
    const MlpItems e = mlp_items(r, head, eval_group, 4);
    r.phase("evaluation", e.fwd);  // eval mode keeps nothing for a backward
  }
  out.device_bytes_moved_per_step += 3.0 * static_cast<double>(slice * D) * static_cast<double>(pb) + static_cast<double>(params) * 4 * 4;
}

// No dense part: the output of a micro-batch (kActivations) and its gradient (kGradients) in the
// workload's precision: fp32 as forward writes them, or bf16 (forward_bf16 / accumulate_bf16,
// with their fp32 scratch of a chunk of bags, kWorkspace). One update per step. One fp32
// micro-batch: the gradient of the whole batch's output is alive in the update. By row (several
// micro-batches, or bf16): each micro-batch's output gradient is summed into the tables' per-row
// sums (plan_accumulation) and freed before the next. Traffic: the output written, its gradient
// written and read, at the precision's bytes; the scratch's round trips are not counted (a few
// MiB reused chunk after chunk: in the device's L2, docs/plan.md).
void plan_embedding_only(const Workload& w, const OutputFloats& of, bool by_row, const std::vector<Item>& staging, Replay& r,
                         Prediction& out) {
  const size_t pb = amp::precision_bytes(w.precision);
  std::vector<Item> step = {r.item(Category::kActivations, of.micro * pb), r.item(Category::kGradients, (by_row ? of.micro : of.batch) * pb)};
  if (bf16_output(w)) step.push_back(r.item(Category::kWorkspace, bf16_scratch_floats(w) * 4));
  r.phase("embedding forward + backward of a micro-batch", step);
  std::vector<Item> upd = staging;
  if (!by_row) upd.push_back(step[1]);
  r.phase("embedding update", upd);
  out.device_bytes_moved_per_step += 3.0 * static_cast<double>(of.batch) * static_cast<double>(pb);
}

// The CTR model's layers: the interaction and the bottom and top MLPs.
struct CtrLayers {
  nn::InteractionOptions io;
  int64_t idim = 0;  // the interaction's output width
  nn::MlpOptions bottom, top;
};

Result<CtrLayers> ctr_layers(const Workload& w) {
  const int64_t F = static_cast<int64_t>(w.tables.size()), D = w.tables[0].dim;
  CtrLayers l;
  l.io.kind = w.interaction;
  l.io.num_features = F;
  l.io.embedding_dim = D;
  l.io.dense_dim = w.bottom_mlp.back();
  l.io.precision = w.precision;
  if (l.io.kind == nn::InteractionKind::kDot && l.io.dense_dim != D)
    return invalid_argument("memory model: interaction dot needs the bottom MLP to end in the embedding dim");
  l.idim = nn::interaction_output_dim(l.io);
  l.bottom.widths = {w.num_dense};
  l.bottom.widths.insert(l.bottom.widths.end(), w.bottom_mlp.begin(), w.bottom_mlp.end());
  l.bottom.relu_after_last = true;
  l.top.widths = {l.idim};
  l.top.widths.insert(l.top.widths.end(), w.top_mlp.begin(), w.top_mlp.end());
  l.top.widths.push_back(1);
  for (nn::MlpOptions* m : {&l.bottom, &l.top}) {
    m->checkpoint_activations = w.checkpoint_activations;
    m->precision = w.precision;
  }
  return l;
}

// The CTR model (CtrModel::train_step): the MLPs' parameters, gradients and state, CtrModel's
// buffers, and a step's phases.
Status plan_ctr_model(const Workload& w, const StepShape& sh, const std::vector<Item>& staging, Replay& r, Prediction& out) {
  const int64_t k = w.micro_batches, n = sh.n;
  LEANEMB_ASSIGN_OR_RETURN(const CtrLayers l, ctr_layers(w));
  model::CtrModelOptions mo;
  mo.num_sparse = static_cast<int>(w.tables.size());
  mo.embedding_dim = w.tables[0].dim;
  mo.bottom_hidden = w.bottom_mlp;
  const model::CtrBufferFloats cb = model::ctr_buffer_floats(mo, l.idim, sh.slice, n);
  // Dense layers live where compute runs (the tier of kActivations); their optimizer's state
  // where kOptimizerState is placed.
  const size_t params = nn::mlp_parameter_floats(l.bottom) + nn::mlp_parameter_floats(l.top);
  r.persist(r.item(Category::kWeights, params * 4, Category::kActivations));
  r.persist(r.item(Category::kGradients, params * 4, Category::kActivations));
  // Gradient groups (or shards): a slot per group here plus their sum (nn/grad_groups.h).
  if (w.grad_groups > 1 || w.num_shards > 1)
    r.persist(r.item(Category::kGradients, static_cast<size_t>(sh.groups_here + 1) * params * 4, Category::kActivations));
  r.persist(r.item(Category::kOptimizerState,
                   (static_cast<size_t>(nn::dense_state_arrays(w.dense_optimizer)) * params + nn::kStepLimbFloats) * 4));
  // CtrModel's buffers, kept between steps.
  for (auto [c, f] : {std::pair{Category::kActivations, cb.pooled}, {Category::kActivations, cb.z},
                      {Category::kActivations, cb.inter}, {Category::kActivations, cb.logits},
                      {Category::kGradients, sh.by_row ? cb.grad_pooled_micro : cb.grad_pooled}, {Category::kWorkspace, cb.dlogits},
                      {Category::kWorkspace, cb.dinter}, {Category::kWorkspace, cb.dz}})
    r.persist(r.item(c, f * 4));

  const size_t pb = amp::precision_bytes(w.precision);
  const MlpItems b = mlp_items(r, l.bottom, n, pb), t = mlp_items(r, l.top, n, pb);
  const std::vector<Item> i_fwd{r.item(Category::kWorkspace, nn::interaction_scratch_floats(l.io, n, false) * 4)};
  const std::vector<Item> i_bwd{r.item(Category::kWorkspace, nn::interaction_scratch_floats(l.io, n, true) * 4)};
  r.phase("embedding forward", {});
  r.phase("bottom MLP forward", concat({&b.saved, &b.fwd}));
  r.phase("interaction forward", concat({&b.saved, &i_fwd}));
  r.phase("top MLP forward", concat({&b.saved, &t.saved, &t.fwd}));
  r.phase("top MLP backward", concat({&b.saved, &t.saved, &t.bwd}));
  r.phase("interaction backward", concat({&b.saved, &i_bwd}));
  r.phase("bottom MLP backward", concat({&b.saved, &b.bwd}));
  r.phase("embedding update", staging);
  // Activations written and read back, the pooled gradient written, reduced and read.
  size_t act = 0;
  for (const Item& i : concat({&b.saved, &t.saved})) act += i.bytes;
  out.device_bytes_moved_per_step += 2.0 * static_cast<double>(act) * static_cast<double>(k) +
                                     3.0 * static_cast<double>(cb.pooled + cb.grad_pooled) * 4 +
                                     static_cast<double>(params) * 4 * 4 * static_cast<double>(k);
  if (w.checkpoint_activations) {
    for (const Item& i : b.bwd) if (i.category == Category::kActivations) out.device_bytes_moved_per_step += 2.0 * i.bytes * k;
    for (const Item& i : t.bwd) if (i.category == Category::kActivations) out.device_bytes_moved_per_step += 2.0 * i.bytes * k;
  }
  return Status();
}

// One step's replay: the step's shape, the tables, the shards' exchange, the dense part.
Result<Prediction> predict_impl(const Workload& w, Estimate est, bool dense_table_gradient) {
  LEANEMB_RETURN_IF_ERROR(validate(w));
  Prediction out;
  Replay r(w.placement);
  const StepShape sh = step_shape(w);
  LEANEMB_ASSIGN_OR_RETURN(const std::vector<TableStep> ts, plan_tables(w, sh, est, dense_table_gradient, r, out));
  const std::vector<Item> staging = update_staging(ts, r);
  const OutputFloats of = output_floats(w, sh.n, est);
  LEANEMB_RETURN_IF_ERROR(plan_comm(w, sh.slice, est, of.batch, r, out));
  if (w.kind == WorkloadKind::kText) plan_text_model(w, sh, staging, r, out);
  else if (w.kind == WorkloadKind::kEmbeddingOnly) plan_embedding_only(w, of, sh.by_row, staging, r, out);
  else LEANEMB_RETURN_IF_ERROR(plan_ctr_model(w, sh, staging, r, out));
  r.finish(&out);
  return out;
}

}  // namespace

Result<Prediction> predict_memory(const Workload& w, Estimate estimate) {
  LEANEMB_ASSIGN_OR_RETURN(Prediction p, predict_impl(w, estimate, false));
  if (w.run_steps > 0 && w.track_changed_rows) {
    LEANEMB_ASSIGN_OR_RETURN(CheckpointBytes cb, checkpoint_bytes(w, 1));
    p.sparse_base_bytes = cb.sparse_base / static_cast<double>(w.num_shards);
  }
  return p;
}

Result<Prediction> predict_naive_baseline(const Workload& w) { return predict_impl(naive_workload(w), Estimate::kWorstCase, true); }

}  // namespace leanemb::plan
