// CtrModel: a DLRM-style click-through-rate model.
//
//   dense [B, num_dense] -> bottom MLP (ReLU after every layer) -> z [B, d]
//   sparse feature f     -> pooled embedding e_f [B, d] (one table per feature)
//   interaction(z, e_1..e_F) (dot or cat) -> top MLP -> logit [B] -> BCE with logits
//
// One train_step() is one optimizer step over a batch, optionally as k micro-batches (gradient
// accumulation): each micro-batch runs forward and backward through the dense layers (their
// gradients accumulate) and computes its rows of the pooled-embedding gradient; the embedding
// rows are then updated once, with the summed gradient of the whole batch, by the collection's
// fused sparse optimizer. With a local collection and more than one micro-batch the tables add
// each micro-batch's gradient into per-row sums as it comes (ctr_accumulates; bit-identical to
// one update over the kept [B, F * d] gradient, which sharded tables still use). Each
// micro-batch's loss gradient is weighted by its share
// of the batch, so k micro-batches of B/k equal one batch of B up to fp32 rounding.
//
// Loss scaling (fp16): the loss gradient is multiplied by the scaler's scale; before anything is
// updated every dense gradient and the pooled-embedding gradient are checked for Inf/NaN, and the
// embedding update checks its row sums; a non-finite value skips the whole step (no embedding
// row, dense parameter or optimizer state changes) and the scaler backs off.
//
// Memory: tables in the tiers of the MemorySystem's placement; pooled outputs and the dense
// layers' saved activations in kActivations; gradients in kGradients; per-call scratch in
// kWorkspace; dense parameters in kWeights and their optimizer state in kOptimizerState. The
// dense layers (parameters, their gradients, saved activations, scratch) live in the tier of
// kActivations, which is always the device, where compute runs: a `weights=host` placement
// moves the embedding rows, not the small dense layers. The dense optimizer's state follows the
// placement of kOptimizerState. ctr_buffer_floats() and the nn size functions give every byte a
// step allocates (src/plan predicts with them).
//
// Thread safety: one thread at a time; results do not depend on the number of OpenMP threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "amp/loss_scaler.h"
#include "amp/precision.h"
#include "data/batch.h"
#include "dist/communicator.h"
#include "dist/payload.h"
#include "table/shard_plan.h"
#include "leanemb/embedding.h"
#include "leanemb/tables.h"
#include "leanemb/memory_system.h"
#include "nn/dense_optimizer.h"
#include "nn/interaction.h"
#include "nn/mlp.h"
#include "table/pruned_rows.h"

namespace leanemb::model {

// The name of sparse feature f's table (0-based f): "C1", "C2", ... (checkpoint entries emb/<name>,
// serving blobs serve/kept/<name>).
inline std::string ctr_table_name(int f) { return std::string("C").append(std::to_string(f + 1)); }

struct CtrModelOptions {
  int num_dense = 13;
  int num_sparse = 26;
  int64_t embedding_dim = 16;
  std::vector<int64_t> table_rows;        // [num_sparse] (a dynamic table's row capacity)
  // [num_sparse] or empty: per table, a dynamic vocabulary (enabled: the feature's ids are raw
  // 64-bit values, rows are given on admission).
  std::vector<TableDynamicOptions> table_dynamic;
  DType row_dtype = DType::kF32;
  OptimizerOptions row_optimizer;
  InitOptions row_init;
  TableCacheOptions row_cache;            // tiered storage of the tables (off by default)...
  int64_t cache_min_rows = 0;             // ...of at least this many rows (tiered::cache_applies)
  std::string store_dir;                  // file stores: <store_dir>/<table name>.rows
  PoolingMode pooling = PoolingMode::kSum;
  std::vector<int64_t> bottom_hidden;     // bottom MLP widths after the input (last = z's dim)
  std::vector<int64_t> top_hidden;        // top MLP hidden widths (a 1-wide output is added)
  nn::InteractionKind interaction = nn::InteractionKind::kDot;
  DType precision = DType::kF32;
  bool checkpoint_activations = false;
  nn::DenseOptimizerOptions dense_optimizer;
  uint64_t seed = 1;
  int num_threads = 0;                    // 0 = OpenMP's default
  // Serving (src/serve): every table lookup-only (TableOptions::frozen), so that int8 rows
  // (DType::kInt8Rowwise) may be used; train_step leaves the rows unchanged.
  bool frozen_tables = false;
  // [num_sparse] or empty: a pruned serving export's kept rows per feature (table/pruned_rows.h;
  // table_rows[f] is then the kept count, at least 1). predict() maps each id (a row of the
  // trained table) to its kept row and drops pruned ids; train_step refuses a pruned model.
  std::vector<PrunedRows> pruned_rows;

  // Multi-process training (docs/dist.md). With a communicator the tables are sharded over its
  // ranks (create_tables with DistributionOptions: every table option applies); train_step()
  // and predict() take the same global batch on every rank and each rank computes its slice of
  // it (see "Gradient groups" below). Must outlive the model.
  dist::Communicator* comm = nullptr;
  dist::ShardingKind sharding = dist::ShardingKind::kRowModulo;
  DType forward_payload = DType::kF32;
  DType backward_payload = DType::kF32;
  // Gradient groups: the batch is cut into `grad_groups` contiguous slices of sizes differing by
  // at most one (group g = records [B*g/G, B*(g+1)/G)); each group's dense gradient is computed
  // on its own, and the step's dense gradient is their fixed-order sum
  // (dist::Communicator::reduce_in_fixed_order over the G groups in order). Rank r of P computes
  // groups [r*G/P, (r+1)*G/P) and sums its own; all_reduce sums the ranks' partials in the same
  // fixed order. With G and P powers of two (or P = G) the two orders are the same tree, so
  // P = 1, 2, 4 ranks with G = 4 give bit-identical dense gradients, and with fp32 payloads,
  // rows and state the whole model trains bit-identically at every such P. 1 (the default
  // without a communicator) is the plain single-pass gradient. REQUIRES: a multiple of the
  // world size.
  int grad_groups = 1;
  // With more than one micro-batch pass, hand the pooled gradient to the tables micro-batch by
  // micro-batch (ctr_accumulates) when they can sum it by row. false keeps the slice's whole
  // gradient and updates once (the path sharded tables take; tests compare the two bit for bit).
  bool accumulate_by_row = true;
  // With a communicator: the global batch of a training step and the most ids a record holds
  // per feature. Given (batch_size > 0), the sharded tables reserve their communication buffers
  // for the largest slice once (DistributionOptions::max_call), as `leanemb plan` predicts them.
  int64_t batch_size = 0;
  int64_t max_ids_per_field = 1;
};

// The per-step buffers of train_step() / predict(), in floats, for a batch of `batch_size`
// records run as slices of `micro_rows` records; `interaction_dim` is the interaction's output
// width. CtrModel allocates exactly these (kept between steps, grown on demand).
struct CtrBufferFloats {
  size_t pooled = 0;       // kActivations: pooled embeddings of the whole batch [B, F * d]
  size_t grad_pooled = 0;  // kGradients: their gradient [B, F * d]
  // kGradients, instead of grad_pooled when train_step accumulates by row (ctr_accumulates):
  // the gradient of one micro-batch's pooled rows [n, F * d]; the tables keep the row sums.
  size_t grad_pooled_micro = 0;
  size_t z = 0;            // kActivations: bottom MLP output of a slice [n, bottom out]
  size_t inter = 0;        // kActivations: interaction output of a slice [n, interaction_dim]
  size_t logits = 0;       // kActivations: [n]
  size_t dlogits = 0;      // kWorkspace: [n]
  size_t dinter = 0;       // kWorkspace: [n, interaction_dim]
  size_t dz = 0;           // kWorkspace: [n, bottom out]
};
// One rank's share of a step (CtrModel::train_step): a batch of B records in G gradient groups
// (nn/grad_groups.h), rank `rank` of `world` computing groups [g0, g1) = records [lo, hi), each
// group in per_group micro-batches of at most max_micro records. The planner sizes the step
// with it. REQUIRES: B >= 1, G a positive multiple of world.
struct CtrSlice {
  int64_t B = 0, G = 1;  // batch size, gradient groups
  int64_t g0 = 0, g1 = 1, lo = 0, hi = 0, per_group = 1, max_micro = 0;
  // Records [first, second) of micro-batch i of group g (sizes differing by at most one).
  std::pair<int64_t, int64_t> micro(int64_t g, int64_t i) const {
    const int64_t gb = B * g / G, gn = B * (g + 1) / G - gb;
    return {gb + gn * i / per_group, gb + gn * (i + 1) / per_group};
  }
};
CtrSlice ctr_slice(int64_t B, int micro_batches, int64_t G, int64_t rank, int64_t world);

CtrBufferFloats ctr_buffer_floats(const CtrModelOptions& options, int64_t interaction_dim, int64_t batch_size,
                                  int64_t micro_rows);
// Whether train_step hands the pooled gradient to the tables micro-batch by micro-batch
// (EmbeddingTables::begin_accumulation / accumulate / apply_accumulated), keeping one
// micro-batch's gradient instead of the slice's: when the tables sum by row
// (accumulates_by_row: a local collection) and the slice runs in more than one pass.
inline bool ctr_accumulates(const CtrSlice& s, bool tables_accumulate_by_row) {
  return tables_accumulate_by_row && (s.g1 - s.g0) * s.per_group > 1;
}

struct StepStats {
  double loss = 0.0;        // mean BCE over the (global) batch (unscaled)
  bool skipped = false;     // a non-finite gradient skipped the step
  int64_t samples = 0;
  int64_t unique_rows = 0;  // embedding rows updated (on this rank, as owner)
};

class CtrModel {
 public:
  // Errors: InvalidArgument (shapes), ResourceExhausted (a budget).
  static Result<std::unique_ptr<CtrModel>> create(const CtrModelOptions& options, MemorySystem* memory);
  ~CtrModel();

  // One optimizer step over `batch` as `micro_batches` passes (>= 1; more than B is clamped).
  // `inject_nonfinite` puts an Inf into the gradient (tests of the skip path).
  // Errors: InvalidArgument (batch shape), ResourceExhausted (nothing was updated).
  Result<StepStats> train_step(const data::Batch& batch, int micro_batches, amp::LossScaler& scaler,
                               bool inject_nonfinite = false);
  // probs [B] = sigmoid(logit) of each record (no state changes: a ForwardMode::kEval lookup, so
  // dynamic tables admit, evict and count nothing), computed in `micro_batches`
  // slices as train_step does, so that evaluation needs no more memory than training.
  Status predict(const data::Batch& batch, std::span<float> probs, int micro_batches = 1);
  // Starts fetching the rows that train_step(next, micro_batches) will touch (tables with a row
  // cache; a no-op otherwise): EmbeddingTables::prefetch of this rank's slice of `next`. Call it
  // before train_step of the current batch (the pipelined order: the fetch then overlaps that
  // whole step, docs/tiered.md). A hint: results do not depend on it. Collective when sharded.
  // Errors: those of EmbeddingTables::prefetch (`next`'s ids checked as a forward checks them).
  Status prefetch(const data::Batch& next, int micro_batches);

  // The tables (leanemb/tables.h): local, or sharded over the communicator.
  EmbeddingTables& embeddings();
  const EmbeddingTables& embeddings() const;
  nn::Mlp& bottom() { return *bottom_; }
  nn::Mlp& top() { return *top_; }
  nn::DenseOptimizer& dense_optimizer() { return *dense_opt_; }
  const CtrModelOptions& options() const { return options_; }
  // Dense parameters then dense optimizer state, as named fp32 tensors (for checkpoints).
  std::vector<nn::NamedTensor> dense_parameters() const;
  std::vector<nn::NamedTensor> dense_optimizer_state() const;
  Status load_dense(std::span<const nn::NamedTensor> params, std::span<const nn::NamedTensor> state);
  // Frees per-step buffers (they are kept between steps otherwise).
  void release_buffers();

 private:
  CtrModel() = default;
  // Records [begin, end) of `batch`; their pooled rows go to row begin - base of the pooled buffer.
  Status forward_micro(const data::Batch& batch, int64_t begin, int64_t end, int64_t base, int64_t slice_rows, bool train,
                       float* logits_out);
  // This rank's records [lo, hi) and groups [g0, g1) of a batch of B; micro-batches per group.
  using Slice = CtrSlice;
  Slice slice_of(int64_t B, int micro_batches) const;
  // Sums the group gradients (and with a communicator all ranks' partials) into the params' grads.
  Status reduce_dense_grads(int64_t groups_here);
  // Moves the params' grads into group slot `slot` and zeroes them.
  void save_group_grads(int64_t slot);
  Status lookup_slice(const data::Batch& batch, int64_t lo, int64_t hi, ForwardMode mode);
  // train_step's pieces (ctr_model.cc), sharing one StepState: the step's buffers; every group's
  // micro-batches (forward, loss, backward; by row, each one's pooled gradient accumulated) and
  // the dense gradients' reduction; the found-inf check agreed by the ranks; the updates. A
  // failure before the updates goes through abandon_step, which leaves the model as it was.
  struct StepState;
  Status step_buffers(StepState* s);
  Status train_groups(const data::Batch& batch, bool inject_nonfinite, StepState* s);
  Status train_micro(const data::Batch& batch, int64_t begin, int64_t end, bool inject_nonfinite, StepState* s);
  Status check_step_gradients(bool inject_nonfinite, StepState* s);
  Status update_step(const StepState& s, const UpdateOptions& uo, StepStats* st);
  Status abandon_step(Status s, bool by_row);
  struct Buffers;
  CtrModelOptions options_;
  MemorySystem* memory_ = nullptr;
  std::unique_ptr<EmbeddingTables> tables_;
  std::unique_ptr<nn::Mlp> bottom_, top_;
  std::unique_ptr<nn::Interaction> interaction_;
  std::unique_ptr<nn::DenseOptimizer> dense_opt_;
  std::unique_ptr<Buffers> buf_;
};

}  // namespace leanemb::model
