// A tiny leanemb program: one bf16 table with RowwiseAdagrad learns to pool to fixed targets.
// Build: part of the main build (target embedding_basic). Run: build/release/embedding_basic
#include <cstdio>
#include <vector>

#include "leanemb/embedding.h"

int main() {
  using namespace leanemb;
  CollectionOptions o;
  TableOptions t;
  t.name = "items";
  t.num_rows = 1000;
  t.dim = 16;
  t.dtype = DType::kBF16;
  t.optimizer.kind = OptimizerKind::kRowwiseAdagrad;
  t.optimizer.learning_rate = 0.1f;
  t.optimizer.eps = 1e-10f;
  o.tables.push_back(t);
  o.features.push_back({"clicks", 0, PoolingMode::kMean});
  TrackingAllocator alloc;
  auto created = EmbeddingCollection::create(o, &alloc);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().to_string().c_str());
    return 1;
  }
  auto& c = *created.value();

  // Four bags of three ids each; bag b should pool to the vector (b + 1) / 4 everywhere.
  const int64_t B = 4, D = t.dim;
  std::vector<int64_t> ids = {1, 5, 9, 2, 5, 7, 3, 3, 8, 0, 4, 6};
  std::vector<int64_t> offsets = {0, 3, 6, 9, 12};
  SparseBatch batch{B, {{ids, offsets, {}}}};
  std::vector<float> out(B * D), grad(B * D);
  double first_loss = -1, last_loss = 0;
  for (int step = 0; step <= 200; ++step) {
    if (!c.forward(batch, out).ok()) return 1;
    double loss = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < D; ++j) {
        const float diff = out[b * D + j] - static_cast<float>(b + 1) / 4.0f;
        loss += 0.5 * diff * diff;
        grad[b * D + j] = diff;  // d loss / d out
      }
    if (first_loss < 0) first_loss = loss;
    last_loss = loss;
    if (step % 50 == 0) std::printf("step %3d  loss %.6f\n", step, loss);
    auto r = c.backward_update(batch, grad);
    if (!r.ok()) return 1;
  }
  std::printf("%s", c.memory_stats().summary_table().c_str());
  // Used as a smoke test by CTest: training must have reduced the loss a hundredfold.
  return last_loss < 0.01 * first_loss ? 0 : 1;
}
