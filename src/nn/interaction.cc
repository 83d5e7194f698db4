// DLRM interaction layers (dot, cat): forward and backward, one sample per loop iteration.
#include "nn/interaction.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/parallel.h"
#include "nn/dot_interaction.h"

namespace leanemb::nn {
namespace {

}  // namespace

Result<Interaction> Interaction::create(const InteractionOptions& options, Allocator* alloc) {
  if (options.num_features < 1 || options.embedding_dim < 1 || options.dense_dim < 1)
    return invalid_argument("interaction: num_features " + std::to_string(options.num_features) + ", embedding_dim " +
                            std::to_string(options.embedding_dim) + ", dense_dim " + std::to_string(options.dense_dim) +
                            " (each must be >= 1)");
  LEANEMB_RETURN_IF_ERROR(check_dtype(DTypeUse::kActivations, options.precision));
  if (options.kind == InteractionKind::kDot && options.dense_dim != options.embedding_dim)
    return invalid_argument("interaction 'dot': dense_dim " + std::to_string(options.dense_dim) +
                            " must equal embedding_dim " + std::to_string(options.embedding_dim));
  Interaction it;
  it.options_ = options;
  it.alloc_ = alloc;
  return it;
}

int64_t interaction_output_dim(const InteractionOptions& o) {
  const int64_t f = o.num_features;
  if (o.kind == InteractionKind::kDot) return o.dense_dim + (f + 1) * f / 2;
  return o.dense_dim + f * o.embedding_dim;
}

size_t interaction_scratch_floats(const InteractionOptions&, int64_t, bool) {
  return 0;  // inputs are rounded per sample inside the kernels (on the stack), never copied whole
}

int64_t Interaction::output_dim() const { return interaction_output_dim(options_); }

Status Interaction::check_sizes(const char* what, int64_t batch, std::span<const float> z,
                                std::span<const float> emb, size_t out_size) const {
  const int64_t emb_cols = options_.num_features * options_.embedding_dim;
  if (batch < 1 || batch > kMaxBatch || static_cast<int64_t>(z.size()) != batch * options_.dense_dim ||
      static_cast<int64_t>(emb.size()) != batch * emb_cols || static_cast<int64_t>(out_size) != batch * output_dim())
    return invalid_argument(std::string("interaction ") + what + ": batch " + std::to_string(batch) + ", z has " +
                            std::to_string(z.size()) + " values (expected batch * " +
                            std::to_string(options_.dense_dim) + "), emb " + std::to_string(emb.size()) +
                            " (expected batch * " + std::to_string(emb_cols) + "), output " +
                            std::to_string(out_size) + " (expected batch * " + std::to_string(output_dim()) + ")");
  return Status();
}

Status Interaction::forward(int64_t batch, std::span<const float> z, std::span<const float> emb,
                            std::span<float> out) const {
  LEANEMB_RETURN_IF_ERROR(check_sizes("forward", batch, z, emb, out.size()));
  const DType p = options_.precision;
  const float* zr = z.data();
  const float* er = emb.data();
  const int64_t F = options_.num_features, d = options_.embedding_dim, dd = options_.dense_dim;
  const int64_t out_dim = output_dim();
  const bool dot = options_.kind == InteractionKind::kDot;
  const DotShape shape{F, d, p};
  // Chunks of about 2^17 multiply-adds (the kernel does several per nanosecond): 23 samples at
  // the main job's shape.
  parallel_for(batch, grain_for(out_dim * (dot ? d : 1), int64_t{1} << 17), [&](int64_t b0, int64_t b1, int) {
    // Each sample's row [z, interaction] is written unrounded, then the chunk's rows are rounded
    // in one pass (rounding is per element, so this equals rounding each part on its own).
    for (int64_t b = b0; b < b1; ++b) {
      const float* z_b = zr + b * dd;
      const float* e_b = er + b * F * d;
      float* o = out.data() + b * out_dim;
      std::memcpy(o, z_b, static_cast<size_t>(dd) * sizeof(float));
      if (!dot) {
        std::memcpy(o + dd, e_b, static_cast<size_t>(F * d) * sizeof(float));
        continue;
      }
      dot_forward_sample(shape, z_b, e_b, o + dd);
    }
    amp::round_to_precision({out.data() + b0 * out_dim, static_cast<size_t>((b1 - b0) * out_dim)}, p);
  });
  return Status();
}

Status Interaction::backward(int64_t batch, std::span<const float> z, std::span<const float> emb,
                             std::span<const float> dout, std::span<float> dz, std::span<float> demb) const {
  LEANEMB_RETURN_IF_ERROR(check_sizes("backward", batch, z, emb, dout.size()));
  if (dz.size() != z.size() || demb.size() != emb.size())
    return invalid_argument("interaction backward: dz has " + std::to_string(dz.size()) + " values (expected " +
                            std::to_string(z.size()) + "), demb " + std::to_string(demb.size()) + " (expected " +
                            std::to_string(emb.size()) + ")");
  const DType p = options_.precision;
  const float* zr = z.data();
  const float* er = emb.data();
  const float* g = dout.data();
  const int64_t F = options_.num_features, d = options_.embedding_dim, dd = options_.dense_dim;
  const int64_t out_dim = output_dim();
  const bool dot = options_.kind == InteractionKind::kDot;
  const DotShape shape{F, d, p};
  parallel_for(batch, grain_for(out_dim * (dot ? 2 * d : 1), int64_t{1} << 17), [&](int64_t b0, int64_t b1, int) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* g_b = g + b * out_dim;
      float* dz_b = dz.data() + b * dd;
      float* de_b = demb.data() + b * F * d;
      if (!dot) {
        std::memcpy(dz_b, g_b, static_cast<size_t>(dd) * sizeof(float));
        std::memcpy(de_b, g_b + dd, static_cast<size_t>(F * d) * sizeof(float));
        continue;
      }
      dot_backward_sample(shape, zr + b * dd, er + b * F * d, g_b, g_b + dd, dz_b, de_b);
    }
    // The chunk's gradients rounded in one pass each (as in forward).
    amp::round_to_precision({dz.data() + b0 * dd, static_cast<size_t>((b1 - b0) * dd)}, p);
    amp::round_to_precision({demb.data() + b0 * F * d, static_cast<size_t>((b1 - b0) * F * d)}, p);
  });
  return Status();
}

}  // namespace leanemb::nn
