// Linear layer: parameters, initialization, GEMM-based forward / backward.
#include "nn/linear.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "nn/bf16_gemm.h"
#include "nn/gemm.h"

namespace leanemb::nn {
namespace {

// The initializer's "step" in the counter-based generator (the embedding initializers use
// 2^64 - 1; a different constant keeps dense and embedding streams apart for equal seeds).
constexpr uint64_t kDenseInitStep = ~uint64_t{0} - 1;

// U(-bound, bound) for element (tensor, row, col): a pure function of its arguments.
float init_value(uint64_t seed, uint32_t tensor, uint64_t row, uint32_t col, double bound) {
  const uint32_t bits = column_bits(row_key(seed, kDenseInitStep, tensor, row), col);
  const double u = (static_cast<double>(bits >> 8) + 0.5) * (1.0 / 16777216.0);  // (0, 1)
  return static_cast<float>(bound * (2.0 * u - 1.0));
}

// Columns of db accumulated per block: a stack accumulator keeps the column sums out of the heap.
constexpr int64_t kColBlock = 256;

// db[o] += sum_b dy[b, o], each column summed over b in order (deterministic), dy [B, out].
void add_column_sums(int64_t batch, int64_t out, const float* dy, float* db) {
  const int64_t num_blocks = (out + kColBlock - 1) / kColBlock;
  parallel_for(num_blocks, grain_for(batch * kColBlock), [&](int64_t blk0, int64_t blk1, int) {
    for (int64_t blk = blk0; blk < blk1; ++blk) {
      const int64_t o0 = blk * kColBlock;
      const int64_t w = std::min(kColBlock, out - o0);
      float acc[kColBlock];
      for (int64_t j = 0; j < w; ++j) acc[j] = 0.0f;
      for (int64_t b = 0; b < batch; ++b) {
        const float* row = dy + b * out + o0;
        for (int64_t j = 0; j < w; ++j) acc[j] += row[j];
      }
      for (int64_t j = 0; j < w; ++j) db[o0 + j] += acc[j];
    }
  });
}

}  // namespace

Result<Linear> Linear::create(const LinearOptions& options, Allocator* alloc) {
  const int64_t in = options.in_features, out = options.out_features;
  if (in < 1 || out < 1 || in >= INT_MAX || out >= INT_MAX || in > INT64_MAX / out)
    return invalid_argument("linear '" + options.name + "': bad shape in_features " + std::to_string(in) +
                            ", out_features " + std::to_string(out));
  LEANEMB_RETURN_IF_ERROR(check_dtype(DTypeUse::kActivations, options.precision));
  Linear l;
  l.options_ = options;
  l.alloc_ = alloc;
  LEANEMB_ASSIGN_OR_RETURN(l.weight_, allocate_floats(alloc, l.weight_numel(), Category::kWeights));
  LEANEMB_ASSIGN_OR_RETURN(l.bias_, allocate_floats(alloc, l.bias_numel(), Category::kWeights));
  LEANEMB_ASSIGN_OR_RETURN(l.weight_grad_, allocate_floats(alloc, l.weight_numel(), Category::kGradients));
  LEANEMB_ASSIGN_OR_RETURN(l.bias_grad_, allocate_floats(alloc, l.bias_numel(), Category::kGradients));
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  float* w = l.weight_.as<float>();
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) w[o * in + i] = init_value(options.seed, 0, o, static_cast<uint32_t>(i), bound);
  float* b = l.bias_.as<float>();
  for (int64_t o = 0; o < out; ++o) b[o] = init_value(options.seed, 1, 0, static_cast<uint32_t>(o), bound);
  l.zero_grad();
  return l;
}

void Linear::zero_grad() {
  std::fill_n(weight_grad_.as<float>(), weight_numel(), 0.0f);
  std::fill_n(bias_grad_.as<float>(), bias_numel(), 0.0f);
}

namespace {
// Floats holding `bytes`, rounded up to 16 floats (64 bytes) so that the next part stays aligned.
size_t part_floats(size_t bytes) { return (bytes + 63) / 64 * 16; }
// Packed A and B of one bf16 GEMM (m, n, k), in floats.
size_t packed_floats(int64_t m, int64_t n, int64_t k) {
  return part_floats(bf16_packed_a_bytes(m, k)) + part_floats(bf16_packed_b_bytes(k, n));
}
}  // namespace

bool linear_uses_native_bf16(const LinearOptions& o) { return o.precision == DType::kBF16 && bf16_native_enabled(); }

size_t linear_scratch_floats(const LinearOptions& o, int64_t batch) {
  if (o.precision == DType::kF32) return 0;
  const int64_t in = o.in_features, out = o.out_features;
  if (!linear_uses_native_bf16(o)) return linear_weight_floats(o) + linear_bias_floats(o);
  // Forward: packed x and W, then the rounded bias; weight gradient; input gradient.
  return std::max({packed_floats(batch, out, in) + part_floats(static_cast<size_t>(out) * 4), packed_floats(out, in, batch),
                   packed_floats(batch, in, out)});
}

size_t Linear::scratch_floats(int64_t batch) const { return linear_scratch_floats(options_, batch); }

const float* Linear::gemm_weight(float* w_scratch) const {
  if (options_.precision == DType::kF32) return weight_.as<const float>();
  amp::copy_rounded(weight(), options_.precision, w_scratch);
  amp::copy_rounded(bias(), options_.precision, w_scratch + weight_numel());
  return w_scratch;
}

// y = round(x W'^T + b'): C = A B with A = x [B, in], B[k][j] = W[j][k]; the bias b' (rounded
// into the scratch after the packed operands) is added and y rounded in the GEMM's epilogue.
void Linear::forward_native_bf16(int64_t batch, const float* x, float* y, float* w_scratch) const {
  const int64_t in = options_.in_features, out = options_.out_features;
  const size_t a_floats = part_floats(bf16_packed_a_bytes(batch, in));
  auto* a = reinterpret_cast<uint16_t*>(w_scratch);
  auto* b = reinterpret_cast<uint32_t*>(w_scratch + a_floats);
  float* rb = w_scratch + a_floats + part_floats(bf16_packed_b_bytes(in, out));
  bf16_pack_a(x, batch, in, in, 1, a);
  bf16_pack_b(weight_.as<const float>(), in, out, 1, in, b);
  amp::copy_rounded(bias(), DType::kBF16, rb);
  bf16_gemm(batch, out, in, a, b, y, out, Bf16Epilogue{.bias = rb, .round_bf16 = true});
}

// dW += dy^T x (A = dy^T [out, B], B = x [B, in]); dx = round(dy W') (A = dy, B = W [out, in]).
void Linear::backward_native_bf16(int64_t batch, const float* x, const uint16_t* x16, const float* dy, float* dx,
                                  float* w_scratch) {
  const int64_t in = options_.in_features, out = options_.out_features;
  auto* a = reinterpret_cast<uint16_t*>(w_scratch);
  auto* b = reinterpret_cast<uint32_t*>(w_scratch + part_floats(bf16_packed_a_bytes(out, batch)));
  bf16_pack_a(dy, out, batch, 1, out, a);
  if (x != nullptr) {
    bf16_pack_b(x, batch, in, in, 1, b);
  } else {
    bf16_pack_b_bf16(x16, batch, in, in, b);
  }
  bf16_gemm(out, in, batch, a, b, weight_grad_.as<float>(), in, true);
  add_column_sums(batch, out, dy, bias_grad_.as<float>());
  if (dx == nullptr) return;
  b = reinterpret_cast<uint32_t*>(w_scratch + part_floats(bf16_packed_a_bytes(batch, out)));
  bf16_pack_a(dy, batch, out, out, 1, a);
  bf16_pack_b(weight_.as<const float>(), out, in, in, 1, b);
  bf16_gemm(batch, in, out, a, b, dx, in, Bf16Epilogue{.round_bf16 = true});  // the native path is bf16's
}

void Linear::backward_compute_bf16(int64_t batch, const uint16_t* x, const float* dy, float* dx, float* w_scratch) {
  LEANEMB_DCHECK(linear_uses_native_bf16(options_), "backward_compute_bf16 off the native bf16 path");
  backward_native_bf16(batch, nullptr, x, dy, dx, w_scratch);
}

void Linear::forward_compute(int64_t batch, const float* x, float* y, float* w_scratch) const {
  if (linear_uses_native_bf16(options_)) return forward_native_bf16(batch, x, y, w_scratch);
  const int64_t in = options_.in_features, out = options_.out_features;
  const float* w = gemm_weight(w_scratch);
  const float* b = options_.precision == DType::kF32 ? bias_.as<const float>() : w + weight_numel();
  // y := b broadcast, then y += x W^T (as torch's addmm on CPU: the bias is C with beta = 1).
  for (int64_t r = 0; r < batch; ++r) std::memcpy(y + r * out, b, static_cast<size_t>(out) * sizeof(float));
  gemm(Trans::kNo, Trans::kYes, batch, out, in, 1.0f, x, in, w, in, 1.0f, y, out);
  amp::round_to_precision({y, static_cast<size_t>(batch * out)}, options_.precision);
}

void Linear::backward_compute(int64_t batch, const float* x, const float* dy, float* dx, float* w_scratch) {
  if (linear_uses_native_bf16(options_)) return backward_native_bf16(batch, x, nullptr, dy, dx, w_scratch);
  const int64_t in = options_.in_features, out = options_.out_features;
  // dW [out, in] += dy^T [out, B] x [B, in]
  gemm(Trans::kYes, Trans::kNo, out, in, batch, 1.0f, dy, out, x, in, 1.0f, weight_grad_.as<float>(), in);
  add_column_sums(batch, out, dy, bias_grad_.as<float>());
  if (dx == nullptr) return;
  const float* w = gemm_weight(w_scratch);
  // dx [B, in] = dy [B, out] W' [out, in]
  gemm(Trans::kNo, Trans::kNo, batch, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
  amp::round_to_precision({dx, static_cast<size_t>(batch * in)}, options_.precision);
}

Status Linear::forward(int64_t batch, std::span<const float> x, std::span<float> y) {
  const int64_t in = options_.in_features, out = options_.out_features;
  saved_input_.reset();
  if (batch < 1 || batch > kMaxBatch || static_cast<int64_t>(x.size()) != batch * in ||
      static_cast<int64_t>(y.size()) != batch * out)
    return invalid_argument("linear '" + options_.name + "' forward: batch " + std::to_string(batch) + ", x has " +
                            std::to_string(x.size()) + " values (expected batch * " + std::to_string(in) +
                            "), y has " + std::to_string(y.size()) + " (expected batch * " + std::to_string(out) + ")");
  LEANEMB_ASSIGN_OR_RETURN(StoredTensor saved, StoredTensor::create(alloc_, batch * in, options_.precision));
  const float* xin = x.data();
  Allocation rounded_x, scratch;
  if (options_.precision != DType::kF32) {
    LEANEMB_ASSIGN_OR_RETURN(rounded_x, allocate_floats(alloc_, x.size(), Category::kWorkspace));
    LEANEMB_ASSIGN_OR_RETURN(scratch, allocate_floats(alloc_, scratch_floats(batch), Category::kWorkspace));
    amp::copy_rounded(x, options_.precision, rounded_x.as<float>());
    xin = rounded_x.as<const float>();
  }
  forward_compute(batch, xin, y.data(), scratch.as<float>());
  saved.store({xin, x.size()});
  saved_input_ = std::move(saved);
  saved_batch_ = batch;
  return Status();
}

Status Linear::backward(std::span<const float> dy, std::span<float> dx) {
  const int64_t in = options_.in_features, out = options_.out_features;
  if (!has_saved_input())
    return failed_precondition("linear '" + options_.name + "' backward: no saved forward (call forward first)");
  const int64_t batch = saved_batch_;
  if (static_cast<int64_t>(dy.size()) != batch * out || (!dx.empty() && static_cast<int64_t>(dx.size()) != batch * in))
    return invalid_argument("linear '" + options_.name + "' backward: dy has " + std::to_string(dy.size()) +
                            " values (expected " + std::to_string(batch * out) + "), dx has " +
                            std::to_string(dx.size()) + " (expected 0 or " + std::to_string(batch * in) + ")");
  const float* g = dy.data();
  const float* x = saved_input_.f32_data();
  Allocation rounded_dy, unpacked_x, scratch;
  if (options_.precision != DType::kF32) {
    // Every allocation happens before the first gradient changes, so a failure changes nothing.
    LEANEMB_ASSIGN_OR_RETURN(rounded_dy, allocate_floats(alloc_, dy.size(), Category::kWorkspace));
    LEANEMB_ASSIGN_OR_RETURN(unpacked_x, allocate_floats(alloc_, static_cast<size_t>(batch * in), Category::kWorkspace));
    LEANEMB_ASSIGN_OR_RETURN(scratch, allocate_floats(alloc_, scratch_floats(batch), Category::kWorkspace));
    amp::copy_rounded(dy, options_.precision, rounded_dy.as<float>());
    saved_input_.load({unpacked_x.as<float>(), static_cast<size_t>(batch * in)});
    g = rounded_dy.as<const float>();
    x = unpacked_x.as<const float>();
  }
  backward_compute(batch, x, g, dx.empty() ? nullptr : dx.data(), scratch.as<float>());
  saved_input_.reset();
  return Status();
}

std::vector<DenseParam> Linear::dense_params() {
  return {{options_.name + ".weight", weight(), weight_grad()}, {options_.name + ".bias", bias(), bias_grad()}};
}

std::vector<NamedTensor> Linear::parameters() const {
  return {{options_.name + ".weight", weight()}, {options_.name + ".bias", bias()}};
}

Status Linear::load_parameters(std::span<const NamedTensor> tensors) {
  const std::vector<NamedTarget> dst = {{options_.name + ".weight", weight()}, {options_.name + ".bias", bias()}};
  return load_named(tensors, dst, "linear '" + options_.name + "'");
}

}  // namespace leanemb::nn
