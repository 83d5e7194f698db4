// EmbeddingCollection: creation (layouts, fat-row buffers, initializers), forward and row
// access. backward_update lives in backward.cc; the shared private state in collection_impl.h.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/enum_names.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "leanemb/embedding.h"
#include "table/batch_check.h"
#include "table/collection_impl.h"

namespace leanemb {


template <>
struct EnumNames<PoolingMode> {
  static constexpr std::string_view kWhat = "pooling";
  static constexpr EnumName<PoolingMode> kNames[] = {
      {PoolingMode::kSum, "sum", ""}, {PoolingMode::kMean, "mean", ""}, {PoolingMode::kNone, "none", ""}};
};

std::string_view pooling_name(PoolingMode p) { return enum_name(p); }
Result<PoolingMode> parse_pooling(std::string_view s) { return parse_enum<PoolingMode>(s); }

namespace {

Status validate_options(const CollectionOptions& o) {
  if (o.tables.empty()) return invalid_argument("collection has no tables");
  if (o.features.empty()) return invalid_argument("collection has no features");
  for (size_t t = 0; t < o.tables.size(); ++t) {
    const TableOptions& to = o.tables[t];
    const std::string name = "table '" + to.name + "' (index " + std::to_string(t) + ")";
    if (to.num_rows <= 0) return invalid_argument(name + ": num_rows must be > 0");
    const TableShardOptions& sh = to.shard;
    if (sh.key_stride < 1 || sh.key_offset < 0 || sh.global_rows < 0)
      return invalid_argument(name + ": shard key_stride must be >= 1, key_offset and global_rows >= 0");
    if (to.dim <= 0 || to.dim > 65536) return invalid_argument(name + ": dim must be in [1, 65536]");
    if (!dtype_traits(to.dtype).trainable && !to.frozen)
      return invalid_argument(name + ": " + std::string(dtype_name(to.dtype)) +
                              " rows are lookup-only; set frozen = true (or use fp32/fp16/bf16)");
    if (to.dynamic.enabled) {
      if (to.frozen)
        return invalid_argument(name + ": a dynamic table creates and trains rows on admission; it cannot be frozen");
      if (to.dynamic.eviction != EvictionPolicy::kAge && to.dynamic.eviction != EvictionPolicy::kLfu)
        return invalid_argument(name + ": dynamic: unknown eviction policy code " +
                                std::to_string(static_cast<int>(to.dynamic.eviction)));
      const uint32_t g = to.dynamic.partitions, held = sh.held_partitions ? sh.held_partitions : g;
      if (g < 1 || g > 65536 || held > g || sh.first_partition > g - held)
        return invalid_argument(name + ": dynamic: partitions must be in [1, 65536] (got " + std::to_string(g) +
                                ") and the held partitions within them");
      if (to.num_rows % held != 0)
        return invalid_argument(name + ": dynamic: the row capacity (" + std::to_string(to.num_rows) +
                                ") must be a multiple of the partitions held (" + std::to_string(held) + ")");
    }
  }
  for (size_t f = 0; f < o.features.size(); ++f) {
    const FeatureOptions& fo = o.features[f];
    if (fo.table < 0 || fo.table >= static_cast<int>(o.tables.size()))
      return invalid_argument("feature '" + fo.name + "' (index " + std::to_string(f) + ") refers to unknown table " +
                              std::to_string(fo.table) + " (the collection has " + std::to_string(o.tables.size()) +
                              " tables)");
  }
  return Status();
}

}  // namespace

EmbeddingCollection::EmbeddingCollection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EmbeddingCollection::~EmbeddingCollection() = default;

namespace {

// The "step" argument of row_key for initial values (training steps are far below it). The key
// is the row's global key: a dynamic table's raw id gets the bytes of the resident row `raw_id`.
constexpr uint64_t kInitStepRow = ~uint64_t{0};

// The initializer's values for one RNG key, stored into `row` (padding zeroed).
void init_row_keyed(const TableOptions& to, const RowLayout& l, uint32_t key, float* tmp, uint8_t* row,
                    const kernels::KernelBackend& be) {
  std::memset(row, 0, l.stride_bytes);
  const int64_t d = l.dim;
  auto u01 = [&](uint32_t c) { return (static_cast<float>(column_bits(key, c) >> 8) + 0.5f) * (1.0f / 16777216.0f); };
  switch (to.init.kind) {
    case InitKind::kZeros:
      for (int64_t j = 0; j < d; ++j) tmp[j] = 0.0f;
      break;
    case InitKind::kUniform: {
      const int64_t rows = to.shard.global_rows > 0 ? to.shard.global_rows : to.num_rows;
      const float bound = to.init.bound > 0.0f ? to.init.bound : 1.0f / std::sqrt(static_cast<float>(rows));
      be.uniform_fill(key, d, bound, tmp);
      break;
    }
    case InitKind::kNormal:
      for (int64_t j = 0; j < d; ++j) {
        const float a = u01(static_cast<uint32_t>(2 * j)), b = u01(static_cast<uint32_t>(2 * j + 1));
        const float z = std::sqrt(-2.0f * std::log(a)) * std::cos(6.28318530717958647692f * b);
        tmp[j] = to.init.mean + to.init.std * z;
      }
      break;
  }
  be.store_weights_rne(l, row, tmp);
}

}  // namespace

// Deterministic per-row initialization from the counter-based RNG.
void init_row(const TableOptions& to, const RowLayout& l, uint64_t seed, uint32_t table, int64_t key, float* tmp,
              uint8_t* row, const kernels::KernelBackend& backend) {
  init_row_keyed(to, l, row_key(seed, kInitStepRow, table, static_cast<uint64_t>(key)), tmp, row, backend);
}

void initial_row(const TableOptions& to, const RowLayout& l, uint64_t seed, uint32_t table, int64_t key, float* tmp,
                 uint8_t* row, const kernels::KernelBackend& backend) {
  if (to.dynamic.enabled) {
    std::memset(row, 0, l.stride_bytes);
    return;
  }
  init_row(to, l, seed, table, key, tmp, row, backend);
}


Result<std::unique_ptr<EmbeddingCollection>> EmbeddingCollection::create(const CollectionOptions& options,
                                                                         Allocator* allocator) {
  auto impl = std::make_unique<Impl>();
  impl->alloc = allocator ? allocator : default_host_allocator();
  return create_impl(options, std::move(impl));
}

Result<std::unique_ptr<EmbeddingCollection>> EmbeddingCollection::create(const CollectionOptions& options,
                                                                         MemorySystem* memory) {
  if (memory == nullptr) return invalid_argument("EmbeddingCollection::create: null MemorySystem");
  auto impl = std::make_unique<Impl>();
  impl->memory = memory;
  impl->sink.memory = memory;
  impl->alloc = memory->allocator_for(Category::kWorkspace);
  return create_impl(options, std::move(impl));
}

Result<std::unique_ptr<EmbeddingCollection>> EmbeddingCollection::create_impl(const CollectionOptions& options,
                                                                              std::unique_ptr<Impl> impl) {
  LEANEMB_RETURN_IF_ERROR(validate_options(options));
  impl->options = options;
  impl->num_threads = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  impl->backend = options.backend             ? options.backend
                  : options.use_reference_kernels ? &kernels::reference_backend()
                                                  : &kernels::cpu_backend();
  for (size_t t = 0; t < options.tables.size(); ++t) {
    const TableOptions& to = options.tables[t];
    TableState ts;
    auto layout = make_row_layout(to.dim, to.dtype, to.optimizer);
    if (!layout.ok())
      return Status(layout.status().code(), "table '" + to.name + "': " + layout.status().message());
    ts.layout = layout.value();
    ts.num_rows = to.num_rows;
    ts.key_stride = to.shard.key_stride;
    ts.key_offset = to.shard.key_offset;
    if (to.optimizer.kind == OptimizerKind::kSm3) {
      ts.sm3_col.assign(static_cast<size_t>(to.dim), 0.0f);
      ts.sm3_next.assign(static_cast<size_t>(to.dim), 0.0f);
    }
    // The rows, allocated and initialized where they live (a cache's on first touch); each row's
    // values depend only on (seed, table, row). A dynamic table's rows start as zeros: a row is
    // initialized from its raw id when one is admitted.
    table_internal::ResidencyContext rc;
    rc.options = to;
    rc.table = static_cast<int>(t);
    rc.seed = options.seed;
    rc.layout = ts.layout;
    rc.key_stride = ts.key_stride;
    rc.key_offset = ts.key_offset;
    rc.memory = impl->memory;
    rc.alloc = impl->alloc;
    rc.backend = impl->backend;
    rc.exec = impl->exec();
    LEANEMB_ASSIGN_OR_RETURN(ts.residency, table_internal::make_residency(rc));
    impl->maps_rows = impl->maps_rows || ts.residency->maps_rows();
    impl->tables.push_back(std::move(ts));
    if (to.dynamic.enabled) LEANEMB_RETURN_IF_ERROR(impl->create_id_map(static_cast<int>(t)));
  }
  for (const FeatureOptions& fo : options.features) {
    impl->meta.push_back({fo.name, options.tables[fo.table].name, options.tables[fo.table].num_rows, fo.pooling,
                          options.tables[fo.table].dynamic.enabled});
    if (fo.pooling == PoolingMode::kNone) {
      impl->pooled_offset.push_back(-1);
    } else {
      impl->pooled_offset.push_back(impl->pooled_dim);
      impl->pooled_dim += options.tables[fo.table].dim;
    }
  }
  return std::unique_ptr<EmbeddingCollection>(new EmbeddingCollection(std::move(impl)));
}

const CollectionOptions& EmbeddingCollection::options() const { return impl_->options; }

Status EmbeddingCollection::set_learning_rate(int table, float lr) {
  if (table < 0 || table >= num_tables()) return out_of_range("set_learning_rate: table " + std::to_string(table) + " out of range");
  if (!std::isfinite(lr) || lr < 0.0f)
    return invalid_argument("set_learning_rate: learning rate " + std::to_string(lr) + " (must be finite and >= 0)");
  TableState& ts = impl_->tables[static_cast<size_t>(table)];
  impl_->options.tables[static_cast<size_t>(table)].optimizer.learning_rate = lr;
  ts.layout.optimizer.learning_rate = lr;
  ts.residency->set_learning_rate(lr);  // the update kernels read the residency's layouts
  return Status();
}
std::span<float> EmbeddingCollection::column_state(int table) {
  LEANEMB_CHECK(table >= 0 && table < num_tables(), "table index out of range");
  return impl_->tables[static_cast<size_t>(table)].sm3_col;
}
std::span<const float> EmbeddingCollection::column_state(int table) const {
  LEANEMB_CHECK(table >= 0 && table < num_tables(), "table index out of range");
  return impl_->tables[static_cast<size_t>(table)].sm3_col;
}
const RowLayout& EmbeddingCollection::layout(int table) const {
  LEANEMB_CHECK(table >= 0 && table < num_tables(), "table index out of range");
  return impl_->tables[table].layout;
}
int64_t EmbeddingCollection::pooled_dim() const { return impl_->pooled_dim; }
int64_t EmbeddingCollection::pooled_offset(int feature) const {
  LEANEMB_CHECK(feature >= 0 && feature < num_features(), "feature index out of range");
  return impl_->pooled_offset[feature];
}
int64_t EmbeddingCollection::step() const { return impl_->step; }
uint64_t EmbeddingCollection::num_skipped_ids() const { return impl_->skipped_ids; }
uint64_t EmbeddingCollection::num_skipped_lookups() const { return impl_->skipped_lookups; }
void EmbeddingCollection::release_step_buffers() {
  discard_accumulation();  // its rows and sums live in acc_buffers
  impl_->acc_buffers.release();
  impl_->buffers.release();
  impl_->remap_buffers.release();
  impl_->dyn_buffers.release();
  std::fill(impl_->fwd_ids.begin(), impl_->fwd_ids.end(), -1);  // the kept mapping lived there
  std::fill(impl_->step_mapped.begin(), impl_->step_mapped.end(), size_t{0});  // and the slots
  std::fill(impl_->prefetch_pending.begin(), impl_->prefetch_pending.end(), size_t{0});  // and a deferred prefetch
}
void EmbeddingCollection::set_step(int64_t step) {
  LEANEMB_CHECK(step >= 0, "negative step");
  impl_->step = step;
}
MemoryStats EmbeddingCollection::memory_stats() const { return impl_->alloc->memory_stats(); }

Status EmbeddingCollection::validate(const SparseBatch& batch) const {
  CheckedBatch cb;
  return impl_->check(batch, &cb);
}


Status check_outputs(const EmbeddingCollection& c, const SparseBatch& b, size_t pooled_size,
                     std::span<const size_t> seq_sizes, const char* what) {
  const size_t want = static_cast<size_t>(b.batch_size * c.pooled_dim());
  if (pooled_size != want)
    return invalid_argument(std::string(what) + ": pooled buffer has " + std::to_string(pooled_size) +
                            " floats, expected batch_size x pooled_dim = " + std::to_string(want));
  size_t s = 0;
  for (int f = 0; f < c.num_features(); ++f) {
    if (c.options().features[f].pooling != PoolingMode::kNone) continue;
    const int64_t dim = c.options().tables[c.options().features[f].table].dim;
    const size_t want_f = b.features[f].ids.size() * static_cast<size_t>(dim);
    if (s >= seq_sizes.size())
      return invalid_argument(std::string(what) + ": no sequence buffer for feature '" + c.options().features[f].name + "'");
    if (seq_sizes[s] != want_f)
      return invalid_argument(std::string(what) + ": sequence buffer of feature '" + c.options().features[f].name +
                              "' has " + std::to_string(seq_sizes[s]) + " floats, expected nnz x dim = " +
                              std::to_string(want_f));
    ++s;
  }
  if (s != seq_sizes.size())
    return invalid_argument(std::string(what) + ": " + std::to_string(seq_sizes.size()) + " sequence buffers for " +
                            std::to_string(s) + " sequence features");
  return Status();
}

Status EmbeddingCollection::forward(const SparseBatch& batch, std::span<float> pooled_out,
                                    std::span<const std::span<float>> seq_out, ForwardMode mode) {
  Impl& im = *impl_;
  if (im.acc && (im.maps_rows || im.has_dynamic))
    return failed_precondition("forward: a gradient accumulation is open over tables that map rows (a row cache or a dynamic "
                               "vocabulary); apply_accumulated or discard_accumulation first");
  const bool eval = mode == ForwardMode::kEval;
  im.eval_forward = eval;  // whatever happens below: this is the most recent forward
  CheckedBatch cb;
  LEANEMB_RETURN_IF_ERROR(im.check_call(*this, batch, pooled_out.size(), seq_out, "forward", &cb));
  if (im.maps_rows) im.release_pins(tiered::PinSet::kStep);  // a forward without its update
  // Dynamic tables: raw ids -> rows (training: admitting and initializing new ones; evaluation:
  // the rows ids have now), then rows -> slots.
  DynamicBatch dyn(im.alloc);
  LEANEMB_RETURN_IF_ERROR(
      im.map_dynamic(*cb.batch, eval ? Impl::DynamicUse::kEvalForward : Impl::DynamicUse::kTrainForward, &dyn));
  SparseBatch remapped;
  LEANEMB_RETURN_IF_ERROR(im.remap(dyn.batch, &remapped));
  if (im.maps_rows) LEANEMB_RETURN_IF_ERROR(im.finish_prefetch_after_remap());
  const SparseBatch& b = remapped;
  if (cb.num_dropped > 0) {
    im.skipped_lookups += cb.num_dropped;
    im.warn_dropped(cb.num_dropped, "forward");
  }
  size_t s = 0;
  std::vector<kernels::PooledJob> jobs;
  const kernels::ExecContext x = im.exec();
  for (int f = 0; f < num_features(); ++f) {
    const FeatureOptions& fo = im.options.features[f];
    const FeatureInput& in = b.features[f];
    const kernels::TableView tv = im.view(fo.table);
    if (fo.pooling == PoolingMode::kNone) {
      im.backend->sequence_lookup(tv, in.ids.data(), static_cast<int64_t>(in.ids.size()), seq_out[s++].data(), x);
      continue;
    }
    kernels::PooledArgs a;
    a.ids = in.ids.data();
    a.offsets = in.offsets.data();
    a.weights = in.weights.empty() ? nullptr : in.weights.data();
    a.batch_size = b.batch_size;
    a.pooling = fo.pooling;
    a.out = pooled_out.data() + im.pooled_offset[f];
    a.ldo = im.pooled_dim;
    jobs.push_back({tv, a});
  }
  // One launch for every pooled feature; rows placed off the device are read over the host link
  // (the backend records one row read per lookup).
  im.backend->pooled_lookup(jobs.data(), static_cast<int>(jobs.size()), x);
  if (im.has_dynamic) im.expand_seq_outputs(dyn, seq_out);
  return Status();
}

}  // namespace leanemb

namespace leanemb {

Status EmbeddingCollection::read_raw_rows(int table, int64_t row_begin, int64_t count, std::span<uint8_t> out) const {
  if (table < 0 || table >= num_tables()) return out_of_range("read_raw_rows: unknown table " + std::to_string(table));
  const TableState& ts = impl_->tables[table];
  if (row_begin < 0 || count < 0 || row_begin > ts.num_rows || count > ts.num_rows - row_begin)
    return out_of_range("read_raw_rows: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + count) +
                        ") outside " + std::to_string(ts.num_rows) + " rows");
  const size_t bytes = static_cast<size_t>(count) * ts.layout.stride_bytes;
  if (out.size() != bytes) return invalid_argument("read_raw_rows: buffer of " + std::to_string(out.size()) + " bytes, expected " + std::to_string(bytes));
  // The caller's buffer is host memory: rows in another tier cross the link (recorded).
  return ts.residency->read_rows(row_begin, count, out.data(), Impl::kCallerTier);
}

Status EmbeddingCollection::write_raw_rows(int table, int64_t row_begin, int64_t count, std::span<const uint8_t> in) {
  if (table < 0 || table >= num_tables()) return out_of_range("write_raw_rows: unknown table " + std::to_string(table));
  TableState& ts = impl_->tables[table];
  if (row_begin < 0 || count < 0 || row_begin > ts.num_rows || count > ts.num_rows - row_begin)
    return out_of_range("write_raw_rows: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + count) +
                        ") outside " + std::to_string(ts.num_rows) + " rows");
  const size_t bytes = static_cast<size_t>(count) * ts.layout.stride_bytes;
  if (in.size() != bytes) return invalid_argument("write_raw_rows: buffer of " + std::to_string(in.size()) + " bytes, expected " + std::to_string(bytes));
  ts.initial_rows = ts.initial_rows && count == 0;
  return ts.residency->write_rows(row_begin, count, in.data(), Impl::kCallerTier);
}

Status EmbeddingCollection::read_raw_rows_at(int table, std::span<const int64_t> rows, std::span<uint8_t> out) const {
  if (table < 0 || table >= num_tables()) return out_of_range("read_raw_rows_at: unknown table " + std::to_string(table));
  const TableState& ts = impl_->tables[static_cast<size_t>(table)];
  for (int64_t r : rows)
    if (r < 0 || r >= ts.num_rows) return out_of_range("read_raw_rows_at: row " + std::to_string(r) + " outside " + std::to_string(ts.num_rows) + " rows");
  const size_t bytes = rows.size() * ts.layout.stride_bytes;
  if (out.size() != bytes) return invalid_argument("read_raw_rows_at: buffer of " + std::to_string(out.size()) + " bytes, expected " + std::to_string(bytes));
  return ts.residency->read_rows_at(rows, ts.layout.stride_bytes, out.data(), Impl::kCallerTier);
}

bool EmbeddingCollection::has_initial_rows(int table) const {
  LEANEMB_CHECK(table >= 0 && table < num_tables(), "table index out of range");
  return impl_->tables[static_cast<size_t>(table)].initial_rows;
}

Status EmbeddingCollection::reset_rows_to_initial(int table) {
  if (table < 0 || table >= num_tables()) return out_of_range("reset_rows_to_initial: unknown table " + std::to_string(table));
  Impl& im = *impl_;
  TableState& ts = im.tables[static_cast<size_t>(table)];
  if (ts.initial_rows) return Status();
  const TableOptions& to = im.options.tables[static_cast<size_t>(table)];
  const size_t stride = ts.layout.stride_bytes;
  constexpr int64_t kChunk = 4096;
  std::vector<uint8_t> rows(static_cast<size_t>(std::min(kChunk, ts.num_rows)) * stride);
  std::vector<float> tmp(static_cast<size_t>(ts.layout.dim));
  for (int64_t r0 = 0; r0 < ts.num_rows; r0 += kChunk) {
    const int64_t n = std::min(kChunk, ts.num_rows - r0);
    for (int64_t i = 0; i < n; ++i)
      initial_row(to, ts.layout, im.options.seed, static_cast<uint32_t>(table), ts.global_row(r0 + i), tmp.data(),
                  rows.data() + static_cast<size_t>(i) * stride, *im.backend);
    LEANEMB_RETURN_IF_ERROR(ts.residency->write_rows(r0, n, rows.data(), Impl::kCallerTier));
  }
  ts.initial_rows = true;
  return Status();
}

bool EmbeddingCollection::can_link_rows(int table, const std::string& into_dir) const {
  if (table < 0 || table >= num_tables()) return false;
  return !impl_->options.tables[static_cast<size_t>(table)].dynamic.enabled &&
         impl_->tables[static_cast<size_t>(table)].residency->can_link_rows(into_dir);
}

Result<LinkedRows> EmbeddingCollection::link_rows(int table, const std::string& dir, const RowPlaceSink& sink) {
  if (!can_link_rows(table)) return unimplemented("link_rows: table " + std::to_string(table) + " keeps no store files to link");
  return impl_->tables[static_cast<size_t>(table)].residency->link_rows(dir, sink);
}

Status EmbeddingCollection::adopt_linked_rows(int table, const std::string& dir, const LinkedRows& linked,
                                              const RowPlaceSource& source) {
  if (!can_link_rows(table)) return unimplemented("adopt_linked_rows: table " + std::to_string(table) + " takes no linked files");
  TableState& ts = impl_->tables[static_cast<size_t>(table)];
  if (!ts.initial_rows) return failed_precondition("adopt_linked_rows: table " + std::to_string(table) + " has changed rows");
  const Status st = ts.residency->adopt_links(dir, linked, source);
  // A refusal (FailedPrecondition: the cache or store holds rows, another layout) comes before
  // anything changed, so the rows are still the initial ones and a copy needs no reset; after
  // success or any other error (a bad place half way) they are not.
  if (st.ok() || st.code() != StatusCode::kFailedPrecondition) ts.initial_rows = false;
  return st;
}

}  // namespace leanemb
