// EmbeddingCollection::backward_update. A step runs in phases:
//   0. check the batch and the incoming gradients (finite; their largest magnitude);
//   1. per trainable table, group the batch's ids by row (dedup): contributions sorted by row
//      with a stable radix sort, runs of equal rows found, all in reusable step buffers;
//   2. if the summed gradients are provably finite and within UpdateOptions::max_abs_grad
//      (|g| * |scale| * run length * |multiplier| below both the bound and FLT_MAX / 1024),
//      reduce each row's gradient and apply the optimizer in one fused pass; otherwise reduce
//      every table into a [unique, dim] buffer, check it (finite, and no element above
//      max_abs_grad), and only then update. Either way the arithmetic is the same, so the
//      result is too: the bound only chooses the path for normal gradients.
// Any failure before the first row update (bad input, allocation failure, non-finite or huge
// gradient) leaves every row, optimizer state and the step counter unchanged.
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "kernels/kernels.h"
#include "table/collection_impl.h"

namespace leanemb {

namespace {

// The step buffers' slots (collection_impl.h, StepSlot).
using Slot = StepSlot;
constexpr Slot kKeys = kSlotKeys, kRuns = kSlotRuns, kSrcPtr = kSlotSrcPtr, kScale = kSlotScale,
               kSortedPtr = kSlotSortedPtr, kSortedScale = kSlotSortedScale, kRows = kSlotRows, kGrads = kSlotGrads;
size_t slot(int table, Slot s) { return step_slot(table, s); }

// Table t's step buffer `s` of at least `bytes` (workspace memory), as T*.
template <typename T>
Result<T*> step_buffer(StepBuffers& buffers, Allocator* alloc, int t, Slot s, size_t bytes) {
  LEANEMB_ASSIGN_OR_RETURN(void* p, buffers.get(slot(t, s), bytes, Category::kWorkspace, alloc));
  return static_cast<T*>(p);
}

// Largest |x| over finite inputs; +Inf if any element is Inf or NaN. Chunks of kChunkWork
// elements over the workers; max is exact and order-free.
float max_abs(std::span<const float> x, int nt) {
  std::atomic<uint32_t> m{0};
  parallel_for(static_cast<int64_t>(x.size()), kChunkWork, [&](int64_t b, int64_t e, int) {
    const uint32_t c = kernels::max_abs_bits(x.data() + b, e - b);
    uint32_t cur = m.load(std::memory_order_relaxed);
    while (c > cur && !m.compare_exchange_weak(cur, c, std::memory_order_relaxed)) {
    }
  }, nt);
  const uint32_t bits = m.load();
  if (bits >= 0x7f800000u) return INFINITY;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Contiguous parts of [0, n) for the dedup's passes over sorted keys: one per thread, each of
// at least kMinPart keys (one part, run inline, below that). first_run[p]: the index of part
// p's first run once counted and prefixed; first_run[0] = 0.
struct RunParts {
  static constexpr int kMaxParts = 64;
  static constexpr int64_t kMinPart = int64_t{1} << 14;
  int parts = 1;
  int64_t n = 0;
  int64_t first_run[kMaxParts + 1] = {};
};
RunParts run_parts(int64_t n, int num_threads) {
  RunParts rp;
  rp.n = n;
  rp.parts = static_cast<int>(std::clamp<int64_t>(n / RunParts::kMinPart, 1,
                                                  std::min(RunParts::kMaxParts, parallel_threads(num_threads))));
  return rp;
}
// f(p, begin, end) for every part, over the pool when there are several.
template <typename F>
void for_each_part(const RunParts& rp, F&& f, int num_threads) {
  auto one = [&](int64_t p) { f(static_cast<int>(p), rp.n * p / rp.parts, rp.n * (p + 1) / rp.parts); };
  if (rp.parts == 1) return one(0);
  parallel_for(rp.parts, 1, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) one(p);
  }, num_threads);
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

float step_max_abs(std::span<const float> x, int num_threads) { return max_abs(x, num_threads); }

Status EmbeddingCollection::Impl::dedup(int t, const SparseBatch& batch, std::span<const float> grad_pooled,
                                        std::span<const std::span<const float>> grad_seq, float multiplier,
                                        TableDedup* out) {
  int64_t n = 0;
  for (size_t f = 0; f < options.features.size(); ++f)
    if (options.features[f].table == t) n += static_cast<int64_t>(batch.features[f].ids.size());
  *out = TableDedup{};
  if (n == 0) return Status();
  // The runs buffer first serves as the radix sort's scratch, then holds run starts [U + 1]
  // (U <= n), hence n + 1 entries.
  const DedupBufferBytes sz = dedup_buffer_bytes(n, n);  // rows: sized in dedup_runs, once U is known
  LEANEMB_ASSIGN_OR_RETURN(uint64_t* keys, step_buffer<uint64_t>(buffers, alloc, t, kKeys, sz.keys));
  LEANEMB_ASSIGN_OR_RETURN(void* runs_p, step_buffer<void>(buffers, alloc, t, kRuns, sz.runs));
  LEANEMB_ASSIGN_OR_RETURN(const float** src, step_buffer<const float*>(buffers, alloc, t, kSrcPtr, sz.src_ptr));
  LEANEMB_ASSIGN_OR_RETURN(float* scale, step_buffer<float>(buffers, alloc, t, kScale, sz.scale));

  // The kernels' row numbers (cache slots for a cached table) and this step's contributions fit
  // the packed sort key row << 32 | contribution unless a resident table has 2^32 rows or more.
  const int row_bits = bit_width(static_cast<uint64_t>(view(t).num_rows - 1));
  const bool wide = row_bits > 32 || n >= (int64_t{1} << 32);
  const float max_scale = dedup_contributions(t, batch, grad_pooled, grad_seq, wide, keys, src, scale);
  if (wide) return dedup_wide(t, n, keys, src, scale, multiplier, max_scale, out);
  backend->sort_row_src(keys, static_cast<uint64_t*>(runs_p), n, row_bits, exec());
  return dedup_runs(t, n, keys, static_cast<int64_t*>(runs_p), src, scale, multiplier, max_scale, out);
}

// Contributions in feature, bag, position order: that order is the summation order. Feature
// f's position i is contribution base + i (its offsets start at 0), so bags fill in parallel.
float EmbeddingCollection::Impl::dedup_contributions(int t, const SparseBatch& batch, std::span<const float> grad_pooled,
                                                     std::span<const std::span<const float>> grad_seq, bool wide,
                                                     uint64_t* keys, const float** src, float* scale) {
  const int64_t dim = tables[t].layout.dim;
  int64_t base = 0;
  size_t seq_index = 0;
  std::atomic<uint32_t> max_scale_bits{0};  // of a non-negative float: ordered as the float
  for (size_t f = 0; f < options.features.size(); ++f) {
    const FeatureOptions& fo = options.features[f];
    const bool is_seq = fo.pooling == PoolingMode::kNone;
    const float* seq_grad = is_seq ? grad_seq[seq_index].data() : nullptr;
    if (is_seq) ++seq_index;
    if (fo.table != t) continue;
    const FeatureInput& in = batch.features[f];
    const bool mean = fo.pooling == PoolingMode::kMean;
    const int64_t k0 = base;
    const int64_t per_bag = std::max<int64_t>(1, static_cast<int64_t>(in.ids.size()) / std::max<int64_t>(1, batch.batch_size));
    parallel_for(batch.batch_size, grain_for(per_bag * 4), [&](int64_t b0, int64_t b1, int) {
      float m = 0.0f;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t lo = in.offsets[b], hi = in.offsets[b + 1];
        const float inv_len = mean ? 1.0f / static_cast<float>(hi - lo) : 1.0f;
        const float* bag_grad = is_seq ? nullptr : grad_pooled.data() + b * pooled_dim + pooled_offset[f];
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t k = k0 + i;
          keys[k] = wide ? static_cast<uint64_t>(in.ids[i]) : (static_cast<uint64_t>(in.ids[i]) << 32) | static_cast<uint64_t>(k);
          src[k] = is_seq ? seq_grad + i * dim : bag_grad;
          const float w = in.weights.empty() ? 1.0f : in.weights[i];
          scale[k] = mean ? w * inv_len : w;
          m = std::max(m, std::fabs(scale[k]));
        }
      }
      uint32_t mb;
      std::memcpy(&mb, &m, 4);
      uint32_t cur = max_scale_bits.load(std::memory_order_relaxed);
      while (mb > cur && !max_scale_bits.compare_exchange_weak(cur, mb, std::memory_order_relaxed)) {
      }
    }, num_threads);
    base += static_cast<int64_t>(in.ids.size());
  }
  float max_scale;
  const uint32_t mb = max_scale_bits.load();
  std::memcpy(&max_scale, &mb, 4);
  return max_scale;
}

// Runs of equal rows, found in parallel over contiguous parts of the sorted keys: each part
// counts the runs that start in it, then (after a prefix over the parts and the rows buffer's
// allocation) writes their rows and starts, and gathers its contributions' pointers and
// scales into sorted order, so the reduce reads them sequentially. A part's last run may end
// in a later part: its length is found by reading on. The run starts overwrite the sort's
// scratch (`runs`), which nothing reads any more.
Status EmbeddingCollection::Impl::dedup_runs(int t, int64_t n, const uint64_t* keys, int64_t* runs, const float** src,
                                             const float* scale, float multiplier, float max_scale, TableDedup* out) {
  RunParts rp = run_parts(n, num_threads);
  auto row_of = [keys](int64_t i) { return keys[i] >> 32; };
  auto starts_run = [&](int64_t i) { return i == 0 || row_of(i) != row_of(i - 1); };
  for_each_part(rp, [&](int p, int64_t b, int64_t e) {
    int64_t c = 0;
    for (int64_t i = b; i < e; ++i) c += starts_run(i) ? 1 : 0;
    rp.first_run[p + 1] = c;
  }, num_threads);
  for (int p = 0; p < rp.parts; ++p) rp.first_run[p + 1] += rp.first_run[p];
  const int64_t num_unique = rp.first_run[rp.parts];
  const DedupBufferBytes sz = dedup_buffer_bytes(n, num_unique);
  LEANEMB_ASSIGN_OR_RETURN(int64_t* rows, step_buffer<int64_t>(buffers, alloc, t, kRows, sz.rows));
  LEANEMB_ASSIGN_OR_RETURN(const float** sorted_ptr, step_buffer<const float*>(buffers, alloc, t, kSortedPtr, sz.sorted_ptr));
  LEANEMB_ASSIGN_OR_RETURN(float* sorted_scale, step_buffer<float>(buffers, alloc, t, kSortedScale, sz.sorted_scale));
  std::atomic<int64_t> max_run{0};
  for_each_part(rp, [&](int p, int64_t b, int64_t e) {
    int64_t u = rp.first_run[p], longest = 0, open = -1;  // open: the start of the run being read
    for (int64_t i = b; i < e; ++i) {
      if (i + 16 < e) {
        const uint32_t ahead = static_cast<uint32_t>(keys[i + 16]);
        __builtin_prefetch(&src[ahead]);
        __builtin_prefetch(&scale[ahead]);
      }
      if (starts_run(i)) {
        if (open >= 0) longest = std::max(longest, i - open);
        rows[u] = static_cast<int64_t>(row_of(i));
        runs[u++] = i;
        open = i;
      }
      const uint32_t src_i = static_cast<uint32_t>(keys[i]);
      sorted_ptr[i] = src[src_i];
      sorted_scale[i] = scale[src_i];
    }
    if (open >= 0) {
      int64_t end = e;
      while (end < n && !starts_run(end)) ++end;
      longest = std::max(longest, end - open);
    }
    int64_t cur = max_run.load(std::memory_order_relaxed);
    while (longest > cur && !max_run.compare_exchange_weak(cur, longest, std::memory_order_relaxed)) {
    }
  }, num_threads);
  runs[num_unique] = n;
  *out = TableDedup{kernels::SegmentSource{runs, sorted_ptr, sorted_scale, tables[t].layout.dim, multiplier}, rows, num_unique, n,
                    max_scale, max_run.load()};
  return Status();
}

// dedup's end for rows that do not fit the packed sort key: keys[k] is contribution k's row. A
// stable sort of contribution indices by row (in the runs buffer), then the same outputs as the
// packed path, in the same order (ties keep position order), so the arithmetic is unchanged.
Status EmbeddingCollection::Impl::dedup_wide(int t, int64_t n, const uint64_t* keys, const float** src,
                                             const float* scale, float multiplier, float max_scale, TableDedup* out) {
  DedupBufferBytes sz = dedup_buffer_bytes(n, n);
  LEANEMB_ASSIGN_OR_RETURN(int64_t* idx, step_buffer<int64_t>(buffers, alloc, t, kRuns, sz.runs));
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::stable_sort(idx, idx + n, [keys](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  int64_t num_unique = 0;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || keys[idx[i]] != keys[idx[i - 1]]) ++num_unique;
  sz = dedup_buffer_bytes(n, num_unique);
  LEANEMB_ASSIGN_OR_RETURN(int64_t* rows, step_buffer<int64_t>(buffers, alloc, t, kRows, sz.rows));
  LEANEMB_ASSIGN_OR_RETURN(const float** sorted_ptr, step_buffer<const float*>(buffers, alloc, t, kSortedPtr, sz.sorted_ptr));
  LEANEMB_ASSIGN_OR_RETURN(float* sorted_scale, step_buffer<float>(buffers, alloc, t, kSortedScale, sz.sorted_scale));
  int64_t* runs = idx;  // run u starts at u <= i: idx[i] is read before runs[u] overwrites it
  int64_t u = 0, max_run = 0;
  uint64_t prev = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = idx[i];
    sorted_ptr[i] = src[j];
    sorted_scale[i] = scale[j];
    if (i == 0 || keys[j] != prev) {
      if (u > 0) max_run = std::max(max_run, i - runs[u - 1]);
      rows[u] = static_cast<int64_t>(keys[j]);
      runs[u++] = i;
    }
    prev = keys[j];
  }
  runs[num_unique] = n;
  max_run = std::max(max_run, n - runs[num_unique - 1]);
  *out = TableDedup{kernels::SegmentSource{runs, sorted_ptr, sorted_scale, tables[t].layout.dim, multiplier}, rows, num_unique, n,
                    max_scale, max_run};
  return Status();
}

Result<UpdateReport> EmbeddingCollection::backward_update(const SparseBatch& batch, std::span<const float> grad_pooled,
                                                          std::span<const std::span<const float>> grad_seq,
                                                          const UpdateOptions& update) {
  Impl& im = *impl_;
  if (im.acc) return failed_precondition("backward_update: a gradient accumulation is open (apply_accumulated or discard_accumulation first)");
  if (im.eval_forward)
    return failed_precondition(
        "backward_update: the most recent forward was an evaluation forward (ForwardMode::kEval), which looks ids up "
        "without mapping them for an update; run a training forward (ForwardMode::kTrain) of the batch first");
  CheckedBatch cb;
  LEANEMB_RETURN_IF_ERROR(im.check_call(*this, batch, grad_pooled.size(), grad_seq, "backward_update", &cb));
  // Cached tables: the batch's rows are pinned (already, if forward ran on it) for the update
  // and unpinned when it returns, whatever happens.
  struct Unpin {
    Impl& im;
    ~Unpin() {
      if (im.maps_rows) im.release_pins(tiered::PinSet::kStep);
    }
  } unpin{im};
  // Dynamic tables: the rows of the forward of this batch (no sightings counted), ids without a
  // row dropped (their sequence gradients too); then rows -> cache slots.
  DynamicBatch dyn(im.alloc);
  LEANEMB_RETURN_IF_ERROR(im.map_dynamic(*cb.batch, Impl::DynamicUse::kUpdate, &dyn));
  std::vector<std::span<const float>> dyn_grad_seq;
  if (im.has_dynamic) {
    LEANEMB_RETURN_IF_ERROR(im.compact_seq_grads(&dyn, grad_seq, &dyn_grad_seq));
    grad_seq = dyn_grad_seq;
  }
  SparseBatch remapped;
  LEANEMB_RETURN_IF_ERROR(im.remap(dyn.batch, &remapped, /*touch=*/false));
  const SparseBatch& b = remapped;
  if (!std::isfinite(update.grad_multiplier)) return invalid_argument("grad_multiplier is not finite");
  if (!(update.max_abs_grad > 0)) return invalid_argument("max_abs_grad must be > 0 (+Inf: no bound)");
  if (cb.num_dropped > 0) {
    im.skipped_ids += cb.num_dropped;
    im.warn_dropped(cb.num_dropped, "backward_update");
  }

  // Phase 0: incoming gradients.
  UpdateReport report;
  float max_grad = 0.0f;
  if (update.check_finite) {
    max_grad = max_abs(grad_pooled, im.num_threads);
    for (const auto& s : grad_seq) max_grad = std::max(max_grad, max_abs(s, im.num_threads));
    if (!std::isfinite(max_grad)) {
      report.skipped_nonfinite = true;
      return report;
    }
  }
  // Phase 1: dedup every trainable table; 1b: the staging buffers. No row has changed yet.
  std::vector<TableDedup> dd(im.tables.size());
  bool fused = update.fuse_when_safe;
  LEANEMB_RETURN_IF_ERROR(im.dedup_tables(b, grad_pooled, grad_seq, update, max_grad, dd, &fused));
  Workspace staging(im.alloc);
  std::vector<UpdateStaging> staged(im.tables.size());
  LEANEMB_RETURN_IF_ERROR(im.stage_updates(dd, &staging, staged));
  // Phase 2.
  const kernels::UpdateStep us{im.options.seed, im.step + 1};
  if (fused) {
    LEANEMB_RETURN_IF_ERROR(im.update_fused(dd, staged, us, &report));
  } else {
    LEANEMB_RETURN_IF_ERROR(im.update_checked(dd, staged, update, us, &report));
    if (report.skipped_nonfinite) return report;
  }
  for (const auto& f : b.features) report.lookups += static_cast<int64_t>(f.ids.size());
  im.step = us.step;
  if (im.has_dynamic) LEANEMB_RETURN_IF_ERROR(im.end_dynamic_step());
  return report;
}

// Phase 1. Allocations may fail here; no row has changed.
Status EmbeddingCollection::Impl::dedup_tables(const SparseBatch& b, std::span<const float> grad_pooled,
                                               std::span<const std::span<const float>> grad_seq,
                                               const UpdateOptions& update, float max_grad, std::span<TableDedup> dd,
                                               bool* fused) {
  for (size_t t = 0; t < tables.size(); ++t) {
    if (options.tables[t].frozen) continue;
    LEANEMB_RETURN_IF_ERROR(dedup(static_cast<int>(t), b, grad_pooled, grad_seq, update.grad_multiplier, &dd[t]));
    if (update.check_finite) {
      // |reduced g| <= max_run * max|scale| * max|grad| * |multiplier| (1 + rounding); a margin of
      // 2^10 below FLT_MAX makes overflow impossible, so the check after reducing can be skipped.
      const double bound = static_cast<double>(dd[t].max_run) * dd[t].max_abs_scale * max_grad *
                           std::fabs(static_cast<double>(update.grad_multiplier));
      if (!(bound < static_cast<double>(FLT_MAX) / 1024.0)) *fused = false;
      // Above the bound on reduced gradients the reduced values must be looked at (the bound is
      // an upper bound: most such steps still pass the check below).
      if (!(bound <= static_cast<double>(update.max_abs_grad))) *fused = false;
    }
  }
  return Status();
}

// Phase 1b: a residency that stages rows for the update (a table split across tiers: its
// touched fat rows in workspace memory) gets its buffers here, before any row changes; they
// return to the arena when `staging` goes out of scope.
Status EmbeddingCollection::Impl::stage_updates(std::span<const TableDedup> dd, Workspace* staging,
                                                std::span<UpdateStaging> staged) {
  for (size_t t = 0; t < tables.size(); ++t) {
    if (dd[t].num_unique == 0) continue;
    const StagingBytes sb = tables[t].residency->update_staging(dd[t].num_unique);
    if (sb.fat == 0 && sb.slots == 0) continue;
    LEANEMB_ASSIGN_OR_RETURN(staged[t].fat, staging->take<uint8_t>(sb.fat));
    LEANEMB_ASSIGN_OR_RETURN(staged[t].slots, staging->take<int64_t>(sb.slots / 8));
  }
  return Status();
}

// Phase 2, fused: reduce and update row by row. Nothing below can fail but the one allocation,
// which happens before any row changes. The view and row numbers table t's update runs on come
// from TableState::begin_update (staged rows are gathered first, through the backend, which
// records the bytes that cross tiers; an unstaged view off the device is updated in place and
// the backend's update records its rows' bytes).
Status EmbeddingCollection::Impl::update_fused(std::span<const TableDedup> dd, std::span<const UpdateStaging> staged,
                                               const kernels::UpdateStep& us, UpdateReport* report) {
  const int num_tables = static_cast<int>(tables.size());
  const kernels::ExecContext x = exec();
  const Tier staging_tier = workspace_tier();
  int64_t max_dim = 0;
  for (int t = 0; t < num_tables; ++t) max_dim = std::max(max_dim, tables[t].layout.dim);
  const size_t floats = backend->reduce_and_update_scratch_floats(max_dim, num_threads);
  LEANEMB_ASSIGN_OR_RETURN(void* scratch, buffers.get(slot(num_tables, kKeys), floats * 4, Category::kGradients, alloc));
  for (int t = 0; t < num_tables; ++t) {
    const TableDedup& d = dd[t];
    if (d.num_unique == 0) continue;
    const table_internal::Residency::UpdateTarget u =
        tables[t].begin_update(t, d.rows, d.num_unique, staged[t].fat, staged[t].slots, staging_tier);
    backend->reduce_and_update(u.view, d.source, u.rows, d.num_unique, us, x, static_cast<float*>(scratch));
    tables[t].end_update(d.rows, d.num_unique, staged[t].fat, staging_tier);
    report->unique_rows += d.num_unique;
  }
  return Status();
}

// Phase 2, checked: reduce every table into [U, dim], check, then update. A skipped step sets
// report->skipped_nonfinite (and skipped_huge_grad) and returns OK with no row changed.
Status EmbeddingCollection::Impl::update_checked(std::span<const TableDedup> dd, std::span<const UpdateStaging> staged,
                                                 const UpdateOptions& update, const kernels::UpdateStep& us,
                                                 UpdateReport* report) {
  const int num_tables = static_cast<int>(tables.size());
  const kernels::ExecContext x = exec();
  std::vector<float*> grads(tables.size(), nullptr);
  bool finite = true;
  for (int t = 0; t < num_tables; ++t) {
    if (dd[t].num_unique == 0) continue;
    const size_t bytes = reduced_grad_bytes(dd[t].num_unique, tables[t].layout.dim);
    LEANEMB_ASSIGN_OR_RETURN(void* g, buffers.get(slot(t, kGrads), bytes, Category::kGradients, alloc));
    grads[t] = static_cast<float*>(g);
    const bool ok = backend->reduce_segments(dd[t].source, dd[t].num_unique, grads[t], x);
    finite = finite && ok;
  }
  if (update.check_finite && !finite) {
    report->skipped_nonfinite = true;
    return Status();
  }
  // Finite but huge: g^2 in Adagrad's and Adam's state would overflow (the state turns
  // infinite and its rows stop learning). Only this path sees such gradients, so normal
  // steps pay nothing.
  if (update.check_finite && std::isfinite(update.max_abs_grad)) {
    for (int t = 0; t < num_tables; ++t) {
      if (dd[t].num_unique == 0) continue;
      const size_t n = static_cast<size_t>(dd[t].num_unique * tables[t].layout.dim);
      if (max_abs(std::span<const float>(grads[t], n), num_threads) > update.max_abs_grad) {
        report->skipped_nonfinite = true;
        report->skipped_huge_grad = true;
        return Status();
      }
    }
  }
  const Tier staging_tier = workspace_tier();
  for (int t = 0; t < num_tables; ++t) {
    const TableDedup& d = dd[t];
    if (d.num_unique == 0) continue;
    const table_internal::Residency::UpdateTarget u =
        tables[t].begin_update(t, d.rows, d.num_unique, staged[t].fat, staged[t].slots, staging_tier);
    backend->update_rows(u.view, u.rows, grads[t], d.num_unique, us, x);
    tables[t].end_update(d.rows, d.num_unique, staged[t].fat, staging_tier);
    report->unique_rows += d.num_unique;
  }
  return Status();
}

}  // namespace leanemb
