// TextModel: pooled input rows -> optional hidden layer -> logits -> softmax / one-vs-all.
#include "text/text_model.h"

#include "core/enum_names.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace leanemb {
template <>
struct EnumNames<text::TextLoss> {
  static constexpr std::string_view kWhat = "loss";
  static constexpr EnumName<text::TextLoss> kNames[] = {{text::TextLoss::kSoftmax, "softmax", ""},
                                                        {text::TextLoss::kOneVsAll, "ova", ""}};
};
}  // namespace leanemb

namespace leanemb::text {

Result<TextLoss> parse_text_loss(std::string_view s) { return parse_enum<TextLoss>(s); }
std::string_view text_loss_name(TextLoss l) { return enum_name(l); }

Result<float> text_loss(TextLoss l, std::span<const float> logits, int64_t num_classes, nn::ClassTargets targets,
                        std::span<float> dlogits) {
  return l == TextLoss::kSoftmax ? nn::softmax_cross_entropy(logits, num_classes, targets, 1.0f, dlogits)
                                 : nn::one_vs_all_logistic(logits, num_classes, targets, 1.0f, dlogits);
}

CollectionOptions TextModel::collection_options(const TextModelOptions& o) {
  CollectionOptions co;
  TableOptions t;
  t.name = "input";
  t.dim = o.dim;
  t.dtype = o.dtype;
  t.optimizer = o.row_optimizer;
  t.init = o.init;
  if (t.init.kind == InitKind::kUniform && t.init.bound <= 0.0f) t.init.bound = 1.0f / static_cast<float>(o.dim);
  t.dynamic = o.dynamic;
  t.frozen = o.frozen;
  t.num_rows = o.dynamic.enabled && o.dynamic_rows > 0 ? std::min(o.dynamic_rows, o.input_rows) : o.input_rows;
  if (o.dynamic.enabled) t.num_rows = t.num_rows / o.dynamic.partitions * o.dynamic.partitions;  // whole partitions
  co.tables.push_back(t);
  co.features.push_back(FeatureOptions{"tokens", 0, PoolingMode::kMean});
  co.seed = o.seed;
  co.num_threads = o.num_threads;
  return co;
}

namespace {
Status check_options(const TextModelOptions& o) {
  if (o.input_rows < 1 || o.dim < 1 || o.num_labels < 1 || o.hidden < 0)
    return invalid_argument("text model: input_rows " + std::to_string(o.input_rows) + ", dim " + std::to_string(o.dim) +
                            ", num_labels " + std::to_string(o.num_labels) + ", hidden " + std::to_string(o.hidden) +
                            " (need input_rows, dim, num_labels >= 1 and hidden >= 0)");
  if (o.dynamic.enabled && o.dynamic_rows < 0) return invalid_argument("text model: dynamic_rows must be >= 0");
  if (o.grad_groups < 1) return invalid_argument("text model: grad_groups must be >= 1");
  return Status();
}
}  // namespace

Result<std::unique_ptr<TextModel>> TextModel::create(const TextModelOptions& o, Allocator* alloc) {
  if (alloc == nullptr) alloc = default_host_allocator();
  LEANEMB_RETURN_IF_ERROR(check_options(o));
  auto c = EmbeddingCollection::create(collection_options(o), alloc);
  if (!c.ok()) return Status(c.status().code(), "text model: " + c.status().message());
  return create_impl(o, alloc, alloc, std::move(c).value());
}

Result<std::unique_ptr<TextModel>> TextModel::create(const TextModelOptions& o, MemorySystem* memory,
                                                     const DistributionOptions& dist) {
  if (memory == nullptr) return invalid_argument("text model: null MemorySystem");
  LEANEMB_RETURN_IF_ERROR(check_options(o));
  const int world = dist.comm ? dist.comm->size() : 1;
  if (o.grad_groups % world != 0)
    return invalid_argument("text model: grad_groups (" + std::to_string(o.grad_groups) + ") must be a multiple of the world size (" +
                            std::to_string(world) + ")");
  auto c = create_tables(collection_options(o), memory, dist);
  if (!c.ok()) return Status(c.status().code(), "text model: " + c.status().message());
  // The head lives where compute runs; its optimizer state follows the kOptimizerState placement.
  return create_impl(o, memory->allocator_for(Category::kActivations), memory->allocator_for(Category::kOptimizerState),
                     std::move(c).value());
}

Result<std::unique_ptr<TextModel>> TextModel::create_impl(const TextModelOptions& o, Allocator* dense, Allocator* state,
                                                          std::unique_ptr<EmbeddingTables> tables) {
  nn::MlpOptions mo;
  mo.widths = {o.dim};
  if (o.hidden > 0) mo.widths.push_back(o.hidden);
  mo.widths.push_back(o.num_labels);
  mo.seed = o.seed * 2654435761u + 17u;
  mo.name = "head";
  LEANEMB_ASSIGN_OR_RETURN(nn::Mlp head, nn::Mlp::create(mo, dense));
  if (o.zero_output_init) {
    nn::Linear& out = head.layer(head.num_layers() - 1);
    std::fill(out.weight().begin(), out.weight().end(), 0.0f);
    std::fill(out.bias().begin(), out.bias().end(), 0.0f);
  }
  std::unique_ptr<TextModel> m(new TextModel(o, dense, std::move(head)));
  m->tables_ = std::move(tables);
  LEANEMB_ASSIGN_OR_RETURN(nn::DenseOptimizer opt, nn::DenseOptimizer::create(o.dense_optimizer, m->head_.dense_params(), state));
  m->dense_opt_ = std::make_unique<nn::DenseOptimizer>(std::move(opt));
  return m;
}

Result<float*> TextModel::buffer(Allocation* a, size_t floats, Category c) {
  const size_t bytes = std::max<size_t>(floats, 1) * sizeof(float);
  if (a->size_bytes() < bytes) {
    a->reset();
    LEANEMB_ASSIGN_OR_RETURN(*a, alloc_->allocate(bytes, c));
  }
  return a->as<float>();
}

size_t TextModel::table_bytes() const {
  return static_cast<size_t>(tables_->local_num_rows(0)) * tables_->layout(0).stride_bytes;
}

Status TextModel::load_dense(std::span<const nn::NamedTensor> params, std::span<const nn::NamedTensor> state) {
  LEANEMB_RETURN_IF_ERROR(head_.load_parameters(params));
  return dense_opt_->load_state(state);
}

SparseBatch TextModel::slice(std::span<const int64_t> ids, std::span<const int64_t> offsets, int64_t lo, int64_t hi) {
  const int64_t first = offsets[static_cast<size_t>(lo)];
  slice_offsets_.resize(static_cast<size_t>(hi - lo + 1));
  for (int64_t i = lo; i <= hi; ++i) slice_offsets_[static_cast<size_t>(i - lo)] = offsets[static_cast<size_t>(i)] - first;
  SparseBatch sb;
  sb.batch_size = hi - lo;
  sb.features.push_back(FeatureInput{ids.subspan(static_cast<size_t>(first), static_cast<size_t>(offsets[static_cast<size_t>(hi)] - first)),
                                     slice_offsets_, {}});
  return sb;
}

Result<double> TextModel::train_step(const TextBatch& batch, double lr_scale) {
  const int64_t B = batch.size();
  if (B < 1) return invalid_argument("text model: empty batch");
  if (options_.pruned) return failed_precondition("text model: a pruned serving model cannot be trained");
  if (!std::isfinite(lr_scale) || lr_scale < 0.0) return invalid_argument("text model: lr_scale must be finite and >= 0");
  if (batch.targets.offsets.size() != batch.offsets.size()) return invalid_argument("text model: targets for another number of examples");
  dist::Communicator* comm = tables_->communicator();
  const nn::GroupSlice sl = nn::group_slice(B, options_.grad_groups, tables_->rank(), tables_->world_size());
  const int64_t n = sl.hi - sl.lo;
  const size_t D = static_cast<size_t>(options_.dim), C = static_cast<size_t>(options_.num_labels);
  const size_t most = static_cast<size_t>((B + sl.G - 1) / sl.G);  // the largest group
  LEANEMB_ASSIGN_OR_RETURN(float* pooled, buffer(&pooled_, static_cast<size_t>(n) * D, Category::kActivations));
  LEANEMB_ASSIGN_OR_RETURN(float* logits, buffer(&logits_, most * C, Category::kActivations));
  LEANEMB_ASSIGN_OR_RETURN(float* dlogits, buffer(&dlogits_, most * C, Category::kWorkspace));
  LEANEMB_ASSIGN_OR_RETURN(float* dpooled, buffer(&dpooled_, static_cast<size_t>(n) * D, Category::kWorkspace));
  const std::span<const nn::DenseParam> params = dense_opt_->params();
  LEANEMB_RETURN_IF_ERROR(groups_.begin(params, sl.g1 - sl.g0, alloc_));

  const SparseBatch sb = slice(batch.ids, batch.offsets, sl.lo, sl.hi);
  LEANEMB_RETURN_IF_ERROR(tables_->forward(sb, std::span<float>(pooled, static_cast<size_t>(n) * D)));
  dense_opt_->zero_grad();
  double loss = 0.0;
  auto fail = [&](Status s) {
    head_.release_saved();
    dense_opt_->zero_grad();
    return s;
  };
  for (int64_t g = sl.g0; g < sl.g1; ++g) {
    const auto [a, b] = sl.group(g);
    const int64_t m = b - a;
    if (m > 0) {
      const std::span<const float> in(pooled + static_cast<size_t>(a - sl.lo) * D, static_cast<size_t>(m) * D);
      const std::span<float> lg(logits, static_cast<size_t>(m) * C), dl(dlogits, static_cast<size_t>(m) * C);
      Status s = head_.forward(m, in, lg);
      // This group's targets, offsets rebased.
      const int64_t l0 = batch.targets.offsets[static_cast<size_t>(a)];
      group_label_offsets_.resize(static_cast<size_t>(m + 1));
      for (int64_t i = a; i <= b; ++i) group_label_offsets_[static_cast<size_t>(i - a)] = batch.targets.offsets[static_cast<size_t>(i)] - l0;
      const nn::ClassTargets targets{group_label_offsets_,
                                     batch.targets.classes.subspan(static_cast<size_t>(l0), static_cast<size_t>(batch.targets.offsets[static_cast<size_t>(b)] - l0))};
      if (s.ok()) {
        auto l = text_loss(options_.loss, lg, options_.num_labels, targets, dl);
        if (l.ok()) loss += static_cast<double>(l.value());
        else s = l.status();
      }
      if (s.ok()) s = head_.backward(dl, std::span<float>(dpooled + static_cast<size_t>(a - sl.lo) * D, static_cast<size_t>(m) * D));
      if (!s.ok()) return fail(s);
    }
    groups_.save(params, g - sl.g0);
  }
  if (Status s = groups_.reduce(params, sl.g1 - sl.g0, comm); !s.ok()) return fail(s);
  if (comm && comm->size() > 1) {
    double total[1] = {loss};
    if (Status s = comm->all_reduce(std::span<double>(total, 1), dist::ReduceOp::kSum); !s.ok()) return fail(s);
    loss = total[0];
  }
  // Dense and sparse learning rates follow the same schedule.
  LEANEMB_RETURN_IF_ERROR(dense_opt_->set_learning_rate(options_.dense_optimizer.learning_rate * lr_scale));
  LEANEMB_RETURN_IF_ERROR(tables_->set_learning_rate(0, static_cast<float>(options_.row_optimizer.learning_rate * lr_scale)));
  // Rows first: when the update fails (bad input), the dense layers have not moved either.
  auto r = tables_->backward_update(sb, std::span<const float>(dpooled, static_cast<size_t>(n) * D));
  if (!r.ok()) return fail(r.status());
  LEANEMB_RETURN_IF_ERROR(dense_opt_->step());
  dense_opt_->zero_grad();
  return loss;
}

Status TextModel::predict(std::span<const int64_t> in_ids, std::span<const int64_t> in_offsets, std::span<float> logits) {
  std::span<const int64_t> ids = in_ids, offsets = in_offsets;
  if (options_.pruned) {  // ids of the trained table -> kept rows, pruned ids dropped
    options_.pruned_rows.remap(in_ids, in_offsets, &pruned_ids_, &pruned_offsets_);
    ids = pruned_ids_;
    offsets = pruned_offsets_;
  }
  const int64_t B = static_cast<int64_t>(offsets.size()) - 1;
  if (B < 1) return invalid_argument("text model: empty batch");
  const size_t D = static_cast<size_t>(options_.dim), C = static_cast<size_t>(options_.num_labels);
  if (logits.size() != static_cast<size_t>(B) * C) return invalid_argument("text model: predict: logits must be [B, num_labels]");
  dist::Communicator* comm = tables_->communicator();
  const nn::GroupSlice sl = nn::group_slice(B, options_.grad_groups, tables_->rank(), tables_->world_size());
  const int64_t n = sl.hi - sl.lo;
  LEANEMB_ASSIGN_OR_RETURN(float* pooled, buffer(&pooled_, static_cast<size_t>(n) * D, Category::kActivations));
  // Lookup only: evaluation and serving admit no ids into dynamic tables.
  LEANEMB_RETURN_IF_ERROR(tables_->forward(slice(ids, offsets, sl.lo, sl.hi), std::span<float>(pooled, static_cast<size_t>(n) * D), {},
                                           ForwardMode::kEval));
  const bool multi = comm && comm->size() > 1;
  if (multi) std::fill(logits.begin(), logits.end(), 0.0f);
  for (int64_t g = sl.g0; g < sl.g1; ++g) {  // in the training step's groups
    const auto [a, b] = sl.group(g);
    if (b == a) continue;
    LEANEMB_RETURN_IF_ERROR(head_.forward(b - a, std::span<const float>(pooled + static_cast<size_t>(a - sl.lo) * D, static_cast<size_t>(b - a) * D),
                                          logits.subspan(static_cast<size_t>(a) * C, static_cast<size_t>(b - a) * C), nn::ForwardMode::kEval));
  }
  // Every rank gets every example's logits: the others' entries are 0 here, and x + 0 = x.
  if (multi) LEANEMB_RETURN_IF_ERROR(comm->all_reduce(logits, dist::ReduceOp::kSum));
  return Status();
}

}  // namespace leanemb::text
