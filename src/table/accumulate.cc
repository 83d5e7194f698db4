// EmbeddingCollection's gradient accumulation over micro-batches (leanemb/tables.h): one
// optimizer step whose output gradients arrive micro-batch by micro-batch.
//
// Invariant (why the result is backward_update's, bit for bit): backward_update computes row r's
// gradient as kernels::reduce_segments does,
//     g_r[j] = multiplier * (((0 + s_1 * x_1[j]) + s_2 * x_2[j]) + ... + s_m * x_m[j])
// over r's contributions in (feature, bag, position) order, in fp32 (-ffp-contract=off: each
// product and each sum rounded on its own). Here sums_r starts at 0 (begin_accumulation), each
// micro-batch's dedup (the same dedup, on the micro-batch's bags) gives r's contributions of
// those bags in position order, and they are added to sums_r one by one with the same two
// operations; apply_accumulated multiplies once and updates with the same kernel as the
// two-pass path. With one feature per table, micro-batches in bag order visit every row's
// contributions in the one-shot order, so each fp32 operation has the same operands.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "table/collection_impl.h"

namespace leanemb {

namespace {

size_t acc_rows_slot(int t) { return 2 * static_cast<size_t>(t); }
size_t acc_sums_slot(int t) { return 2 * static_cast<size_t>(t) + 1; }

// Bags [b0, b1) of `b` as a batch of their own, offsets rebased into *offsets.
void acc_slice_bags(const SparseBatch& b, int64_t b0, int64_t b1, std::vector<int64_t>* offsets, SparseBatch* out) {
  const size_t F = b.features.size();
  const int64_t n = b1 - b0;
  offsets->resize(F * static_cast<size_t>(n + 1));
  out->batch_size = n;
  out->features.resize(F);
  for (size_t f = 0; f < F; ++f) {
    const FeatureInput& in = b.features[f];
    const int64_t lo = in.offsets[static_cast<size_t>(b0)], hi = in.offsets[static_cast<size_t>(b1)];
    int64_t* off = offsets->data() + f * static_cast<size_t>(n + 1);
    for (int64_t i = 0; i <= n; ++i) off[i] = in.offsets[static_cast<size_t>(b0 + i)] - lo;
    const auto l = static_cast<size_t>(lo), c = static_cast<size_t>(hi - lo);
    out->features[f] = FeatureInput{in.ids.subspan(l, c), std::span<const int64_t>(off, static_cast<size_t>(n + 1)),
                                    in.weights.empty() ? std::span<const float>() : in.weights.subspan(l, c)};
  }
}

// Adds a micro-batch's deduped contributions of one table into the step's sums: run u (row
// dd.rows[u]) into the sum of the same row among rows [0, U) (both ascending), its
// contributions in run order. Each row is one chunk's, so the thread count changes nothing.
void acc_add_runs(const TableDedup& dd, const int64_t* rows, int64_t U, int64_t dim, float* sums, int num_threads) {
  const kernels::SegmentSource& s = dd.source;
  const int64_t per_run = std::max<int64_t>(1, dd.num_ids / std::max<int64_t>(1, dd.num_unique)) * dim;
  parallel_for(dd.num_unique, grain_for(per_run), [&](int64_t u0, int64_t u1, int) {
    int64_t j = std::lower_bound(rows, rows + U, dd.rows[u0]) - rows;
    for (int64_t u = u0; u < u1; ++u) {
      while (rows[j] != dd.rows[u]) ++j;
      LEANEMB_DCHECK(j < U, "accumulate: a micro-batch row is not among the step's rows");
      float* __restrict acc = sums + j * dim;
      for (int64_t k = s.seg[u]; k < s.seg[u + 1]; ++k) {
        const float sc = s.scale[k];
        const float* __restrict x = s.ptr[k];
        for (int64_t c = 0; c < dim; ++c) acc[c] += sc * x[c];
      }
    }
  }, num_threads);
}

// x := x * m elementwise (reduce_segments' last operation).
void acc_scale(float* x, int64_t n, float m, int num_threads) {
  parallel_for(n, kChunkWork, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) x[i] = x[i] * m;
  }, num_threads);
}

}  // namespace

Status EmbeddingCollection::Impl::accumulation_rows(int t, const SparseBatch& b, Accumulation* a) {
  const auto n = static_cast<int64_t>(table_nnz(options, b, t));
  if (n == 0) return Status();
  // The dedup's keys slot of the table: the micro-batches' dedups reuse it.
  LEANEMB_ASSIGN_OR_RETURN(void* kp, buffers.get(step_slot(t, kSlotKeys), dedup_buffer_bytes(n, n).keys, Category::kWorkspace, alloc));
  auto* keys = static_cast<int64_t*>(kp);
  gather_table_ids(options, b, t, keys);
  std::sort(keys, keys + n);
  const int64_t u = std::unique(keys, keys + n) - keys;
  const int64_t dim = tables[t].layout.dim;
  const int64_t most = std::min(n, view(t).num_rows);  // no step has more distinct rows
  const AccumulationBytes ab = accumulation_bytes(u, dim), cap = accumulation_bytes(most, dim);
  LEANEMB_ASSIGN_OR_RETURN(void* rp, acc_buffers.get(acc_rows_slot(t), ab.rows, Category::kWorkspace, alloc, cap.rows));
  LEANEMB_ASSIGN_OR_RETURN(void* sp, acc_buffers.get(acc_sums_slot(t), ab.sums, Category::kGradients, alloc, cap.sums));
  std::memcpy(rp, keys, ab.rows);
  std::memset(sp, 0, ab.sums);
  a->num_unique[t] = u;
  a->rows[t] = static_cast<const int64_t*>(rp);
  a->sums[t] = static_cast<float*>(sp);
  return Status();
}

Status EmbeddingCollection::begin_accumulation(const SparseBatch& batch, const UpdateOptions& update) {
  Impl& im = *impl_;
  if (im.acc) return failed_precondition("begin_accumulation: an accumulation is open (apply_accumulated or discard_accumulation first)");
  if (im.eval_forward)
    return failed_precondition("begin_accumulation: the most recent forward was an evaluation forward (ForwardMode::kEval); "
                               "run a training forward (ForwardMode::kTrain) of the batch first");
  if (!std::isfinite(update.grad_multiplier)) return invalid_argument("grad_multiplier is not finite");
  if (!(update.max_abs_grad > 0)) return invalid_argument("max_abs_grad must be > 0 (+Inf: no bound)");
  auto a = std::make_unique<Accumulation>(im.alloc);
  a->batch = batch;
  a->update = update;
  // Cached tables: the batch's rows stay pinned until apply or discard; released on error here.
  struct Unpin {
    Impl& im;
    bool armed = true;
    ~Unpin() {
      if (armed && im.maps_rows) im.release_pins(tiered::PinSet::kStep);
    }
  } unpin{im};
  LEANEMB_RETURN_IF_ERROR(im.check(a->batch, &a->cb));
  LEANEMB_RETURN_IF_ERROR(im.map_dynamic(*a->cb.batch, Impl::DynamicUse::kUpdate, &a->dyn));
  LEANEMB_RETURN_IF_ERROR(im.remap(a->dyn.batch, &a->step, /*touch=*/false));
  a->num_unique.assign(im.tables.size(), 0);
  a->rows.assign(im.tables.size(), nullptr);
  a->sums.assign(im.tables.size(), nullptr);
  for (int t = 0; t < num_tables(); ++t) {
    if (im.options.tables[t].frozen) continue;
    LEANEMB_RETURN_IF_ERROR(im.accumulation_rows(t, a->step, a.get()));
  }
  if (a->cb.num_dropped > 0) {
    im.skipped_ids += a->cb.num_dropped;
    im.warn_dropped(a->cb.num_dropped, "begin_accumulation");
  }
  unpin.armed = false;
  im.acc = std::move(a);
  return Status();
}

Status EmbeddingCollection::Impl::compact_micro_seq_grads(int64_t b0, int64_t b1, std::span<const std::span<const float>> grad_seq,
                                                          Workspace* ws, std::vector<std::span<const float>>* out) {
  out->assign(grad_seq.begin(), grad_seq.end());
  if (!has_dynamic) return Status();
  size_t si = 0;
  for (size_t f = 0; f < options.features.size(); ++f) {
    if (options.features[f].pooling != PoolingMode::kNone) continue;
    const size_t s = si++;
    const std::span<const uint8_t> kept = acc->dyn.kept.empty() ? std::span<const uint8_t>() : acc->dyn.kept[f];
    if (kept.empty()) continue;
    const auto& off = acc->cb.batch->features[f].offsets;  // positions of the caller's gradients
    const auto lo = static_cast<size_t>(off[static_cast<size_t>(b0)]), hi = static_cast<size_t>(off[static_cast<size_t>(b1)]);
    const auto dim = static_cast<size_t>(options.tables[options.features[f].table].dim);
    size_t n = 0;
    for (size_t i = lo; i < hi; ++i) n += kept[i];
    LEANEMB_ASSIGN_OR_RETURN(std::span<float> g, ws->take<float>(n * dim));
    size_t k = 0;
    for (size_t i = lo; i < hi; ++i)
      if (kept[i]) std::memcpy(g.data() + (k++) * dim, grad_seq[s].data() + (i - lo) * dim, dim * 4);
    (*out)[s] = g;
  }
  return Status();
}

Status EmbeddingCollection::accumulate(int64_t bag_begin, int64_t bag_end, std::span<const float> grad_pooled,
                                       std::span<const std::span<const float>> grad_seq) {
  Impl& im = *impl_;
  if (!im.acc) return failed_precondition("accumulate: no accumulation is open (begin_accumulation first)");
  Accumulation& a = *im.acc;
  if (bag_begin != a.next_bag || bag_end < bag_begin || bag_end > a.step.batch_size)
    return invalid_argument("accumulate: bags [" + std::to_string(bag_begin) + ", " + std::to_string(bag_end) +
                            ") are not the next ones (bag " + std::to_string(a.next_bag) + " of " +
                            std::to_string(a.step.batch_size) + " is next)");
  if (grad_pooled.size() != static_cast<size_t>((bag_end - bag_begin) * im.pooled_dim))
    return invalid_argument("accumulate: grad_pooled has " + std::to_string(grad_pooled.size()) + " floats, expected " +
                            std::to_string((bag_end - bag_begin) * im.pooled_dim));
  size_t si = 0;
  for (size_t f = 0; f < im.options.features.size(); ++f) {
    if (im.options.features[f].pooling != PoolingMode::kNone) continue;
    const auto& off = a.cb.batch->features[f].offsets;
    const size_t want = static_cast<size_t>(off[static_cast<size_t>(bag_end)] - off[static_cast<size_t>(bag_begin)]) *
                        static_cast<size_t>(im.options.tables[im.options.features[f].table].dim);
    if (si >= grad_seq.size() || grad_seq[si].size() != want)
      return invalid_argument("accumulate: sequence feature '" + im.options.features[f].name + "' needs a gradient of " +
                              std::to_string(want) + " floats");
    ++si;
  }
  if (si != grad_seq.size()) return invalid_argument("accumulate: one gradient per sequence feature expected");
  if (!a.nonfinite && a.update.check_finite) {
    bool finite = std::isfinite(step_max_abs(grad_pooled, im.num_threads));
    for (const auto& s : grad_seq) finite = finite && std::isfinite(step_max_abs(s, im.num_threads));
    a.nonfinite = !finite;
  }
  if (a.nonfinite) {  // the step will be skipped: nothing to add
    a.next_bag = bag_end;
    return Status();
  }
  SparseBatch micro;
  acc_slice_bags(a.step, bag_begin, bag_end, &a.offsets, &micro);
  Workspace ws(im.alloc);
  std::vector<std::span<const float>> seq;
  LEANEMB_RETURN_IF_ERROR(im.compact_micro_seq_grads(bag_begin, bag_end, grad_seq, &ws, &seq));
  // Every table's dedup first (each in its own step buffers): an allocation failure leaves the
  // sums as they were.
  std::vector<TableDedup> dd(im.tables.size());
  for (int t = 0; t < num_tables(); ++t)
    if (a.num_unique[t] > 0) LEANEMB_RETURN_IF_ERROR(im.dedup(t, micro, grad_pooled, seq, 1.0f, &dd[t]));
  for (int t = 0; t < num_tables(); ++t) {
    if (dd[t].num_unique == 0) continue;
    acc_add_runs(dd[t], a.rows[t], a.num_unique[t], im.tables[t].layout.dim, a.sums[t], im.num_threads);
  }
  a.next_bag = bag_end;
  return Status();
}

// As backward_update's phase 2 (checked path) over the accumulated rows: staging for every
// split table first (before any row changes), then per table begin_update, the update kernel,
// end_update.
Status EmbeddingCollection::Impl::update_accumulated(UpdateReport* report) {
  const size_t T = tables.size();
  Workspace staging(alloc);
  std::vector<std::span<uint8_t>> fat(T);
  std::vector<std::span<int64_t>> slots(T);
  for (size_t t = 0; t < T; ++t) {
    if (acc->num_unique[t] == 0) continue;
    const StagingBytes sb = tables[t].residency->update_staging(acc->num_unique[t]);
    if (sb.fat == 0 && sb.slots == 0) continue;
    LEANEMB_ASSIGN_OR_RETURN(fat[t], staging.take<uint8_t>(sb.fat));
    LEANEMB_ASSIGN_OR_RETURN(slots[t], staging.take<int64_t>(sb.slots / 8));
  }
  const kernels::UpdateStep us{options.seed, step + 1};
  const Tier tier = workspace_tier();
  for (size_t t = 0; t < T; ++t) {
    const int64_t U = acc->num_unique[t];
    if (U == 0) continue;
    const int64_t* rows = acc->rows[t];
    const float* sums = acc->sums[t];
    TableState& ts = tables[t];
    table_internal::Residency::UpdateTarget u = ts.begin_update(static_cast<int>(t), rows, U, fat[t], slots[t], tier);
    backend->update_rows(u.view, u.rows, sums, U, us, exec());
    ts.end_update(rows, U, fat[t], tier);
    report->unique_rows += U;
  }
  step = us.step;
  return Status();
}

Result<UpdateReport> EmbeddingCollection::apply_accumulated() {
  Impl& im = *impl_;
  if (!im.acc) return failed_precondition("apply_accumulated: no accumulation is open (begin_accumulation first)");
  if (im.acc->next_bag != im.acc->step.batch_size)
    return failed_precondition("apply_accumulated: bags [" + std::to_string(im.acc->next_bag) + ", " +
                               std::to_string(im.acc->step.batch_size) + ") have no gradients yet");
  // The accumulation closes whatever happens below; the pins go with it.
  struct Close {
    Impl& im;
    ~Close() {
      if (im.maps_rows) im.release_pins(tiered::PinSet::kStep);
      im.acc.reset();
    }
  } close{im};
  const Accumulation& a = *im.acc;
  UpdateReport report;
  if (a.nonfinite) {
    report.skipped_nonfinite = true;
    return report;
  }
  // The sums times the multiplier (reduce_segments' last step), then the two-pass path's checks:
  // any non-finite sum skips the step, else any above max_abs_grad does (skipped_huge_grad).
  float most = 0.0f;
  for (int t = 0; t < num_tables(); ++t) {
    const int64_t n = a.num_unique[t] * im.tables[t].layout.dim;
    if (n == 0) continue;
    acc_scale(a.sums[t], n, a.update.grad_multiplier, im.num_threads);
    if (a.update.check_finite) most = std::max(most, step_max_abs(std::span<const float>(a.sums[t], static_cast<size_t>(n)), im.num_threads));
  }
  if (a.update.check_finite && (!std::isfinite(most) || (std::isfinite(a.update.max_abs_grad) && most > a.update.max_abs_grad))) {
    report.skipped_nonfinite = true;
    report.skipped_huge_grad = std::isfinite(most);
    return report;
  }
  LEANEMB_RETURN_IF_ERROR(im.update_accumulated(&report));
  for (const auto& f : a.step.features) report.lookups += static_cast<int64_t>(f.ids.size());
  if (im.has_dynamic) LEANEMB_RETURN_IF_ERROR(im.end_dynamic_step());
  return report;
}

void EmbeddingCollection::discard_accumulation() {
  Impl& im = *impl_;
  if (!im.acc) return;
  if (im.maps_rows) im.release_pins(tiered::PinSet::kStep);
  im.acc.reset();
}

}  // namespace leanemb
