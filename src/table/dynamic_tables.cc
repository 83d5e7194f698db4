// EmbeddingCollection's dynamic tables (TableDynamicOptions, docs/tiered.md "Dynamic tables in a
// collection"): an IdMap per table turns the batch's raw ids into rows before anything else
// (bounds check excepted) sees them; the rest of the engine works on rows as usual.
//
// Invariants:
// - forward() maps each dynamic table's ids exactly once (IdMap::map, step = step() + 1: the
//   step of the update that follows), initializes every row assigned by that call from its raw
//   id before any kernel or cache acquire reads it, and keeps (raw ids, rows) in dyn_buffers
//   slots 4t / 4t + 1 with fwd_ids[t] = their count.
// - An evaluation forward (ForwardMode::kEval) only calls IdMap::find: no IdMap, row or kept
//   mapping changes (its scratch is backward_update's slots 4t + 2 / 4t + 3), and ids without a
//   row are dropped from their bags as rejected ids are.
// - backward_update() never changes the IdMap's counts: it reuses the kept mapping when the
//   batch has the same raw ids (this matters when an id is admitted in the middle of a batch:
//   its earlier occurrences read zeros in the forward and must get no gradient), else find().
//   After a successful update end_step(step()) expires rows, and the kept mapping is dropped
//   (an expired row may be reassigned by the next forward).
// - Rows are never written by eviction: a freed row keeps its old bytes until it is assigned
//   again, and assignment overwrites the whole fat row (weights and optimizer state).

#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "core/rng.h"
#include "table/collection_impl.h"

namespace leanemb {

namespace {

constexpr size_t kDynSlots = kDynamicIdBuffers;  // the planner counts them (table/step_sizes.h)
enum DynSlot : size_t { kFwdRaw, kFwdRows, kBwdRaw, kBwdRows };
size_t dyn_slot(int t, DynSlot s) { return static_cast<size_t>(t) * kDynSlots + s; }

Status table_error(const std::string& name, const Status& s) {
  return Status(s.code(), "table '" + name + "' (dynamic): " + s.message());
}

}  // namespace

uint32_t dynamic_partition(int64_t raw_id, uint32_t partitions) {
  if (partitions <= 1) return 0;
  return static_cast<uint32_t>(mix64(static_cast<uint64_t>(raw_id) ^ 0x7061727469746e73ull) % partitions);
}

namespace {
// The IdMap options of each partition of a dynamic table of `num_rows` rows, `held` partitions here.
Result<tiered::IdMapOptions> partition_map_options(const TableDynamicOptions& d, int64_t num_rows, uint32_t held) {
  tiered::IdMapOptions mo;
  mo.capacity_rows = num_rows / held;
  mo.min_count = d.min_count;
  // Each partition filters its own ids: the table's counters are shared out.
  mo.bloom_counters = std::max<uint64_t>(d.bloom_counters / d.partitions, 64);
  mo.bloom_hashes = d.bloom_hashes;
  mo.bloom_counter_bits = d.min_count > 15 ? 8 : 4;
  mo.eviction = d.eviction;
  mo.max_age_steps = d.max_age_steps;
  return mo;
}
}  // namespace

size_t dynamic_table_host_bytes(const TableDynamicOptions& d, int64_t num_rows, uint32_t held_partitions) {
  const uint32_t held = held_partitions ? held_partitions : std::max<uint32_t>(d.partitions, 1);
  auto mo = partition_map_options(d, num_rows, held);
  const size_t maps = mo.ok() ? held * tiered::IdMap::allocated_bytes(mo.value()) : 0;
  return maps + static_cast<size_t>(num_rows) * 8;
}

Result<std::unique_ptr<DynamicIds>> DynamicIds::create(const TableOptions& to, uint64_t seed, int table, Allocator* host) {
  const TableDynamicOptions& d = to.dynamic;
  auto ids = std::make_unique<DynamicIds>();
  ids->partitions_ = d.partitions;
  ids->first_ = to.shard.first_partition;
  const uint32_t held = to.shard.held_partitions ? to.shard.held_partitions : d.partitions;
  ids->part_rows_ = to.num_rows / held;
  LEANEMB_ASSIGN_OR_RETURN(tiered::IdMapOptions mo, partition_map_options(d, to.num_rows, held));
  // Distinct tables (and partitions) hash ids independently (a collision pattern in one is not
  // in another); partition 0 keeps the seed of a table without partitions.
  const uint64_t table_seed = seed ^ (0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(table) + 1));
  for (uint32_t k = 0; k < held; ++k) {
    const uint32_t g = ids->first_ + k;
    mo.seed = table_seed ^ (g ? mix64(g) : 0);
    LEANEMB_ASSIGN_OR_RETURN(tiered::IdMap m, tiered::IdMap::create(mo, host));
    ids->maps_.push_back(std::move(m));
  }
  LEANEMB_ASSIGN_OR_RETURN(ids->row_keys_, host->allocate(static_cast<size_t>(to.num_rows) * 8, Category::kRowCache));
  std::fill_n(ids->row_keys_.as<int64_t>(), to.num_rows, int64_t{-1});
  return ids;
}

void DynamicIds::track(const tiered::MapReport& r, int64_t base, std::vector<tiered::RowAssignment>* assigned) {
  int64_t* keys = row_keys_.as<int64_t>();
  for (const tiered::RowAssignment& e : r.evicted) keys[base + e.row] = -1;
  for (const tiered::RowAssignment& a : r.assigned) {
    keys[base + a.row] = a.raw_id;
    if (assigned) assigned->push_back({base + a.row, a.raw_id});
  }
}

Status DynamicIds::map(std::span<const int64_t> raw_ids, int64_t step, std::span<int64_t> rows_out,
                       std::vector<tiered::RowAssignment>* assigned) {
  assigned->clear();
  const size_t n = raw_ids.size();
  if (maps_.size() == 1) {
    if (partitions_ > 1)
      for (int64_t id : raw_ids)
        if (dynamic_partition(id, partitions_) != first_) return internal_error("dynamic: id routed to a partition not held here");
    LEANEMB_RETURN_IF_ERROR(maps_[0].map(raw_ids, step, rows_out, &report_));
    track(report_, 0, assigned);
    return Status();
  }
  // Each partition maps its own ids, in their order in the batch.
  part_of_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t g = dynamic_partition(raw_ids[i], partitions_);
    if (g < first_ || g - first_ >= maps_.size()) return internal_error("dynamic: id routed to a partition not held here");
    part_of_[i] = g - first_;
  }
  for (uint32_t k = 0; k < maps_.size(); ++k) {
    ids_.clear();
    for (size_t i = 0; i < n; ++i)
      if (part_of_[i] == k) ids_.push_back(raw_ids[i]);
    if (ids_.empty()) continue;
    rows_.resize(ids_.size());
    LEANEMB_RETURN_IF_ERROR(maps_[k].map(ids_, step, rows_, &report_));
    const int64_t base = static_cast<int64_t>(k) * part_rows_;
    track(report_, base, assigned);
    size_t j = 0;
    for (size_t i = 0; i < n; ++i)
      if (part_of_[i] == k) rows_out[i] = rows_[j] < 0 ? -1 : base + rows_[j], ++j;
  }
  return Status();
}

int64_t DynamicIds::find(int64_t raw_id) const {
  const uint32_t g = dynamic_partition(raw_id, partitions_);
  if (g < first_ || g - first_ >= maps_.size()) return -1;
  const int64_t r = maps_[g - first_].find(raw_id);
  return r < 0 ? -1 : static_cast<int64_t>(g - first_) * part_rows_ + r;
}

Status DynamicIds::end_step(int64_t step) {
  for (uint32_t k = 0; k < maps_.size(); ++k) {
    LEANEMB_RETURN_IF_ERROR(maps_[k].end_step(step, &report_));
    track(report_, static_cast<int64_t>(k) * part_rows_, nullptr);
  }
  return Status();
}

DynamicTableStats DynamicIds::stats() const {
  DynamicTableStats s;
  for (const tiered::IdMap& m : maps_) {
    const tiered::IdMapCounters& c = m.counters();
    s.admitted += c.admitted;
    s.readmitted += c.readmitted;
    s.rejected_min_count += c.rejected_min_count;
    s.rejected_capacity += c.rejected_capacity;
    s.evicted += c.evicted;
    s.expired += c.expired;
    s.live_rows += c.live_rows;
  }
  s.held_bytes = held_bytes();
  return s;
}

size_t DynamicIds::held_bytes() const {
  size_t b = row_keys_.size_bytes();
  for (const tiered::IdMap& m : maps_) b += m.held_bytes();
  return b;
}

std::vector<uint8_t> DynamicIds::serialize(uint32_t k) const { return maps_[k].serialize(); }

Status DynamicIds::deserialize(std::span<const uint32_t> parts, std::span<const std::span<const uint8_t>> bytes,
                               Allocator* host) {
  std::vector<tiered::IdMap> loaded;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] >= maps_.size()) return out_of_range("partition " + std::to_string(parts[i]) + " is not held here");
    LEANEMB_ASSIGN_OR_RETURN(tiered::IdMap m, tiered::IdMap::deserialize(bytes[i], host));
    if (m.options().capacity_rows != part_rows_)
      return invalid_argument("the saved map has " + std::to_string(m.options().capacity_rows) + " rows, the partition " +
                              std::to_string(part_rows_));
    loaded.push_back(std::move(m));
  }
  for (size_t i = 0; i < parts.size(); ++i) {  // all parsed: nothing can fail now
    const uint32_t k = parts[i];
    maps_[k] = std::move(loaded[i]);
    int64_t* keys = row_keys_.as<int64_t>() + static_cast<int64_t>(k) * part_rows_;
    for (int64_t r = 0; r < part_rows_; ++r) keys[r] = maps_[k].raw_id_of(r);
  }
  return Status();
}

Status EmbeddingCollection::Impl::create_id_map(int t) {
  const TableOptions& to = options.tables[t];
  Allocator* host = memory ? memory->host() : alloc;
  auto m = DynamicIds::create(to, options.seed, t, host);
  if (!m.ok()) return table_error(to.name, m.status());
  tables[t].id_map = std::move(m).value();
  has_dynamic = true;
  fwd_ids.assign(options.tables.size(), -1);
  return Status();
}

namespace {

// Replaces feature `in`'s ids by `rows` (its slice of the table's mapping) in `out`, dropping
// ids without a row (-1). Copies are taken from `ws`; `kept` gets the mask of kept positions.
Status rows_for_feature(const FeatureInput& in, int64_t batch_size, PoolingMode pooling, const int64_t* rows,
                        Workspace* ws, FeatureInput* out, std::span<const uint8_t>* kept) {
  const size_t m = in.ids.size();
  size_t missing = 0;
  for (size_t i = 0; i < m; ++i) missing += rows[i] < 0 ? 1 : 0;
  if (missing == 0) {
    out->ids = std::span<const int64_t>(rows, m);
    return Status();
  }
  const bool mean = pooling == PoolingMode::kMean;
  const bool weighted = !in.weights.empty() || mean;  // mean bags that lost ids get scaled weights
  LEANEMB_ASSIGN_OR_RETURN(std::span<int64_t> ids, ws->take<int64_t>(m - missing));
  LEANEMB_ASSIGN_OR_RETURN(std::span<int64_t> offs, ws->take<int64_t>(static_cast<size_t>(batch_size) + 1));
  LEANEMB_ASSIGN_OR_RETURN(std::span<uint8_t> mask, ws->take<uint8_t>(m));
  std::span<float> w;
  if (weighted) {
    LEANEMB_ASSIGN_OR_RETURN(w, ws->take<float>(m - missing));
  }
  int64_t n = 0;
  offs[0] = 0;
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t lo = in.offsets[b], hi = in.offsets[b + 1], first = n;
    for (int64_t i = lo; i < hi; ++i) {
      mask[i] = rows[i] >= 0 ? 1 : 0;
      if (rows[i] < 0) continue;
      if (weighted) w[n] = in.weights.empty() ? 1.0f : in.weights[i];
      ids[n++] = rows[i];
    }
    offs[b + 1] = n;
    // kMean divides by the kept length; scaling by kept / original makes it the original one.
    if (mean && n > first && n - first < hi - lo) {
      const float scale = static_cast<float>(n - first) / static_cast<float>(hi - lo);
      for (int64_t j = first; j < n; ++j) w[j] *= scale;
    }
  }
  out->ids = ids;
  out->offsets = offs;
  out->weights = weighted ? std::span<const float>(w) : std::span<const float>();
  *kept = mask;
  return Status();
}

}  // namespace

Status EmbeddingCollection::Impl::map_dynamic(const SparseBatch& b, DynamicUse use, DynamicBatch* out) {
  out->batch = b;
  if (!has_dynamic) return Status();
  out->kept.assign(b.features.size(), {});
  for (int t = 0; t < static_cast<int>(tables.size()); ++t) {
    TableState& ts = tables[t];
    if (!ts.id_map) continue;
    const TableOptions& to = options.tables[t];
    const size_t n = table_nnz(options, b, t);
    if (use == DynamicUse::kTrainForward) fwd_ids[t] = -1;
    if (n == 0) continue;
    int64_t* rows = nullptr;
    if (use == DynamicUse::kEvalForward) {
      // Lookup only, in backward_update's scratch slots: the kept mapping of the last training
      // forward, the IdMap (counts, ages, admission filter) and the rows stay as they are.
      LEANEMB_ASSIGN_OR_RETURN(void* raw_p, dyn_buffers.get(dyn_slot(t, kBwdRaw), n * 8, Category::kWorkspace, alloc));
      LEANEMB_ASSIGN_OR_RETURN(void* rows_p, dyn_buffers.get(dyn_slot(t, kBwdRows), n * 8, Category::kWorkspace, alloc));
      int64_t* raw = static_cast<int64_t*>(raw_p);
      rows = static_cast<int64_t*>(rows_p);
      gather_table_ids(options, b, t, raw);
      for (size_t i = 0; i < n; ++i) rows[i] = ts.id_map->find(raw[i]);
    } else if (use == DynamicUse::kTrainForward) {
      LEANEMB_ASSIGN_OR_RETURN(void* raw_p, dyn_buffers.get(dyn_slot(t, kFwdRaw), n * 8, Category::kWorkspace, alloc));
      LEANEMB_ASSIGN_OR_RETURN(void* rows_p, dyn_buffers.get(dyn_slot(t, kFwdRows), n * 8, Category::kWorkspace, alloc));
      int64_t* raw = static_cast<int64_t*>(raw_p);
      rows = static_cast<int64_t*>(rows_p);
      gather_table_ids(options, b, t, raw);
      std::vector<tiered::RowAssignment>& assigned = assigned_rows;
      const Status st = ts.id_map->map(std::span<const int64_t>(raw, n), step + 1, std::span<int64_t>(rows, n), &assigned);
      if (!st.ok()) return table_error(to.name, st);
      fwd_ids[t] = static_cast<int64_t>(n);
      // New rows: the initializer's values for their raw ids (computed in parallel, then written
      // through the table's storage: slot or store for a cached table).
      const size_t a = assigned.size();
      if (a > 0) {
        const size_t stride = ts.layout.stride_bytes;
        Workspace ws(alloc);
        LEANEMB_ASSIGN_OR_RETURN(std::span<uint8_t> fat, ws.take<uint8_t>(a * stride));
        parallel_for(static_cast<int64_t>(a), grain_for(16 * to.dim), [&](int64_t b, int64_t e, int) {
          std::vector<float> tmp(static_cast<size_t>(to.dim));
          for (int64_t i = b; i < e; ++i)
            init_row(to, ts.layout, options.seed, static_cast<uint32_t>(t), assigned[static_cast<size_t>(i)].raw_id,
                     tmp.data(), fat.data() + static_cast<size_t>(i) * stride, *backend);
        }, num_threads);
        ts.initial_rows = false;
        for (size_t i = 0; i < a; ++i) {
          const Status w = ts.residency->write_row(assigned[i].row, fat.data() + i * stride, workspace_tier());
          if (!w.ok()) return table_error(to.name, w);
        }
      }
    } else {
      LEANEMB_ASSIGN_OR_RETURN(void* raw_p, dyn_buffers.get(dyn_slot(t, kBwdRaw), n * 8, Category::kWorkspace, alloc));
      int64_t* raw = static_cast<int64_t*>(raw_p);
      gather_table_ids(options, b, t, raw);
      if (fwd_ids[t] == static_cast<int64_t>(n)) {
        // dyn_buffers.get() of an already large enough slot returns it unchanged.
        LEANEMB_ASSIGN_OR_RETURN(void* fraw, dyn_buffers.get(dyn_slot(t, kFwdRaw), n * 8, Category::kWorkspace, alloc));
        if (std::memcmp(fraw, raw, n * 8) == 0) {
          LEANEMB_ASSIGN_OR_RETURN(void* frows, dyn_buffers.get(dyn_slot(t, kFwdRows), n * 8, Category::kWorkspace, alloc));
          rows = static_cast<int64_t*>(frows);
        }
      }
      if (rows == nullptr) {
        LEANEMB_ASSIGN_OR_RETURN(void* rows_p, dyn_buffers.get(dyn_slot(t, kBwdRows), n * 8, Category::kWorkspace, alloc));
        rows = static_cast<int64_t*>(rows_p);
        for (size_t i = 0; i < n; ++i) rows[i] = ts.id_map->find(raw[i]);
      }
    }
    size_t k = 0;
    for (size_t f = 0; f < options.features.size(); ++f) {
      if (options.features[f].table != t) continue;
      const FeatureInput& in = b.features[f];
      LEANEMB_RETURN_IF_ERROR(rows_for_feature(in, b.batch_size, options.features[f].pooling, rows + k, &out->ws,
                                               &out->batch.features[f], &out->kept[f]));
      k += in.ids.size();
    }
  }
  return Status();
}

void EmbeddingCollection::Impl::expand_seq_outputs(const DynamicBatch& d, std::span<const std::span<float>> seq_out) const {
  size_t s = 0;
  for (size_t f = 0; f < options.features.size(); ++f) {
    if (options.features[f].pooling != PoolingMode::kNone) continue;
    const std::span<const uint8_t> kept = d.kept[f];
    float* out = seq_out[s++].data();
    if (kept.empty()) continue;
    const size_t dim = static_cast<size_t>(options.tables[options.features[f].table].dim);
    // The kernel wrote the k kept rows to out[0, k); position i >= its kept index, so moving
    // from the last position down never overwrites a row still to be moved.
    size_t k = d.batch.features[f].ids.size();
    for (size_t i = kept.size(); i-- > 0;) {
      if (kept[i]) {
        --k;
        if (k != i) std::memmove(out + i * dim, out + k * dim, dim * 4);
      } else {
        std::memset(out + i * dim, 0, dim * 4);
      }
    }
  }
}

Status EmbeddingCollection::Impl::compact_seq_grads(DynamicBatch* d, std::span<const std::span<const float>> grad_seq,
                                                    std::vector<std::span<const float>>* out) {
  out->assign(grad_seq.begin(), grad_seq.end());
  size_t s = 0;
  for (size_t f = 0; f < options.features.size(); ++f) {
    if (options.features[f].pooling != PoolingMode::kNone) continue;
    const size_t si = s++;
    const std::span<const uint8_t> kept = d->kept[f];
    if (kept.empty()) continue;
    const size_t dim = static_cast<size_t>(options.tables[options.features[f].table].dim);
    LEANEMB_ASSIGN_OR_RETURN(std::span<float> g, d->ws.take<float>(d->batch.features[f].ids.size() * dim));
    size_t k = 0;
    for (size_t i = 0; i < kept.size(); ++i)
      if (kept[i]) std::memcpy(g.data() + (k++) * dim, grad_seq[si].data() + i * dim, dim * 4);
    (*out)[si] = g;
  }
  return Status();
}

Status EmbeddingCollection::Impl::end_dynamic_step() {
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!tables[t].id_map) continue;
    fwd_ids[t] = -1;  // rows may be freed now: the next update maps again
    const Status st = tables[t].id_map->end_step(step);
    if (!st.ok()) return table_error(options.tables[t].name, st);
  }
  return Status();
}

namespace {

Result<DynamicIds*> dynamic_ids(const EmbeddingCollection& c, const std::vector<TableState>& tables, int table,
                                const char* what) {
  if (table < 0 || table >= c.num_tables()) return out_of_range(std::string(what) + ": unknown table " + std::to_string(table));
  if (!tables[table].id_map)
    return failed_precondition(std::string(what) + ": table '" + c.options().tables[table].name + "' is not dynamic");
  return tables[table].id_map.get();
}

// save_dynamic_state's bytes: "LEDP", u32 partitions held, then per partition u64 length and the
// IdMap's own (checksummed) bytes.
constexpr char kDynMagic[4] = {'L', 'E', 'D', 'P'};

}  // namespace

Result<DynamicTableStats> EmbeddingCollection::dynamic_stats(int table) const {
  LEANEMB_ASSIGN_OR_RETURN(DynamicIds * m, dynamic_ids(*this, impl_->tables, table, "dynamic_stats"));
  return m->stats();
}

Result<int64_t> EmbeddingCollection::dynamic_row(int table, int64_t raw_id) const {
  LEANEMB_ASSIGN_OR_RETURN(DynamicIds * m, dynamic_ids(*this, impl_->tables, table, "dynamic_row"));
  return m->find(raw_id);
}

Result<std::vector<uint8_t>> EmbeddingCollection::save_dynamic_partition(int table, uint32_t k) const {
  LEANEMB_ASSIGN_OR_RETURN(DynamicIds * m, dynamic_ids(*this, impl_->tables, table, "save_dynamic_partition"));
  if (k >= m->held_partitions()) return out_of_range("save_dynamic_partition: partition " + std::to_string(k) + " not held");
  return m->serialize(k);
}

Status EmbeddingCollection::load_dynamic_partition(int table, uint32_t k, std::span<const uint8_t> bytes) {
  Impl& im = *impl_;
  LEANEMB_ASSIGN_OR_RETURN(DynamicIds * m, dynamic_ids(*this, im.tables, table, "load_dynamic_partition"));
  if (k >= m->held_partitions()) return out_of_range("load_dynamic_partition: partition " + std::to_string(k) + " not held");
  Allocator* host = im.memory ? im.memory->host() : im.alloc;
  const std::span<const uint8_t> one[1] = {bytes};
  const Status st = m->deserialize(std::span<const uint32_t>(&k, 1), one, host);
  if (!st.ok()) return table_error(im.options.tables[table].name, st);
  im.fwd_ids[table] = -1;
  return Status();
}

Result<std::vector<uint8_t>> EmbeddingCollection::save_dynamic_state(int table) const {
  LEANEMB_ASSIGN_OR_RETURN(DynamicIds * m, dynamic_ids(*this, impl_->tables, table, "save_dynamic_state"));
  std::vector<uint8_t> out(kDynMagic, kDynMagic + 4);
  const uint32_t held = m->held_partitions();
  out.insert(out.end(), reinterpret_cast<const uint8_t*>(&held), reinterpret_cast<const uint8_t*>(&held) + 4);
  for (uint32_t k = 0; k < held; ++k) {
    const std::vector<uint8_t> part = m->serialize(k);
    const uint64_t len = part.size();
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(&len), reinterpret_cast<const uint8_t*>(&len) + 8);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

Status EmbeddingCollection::load_dynamic_state(int table, std::span<const uint8_t> bytes) {
  LEANEMB_ASSIGN_OR_RETURN(DynamicIds * m, dynamic_ids(*this, impl_->tables, table, "load_dynamic_state"));
  const std::string where = "load_dynamic_state: table '" + impl_->options.tables[table].name + "': ";
  uint32_t held = 0;
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kDynMagic, 4) != 0)
    return Status(StatusCode::kDataLoss, where + "not a dynamic-table state");
  std::memcpy(&held, bytes.data() + 4, 4);
  if (held != m->held_partitions())
    return invalid_argument(where + "the state holds " + std::to_string(held) + " partitions, the table " +
                            std::to_string(m->held_partitions()));
  // Check every part's framing first, so that a truncated state changes nothing.
  std::vector<std::span<const uint8_t>> parts;
  size_t at = 8;
  for (uint32_t k = 0; k < held; ++k) {
    uint64_t len = 0;
    if (bytes.size() - at < 8) return Status(StatusCode::kDataLoss, where + "truncated");
    std::memcpy(&len, bytes.data() + at, 8);
    at += 8;
    if (bytes.size() - at < len) return Status(StatusCode::kDataLoss, where + "truncated");
    parts.push_back(bytes.subspan(at, len));
    at += len;
  }
  if (at != bytes.size()) return Status(StatusCode::kDataLoss, where + "bytes after the last partition");
  std::vector<uint32_t> ks(held);
  for (uint32_t k = 0; k < held; ++k) ks[k] = k;
  Allocator* host = impl_->memory ? impl_->memory->host() : impl_->alloc;
  const Status st = m->deserialize(ks, parts, host);
  if (!st.ok()) return table_error(impl_->options.tables[table].name, st);
  impl_->fwd_ids[table] = -1;
  return Status();
}

}  // namespace leanemb
