// EmbeddingCollection's dynamic tables (TableDynamicOptions, docs/tiered.md "Dynamic tables in a
// collection"): an IdMap per table turns the batch's raw ids into rows before anything else
// (bounds check excepted) sees them; the rest of the engine works on rows as usual.
//
// Invariants:
// - forward() maps each dynamic table's ids exactly once (IdMap::map, step = step() + 1: the
//   step of the update that follows), initializes every row assigned by that call from its raw
//   id before any kernel or cache acquire reads it, and keeps (raw ids, rows) in dyn_buffers
//   slots 4t / 4t + 1 with fwd_ids[t] = their count.
// - backward_update() never changes the IdMap's counts: it reuses the kept mapping when the
//   batch has the same raw ids (this matters when an id is admitted in the middle of a batch:
//   its earlier occurrences read zeros in the forward and must get no gradient), else find().
//   After a successful update end_step(step()) expires rows, and the kept mapping is dropped
//   (an expired row may be reassigned by the next forward).
// - Rows are never written by eviction: a freed row keeps its old bytes until it is assigned
//   again, and assignment overwrites the whole fat row (weights and optimizer state).
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "table/collection_impl.h"

namespace leanemb {

namespace {

constexpr size_t kDynSlots = 4;
enum DynSlot : size_t { kFwdRaw, kFwdRows, kBwdRaw, kBwdRows };
size_t dyn_slot(int t, DynSlot s) { return static_cast<size_t>(t) * kDynSlots + s; }

Status table_error(const std::string& name, const Status& s) {
  return Status(s.code(), "table '" + name + "' (dynamic): " + s.message());
}

}  // namespace

Status EmbeddingCollection::Impl::create_id_map(int t) {
  const TableOptions& to = options.tables[t];
  const TableDynamicOptions& d = to.dynamic;
  tiered::IdMapOptions mo;
  mo.capacity_rows = to.num_rows;
  mo.min_count = d.min_count;
  mo.bloom_counters = d.bloom_counters;
  mo.bloom_hashes = d.bloom_hashes;
  mo.bloom_counter_bits = d.min_count > 15 ? 8 : 4;
  LEANEMB_ASSIGN_OR_RETURN(mo.eviction, tiered::parse_eviction_policy(d.eviction));
  mo.max_age_steps = d.max_age_steps;
  // Distinct tables hash ids independently (a collision pattern in one is not in another).
  mo.seed = options.seed ^ (0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(t) + 1));
  Allocator* host = memory ? memory->host() : alloc;
  auto m = tiered::IdMap::create(mo, host);
  if (!m.ok()) return table_error(to.name, m.status());
  tables[t].id_map = std::make_unique<tiered::IdMap>(std::move(m).value());
  has_dynamic = true;
  fwd_ids.assign(options.tables.size(), -1);
  return Status();
}

Status EmbeddingCollection::Impl::write_fat_row(int t, int64_t row, const uint8_t* fat) {
  TableState& ts = tables[t];
  if (ts.cache) return ts.cache->write_row(row, fat);
  if (ts.split) {
    ts.scatter_fat(row, fat);
  } else {
    std::memcpy(ts.rows.as<uint8_t>() + static_cast<size_t>(row) * ts.layout.stride_bytes, fat, ts.layout.stride_bytes);
  }
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

Status EmbeddingCollection::Impl::map_dynamic(const SparseBatch& b, bool forward, DynamicBatch* out) {
  out->batch = b;
  if (!has_dynamic) return Status();
  out->kept.assign(b.features.size(), {});
  for (int t = 0; t < static_cast<int>(tables.size()); ++t) {
    TableState& ts = tables[t];
    if (!ts.id_map) continue;
    const TableOptions& to = options.tables[t];
    const size_t n = table_nnz(options, b, t);
    if (forward) fwd_ids[t] = -1;
    if (n == 0) continue;
    int64_t* rows = nullptr;
    if (forward) {
      LEANEMB_ASSIGN_OR_RETURN(void* raw_p, dyn_buffers.get(dyn_slot(t, kFwdRaw), n * 8, Category::kWorkspace, alloc));
      LEANEMB_ASSIGN_OR_RETURN(void* rows_p, dyn_buffers.get(dyn_slot(t, kFwdRows), n * 8, Category::kWorkspace, alloc));
      int64_t* raw = static_cast<int64_t*>(raw_p);
      rows = static_cast<int64_t*>(rows_p);
      gather_table_ids(options, b, t, raw);
      tiered::MapReport rep;
      const Status st = ts.id_map->map(std::span<const int64_t>(raw, n), step + 1, std::span<int64_t>(rows, n), &rep);
      if (!st.ok()) return table_error(to.name, st);
      fwd_ids[t] = static_cast<int64_t>(n);
      // New rows: the initializer's values for their raw ids (computed in parallel, then written
      // through the table's storage: slot or store for a cached table).
      const size_t a = rep.assigned.size();
      if (a > 0) {
        const size_t stride = ts.layout.stride_bytes;
        Workspace ws(alloc);
        LEANEMB_ASSIGN_OR_RETURN(std::span<uint8_t> fat, ws.take<uint8_t>(a * stride));
#pragma omp parallel num_threads(num_threads)
        {
          std::vector<float> tmp(static_cast<size_t>(to.dim));
#pragma omp for schedule(static)
          for (int64_t i = 0; i < static_cast<int64_t>(a); ++i)
            init_row_for_id(to, ts.layout, options.seed, static_cast<uint32_t>(t), rep.assigned[i].raw_id, tmp.data(),
                            fat.data() + static_cast<size_t>(i) * stride);
        }
        for (size_t i = 0; i < a; ++i) {
          const Status w = write_fat_row(t, rep.assigned[i].row, fat.data() + i * stride);
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
    const Status st = tables[t].id_map->end_step(step, nullptr);
    if (!st.ok()) return table_error(options.tables[t].name, st);
  }
  return Status();
}

namespace {

Result<tiered::IdMap*> dynamic_map(const EmbeddingCollection& c, const std::vector<TableState>& tables, int table,
                                   const char* what) {
  if (table < 0 || table >= c.num_tables()) return out_of_range(std::string(what) + ": unknown table " + std::to_string(table));
  if (!tables[table].id_map)
    return failed_precondition(std::string(what) + ": table '" + c.options().tables[table].name + "' is not dynamic");
  return tables[table].id_map.get();
}

}  // namespace

Result<DynamicTableStats> EmbeddingCollection::dynamic_stats(int table) const {
  LEANEMB_ASSIGN_OR_RETURN(tiered::IdMap * m, dynamic_map(*this, impl_->tables, table, "dynamic_stats"));
  const tiered::IdMapCounters& c = m->counters();
  DynamicTableStats s;
  s.admitted = c.admitted;
  s.readmitted = c.readmitted;
  s.rejected_min_count = c.rejected_min_count;
  s.rejected_capacity = c.rejected_capacity;
  s.evicted = c.evicted;
  s.expired = c.expired;
  s.live_rows = c.live_rows;
  s.held_bytes = m->held_bytes();
  return s;
}

Result<int64_t> EmbeddingCollection::dynamic_row(int table, int64_t raw_id) const {
  LEANEMB_ASSIGN_OR_RETURN(tiered::IdMap * m, dynamic_map(*this, impl_->tables, table, "dynamic_row"));
  return m->find(raw_id);
}

Result<std::vector<uint8_t>> EmbeddingCollection::save_dynamic_state(int table) const {
  LEANEMB_ASSIGN_OR_RETURN(tiered::IdMap * m, dynamic_map(*this, impl_->tables, table, "save_dynamic_state"));
  return m->serialize();
}

Status EmbeddingCollection::load_dynamic_state(int table, std::span<const uint8_t> bytes) {
  Impl& im = *impl_;
  LEANEMB_ASSIGN_OR_RETURN(tiered::IdMap * m, dynamic_map(*this, im.tables, table, "load_dynamic_state"));
  const std::string& name = im.options.tables[table].name;
  Allocator* host = im.memory ? im.memory->host() : im.alloc;
  auto loaded = tiered::IdMap::deserialize(bytes, host);
  if (!loaded.ok()) return table_error(name, loaded.status());
  if (loaded.value().options().capacity_rows != m->options().capacity_rows)
    return invalid_argument("load_dynamic_state: table '" + name + "' has " +
                            std::to_string(m->options().capacity_rows) + " rows, the saved map " +
                            std::to_string(loaded.value().options().capacity_rows));
  *m = std::move(loaded).value();
  im.fwd_ids[table] = -1;
  return Status();
}

}  // namespace leanemb
