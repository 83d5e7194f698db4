// EmbeddingCollection: owns the fat-row buffers of its tables and runs one training step in
// three phases: check the batch; aggregate each table's per-unique-row gradients into a
// [unique, dim] fp32 buffer (checking them for Inf/NaN); only then update rows. A failure in
// the first two phases (bad input, allocation failure, non-finite gradient) changes no row.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/multiversion.h"
#include "leanemb/embedding.h"
#include "table/batch_check.h"

namespace leanemb {

using table_internal::CheckedBatch;
using table_internal::FeatureMeta;

std::string_view pooling_name(PoolingMode p) {
  switch (p) {
    case PoolingMode::kSum: return "sum";
    case PoolingMode::kMean: return "mean";
    case PoolingMode::kNone: return "none";
  }
  return "?";
}

Result<PoolingMode> parse_pooling(std::string_view s) {
  if (s == "sum") return PoolingMode::kSum;
  if (s == "mean") return PoolingMode::kMean;
  if (s == "none") return PoolingMode::kNone;
  return invalid_argument("unknown pooling '" + std::string(s) + "' (expected sum, mean or none)");
}

struct TableState {
  RowLayout layout;
  Allocation rows;
  int64_t num_rows = 0;
  kernels::TableView view() const {
    return kernels::TableView{rows.as<uint8_t>(), &layout, num_rows, 0};
  }
};

// One table's aggregated gradient for a step.
struct TableGrad {
  Allocation unique_rows;  // int64 [U]
  Allocation grads;        // fp32 [U, dim]
  int64_t num_unique = 0;
};

struct EmbeddingCollection::Impl {
  CollectionOptions options;
  Allocator* alloc = nullptr;
  std::vector<TableState> tables;
  std::vector<FeatureMeta> meta;
  std::vector<int64_t> pooled_offset;  // per feature, -1 for sequence features
  int64_t pooled_dim = 0;
  int64_t step = 0;
  uint64_t skipped_ids = 0;      // dropped in backward_update
  uint64_t skipped_lookups = 0;  // dropped in forward
  int dropped_warnings = 0;
  int num_threads = 1;

  kernels::TableView view(int t) const {
    kernels::TableView v = tables[t].view();
    v.table_index = static_cast<uint32_t>(t);
    return v;
  }
  // Rate-limited warning about ids dropped under BoundsCheckMode::kSkip.
  void warn_dropped(uint64_t n, const char* where) {
    if (dropped_warnings >= 5) return;
    ++dropped_warnings;
    std::fprintf(stderr, "leanemb: warning: %s dropped %llu out-of-range ids in this batch%s\n", where,
                 static_cast<unsigned long long>(n), dropped_warnings == 5 ? "; further warnings suppressed" : "");
  }
  Status check(const SparseBatch& batch, CheckedBatch* out) const {
    return table_internal::check_batch(batch, meta, options.bounds_check, alloc, out);
  }
  Status aggregate(int t, const SparseBatch& batch, std::span<const float> grad_pooled,
                   std::span<const std::span<const float>> grad_seq, float multiplier, TableGrad* out,
                   bool* nonfinite);
};

namespace {

Status validate_options(const CollectionOptions& o) {
  if (o.tables.empty()) return invalid_argument("collection has no tables");
  if (o.features.empty()) return invalid_argument("collection has no features");
  for (size_t t = 0; t < o.tables.size(); ++t) {
    const TableOptions& to = o.tables[t];
    const std::string name = "table '" + to.name + "' (index " + std::to_string(t) + ")";
    if (to.num_rows <= 0) return invalid_argument(name + ": num_rows must be > 0");
    if (to.num_rows >= (int64_t{1} << 32))
      return unimplemented(name + ": tables with 2^32 or more rows are not supported yet");
    if (to.dim <= 0 || to.dim > 65536) return invalid_argument(name + ": dim must be in [1, 65536]");
    if (!dtype_traits(to.dtype).trainable && !to.frozen)
      return invalid_argument(name + ": " + std::string(dtype_name(to.dtype)) +
                              " rows are lookup-only; set frozen = true (or use fp32/fp16/bf16)");
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

// Deterministic per-row initialization from the counter-based RNG.
void init_row(const TableOptions& to, const RowLayout& l, uint64_t seed, uint32_t table, int64_t r, float* tmp,
              uint8_t* row) {
  std::memset(row, 0, l.stride_bytes);
  const uint32_t key = row_key(seed, ~uint64_t{0}, table, static_cast<uint64_t>(r));
  const int64_t d = l.dim;
  auto u01 = [&](uint32_t c) { return (static_cast<float>(column_bits(key, c) >> 8) + 0.5f) * (1.0f / 16777216.0f); };
  switch (to.init.kind) {
    case InitKind::kZeros:
      for (int64_t j = 0; j < d; ++j) tmp[j] = 0.0f;
      break;
    case InitKind::kUniform: {
      const float bound = to.init.bound > 0.0f ? to.init.bound : 1.0f / std::sqrt(static_cast<float>(to.num_rows));
      for (int64_t j = 0; j < d; ++j) tmp[j] = (2.0f * u01(static_cast<uint32_t>(j)) - 1.0f) * bound;
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
  kernels::ref_store_weights_rne(l, row, tmp);
}

}  // namespace

EmbeddingCollection::EmbeddingCollection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EmbeddingCollection::~EmbeddingCollection() = default;

Result<std::unique_ptr<EmbeddingCollection>> EmbeddingCollection::create(const CollectionOptions& options,
                                                                         Allocator* allocator) {
  LEANEMB_RETURN_IF_ERROR(validate_options(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->alloc = allocator ? allocator : default_host_allocator();
  impl->num_threads = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  for (size_t t = 0; t < options.tables.size(); ++t) {
    const TableOptions& to = options.tables[t];
    TableState ts;
    auto layout = make_row_layout(to.dim, to.dtype, to.optimizer);
    if (!layout.ok())
      return Status(layout.status().code(), "table '" + to.name + "': " + layout.status().message());
    ts.layout = layout.value();
    ts.num_rows = to.num_rows;
    const size_t n = static_cast<size_t>(to.num_rows);
    const CategoryBytes parts[2] = {
        {Category::kWeights, n * (ts.layout.stride_bytes - ts.layout.state_bytes)},
        {Category::kOptimizerState, n * ts.layout.state_bytes}};
    auto rows = impl->alloc->allocate_parts(std::span<const CategoryBytes>(parts, ts.layout.state_bytes ? 2 : 1), 64);
    if (!rows.ok())
      return Status(rows.status().code(), "table '" + to.name + "' (" + std::to_string(to.num_rows) + " rows x " +
                                              std::to_string(ts.layout.stride_bytes) + " B): " + rows.status().message());
    ts.rows = std::move(rows).value();
    impl->tables.push_back(std::move(ts));
  }
  // Initialize rows in parallel; each row's values depend only on (seed, table, row).
  for (size_t t = 0; t < impl->tables.size(); ++t) {
    TableState& ts = impl->tables[t];
    const TableOptions& to = options.tables[t];
    uint8_t* base = ts.rows.as<uint8_t>();
#pragma omp parallel num_threads(impl->num_threads)
    {
      std::vector<float> tmp(static_cast<size_t>(to.dim));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < to.num_rows; ++r)
        init_row(to, ts.layout, options.seed, static_cast<uint32_t>(t), r, tmp.data(),
                 base + static_cast<size_t>(r) * ts.layout.stride_bytes);
    }
  }
  for (const FeatureOptions& fo : options.features) {
    impl->meta.push_back({fo.name, options.tables[fo.table].name, options.tables[fo.table].num_rows, fo.pooling});
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
const RowLayout& EmbeddingCollection::layout(int table) const {
  LEANEMB_CHECK(table >= 0 && table < num_tables(), "table index out of range");
  return impl_->tables[table].layout;
}
int EmbeddingCollection::num_tables() const { return static_cast<int>(impl_->tables.size()); }
int EmbeddingCollection::num_features() const { return static_cast<int>(impl_->options.features.size()); }
int64_t EmbeddingCollection::pooled_dim() const { return impl_->pooled_dim; }
int64_t EmbeddingCollection::pooled_offset(int feature) const {
  LEANEMB_CHECK(feature >= 0 && feature < num_features(), "feature index out of range");
  return impl_->pooled_offset[feature];
}
int64_t EmbeddingCollection::step() const { return impl_->step; }
uint64_t EmbeddingCollection::num_skipped_ids() const { return impl_->skipped_ids; }
uint64_t EmbeddingCollection::num_skipped_lookups() const { return impl_->skipped_lookups; }
void EmbeddingCollection::set_step(int64_t step) {
  LEANEMB_CHECK(step >= 0, "negative step");
  impl_->step = step;
}
MemoryStats EmbeddingCollection::memory_stats() const { return impl_->alloc->memory_stats(); }

Status EmbeddingCollection::validate(const SparseBatch& batch) const {
  CheckedBatch cb;
  return impl_->check(batch, &cb);
}

namespace {

// Output sizes for a checked batch.
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

}  // namespace

Status EmbeddingCollection::forward(const SparseBatch& batch, std::span<float> pooled_out,
                                    std::span<const std::span<float>> seq_out) {
  Impl& im = *impl_;
  CheckedBatch cb;
  LEANEMB_RETURN_IF_ERROR(im.check(batch, &cb));
  const SparseBatch& b = *cb.batch;
  std::vector<size_t> seq_sizes;
  for (const auto& s : seq_out) seq_sizes.push_back(s.size());
  LEANEMB_RETURN_IF_ERROR(check_outputs(*this, b, pooled_out.size(), seq_sizes, "forward"));
  if (cb.num_dropped > 0) {
    im.skipped_lookups += cb.num_dropped;
    im.warn_dropped(cb.num_dropped, "forward");
  }
  size_t s = 0;
  for (int f = 0; f < num_features(); ++f) {
    const FeatureOptions& fo = im.options.features[f];
    const FeatureInput& in = b.features[f];
    const kernels::TableView tv = im.view(fo.table);
    if (fo.pooling == PoolingMode::kNone) {
      float* out = seq_out[s++].data();
      if (im.options.use_reference_kernels) kernels::ref_sequence_lookup(tv, in.ids.data(), static_cast<int64_t>(in.ids.size()), out);
      else kernels::sequence_lookup(tv, in.ids.data(), static_cast<int64_t>(in.ids.size()), out, im.num_threads);
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
    if (im.options.use_reference_kernels) kernels::ref_pooled_lookup(tv, a);
    else kernels::pooled_lookup(tv, a, im.num_threads);
  }
  return Status();
}

namespace {

bool all_finite(std::span<const float> x, int nt) {
  int bad = 0;
#pragma omp parallel for num_threads(nt) reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) bad |= std::isfinite(x[i]) ? 0 : 1;
  return bad == 0;
}

// Sums each segment's contributions in src order: out[u, :] = multiplier * sum_k scale[k] * src[k][:].
LEANEMB_MULTIVERSION
void reduce_segments(const uint64_t* keys, const int64_t* seg_begin, int64_t u0, int64_t u1, const float* const* src,
                     const float* scale, int64_t dim, float multiplier, float* out, int* nonfinite) {
  int bad = 0;
  for (int64_t u = u0; u < u1; ++u) {
    float* __restrict g = out + u * dim;
    for (int64_t j = 0; j < dim; ++j) g[j] = 0.0f;
    for (int64_t k = seg_begin[u]; k < seg_begin[u + 1]; ++k) {
      const uint32_t sidx = static_cast<uint32_t>(keys[k]);
      const float* __restrict x = src[sidx];
      const float sc = scale[sidx];
      for (int64_t j = 0; j < dim; ++j) g[j] += sc * x[j];
    }
    if (multiplier != 1.0f)
      for (int64_t j = 0; j < dim; ++j) g[j] *= multiplier;
    for (int64_t j = 0; j < dim; ++j) bad |= std::isfinite(g[j]) ? 0 : 1;
  }
  *nonfinite |= bad;
}

int bit_width(uint64_t x) {
  int b = 0;
  while (x) {
    ++b;
    x >>= 1;
  }
  return b;
}

}  // namespace

Status EmbeddingCollection::Impl::aggregate(int t, const SparseBatch& batch, std::span<const float> grad_pooled,
                                            std::span<const std::span<const float>> grad_seq, float multiplier,
                                            TableGrad* out, bool* nonfinite) {
  const int64_t dim = tables[t].layout.dim;
  // Gather every (row, contribution) of this table from the features that use it.
  int64_t n = 0;
  for (size_t f = 0; f < options.features.size(); ++f)
    if (options.features[f].table == t) n += static_cast<int64_t>(batch.features[f].ids.size());
  out->num_unique = 0;
  if (n == 0) return Status();
  const size_t nz = static_cast<size_t>(n);
  LEANEMB_ASSIGN_OR_RETURN(Allocation keys_a, alloc->allocate(nz * 8, Category::kWorkspace));
  // scratch: radix-sort buffer, then segment starts [U + 1] (U <= n), hence n + 1 entries.
  LEANEMB_ASSIGN_OR_RETURN(Allocation scratch_a, alloc->allocate((nz + 1) * 8, Category::kWorkspace));
  LEANEMB_ASSIGN_OR_RETURN(Allocation src_a, alloc->allocate(nz * sizeof(float*), Category::kWorkspace));
  LEANEMB_ASSIGN_OR_RETURN(Allocation scale_a, alloc->allocate(nz * 4, Category::kWorkspace));
  uint64_t* keys = keys_a.as<uint64_t>();
  const float** src = static_cast<const float**>(src_a.data());
  float* scale = scale_a.as<float>();
  int64_t k = 0;
  size_t seq_index = 0;
  for (size_t f = 0; f < options.features.size(); ++f) {
    const FeatureOptions& fo = options.features[f];
    const bool is_seq = fo.pooling == PoolingMode::kNone;
    const float* seq_grad = is_seq ? grad_seq[seq_index].data() : nullptr;
    if (is_seq) ++seq_index;
    if (fo.table != t) continue;
    const FeatureInput& in = batch.features[f];
    for (int64_t b = 0; b < batch.batch_size; ++b) {
      const int64_t lo = in.offsets[b], hi = in.offsets[b + 1];
      const float inv_len = (fo.pooling == PoolingMode::kMean) ? 1.0f / static_cast<float>(hi - lo) : 1.0f;
      for (int64_t i = lo; i < hi; ++i, ++k) {
        keys[k] = (static_cast<uint64_t>(in.ids[i]) << 32) | static_cast<uint64_t>(k);
        src[k] = is_seq ? seq_grad + i * dim : grad_pooled.data() + b * pooled_dim + pooled_offset[f];
        const float w = in.weights.empty() ? 1.0f : in.weights[i];
        scale[k] = fo.pooling == PoolingMode::kMean ? w * inv_len : w;
      }
    }
  }
  // Dedup: sort by row (stable, so contributions of a row stay in src order), find segments.
  if (options.use_reference_kernels) {
    std::stable_sort(keys, keys + n, [](uint64_t a, uint64_t b) { return (a >> 32) < (b >> 32); });
  } else {
    kernels::radix_sort_row_src(keys, scratch_a.as<uint64_t>(), n, bit_width(static_cast<uint64_t>(tables[t].num_rows - 1)));
  }
  int64_t num_unique = 0;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || (keys[i] >> 32) != (keys[i - 1] >> 32)) ++num_unique;
  LEANEMB_ASSIGN_OR_RETURN(Allocation rows_a, alloc->allocate(static_cast<size_t>(num_unique) * 8, Category::kWorkspace));
  LEANEMB_ASSIGN_OR_RETURN(Allocation grads_a, alloc->allocate(static_cast<size_t>(num_unique * dim) * 4, Category::kGradients));
  int64_t* seg = reinterpret_cast<int64_t*>(scratch_a.as<uint64_t>());
  int64_t* rows = rows_a.as<int64_t>();
  int64_t u = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || (keys[i] >> 32) != (keys[i - 1] >> 32)) {
      rows[u] = static_cast<int64_t>(keys[i] >> 32);
      seg[u++] = i;
    }
  }
  seg[num_unique] = n;
  int bad = 0;
  float* g = grads_a.as<float>();
  if (options.use_reference_kernels) {
    reduce_segments(keys, seg, 0, num_unique, src, scale, dim, multiplier, g, &bad);
  } else {
#pragma omp parallel num_threads(num_threads) reduction(| : bad)
    {
      int64_t u0, u1;
      kernels::static_chunk(num_unique, omp_get_thread_num(), omp_get_num_threads(), &u0, &u1);
      int local = 0;
      reduce_segments(keys, seg, u0, u1, src, scale, dim, multiplier, g, &local);
      bad |= local;
    }
  }
  *nonfinite = *nonfinite || bad != 0;
  out->unique_rows = std::move(rows_a);
  out->grads = std::move(grads_a);
  out->num_unique = num_unique;
  return Status();
}

Result<UpdateReport> EmbeddingCollection::backward_update(const SparseBatch& batch, std::span<const float> grad_pooled,
                                                          std::span<const std::span<const float>> grad_seq,
                                                          const UpdateOptions& update) {
  Impl& im = *impl_;
  CheckedBatch cb;
  LEANEMB_RETURN_IF_ERROR(im.check(batch, &cb));
  const SparseBatch& b = *cb.batch;
  std::vector<size_t> seq_sizes;
  for (const auto& s : grad_seq) seq_sizes.push_back(s.size());
  LEANEMB_RETURN_IF_ERROR(check_outputs(*this, b, grad_pooled.size(), seq_sizes, "backward_update"));
  if (!std::isfinite(update.grad_multiplier)) return invalid_argument("grad_multiplier is not finite");
  if (cb.num_dropped > 0) {
    im.skipped_ids += cb.num_dropped;
    im.warn_dropped(cb.num_dropped, "backward_update");
  }

  UpdateReport report;
  if (update.check_finite) {
    bool finite = all_finite(grad_pooled, im.num_threads);
    for (const auto& s : grad_seq) finite = finite && all_finite(s, im.num_threads);
    if (!finite) {
      report.skipped_nonfinite = true;
      return report;
    }
  }
  // Phase 1: aggregate every trainable table (allocations may fail here; no row has changed).
  std::vector<TableGrad> grads(im.tables.size());
  bool nonfinite = false;
  for (int t = 0; t < num_tables(); ++t) {
    if (im.options.tables[t].frozen) continue;
    LEANEMB_RETURN_IF_ERROR(im.aggregate(t, b, grad_pooled, grad_seq, update.grad_multiplier, &grads[t], &nonfinite));
  }
  if (update.check_finite && nonfinite) {
    report.skipped_nonfinite = true;
    return report;
  }
  // Phase 2: apply the optimizers. Nothing below can fail.
  const int64_t step = im.step + 1;
  for (int t = 0; t < num_tables(); ++t) {
    const TableGrad& tg = grads[t];
    if (tg.num_unique == 0) continue;
    const kernels::TableView tv = im.view(t);
    const kernels::UpdateStep us{im.options.seed, step};
    const int64_t* rows = tg.unique_rows.as<int64_t>();
    const float* g = tg.grads.as<float>();
    if (im.options.use_reference_kernels) {
      for (int64_t u = 0; u < tg.num_unique; ++u) kernels::ref_update_row(tv, rows[u], g + u * tv.layout->dim, us);
    } else {
      kernels::update_rows(tv, rows, g, tg.num_unique, us, im.num_threads);
    }
    report.unique_rows += tg.num_unique;
  }
  for (const auto& f : b.features) report.lookups += static_cast<int64_t>(f.ids.size());
  im.step = step;
  return report;
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
  if (bytes) std::memcpy(out.data(), ts.rows.as<uint8_t>() + static_cast<size_t>(row_begin) * ts.layout.stride_bytes, bytes);
  return Status();
}

Status EmbeddingCollection::write_raw_rows(int table, int64_t row_begin, int64_t count, std::span<const uint8_t> in) {
  if (table < 0 || table >= num_tables()) return out_of_range("write_raw_rows: unknown table " + std::to_string(table));
  TableState& ts = impl_->tables[table];
  if (row_begin < 0 || count < 0 || row_begin > ts.num_rows || count > ts.num_rows - row_begin)
    return out_of_range("write_raw_rows: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + count) +
                        ") outside " + std::to_string(ts.num_rows) + " rows");
  const size_t bytes = static_cast<size_t>(count) * ts.layout.stride_bytes;
  if (in.size() != bytes) return invalid_argument("write_raw_rows: buffer of " + std::to_string(in.size()) + " bytes, expected " + std::to_string(bytes));
  if (bytes) std::memcpy(ts.rows.as<uint8_t>() + static_cast<size_t>(row_begin) * ts.layout.stride_bytes, in.data(), bytes);
  return Status();
}

}  // namespace leanemb
