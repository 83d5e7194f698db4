// nn_optim_trace: prints a few steps of each dense optimizer for torch_optim_parity_test.py,
// which replays them with torch.optim. Test helper, not installed.
//
// Output, one record per line, every number as a C99 hex float (exact):
//   case <kind> <lr> <weight_decay> <eps> <beta1> <beta2> <grad_multiplier> <steps>
//   init <param> <values...>
//   grad <step> <param> <values...>
//   param <step> <param> <values...>       (after the step)
//   state <step> <param>.<state> <values...>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "nn/dense_optimizer.h"

namespace {

using leanemb::nn::DenseOptimizer;
using leanemb::nn::DenseOptimizerKind;
using leanemb::nn::DenseOptimizerOptions;

void print_values(const char* tag, const std::string& prefix, std::span<const float> v) {
  std::printf("%s %s", tag, prefix.c_str());
  for (float x : v) std::printf(" %a", static_cast<double>(x));
  std::printf("\n");
}

int run_case(const DenseOptimizerOptions& o, const char* kind, float multiplier, uint64_t seed) {
  constexpr int kSteps = 5;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(24), b(6), gw(24), gb(6);
  for (float& x : w) x = u(gen);
  for (float& x : b) x = u(gen);
  leanemb::TrackingAllocator alloc;
  auto opt = DenseOptimizer::create(o, {{"w", w, gw}, {"b", b, gb}}, &alloc);
  if (!opt.ok()) {
    std::fprintf(stderr, "%s\n", opt.status().to_string().c_str());
    return 1;
  }
  const DenseOptimizerOptions& eff = opt->options();
  std::printf("case %s %a %a %a %a %a %a %d\n", kind, eff.learning_rate, eff.weight_decay, *eff.eps, eff.beta1,
              eff.beta2, static_cast<double>(multiplier), kSteps);
  print_values("init", "w", w);
  print_values("init", "b", b);
  for (int t = 1; t <= kSteps; ++t) {
    for (float& x : gw) x = u(gen) / multiplier;  // gradients as a loss scaler would scale them
    for (float& x : gb) x = u(gen) / multiplier;
    print_values("grad", std::to_string(t) + " w", gw);
    print_values("grad", std::to_string(t) + " b", gb);
    if (!opt->step(multiplier).ok()) return 1;
    print_values("param", std::to_string(t) + " w", w);
    print_values("param", std::to_string(t) + " b", b);
    for (const auto& s : opt->state())
      if (s.name != o.name + ".step") print_values("state", std::to_string(t) + " " + s.name, s.values);
  }
  return 0;
}

}  // namespace

int main() {
  int rc = 0;
  rc |= run_case({.kind = DenseOptimizerKind::kSgd, .learning_rate = 0.1, .weight_decay = 0.01}, "sgd", 1.0f / 128, 1);
  rc |= run_case({.kind = DenseOptimizerKind::kAdagrad, .learning_rate = 0.05}, "adagrad", 1.0f, 2);
  rc |= run_case({.kind = DenseOptimizerKind::kAdagrad, .learning_rate = 0.02, .weight_decay = 0.1}, "adagrad", 0.5f, 3);
  rc |= run_case({.kind = DenseOptimizerKind::kAdam, .learning_rate = 0.01, .weight_decay = 0.001}, "adam",
                 1.0f / 1024, 4);
  rc |= run_case({.kind = DenseOptimizerKind::kAdam, .learning_rate = 0.003, .beta1 = 0.8, .beta2 = 0.95}, "adam",
                 1.0f, 5);
  return rc;
}
