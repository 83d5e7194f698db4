// Google Benchmark micro-benches of the dense layers at the main job's shapes
// (examples/ctr_small.toml: B = 1024, 26 features of dim 16, top MLP 367-64-32-1). Each benchmark
// first checks its fast path against the scalar reference (SkipWithError on mismatch).
//   leanemb_microbench --benchmark_filter='Dot|Dense'
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "leanemb/device_arena.h"
#include "leanemb/memory.h"
#include "nn/bf16_gemm.h"
#include "nn/dot_interaction.h"
#include "nn/interaction.h"
#include "nn/mlp.h"

namespace leanemb::bench {
namespace {

constexpr int64_t kBatch = 1024, kFeatures = 26, kDim = 16;

std::vector<float> uniform(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// One sample of the fast kernel against the reference; false on any bit difference.
bool dot_kernel_matches(const nn::DotShape& s, const float* z, const float* e, const float* g) {
  std::vector<float> a(static_cast<size_t>(nn::dot_pair_count(s))), b(a.size());
  nn::dot_forward_sample(s, z, e, a.data());
  nn::dot_forward_sample_reference(s, z, e, b.data());
  std::vector<float> dz(static_cast<size_t>(s.dim)), de(static_cast<size_t>(s.num_features * s.dim));
  std::vector<float> rdz(dz.size()), rde(de.size());
  nn::dot_backward_sample(s, z, e, z, g, dz.data(), de.data());
  nn::dot_backward_sample_reference(s, z, e, z, g, rdz.data(), rde.data());
  return std::memcmp(a.data(), b.data(), a.size() * 4) == 0 && std::memcmp(dz.data(), rdz.data(), dz.size() * 4) == 0 &&
         std::memcmp(de.data(), rde.data(), de.size() * 4) == 0;
}

// Interaction forward (arg 0) or backward (arg 1) of one main-job batch, fp32.
void BM_DotInteraction(benchmark::State& state) {
  const bool backward = state.range(0) == 1;
  TrackingAllocator alloc;
  auto it = nn::Interaction::create(
      {.kind = nn::InteractionKind::kDot, .num_features = kFeatures, .embedding_dim = kDim, .dense_dim = kDim}, &alloc);
  if (!it.ok()) return state.SkipWithError("create failed");
  const auto z = uniform(kBatch * kDim, 1), e = uniform(kBatch * kFeatures * kDim, 2);
  const auto g = uniform(static_cast<size_t>(kBatch * it->output_dim()), 3);
  if (!dot_kernel_matches({kFeatures, kDim}, z.data(), e.data(), g.data() + kDim))
    return state.SkipWithError("fast dot kernel differs from the reference");
  std::vector<float> out(g.size()), dz(z.size()), de(e.size());
  for (auto _ : state) {
    const Status s = backward ? it->backward(kBatch, z, e, g, dz, de) : it->forward(kBatch, z, e, out);
    if (!s.ok()) return state.SkipWithError("interaction failed");
    benchmark::DoNotOptimize(backward ? de.data() : out.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_DotInteraction)->ArgName("backward")->Arg(0)->Arg(1)->UseRealTime();

// One forward + backward (with dx) of the main job's top MLP (367 -> 64 -> 32 -> 1, B = 1024) on
// a device arena, as in training: arg 0 fp32 (OpenBLAS sgemm panels), 1 bf16 emulated (rounded
// operands, sgemm), 2 bf16 native (VDPBF16PS; skipped without AVX512_BF16).
void BM_DenseTopMlp(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  if (mode == 2 && !nn::bf16_native_supported()) return state.SkipWithError("no AVX512_BF16");
  DeviceArenaOptions ao;
  ao.budget_bytes = size_t{1} << 28;
  auto arena = DeviceArena::create(ao);
  if (!arena.ok()) return state.SkipWithError("arena");
  nn::set_bf16_native_enabled(mode == 2);
  auto m = nn::Mlp::create({.widths = {367, 64, 32, 1}, .precision = mode == 0 ? DType::kF32 : DType::kBF16},
                           arena->get());
  if (!m.ok()) return state.SkipWithError("create failed");
  const auto x = uniform(kBatch * 367, 4), g = uniform(kBatch, 5);
  std::vector<float> y(g.size()), dx(x.size());
  for (auto _ : state) {
    if (!m->forward(kBatch, x, y).ok() || !m->backward(g, dx).ok()) return state.SkipWithError("mlp failed");
    benchmark::DoNotOptimize(dx.data());
  }
  nn::set_bf16_native_enabled(true);
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_DenseTopMlp)->ArgName("fp32_bf16emul_bf16native")->Arg(0)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
}  // namespace leanemb::bench
