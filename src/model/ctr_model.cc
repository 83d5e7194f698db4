// CtrModel: assembly of the DLRM-style model and its training step. See ctr_model.h.
#include "model/ctr_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "nn/loss.h"
#include "tiered/sizes.h"

namespace leanemb::model {

// Per-step buffers, grown on demand and kept between steps.
struct CtrModel::Buffers {
  struct Buf {
    Allocation a;
    Result<float*> get(Allocator* alloc, Category c, size_t floats) {
      floats = std::max<size_t>(floats, 1);
      if (a.size_bytes() < floats * 4) {
        a.reset();
        LEANEMB_ASSIGN_OR_RETURN(a, alloc->allocate(floats * 4, c));
      }
      return a.as<float>();
    }
  };
  Buf pooled, grad_pooled, z, inter, logits, dlogits, dinter, dz;
  Buf group_grads;                // kGradients: [groups here + 1, dense params] (gradient groups)
  std::vector<int64_t> slice_offsets;  // rebased offsets of this rank's slice
  SparseBatch slice;                   // views of this rank's slice
  std::vector<int64_t> next_offsets;   // prefetch(): the next batch's slice (the ids are copied
  SparseBatch next_slice;              // by the tables' prefetch, so nothing of it is kept)
  data::Batch pruned;                  // predict() on a pruned model: the batch with kept rows
};

namespace {

// Views of records [begin, end) of `batch`'s sparse features, offsets rebased to 0 (stored in
// *offsets, which must stay alive as long as *out is used).
void slice_sparse(const data::Batch& batch, int64_t begin, int64_t end, std::vector<int64_t>* offsets, SparseBatch* out) {
  const int64_t n = end - begin;
  const auto F = static_cast<int64_t>(batch.sparse.size());
  offsets->resize(static_cast<size_t>(F * (n + 1)));
  out->batch_size = n;
  out->features.resize(static_cast<size_t>(F));
  for (int64_t f = 0; f < F; ++f) {
    const data::SparseColumn& col = batch.sparse[static_cast<size_t>(f)];
    const int64_t lo = col.offsets[static_cast<size_t>(begin)], hi = col.offsets[static_cast<size_t>(end)];
    int64_t* off = offsets->data() + f * (n + 1);
    for (int64_t i = 0; i <= n; ++i) off[i] = col.offsets[static_cast<size_t>(begin + i)] - lo;
    out->features[static_cast<size_t>(f)] =
        FeatureInput{std::span<const int64_t>(col.ids.data() + lo, static_cast<size_t>(hi - lo)),
                     std::span<const int64_t>(off, static_cast<size_t>(n + 1)), {}};
  }
}

size_t dense_param_floats(const nn::DenseOptimizer& opt) {
  size_t n = 0;
  for (const nn::DenseParam& p : opt.params()) n += p.grad.size();
  return n;
}

}  // namespace

CtrModel::~CtrModel() = default;

CtrBufferFloats ctr_buffer_floats(const CtrModelOptions& o, int64_t interaction_dim, int64_t batch_size,
                                  int64_t micro_rows) {
  const int64_t fd = o.num_sparse * o.embedding_dim;
  const int64_t zd = o.bottom_hidden.back();
  // Buffers::Buf::get allocates at least one float.
  auto f = [](int64_t n) { return static_cast<size_t>(std::max<int64_t>(n, 1)); };
  CtrBufferFloats b;
  b.pooled = f(batch_size * fd);
  b.grad_pooled = f(batch_size * fd);
  b.grad_pooled_micro = f(micro_rows * fd);
  b.z = f(micro_rows * zd);
  b.inter = f(micro_rows * interaction_dim);
  b.logits = f(micro_rows);
  b.dlogits = f(micro_rows);
  b.dinter = f(micro_rows * interaction_dim);
  b.dz = f(micro_rows * zd);
  return b;
}

namespace {

// create's checks of the options (world: the communicator's size, 1 without one).
Status check_model_options(const CtrModelOptions& o, int world) {
  if (o.num_dense < 1 || o.num_sparse < 1) return invalid_argument("CtrModel: needs >= 1 dense and >= 1 sparse feature");
  if (static_cast<int>(o.table_rows.size()) != o.num_sparse)
    return invalid_argument("CtrModel: table_rows must have one value per sparse feature");
  if (!o.table_dynamic.empty() && static_cast<int>(o.table_dynamic.size()) != o.num_sparse)
    return invalid_argument("CtrModel: table_dynamic must be empty or have one entry per sparse feature");
  if (o.bottom_hidden.empty()) return invalid_argument("CtrModel: bottom MLP needs at least one layer");
  if (!o.pruned_rows.empty() && static_cast<int>(o.pruned_rows.size()) != o.num_sparse)
    return invalid_argument("CtrModel: pruned_rows must be empty or have one entry per sparse feature");
  if (o.grad_groups < 1 || o.grad_groups % world != 0)
    return invalid_argument("CtrModel: grad_groups (" + std::to_string(o.grad_groups) + ") must be a positive multiple of the world size (" +
                            std::to_string(world) + ")");
  return Status();
}

// One table and one feature per sparse field.
CollectionOptions ctr_collection_options(const CtrModelOptions& o) {
  CollectionOptions co;
  for (int f = 0; f < o.num_sparse; ++f) {
    TableOptions t;
    t.name = ctr_table_name(f);
    t.num_rows = o.table_rows[static_cast<size_t>(f)];
    t.dim = o.embedding_dim;
    t.dtype = o.row_dtype;
    t.optimizer = o.row_optimizer;
    t.init = o.row_init;
    t.frozen = o.frozen_tables;
    if (!o.table_dynamic.empty()) t.dynamic = o.table_dynamic[static_cast<size_t>(f)];
    if (tiered::cache_applies(t.num_rows, o.row_cache.fraction, o.cache_min_rows)) {
      t.cache = o.row_cache;
      if (t.cache.store == StoreKind::kFile) t.cache.store_path = o.store_dir + "/" + t.name + ".rows";
    }
    co.tables.push_back(t);
    co.features.push_back(FeatureOptions{t.name, f, o.pooling});
  }
  co.seed = o.seed;
  co.num_threads = o.num_threads;
  return co;
}

DistributionOptions ctr_distribution_options(const CtrModelOptions& o, int world, size_t num_features) {
  DistributionOptions dist;
  dist.comm = o.comm;
  dist.sharding = o.sharding;
  dist.forward_payload = o.forward_payload;
  dist.backward_payload = o.backward_payload;
  if (o.comm && o.batch_size > 0) {
    int64_t bags = 0;  // the largest slice over the ranks (lookup_slice: one call per step)
    for (int r = 0; r < world; ++r) {
      const CtrSlice s = ctr_slice(o.batch_size, 1, o.grad_groups, r, world);
      bags = std::max(bags, s.hi - s.lo);
    }
    dist.max_call.assign(num_features, FeatureCallShape{bags, bags * o.max_ids_per_field, false});
  }
  return dist;
}

// The bottom MLP (dense features -> bottom_hidden, ReLU after every layer) or the top one
// (in_dim -> top_hidden -> 1 logit).
nn::MlpOptions ctr_mlp_options(const CtrModelOptions& o, bool bottom, int64_t in_dim) {
  nn::MlpOptions m;
  const std::vector<int64_t>& hidden = bottom ? o.bottom_hidden : o.top_hidden;
  m.widths = {in_dim};
  m.widths.insert(m.widths.end(), hidden.begin(), hidden.end());
  if (!bottom) m.widths.push_back(1);
  m.relu_after_last = bottom;
  m.checkpoint_activations = o.checkpoint_activations;
  m.precision = o.precision;
  m.seed = o.seed * 1000003 + (bottom ? 1 : 2);
  m.name = bottom ? "bottom" : "top";
  return m;
}

}  // namespace

Result<std::unique_ptr<CtrModel>> CtrModel::create(const CtrModelOptions& o, MemorySystem* memory) {
  if (memory == nullptr) return invalid_argument("CtrModel: null MemorySystem");
  const int world = o.comm ? o.comm->size() : 1;
  LEANEMB_RETURN_IF_ERROR(check_model_options(o, world));
  std::unique_ptr<CtrModel> m(new CtrModel());
  m->options_ = o;
  m->memory_ = memory;
  m->buf_ = std::make_unique<Buffers>();
  const CollectionOptions co = ctr_collection_options(o);
  LEANEMB_ASSIGN_OR_RETURN(m->tables_, create_tables(co, memory, ctr_distribution_options(o, world, co.features.size())));

  // The dense layers live where compute runs (see ctr_model.h).
  Allocator* dense_alloc = memory->allocator_for(Category::kActivations);
  LEANEMB_ASSIGN_OR_RETURN(nn::Mlp bottom, nn::Mlp::create(ctr_mlp_options(o, true, o.num_dense), dense_alloc));
  m->bottom_ = std::make_unique<nn::Mlp>(std::move(bottom));

  nn::InteractionOptions io;
  io.kind = o.interaction;
  io.num_features = o.num_sparse;
  io.embedding_dim = o.embedding_dim;
  io.dense_dim = o.bottom_hidden.back();
  io.precision = o.precision;
  LEANEMB_ASSIGN_OR_RETURN(nn::Interaction inter, nn::Interaction::create(io, memory->allocator_for(Category::kWorkspace)));
  m->interaction_ = std::make_unique<nn::Interaction>(std::move(inter));

  LEANEMB_ASSIGN_OR_RETURN(nn::Mlp top,
                           nn::Mlp::create(ctr_mlp_options(o, false, m->interaction_->output_dim()), dense_alloc));
  m->top_ = std::make_unique<nn::Mlp>(std::move(top));

  std::vector<nn::DenseParam> params = m->bottom_->dense_params();
  for (auto& p : m->top_->dense_params()) params.push_back(p);
  nn::DenseOptimizerOptions doo = o.dense_optimizer;
  doo.name = "dense_optimizer";
  LEANEMB_ASSIGN_OR_RETURN(nn::DenseOptimizer opt,
                           nn::DenseOptimizer::create(doo, std::move(params), memory->allocator_for(Category::kOptimizerState)));
  m->dense_opt_ = std::make_unique<nn::DenseOptimizer>(std::move(opt));
  return m;
}

EmbeddingTables& CtrModel::embeddings() { return *tables_; }
const EmbeddingTables& CtrModel::embeddings() const { return *tables_; }

CtrSlice ctr_slice(int64_t B, int micro_batches, int64_t G, int64_t r, int64_t P) {
  CtrSlice s;
  s.B = B;
  s.G = G;
  s.g0 = r * G / P;
  s.g1 = (r + 1) * G / P;
  s.lo = B * s.g0 / G;
  s.hi = B * s.g1 / G;
  // The same count on every rank (the sharded forward is collective): at most the smallest
  // group's size, at least one.
  s.per_group = std::clamp<int64_t>((micro_batches + G - 1) / G, 1, std::max<int64_t>(1, B / G));
  s.max_micro = ((B + G - 1) / G + s.per_group - 1) / s.per_group;
  return s;
}

CtrModel::Slice CtrModel::slice_of(int64_t B, int micro_batches) const {
  const int64_t P = options_.comm ? options_.comm->size() : 1, r = options_.comm ? options_.comm->rank() : 0;
  return ctr_slice(B, micro_batches, options_.grad_groups, r, P);
}

// Forward of records [begin, end) of `batch`: pooled embeddings into rows [begin - base, end -
// base) of the pooled buffer (sized for slice_rows records), bottom MLP, interaction, top MLP into
// logits_out [end - begin]. train: the MLPs keep what their backward needs. The pooled rows of
// the whole slice are already there (lookup_slice()).
Status CtrModel::forward_micro(const data::Batch& batch, int64_t begin, int64_t end, int64_t base, int64_t slice_rows,
                               bool train, float* logits_out) {
  Buffers& b = *buf_;
  const int64_t n = end - begin;
  const int64_t F = options_.num_sparse, D = options_.embedding_dim;
  const int64_t zd = options_.bottom_hidden.back();
  const int64_t idim = interaction_->output_dim();
  const CtrBufferFloats sz = ctr_buffer_floats(options_, idim, slice_rows, n);
  Allocator* act = memory_->allocator_for(Category::kActivations);
  LEANEMB_ASSIGN_OR_RETURN(float* pooled, b.pooled.get(act, Category::kActivations, sz.pooled));
  LEANEMB_ASSIGN_OR_RETURN(float* z, b.z.get(act, Category::kActivations, sz.z));
  LEANEMB_ASSIGN_OR_RETURN(float* inter, b.inter.get(act, Category::kActivations, sz.inter));

  float* pooled_rows = pooled + (begin - base) * F * D;
  const std::span<float> pooled_span(pooled_rows, static_cast<size_t>(n * F * D));
  if (n == 0) return Status();
  const nn::ForwardMode mode = train ? nn::ForwardMode::kTrain : nn::ForwardMode::kEval;
  const std::span<const float> dense(batch.dense.data() + begin * options_.num_dense, static_cast<size_t>(n * options_.num_dense));
  LEANEMB_RETURN_IF_ERROR(bottom_->forward(n, dense, std::span<float>(z, static_cast<size_t>(n * zd)), mode));
  LEANEMB_RETURN_IF_ERROR(interaction_->forward(n, std::span<const float>(z, static_cast<size_t>(n * zd)), pooled_span,
                                                std::span<float>(inter, static_cast<size_t>(n * idim))));
  LEANEMB_RETURN_IF_ERROR(top_->forward(n, std::span<const float>(inter, static_cast<size_t>(n * idim)),
                                        std::span<float>(logits_out, static_cast<size_t>(n)), mode));
  return Status();
}

// One lookup (a collective when sharded) for this rank's whole slice [lo, hi) into the pooled
// buffer, before its micro-batches run the dense layers. Fills b.slice, which the update
// reuses. mode: kTrain in train_step, kEval in predict (dynamic tables admit no ids).
Status CtrModel::lookup_slice(const data::Batch& batch, int64_t lo, int64_t hi, ForwardMode mode) {
  Buffers& b = *buf_;
  const int64_t n = hi - lo, F = options_.num_sparse, D = options_.embedding_dim;
  const CtrBufferFloats sz = ctr_buffer_floats(options_, interaction_->output_dim(), n, 1);
  LEANEMB_ASSIGN_OR_RETURN(float* pooled, b.pooled.get(memory_->allocator_for(Category::kActivations), Category::kActivations, sz.pooled));
  slice_sparse(batch, lo, hi, &b.slice_offsets, &b.slice);
  return tables_->forward(b.slice, std::span<float>(pooled, static_cast<size_t>(n * F * D)), {}, mode);
}

void CtrModel::save_group_grads(int64_t slot) {
  float* dst = buf_->group_grads.a.as<float>() + static_cast<size_t>(slot) * dense_param_floats(*dense_opt_);
  for (const nn::DenseParam& p : dense_opt_->params()) dst = std::copy(p.grad.begin(), p.grad.end(), dst);
  dense_opt_->zero_grad();
}

Status CtrModel::reduce_dense_grads(int64_t groups_here) {
  const size_t n = dense_param_floats(*dense_opt_);
  float* base = buf_->group_grads.a.as<float>();
  std::vector<std::span<const float>> parts;
  for (int64_t g = 0; g < groups_here; ++g) parts.emplace_back(base + static_cast<size_t>(g) * n, n);
  const std::span<float> sum(base + static_cast<size_t>(groups_here) * n, n);
  dist::Communicator::reduce_in_fixed_order(parts, sum, dist::ReduceOp::kSum);
  if (options_.comm && options_.comm->size() > 1) LEANEMB_RETURN_IF_ERROR(options_.comm->all_reduce(sum, dist::ReduceOp::kSum));
  const float* src = sum.data();
  for (const nn::DenseParam& p : dense_opt_->params()) {
    std::copy(src, src + p.grad.size(), p.grad.begin());
    src += p.grad.size();
  }
  return Status();
}

namespace {
Status check_batch_shape(const data::Batch& batch, const CtrModelOptions& o) {
  if (batch.batch_size < 1) return invalid_argument("CtrModel: empty batch");
  if (batch.num_dense != o.num_dense || static_cast<int>(batch.sparse.size()) != o.num_sparse)
    return invalid_argument("CtrModel: batch has " + std::to_string(batch.num_dense) + " dense and " +
                            std::to_string(batch.sparse.size()) + " sparse features, the model " +
                            std::to_string(o.num_dense) + " and " + std::to_string(o.num_sparse));
  return Status();
}
}  // namespace

Status CtrModel::prefetch(const data::Batch& next, int micro_batches) {
  LEANEMB_RETURN_IF_ERROR(check_batch_shape(next, options_));
  Buffers& b = *buf_;
  const Slice sl = slice_of(next.batch_size, micro_batches);
  slice_sparse(next, sl.lo, sl.hi, &b.next_offsets, &b.next_slice);
  return tables_->prefetch(b.next_slice);
}

// One train_step: this rank's slice, how its gradients travel, its buffers and running sums.
struct CtrModel::StepState {
  Slice sl;
  int64_t nl = 0;         // this rank's records, sl.hi - sl.lo
  bool grouped = false;   // dense gradients through group_grads
  bool by_row = false;    // the tables sum each micro-batch's pooled gradient as it comes
  float scale = 1.0f;     // the loss scale
  float* grad_pooled = nullptr;  // [nl, F * D], by row [one micro-batch, F * D]
  float* logits = nullptr;
  float* dlogits = nullptr;
  float* dinter = nullptr;
  float* dz = nullptr;
  double loss = 0.0;      // this rank's share of the batch's mean loss
  bool found = false;     // a non-finite gradient: the step is skipped
};

Result<StepStats> CtrModel::train_step(const data::Batch& batch, int micro_batches, amp::LossScaler& scaler,
                                       bool inject_nonfinite) {
  LEANEMB_RETURN_IF_ERROR(check_batch_shape(batch, options_));
  if (!options_.pruned_rows.empty()) return failed_precondition("CtrModel: a pruned serving model cannot be trained");
  StepState s;
  s.sl = slice_of(batch.batch_size, micro_batches);
  s.nl = s.sl.hi - s.sl.lo;
  s.grouped = s.sl.G > 1 || options_.comm != nullptr;
  // By row: the tables sum each micro-batch's pooled gradient as it comes (one micro-batch's kept).
  s.by_row = ctr_accumulates(s.sl, options_.accumulate_by_row && tables_->accumulates_by_row());
  LEANEMB_RETURN_IF_ERROR(step_buffers(&s));

  // Gradients of the dense layers start at zero and accumulate over a group's micro-batches.
  dense_opt_->zero_grad();
  StepStats st;
  st.samples = batch.batch_size;
  s.scale = scaler.scale();
  if (Status e = lookup_slice(batch, s.sl.lo, s.sl.hi, ForwardMode::kTrain); !e.ok()) return abandon_step(e, s.by_row);
  const float inv = scaler.inv_scale();
  UpdateOptions uo;
  uo.grad_multiplier = inv;
  if (s.by_row) {
    if (Status e = tables_->begin_accumulation(buf_->slice, uo); !e.ok()) return abandon_step(e, s.by_row);
  }
  if (Status e = train_groups(batch, inject_nonfinite, &s); !e.ok()) return abandon_step(e, s.by_row);
  if (Status e = check_step_gradients(inject_nonfinite, &s); !e.ok()) return abandon_step(e, s.by_row);
  st.loss = s.loss;
  bool found = s.found;
  if (!found) {
    LEANEMB_RETURN_IF_ERROR(update_step(s, uo, &st));
    found = st.skipped;
  } else if (s.by_row) {
    tables_->discard_accumulation();
  }
  if (!found) LEANEMB_RETURN_IF_ERROR(dense_opt_->step(inv));
  dense_opt_->zero_grad();
  scaler.update(found);
  st.skipped = found;
  return st;
}

// The step's buffers (kept between steps; grown here when the batch is larger).
Status CtrModel::step_buffers(StepState* s) {
  Buffers& b = *buf_;
  const CtrBufferFloats sz = ctr_buffer_floats(options_, interaction_->output_dim(), s->nl, s->sl.max_micro);
  Allocator* work = memory_->allocator_for(Category::kWorkspace);
  Allocator* grads = memory_->allocator_for(Category::kGradients);
  LEANEMB_ASSIGN_OR_RETURN(s->grad_pooled,
                           b.grad_pooled.get(grads, Category::kGradients, s->by_row ? sz.grad_pooled_micro : sz.grad_pooled));
  LEANEMB_ASSIGN_OR_RETURN(s->logits, b.logits.get(memory_->allocator_for(Category::kActivations), Category::kActivations, sz.logits));
  LEANEMB_ASSIGN_OR_RETURN(s->dlogits, b.dlogits.get(work, Category::kWorkspace, sz.dlogits));
  LEANEMB_ASSIGN_OR_RETURN(s->dinter, b.dinter.get(work, Category::kWorkspace, sz.dinter));
  LEANEMB_ASSIGN_OR_RETURN(s->dz, b.dz.get(work, Category::kWorkspace, sz.dz));
  if (s->grouped)
    LEANEMB_RETURN_IF_ERROR(b.group_grads.get(memory_->allocator_for(Category::kActivations), Category::kGradients,
                                              static_cast<size_t>(s->sl.g1 - s->sl.g0 + 1) * dense_param_floats(*dense_opt_)).status());
  return Status();
}

// Every micro-batch of this rank's groups; grouped, each group's dense gradients are saved, then
// summed (over the ranks too).
Status CtrModel::train_groups(const data::Batch& batch, bool inject_nonfinite, StepState* s) {
  const Slice& sl = s->sl;
  for (int64_t g = sl.g0; g < sl.g1; ++g) {
    for (int64_t i = 0; i < sl.per_group; ++i) {
      const auto [begin, end] = sl.micro(g, i);
      LEANEMB_RETURN_IF_ERROR(train_micro(batch, begin, end, inject_nonfinite, s));
    }
    if (s->grouped) save_group_grads(g - sl.g0);
  }
  if (s->grouped) LEANEMB_RETURN_IF_ERROR(reduce_dense_grads(sl.g1 - sl.g0));
  return Status();
}

// Records [begin, end): forward, loss (scaled by their share of the batch), backward through the
// top MLP, the interaction and the bottom MLP; the pooled gradient into grad_pooled (by row: the
// micro-batch's, checked and handed to the tables' accumulation).
Status CtrModel::train_micro(const data::Batch& batch, int64_t begin, int64_t end, bool inject_nonfinite, StepState* st) {
  Buffers& b = *buf_;
  const Slice& sl = st->sl;
  const int64_t B = batch.batch_size, n = end - begin;
  const int64_t F = options_.num_sparse, D = options_.embedding_dim;
  const int64_t zd = options_.bottom_hidden.back();
  const int64_t idim = interaction_->output_dim();
  Status s = forward_micro(batch, begin, end, sl.lo, st->nl, true, st->logits);
  if (n == 0 && s.ok()) return Status();
  if (s.ok()) {
    const float share = static_cast<float>(static_cast<double>(n) / static_cast<double>(B));
    auto l = nn::bce_with_logits(std::span<const float>(st->logits, static_cast<size_t>(n)),
                                 std::span<const float>(batch.labels.data() + begin, static_cast<size_t>(n)),
                                 st->scale * share, std::span<float>(st->dlogits, static_cast<size_t>(n)));
    if (!l.ok()) s = l.status();
    else st->loss += static_cast<double>(l.value()) * static_cast<double>(n) / static_cast<double>(B);
  }
  if (s.ok())
    s = top_->backward(std::span<const float>(st->dlogits, static_cast<size_t>(n)),
                       std::span<float>(st->dinter, static_cast<size_t>(n * idim)));
  const int64_t row = (begin - sl.lo) * F * D;
  const std::span<float> gp(st->grad_pooled + (st->by_row ? 0 : row), static_cast<size_t>(n * F * D));
  if (s.ok())
    s = interaction_->backward(n, std::span<const float>(b.z.a.as<float>(), static_cast<size_t>(n * zd)),
                               std::span<const float>(b.pooled.a.as<float>() + row, static_cast<size_t>(n * F * D)),
                               std::span<const float>(st->dinter, static_cast<size_t>(n * idim)),
                               std::span<float>(st->dz, static_cast<size_t>(n * zd)), gp);
  if (s.ok()) s = bottom_->backward(std::span<const float>(st->dz, static_cast<size_t>(n * zd)), {});
  if (s.ok() && st->by_row) {  // the slice's record 0 is this micro-batch's first when begin == lo
    if (inject_nonfinite && begin == sl.lo) gp[0] = std::numeric_limits<float>::infinity();
    st->found = st->found || amp::found_nonfinite(gp);
    if (!st->found) s = tables_->accumulate(begin - sl.lo, end - sl.lo, gp);
  }
  return s;
}

// Found-inf check before anything is updated (with a communicator: agreed by every rank, with
// the loss; the dense gradients are already the global sums). By row, each micro-batch was
// checked as it came.
Status CtrModel::check_step_gradients(bool inject_nonfinite, StepState* s) {
  if (!s->by_row) {
    const int64_t FD = options_.num_sparse * options_.embedding_dim;
    if (inject_nonfinite && s->nl > 0) s->grad_pooled[0] = std::numeric_limits<float>::infinity();
    s->found = amp::found_nonfinite(std::span<const float>(s->grad_pooled, static_cast<size_t>(s->nl * FD)));
  }
  s->found = s->found || dense_opt_->any_nonfinite_grad();
  if (options_.comm && options_.comm->size() > 1) {
    double agreed[2] = {s->loss, s->found ? 1.0 : 0.0};
    LEANEMB_RETURN_IF_ERROR(options_.comm->all_reduce(std::span<double>(agreed, 2), dist::ReduceOp::kSum));
    s->loss = agreed[0];
    s->found = agreed[1] > 0;
  }
  return Status();
}

// The tables' update (st->skipped: the tables skipped it after all) and its row count.
Status CtrModel::update_step(const StepState& s, const UpdateOptions& uo, StepStats* st) {
  UpdateReport rep;
  if (s.by_row) {
    LEANEMB_ASSIGN_OR_RETURN(rep, tables_->apply_accumulated());
  } else {
    const std::span<const float> gp(s.grad_pooled, static_cast<size_t>(s.nl * options_.num_sparse * options_.embedding_dim));
    LEANEMB_ASSIGN_OR_RETURN(rep, tables_->backward_update(buf_->slice, gp, {}, uo));
  }
  st->skipped = rep.skipped_nonfinite;
  st->unique_rows = rep.unique_rows;
  return Status();
}

// A step that failed before any update: the saved activations, the dense gradients and an open
// accumulation are dropped, so the model is as before the step.
Status CtrModel::abandon_step(Status s, bool by_row) {
  bottom_->release_saved();
  top_->release_saved();
  dense_opt_->zero_grad();
  if (by_row) tables_->discard_accumulation();
  return s;
}

Status CtrModel::predict(const data::Batch& in, std::span<float> probs, int micro_batches) {
  LEANEMB_RETURN_IF_ERROR(check_batch_shape(in, options_));
  const data::Batch* bp = &in;
  if (!options_.pruned_rows.empty()) {  // ids of the trained tables -> kept rows, pruned ids dropped
    data::Batch& pb = buf_->pruned;
    pb.batch_size = in.batch_size;
    pb.num_dense = in.num_dense;
    pb.epoch = in.epoch;
    pb.labels = in.labels;
    pb.dense = in.dense;
    pb.sparse.resize(in.sparse.size());
    for (size_t f = 0; f < in.sparse.size(); ++f)
      options_.pruned_rows[f].remap(in.sparse[f].ids, in.sparse[f].offsets, &pb.sparse[f].ids, &pb.sparse[f].offsets);
    bp = &pb;
  }
  const data::Batch& batch = *bp;
  if (probs.size() != static_cast<size_t>(batch.batch_size))
    return invalid_argument("predict: probs has " + std::to_string(probs.size()) + " entries, batch " + std::to_string(batch.batch_size));
  const Slice sl = slice_of(batch.batch_size, micro_batches);
  const bool multi = options_.comm && options_.comm->size() > 1;
  if (multi) std::fill(probs.begin(), probs.end(), 0.0f);
  LEANEMB_RETURN_IF_ERROR(lookup_slice(batch, sl.lo, sl.hi, ForwardMode::kEval));
  for (int64_t g = sl.g0; g < sl.g1; ++g) {
    for (int64_t i = 0; i < sl.per_group; ++i) {
      const auto [begin, end] = sl.micro(g, i);
      LEANEMB_RETURN_IF_ERROR(forward_micro(batch, begin, end, sl.lo, sl.hi - sl.lo, false, probs.data() + begin));
    }
  }
  for (int64_t i = sl.lo; i < sl.hi; ++i) {
    float& p = probs[static_cast<size_t>(i)];
    p = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(p))));
  }
  // Every rank gets every probability: the others' entries are 0 here, and x + 0 = x exactly.
  if (multi) LEANEMB_RETURN_IF_ERROR(options_.comm->all_reduce(probs, dist::ReduceOp::kSum));
  return Status();
}

std::vector<nn::NamedTensor> CtrModel::dense_parameters() const {
  std::vector<nn::NamedTensor> out = bottom_->parameters();
  for (auto& t : top_->parameters()) out.push_back(t);
  return out;
}

std::vector<nn::NamedTensor> CtrModel::dense_optimizer_state() const { return dense_opt_->state(); }

Status CtrModel::load_dense(std::span<const nn::NamedTensor> params, std::span<const nn::NamedTensor> state) {
  std::vector<nn::NamedTensor> bottom, top;
  for (const auto& t : params) (t.name.rfind("bottom.", 0) == 0 ? bottom : top).push_back(t);
  LEANEMB_RETURN_IF_ERROR(bottom_->load_parameters(bottom));
  LEANEMB_RETURN_IF_ERROR(top_->load_parameters(top));
  return dense_opt_->load_state(state);
}

void CtrModel::release_buffers() {
  buf_ = std::make_unique<Buffers>();
  embeddings().release_step_buffers();
}

}  // namespace leanemb::model
