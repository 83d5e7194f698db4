// Interaction: the feature-interaction layer of DLRM between the bottom MLP and the top MLP.
//
// Inputs per sample b: the bottom MLP's output z [B, dense_dim] and F pooled embedding vectors,
// given as the pooled output of an EmbeddingCollection emb [B, F * embedding_dim] row-major
// (feature f of sample b at emb[b * F * dim + f * dim ...]).
//   kDot (DLRM "dot", arch_interaction_op="dot", no self-interaction): with T = [z, e_1..e_F]
//     ([F+1, d] per sample, d = dense_dim = embedding_dim), out = [z, Zflat] where Zflat lists
//     T_i . T_j for the strictly lower triangle in row-major order (i = 1..F, j = 0..i-1), as
//     torch.tril_indices(F+1, F+1, offset=-1):  out [B, d + (F+1)F/2].
//   kCat: out = [z, e_1, ..., e_F]:  out [B, dense_dim + F * embedding_dim].
// Dot products follow the contract of nn/dot_interaction.h (fp32, one accumulator per output,
// a fixed order; a register-blocked kernel with the scalar reference's bits); samples are
// independent and split over parallel_for threads, so results do not depend on the thread count.
//
// Precision: with bf16 / fp16, z and emb are rounded to the 16-bit grid before the products,
// the outputs and input gradients are rounded after (sums in fp32), and dout is rounded first.
//
// The layer keeps no activations: backward() takes the same z and emb again (the bottom MLP's
// output and the pooled embeddings live until the backward anyway), so it costs no activation
// memory, and no workspace either: with bf16 / fp16 each sample's inputs are rounded into the
// kernel's stack scratch as they are read (nn/dot_interaction.h).
//
// Thread safety: forward() and backward() are const and may run concurrently on one object.
#pragma once

#include <cstdint>
#include <span>

#include "leanemb/memory.h"
#include "leanemb/status.h"
#include "nn/tensor.h"

namespace leanemb::nn {

enum class InteractionKind : uint8_t { kDot, kCat };

struct InteractionOptions {
  InteractionKind kind = InteractionKind::kDot;
  int64_t num_features = 0;    // F >= 1: pooled embedding vectors per sample
  int64_t embedding_dim = 0;   // >= 1: dim of each embedding vector
  int64_t dense_dim = 0;       // >= 1: dim of z; kDot requires dense_dim == embedding_dim
  DType precision = DType::kF32;
};

// Size functions (the layer computes with them; the memory model in src/plan predicts with them).
// Columns of the output: kDot: dense_dim + (F+1)F/2; kCat: dense_dim + F * embedding_dim.
int64_t interaction_output_dim(const InteractionOptions& options);
// kWorkspace floats one call on `batch` samples holds: 0 (kept for the memory model's phases).
size_t interaction_scratch_floats(const InteractionOptions& options, int64_t batch, bool backward);

class Interaction {
 public:
  // Errors: InvalidArgument for a size < 1, or kDot with dense_dim != embedding_dim.
  static Result<Interaction> create(const InteractionOptions& options, Allocator* alloc);

  // Columns of out: kDot: dense_dim + (F+1)F/2; kCat: dense_dim + F * embedding_dim.
  int64_t output_dim() const;
  const InteractionOptions& options() const { return options_; }

  // out [B, output_dim] from z [B, dense_dim] and emb [B, F * embedding_dim].
  // Errors: InvalidArgument for batch outside [1, kMaxBatch] or wrong span sizes; ResourceExhausted (scratch).
  Status forward(int64_t batch, std::span<const float> z, std::span<const float> emb, std::span<float> out) const;
  // Gradients of z and emb from dout [B, output_dim], given the forward's z and emb:
  //   kDot: dz = dout[:, :d] + sum_{i>0} g_i0 T_i;  de_i = sum_{j<i} g_ij T_j + sum_{k>i} g_ki T_k
  //   kCat: dz, de = the matching columns of dout.
  // dz [B, dense_dim] and demb [B, F * embedding_dim] are overwritten (not accumulated); demb is
  // the gradient to pass to EmbeddingCollection::backward_update.
  // Errors: InvalidArgument for wrong sizes; ResourceExhausted (scratch; outputs unchanged).
  Status backward(int64_t batch, std::span<const float> z, std::span<const float> emb, std::span<const float> dout,
                  std::span<float> dz, std::span<float> demb) const;

 private:
  Interaction() = default;
  Status check_sizes(const char* what, int64_t batch, std::span<const float> z, std::span<const float> emb,
                     size_t out_size) const;

  InteractionOptions options_;
  Allocator* alloc_ = nullptr;
};

}  // namespace leanemb::nn
