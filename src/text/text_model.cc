// TextModel: pooled input rows -> optional hidden layer -> logits -> softmax / one-vs-all.
#include "text/text_model.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace leanemb::text {

Result<TextLoss> parse_text_loss(std::string_view s) {
  if (s == "softmax") return TextLoss::kSoftmax;
  if (s == "ova") return TextLoss::kOneVsAll;
  return invalid_argument("unknown loss '" + std::string(s) + "' (expected softmax or ova)");
}

std::string_view text_loss_name(TextLoss l) { return l == TextLoss::kSoftmax ? "softmax" : "ova"; }

Result<float> text_loss(TextLoss l, std::span<const float> logits, int64_t num_classes, nn::ClassTargets targets,
                        std::span<float> dlogits) {
  return l == TextLoss::kSoftmax ? nn::softmax_cross_entropy(logits, num_classes, targets, 1.0f, dlogits)
                                 : nn::one_vs_all_logistic(logits, num_classes, targets, 1.0f, dlogits);
}

Result<std::unique_ptr<TextModel>> TextModel::create(const TextModelOptions& o, Allocator* alloc) {
  if (alloc == nullptr) alloc = default_host_allocator();
  if (o.input_rows < 1 || o.dim < 1 || o.num_labels < 1 || o.hidden < 0)
    return invalid_argument("text model: input_rows " + std::to_string(o.input_rows) + ", dim " + std::to_string(o.dim) +
                            ", num_labels " + std::to_string(o.num_labels) + ", hidden " + std::to_string(o.hidden) +
                            " (need input_rows, dim, num_labels >= 1 and hidden >= 0)");
  if (o.dynamic.enabled && o.dynamic_rows < 0) return invalid_argument("text model: dynamic_rows must be >= 0");
  nn::MlpOptions mo;
  mo.widths = {o.dim};
  if (o.hidden > 0) mo.widths.push_back(o.hidden);
  mo.widths.push_back(o.num_labels);
  mo.seed = o.seed * 2654435761u + 17u;
  mo.name = "head";
  LEANEMB_ASSIGN_OR_RETURN(nn::Mlp head, nn::Mlp::create(mo, alloc));
  if (o.zero_output_init) {
    nn::Linear& out = head.layer(head.num_layers() - 1);
    std::fill(out.weight().begin(), out.weight().end(), 0.0f);
    std::fill(out.bias().begin(), out.bias().end(), 0.0f);
  }
  std::unique_ptr<TextModel> m(new TextModel(o, alloc, std::move(head)));

  CollectionOptions co;
  TableOptions t;
  t.name = "input";
  t.dim = o.dim;
  t.dtype = o.dtype;
  t.optimizer = o.row_optimizer;
  t.init = o.init;
  if (t.init.kind == InitKind::kUniform && t.init.bound <= 0.0f) t.init.bound = 1.0f / static_cast<float>(o.dim);
  t.dynamic = o.dynamic;
  t.num_rows = o.dynamic.enabled && o.dynamic_rows > 0 ? std::min(o.dynamic_rows, o.input_rows) : o.input_rows;
  co.tables.push_back(t);
  co.features.push_back(FeatureOptions{"tokens", 0, PoolingMode::kMean});
  co.seed = o.seed;
  co.num_threads = o.num_threads;
  auto c = EmbeddingCollection::create(co, alloc);
  if (!c.ok()) return Status(c.status().code(), "text model: " + c.status().message());
  m->collection_ = std::move(c).value();

  LEANEMB_ASSIGN_OR_RETURN(nn::DenseOptimizer opt, nn::DenseOptimizer::create(o.dense_optimizer, m->head_.dense_params(), alloc));
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
  return static_cast<size_t>(collection_->options().tables[0].num_rows) * collection_->layout(0).stride_bytes;
}

Result<double> TextModel::train_step(const TextBatch& batch, double lr_scale) {
  const int64_t B = batch.size();
  if (B < 1) return invalid_argument("text model: empty batch");
  if (!std::isfinite(lr_scale) || lr_scale < 0.0) return invalid_argument("text model: lr_scale must be finite and >= 0");
  const size_t D = static_cast<size_t>(options_.dim), C = static_cast<size_t>(options_.num_labels);
  LEANEMB_ASSIGN_OR_RETURN(float* pooled, buffer(&pooled_, static_cast<size_t>(B) * D, Category::kActivations));
  LEANEMB_ASSIGN_OR_RETURN(float* logits, buffer(&logits_, static_cast<size_t>(B) * C, Category::kActivations));
  LEANEMB_ASSIGN_OR_RETURN(float* dlogits, buffer(&dlogits_, static_cast<size_t>(B) * C, Category::kWorkspace));
  LEANEMB_ASSIGN_OR_RETURN(float* dpooled, buffer(&dpooled_, static_cast<size_t>(B) * D, Category::kWorkspace));
  const std::span<float> pooled_s(pooled, static_cast<size_t>(B) * D), logits_s(logits, static_cast<size_t>(B) * C);
  const std::span<float> dlogits_s(dlogits, static_cast<size_t>(B) * C), dpooled_s(dpooled, static_cast<size_t>(B) * D);

  SparseBatch sb;
  sb.batch_size = B;
  sb.features.push_back(FeatureInput{batch.ids, batch.offsets, {}});
  LEANEMB_RETURN_IF_ERROR(collection_->forward(sb, pooled_s));
  LEANEMB_RETURN_IF_ERROR(head_.forward(B, pooled_s, logits_s));
  auto loss = text_loss(options_.loss, logits_s, options_.num_labels, batch.targets, dlogits_s);
  if (!loss.ok()) {
    head_.release_saved();
    return loss.status();
  }
  LEANEMB_RETURN_IF_ERROR(head_.backward(dlogits_s, dpooled_s));
  // Dense and sparse learning rates follow the same schedule.
  LEANEMB_RETURN_IF_ERROR(dense_opt_->set_learning_rate(options_.dense_optimizer.learning_rate * lr_scale));
  LEANEMB_RETURN_IF_ERROR(collection_->set_learning_rate(0, static_cast<float>(options_.row_optimizer.learning_rate * lr_scale)));
  // Rows first: when the update fails (bad input), the dense layers have not moved either.
  auto r = collection_->backward_update(sb, dpooled_s);
  if (!r.ok()) {
    dense_opt_->zero_grad();
    return r.status();
  }
  LEANEMB_RETURN_IF_ERROR(dense_opt_->step());
  dense_opt_->zero_grad();
  return static_cast<double>(loss.value());
}

Status TextModel::predict(std::span<const int64_t> ids, std::span<const int64_t> offsets, std::span<float> logits) {
  const int64_t B = static_cast<int64_t>(offsets.size()) - 1;
  if (B < 1) return invalid_argument("text model: empty batch");
  const size_t D = static_cast<size_t>(options_.dim);
  if (logits.size() != static_cast<size_t>(B) * static_cast<size_t>(options_.num_labels))
    return invalid_argument("text model: predict: logits must be [B, num_labels]");
  LEANEMB_ASSIGN_OR_RETURN(float* pooled, buffer(&pooled_, static_cast<size_t>(B) * D, Category::kActivations));
  const std::span<float> pooled_s(pooled, static_cast<size_t>(B) * D);
  SparseBatch sb;
  sb.batch_size = B;
  sb.features.push_back(FeatureInput{ids, offsets, {}});
  LEANEMB_RETURN_IF_ERROR(collection_->forward(sb, pooled_s));
  return head_.forward(B, pooled_s, logits, nn::ForwardMode::kEval);
}

}  // namespace leanemb::text
