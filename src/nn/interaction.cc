// DLRM interaction layers (dot, cat): forward and backward, one sample per loop iteration.
#include "nn/interaction.h"

#include <algorithm>
#include <string>

namespace leanemb::nn {
namespace {

// a . b over n elements: 8 interleaved fp32 partial sums, combined pairwise in a fixed order.
inline float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
  for (int l = 0; j + l < n; ++l) acc[l] += a[j + l] * b[j + l];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// y += s * x over n elements.
inline void axpy(float s, const float* x, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] += s * x[j];
}

// Row r of T for one sample: r = 0 is z, r = f + 1 is embedding f.
inline const float* t_row(const float* z_b, const float* e_b, int64_t d, int64_t r) {
  return r == 0 ? z_b : e_b + (r - 1) * d;
}
inline float* t_row(float* z_b, float* e_b, int64_t d, int64_t r) { return r == 0 ? z_b : e_b + (r - 1) * d; }

// A copy of x rounded to p (kept in `holder`), or x itself for fp32.
Result<const float*> rounded_input(std::span<const float> x, Precision p, Allocator* alloc, Allocation& holder) {
  if (p == Precision::kFp32) return x.data();
  LEANEMB_ASSIGN_OR_RETURN(holder, allocate_floats(alloc, x.size(), Category::kWorkspace));
  std::copy(x.begin(), x.end(), holder.as<float>());
  amp::round_to_precision({holder.as<float>(), x.size()}, p);
  return holder.as<const float>();
}

}  // namespace

Result<Interaction> Interaction::create(const InteractionOptions& options, Allocator* alloc) {
  if (options.num_features < 1 || options.embedding_dim < 1 || options.dense_dim < 1)
    return invalid_argument("interaction: num_features " + std::to_string(options.num_features) + ", embedding_dim " +
                            std::to_string(options.embedding_dim) + ", dense_dim " + std::to_string(options.dense_dim) +
                            " (each must be >= 1)");
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

size_t interaction_scratch_floats(const InteractionOptions& o, int64_t batch, bool backward) {
  if (o.precision == Precision::kFp32) return 0;
  // The rounded copies rounded_input() makes: z [batch, dense_dim], emb [batch, F * dim], and
  // in backward dout [batch, output_dim].
  const int64_t n = batch * (o.dense_dim + o.num_features * o.embedding_dim) + (backward ? batch * interaction_output_dim(o) : 0);
  return static_cast<size_t>(n);
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
  const Precision p = options_.precision;
  Allocation zr_holder, er_holder;
  LEANEMB_ASSIGN_OR_RETURN(const float* zr, rounded_input(z, p, alloc_, zr_holder));
  LEANEMB_ASSIGN_OR_RETURN(const float* er, rounded_input(emb, p, alloc_, er_holder));
  const int64_t F = options_.num_features, d = options_.embedding_dim, dd = options_.dense_dim;
  const int64_t out_dim = output_dim();
  const bool dot = options_.kind == InteractionKind::kDot;
#pragma omp parallel for schedule(static) if (batch * out_dim * (dot ? d : 1) > (int64_t{1} << 16))
  for (int64_t b = 0; b < batch; ++b) {
    const float* z_b = zr + b * dd;
    const float* e_b = er + b * F * d;
    float* o = out.data() + b * out_dim;
    std::copy_n(z_b, dd, o);
    if (!dot) {
      std::copy_n(e_b, F * d, o + dd);
      continue;
    }
    int64_t k = dd;
    for (int64_t i = 1; i <= F; ++i)
      for (int64_t j = 0; j < i; ++j) o[k++] = dot8(t_row(z_b, e_b, d, i), t_row(z_b, e_b, d, j), d);
    amp::round_to_precision({o + dd, static_cast<size_t>(out_dim - dd)}, p);
  }
  return Status();
}

Status Interaction::backward(int64_t batch, std::span<const float> z, std::span<const float> emb,
                             std::span<const float> dout, std::span<float> dz, std::span<float> demb) const {
  LEANEMB_RETURN_IF_ERROR(check_sizes("backward", batch, z, emb, dout.size()));
  if (dz.size() != z.size() || demb.size() != emb.size())
    return invalid_argument("interaction backward: dz has " + std::to_string(dz.size()) + " values (expected " +
                            std::to_string(z.size()) + "), demb " + std::to_string(demb.size()) + " (expected " +
                            std::to_string(emb.size()) + ")");
  const Precision p = options_.precision;
  Allocation zr_holder, er_holder, g_holder;
  LEANEMB_ASSIGN_OR_RETURN(const float* zr, rounded_input(z, p, alloc_, zr_holder));
  LEANEMB_ASSIGN_OR_RETURN(const float* er, rounded_input(emb, p, alloc_, er_holder));
  LEANEMB_ASSIGN_OR_RETURN(const float* g, rounded_input(dout, p, alloc_, g_holder));
  const int64_t F = options_.num_features, d = options_.embedding_dim, dd = options_.dense_dim;
  const int64_t out_dim = output_dim();
  const bool dot = options_.kind == InteractionKind::kDot;
#pragma omp parallel for schedule(static) if (batch * out_dim * (dot ? d : 1) > (int64_t{1} << 16))
  for (int64_t b = 0; b < batch; ++b) {
    const float* g_b = g + b * out_dim;
    float* dz_b = dz.data() + b * dd;
    float* de_b = demb.data() + b * F * d;
    std::copy_n(g_b, dd, dz_b);
    if (!dot) {
      std::copy_n(g_b + dd, F * d, de_b);
      continue;
    }
    const float* z_b = zr + b * dd;
    const float* e_b = er + b * F * d;
    std::fill_n(de_b, F * d, 0.0f);
    int64_t k = dd;
    for (int64_t i = 1; i <= F; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        const float s = g_b[k++];
        axpy(s, t_row(z_b, e_b, d, j), t_row(dz_b, de_b, d, i), d);
        axpy(s, t_row(z_b, e_b, d, i), t_row(dz_b, de_b, d, j), d);
      }
    }
    amp::round_to_precision({dz_b, static_cast<size_t>(dd)}, p);
    amp::round_to_precision({de_b, static_cast<size_t>(F * d)}, p);
  }
  return Status();
}

}  // namespace leanemb::nn
