// TextModel: a fastText-style classifier. The input rows of a line (its words and word-n-gram
// buckets, text/text_data.h) are averaged into one vector by an EmbeddingCollection (one table,
// one kMean feature: per-token vectors never exist), an optional hidden layer with ReLU follows,
// then a linear layer to one logit per label, and a softmax (or one-vs-all) loss summed over
// the batch (nn/loss.h).
//
// This is fastText's supervised model with minibatches: fastText applies SGD after every
// example; a step here applies the sum of a batch's example gradients once (the embedding rows
// through the collection's fused sparse optimizer, the dense layers through DenseOptimizer),
// so with batch_size 1 and SGD the update rule is fastText's. The input table may be stored in
// fp16 / bf16 (stochastic rounding), trained by any row optimizer (RowwiseAdagrad keeps one
// fp32 per row), and may be dynamic (rows on first touch, TableDynamicOptions) so that n-gram
// buckets no line uses never take memory.
//
// Memory: on one allocator (every byte) or a MemorySystem (categories in their tiers); the input
// table is an EmbeddingTables (local or sharded, any residency). Several processes: each step's
// global batch is cut into grad_groups groups (nn/grad_groups.h); each rank looks up and trains
// its groups' examples, the head's gradient is the fixed-order sum of the groups', so P = 1, 2,
// 4 train bit-identically for a fixed grad_groups. Thread safety: none; one thread calls at a time
// (calls use the worker pool of core/parallel.h inside; results do not depend on the thread count).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "table/pruned_rows.h"
#include "leanemb/tables.h"
#include "leanemb/memory.h"
#include "leanemb/status.h"
#include "nn/dense_optimizer.h"
#include "nn/grad_groups.h"
#include "nn/loss.h"
#include "nn/mlp.h"

namespace leanemb::text {

enum class TextLoss : uint8_t { kSoftmax, kOneVsAll };
Result<TextLoss> parse_text_loss(std::string_view s);  // "softmax" | "ova"
std::string_view text_loss_name(TextLoss l);
// The loss `l` (nn::softmax_cross_entropy or nn::one_vs_all_logistic, unscaled) of logits
// [B, num_classes]: the batch's summed loss, dlogits [B, num_classes].
Result<float> text_loss(TextLoss l, std::span<const float> logits, int64_t num_classes, nn::ClassTargets targets,
                        std::span<float> dlogits);

struct TextModelOptions {
  int64_t input_rows = 0;   // words + n-gram buckets (Dictionary::input_rows)
  int64_t dim = 100;        // embedding dimension (fastText's -dim)
  int64_t hidden = 0;       // hidden layer width; 0 = none (fastText)
  int32_t num_labels = 0;   // >= 1 (>= 2 for softmax to learn anything)
  TextLoss loss = TextLoss::kSoftmax;
  bool zero_output_init = true;  // output layer starts at zero (fastText); false: torch's uniform
  // The input table: dtype, optimizer (learning_rate is the base rate of the schedule), init
  // (uniform, bound 1/dim as fastText when bound <= 0), dynamic rows.
  DType dtype = DType::kF32;
  OptimizerOptions row_optimizer;
  InitOptions init;
  TableDynamicOptions dynamic;  // enabled: num_rows below is the row capacity
  int64_t dynamic_rows = 0;     // capacity of a dynamic table (0 = input_rows)
  nn::DenseOptimizerOptions dense_optimizer;
  uint64_t seed = 1;
  int num_threads = 0;          // 0 = OpenMP's default
  bool frozen = false;          // serving (src/serve): the table lookup-only, int8 rows allowed
  // A pruned serving export (table/pruned_rows.h): input_rows is then the kept count, and
  // predict() maps each id (a row of the trained table) to its kept row, dropping pruned ids.
  // Training a pruned model is refused.
  bool pruned = false;
  PrunedRows pruned_rows;
  // Gradient groups of the dense head (nn/grad_groups.h): a multiple of the world size; the
  // same value trains bit-identically at every process count that divides it.
  int grad_groups = 1;
  // The embedding output's precision (train.precision): kF32, or kBF16 (one process): the pooled
  // rows and their gradient held as bf16 (EmbeddingTables::forward_bf16 / backward_update_bf16
  // through an fp32 scratch of max(kBf16ScratchFloats, dim) floats), each gradient group's rows
  // widened to fp32 into a buffer of the largest group for the head. The head, its weights and
  // the loss stay fp32; predict() rounds the pooled rows as training does.
  DType precision = DType::kF32;
};

// One batch of encoded examples (CSR over examples, as TextDataset): ids [nnz] input rows,
// offsets [B + 1]; targets: labels per example.
struct TextBatch {
  std::span<const int64_t> ids;
  std::span<const int64_t> offsets;
  nn::ClassTargets targets;
  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

class TextModel {
 public:
  // Every byte through `alloc` (null: the default host allocator), one process.
  // Errors: InvalidArgument for bad options; ResourceExhausted from the allocator.
  static Result<std::unique_ptr<TextModel>> create(const TextModelOptions& options, Allocator* alloc);
  // On a MemorySystem (the table in its categories' tiers, any residency and dynamic options),
  // local or sharded over dist.comm (collective; every rank passes the same options). The
  // dense head lives where compute runs (the kActivations tier), its optimizer state in the
  // kOptimizerState tier.
  static Result<std::unique_ptr<TextModel>> create(const TextModelOptions& options, MemorySystem* memory,
                                                   const DistributionOptions& dist = {});

  // One optimizer step on the global `batch` (every rank passes the same one; each computes
  // its groups' examples) with learning-rate factor lr_scale (the rates used are the
  // configured ones times lr_scale). Returns the global batch's summed loss.
  // Errors: InvalidArgument for a bad batch (ids out of range, bad targets); nothing changes then.
  Result<double> train_step(const TextBatch& batch, double lr_scale);

  // logits [B, num_labels] of a global batch, on every rank (no state changes: a
  // ForwardMode::kEval lookup, so a dynamic table admits, evicts and counts nothing; an id
  // without a row reads zeros). Collective when sharded.
  Status predict(std::span<const int64_t> ids, std::span<const int64_t> offsets, std::span<float> logits);

  const TextModelOptions& options() const { return options_; }
  EmbeddingTables& tables() { return *tables_; }
  const EmbeddingTables& tables() const { return *tables_; }
  nn::Mlp& head() { return head_; }
  nn::DenseOptimizer& dense_optimizer() { return *dense_opt_; }
  // Dense parameters then dense optimizer state, as named fp32 tensors (for checkpoints).
  std::vector<nn::NamedTensor> dense_parameters() const { return head_.parameters(); }
  std::vector<nn::NamedTensor> dense_optimizer_state() const { return dense_opt_->state(); }
  Status load_dense(std::span<const nn::NamedTensor> params, std::span<const nn::NamedTensor> state);
  MemoryStats memory_stats() const { return alloc_->memory_stats(); }
  // Bytes of the input table's fat rows (weights and optimizer state) in this process.
  size_t table_bytes() const;
  // The collection (one table, one mean-pooled feature) a model of `o` builds; the planner
  // describes the table with it.
  static CollectionOptions collection_options(const TextModelOptions& o);

 private:
  TextModel(TextModelOptions o, Allocator* a, nn::Mlp head) : options_(std::move(o)), alloc_(a), head_(std::move(head)) {}
  static Result<std::unique_ptr<TextModel>> create_impl(const TextModelOptions& o, Allocator* dense, Allocator* state,
                                                        std::unique_ptr<EmbeddingTables> tables);
  // This rank's examples [lo, hi) of a batch of offsets.size() - 1: ids and rebased offsets.
  SparseBatch slice(std::span<const int64_t> ids, std::span<const int64_t> offsets, int64_t lo, int64_t hi);
  TextModelOptions options_;
  Allocator* alloc_;
  std::unique_ptr<EmbeddingTables> tables_;
  nn::Mlp head_;
  std::unique_ptr<nn::DenseOptimizer> dense_opt_;
  nn::GradientGroups groups_;
  // Per-step buffers (kActivations: pooled, logits; kWorkspace: their gradients), grown on demand.
  // A bf16 output: pooled_ and dpooled_ hold bf16; wide_ (kActivations) a group's pooled rows in
  // fp32, dwide_ (kWorkspace) their fp32 gradient, scratch_ (kWorkspace) the tables' fp32 scratch.
  Allocation pooled_, logits_, dlogits_, dpooled_, wide_, dwide_, scratch_;
  std::vector<int64_t> slice_offsets_, group_label_offsets_;
  std::vector<int64_t> pruned_ids_, pruned_offsets_;  // predict() on a pruned model
  Status grow(Allocation* a, size_t bytes, Category c);  // at least `bytes` (4 at least)
  Result<float*> buffer(Allocation* a, size_t floats, Category c);
  Result<uint16_t*> bf16_buffer(Allocation* a, size_t elements, Category c);
  bool bf16_output() const { return options_.precision == DType::kBF16; }
  // The bf16 path's fp32 scratch for `sb` (kWorkspace).
  Result<std::span<float>> bf16_scratch(const SparseBatch& sb);
  // Rows [a, a + m) of the slice's bf16 pooled buffer widened to fp32 (wide_): the head's input.
  Result<std::span<const float>> widened(const uint16_t* pooled, int64_t a, int64_t m);
  // The head's forward, loss and backward of group rows [a, b) of the batch (in: their pooled
  // rows, fp32), the input gradient into dpooled (fp32, m x dim). Adds the group's loss to *loss.
  Status group_step(const TextBatch& batch, int64_t a, int64_t b, std::span<const float> in, std::span<float> dpooled,
                    double* loss);
};

}  // namespace leanemb::text
