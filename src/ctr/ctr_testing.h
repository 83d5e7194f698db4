// Test helpers of the CtrModel tests (tests only): a small model, random batches, state bytes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "data/batch.h"
#include "leanemb/memory_system.h"
#include "amp/loss_scaler.h"
#include "model/ctr_model.h"

namespace leanemb::ctr {

inline model::CtrModelOptions small_model(int64_t rows = 50) {
  model::CtrModelOptions o;
  o.num_dense = 3;
  o.num_sparse = 4;
  o.embedding_dim = 8;
  o.table_rows = std::vector<int64_t>(4, rows);
  o.row_optimizer.kind = OptimizerKind::kAdagrad;
  o.row_optimizer.learning_rate = 0.1f;
  o.row_optimizer.eps = 1e-10f;
  o.bottom_hidden = {16, 8};
  o.top_hidden = {16};
  o.dense_optimizer.kind = nn::DenseOptimizerKind::kAdam;
  o.dense_optimizer.learning_rate = 0.01;
  o.seed = 3;
  o.num_threads = 2;
  return o;
}

// A random batch: multi-hot bags of 0..3 ids, labels from a simple rule.
inline data::Batch random_batch(const model::CtrModelOptions& o, int64_t B, uint64_t seed) {
  std::mt19937_64 rng(seed);
  data::Batch b;
  b.clear(o.num_dense, o.num_sparse);
  b.batch_size = B;
  std::uniform_real_distribution<float> u(0.0f, 3.0f);
  for (int64_t i = 0; i < B * o.num_dense; ++i) b.dense.push_back(u(rng));
  for (int f = 0; f < o.num_sparse; ++f) {
    auto& col = b.sparse[static_cast<size_t>(f)];
    col.offsets = {0};
    for (int64_t i = 0; i < B; ++i) {
      for (int64_t n = static_cast<int64_t>(rng() % 4); n > 0; --n)
        col.ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(o.table_rows[static_cast<size_t>(f)])));
      col.offsets.push_back(static_cast<int64_t>(col.ids.size()));
    }
  }
  for (int64_t i = 0; i < B; ++i) b.labels.push_back(b.dense[static_cast<size_t>(i * o.num_dense)] > 1.5f ? 1.0f : 0.0f);
  return b;
}

struct Rig {
  std::unique_ptr<MemorySystem> mem;
  std::unique_ptr<model::CtrModel> model;
};

inline Rig make_rig(const model::CtrModelOptions& o) {
  Rig r;
  r.mem = std::move(MemorySystem::create({})).value();
  auto m = model::CtrModel::create(o, r.mem.get());
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  r.model = std::move(m).value();
  return r;
}

// Every trainable byte: embedding fat rows and dense parameters and optimizer state.
inline std::vector<uint8_t> state_bytes(model::CtrModel& m) {
  std::vector<uint8_t> out;
  const EmbeddingTables& e = m.embeddings();
  for (int t = 0; t < e.num_tables(); ++t) {
    const int64_t rows = e.options().tables[static_cast<size_t>(t)].num_rows;
    std::vector<uint8_t> raw(static_cast<size_t>(rows) * e.layout(t).stride_bytes);
    EXPECT_TRUE(e.read_raw_rows(t, 0, rows, raw).ok());
    out.insert(out.end(), raw.begin(), raw.end());
  }
  for (const auto& v : {m.dense_parameters(), m.dense_optimizer_state()})
    for (const auto& t : v) {
      const auto* p = reinterpret_cast<const uint8_t*>(t.values.data());
      out.insert(out.end(), p, p + t.values.size() * 4);
    }
  return out;
}

inline std::vector<float> dense_values(model::CtrModel& m) {
  std::vector<float> out;
  for (const auto& t : m.dense_parameters()) out.insert(out.end(), t.values.begin(), t.values.end());
  return out;
}

inline std::vector<float> table_values(model::CtrModel& m) {
  std::vector<float> out;
  const EmbeddingTables& e = m.embeddings();
  for (int t = 0; t < e.num_tables(); ++t) {
    const int64_t rows = e.options().tables[static_cast<size_t>(t)].num_rows;
    std::vector<float> w(static_cast<size_t>(rows * e.layout(t).dim));
    EXPECT_TRUE(e.read_rows(t, 0, rows, w).ok());
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

// Trains a and b on the same `steps` random batches of B records (seeds seed, seed + 1, ...),
// each with its own unscaled fp32 loss scaler and micro_a / micro_b micro-batches.
inline void train_pair(Rig& a, Rig& b, const model::CtrModelOptions& o, int steps, int64_t B, uint64_t seed,
                       int micro_a = 1, int micro_b = 1) {
  amp::LossScaler sa = std::move(amp::LossScaler::create({.enabled = false})).value();
  amp::LossScaler sb = std::move(amp::LossScaler::create({.enabled = false})).value();
  for (int step = 0; step < steps; ++step) {
    const data::Batch batch = random_batch(o, B, seed + static_cast<uint64_t>(step));
    ASSERT_TRUE(a.model->train_step(batch, micro_a, sa).ok());
    ASSERT_TRUE(b.model->train_step(batch, micro_b, sb).ok());
  }
}

}  // namespace leanemb::ctr
