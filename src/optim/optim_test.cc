// Tests of the optimizers: EmbeddingCollection training (fp32 rows and state) against an
// independent double-precision implementation of PyTorch's published update rules
// (torch.optim.SGD, Adagrad, SparseAdam) and of FBGEMM's RowwiseAdagrad / PartialRowwiseAdam as
// documented in include/leanemb/optimizer.h; fat-row byte layouts; low-precision state
// convergence on a small quadratic problem.
//
// The oracle shares no code with src/kernels: it keeps a dense double copy of every table,
// differentiates loss = sum(pooled_out * G) by hand and applies the textbook rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "table/owned_batch_testing.h"
#include "leanemb/embedding.h"
#include "leanemb/memory.h"
#include "leanemb/optimizer.h"

namespace leanemb {
namespace {

// ---- the independent oracle -------------------------------------------------------------------

struct DenseTable {
  int64_t rows = 0, dim = 0;
  std::vector<double> w;        // [rows, dim]
  std::vector<double> s1, s2;   // per-element state: Adagrad sum / Adam exp_avg, Adam exp_avg_sq
  std::vector<double> rowwise;  // [rows]: RowwiseAdagrad sum / PartialRowwiseAdam v / SM3 row acc
  std::vector<double> col;      // [dim]: SM3 column accumulators
};

// One sparse step on the touched rows `grads` (row -> summed gradient), t = 1-based step.
void oracle_step(DenseTable& T, const std::map<int64_t, std::vector<double>>& grads, int64_t t,
                 const OptimizerOptions& o) {
  const double lr = o.learning_rate, eps = o.eps, b1 = o.beta1, b2 = o.beta2, wd = o.weight_decay;
  const std::vector<double> col_before = T.col;  // SM3: every row reads the columns of before the step
  for (const auto& [r, grad] : grads) {
    double* w = &T.w[r * T.dim];
    std::vector<double> g(grad);
    for (int64_t j = 0; j < T.dim; ++j) g[j] += wd * w[j];  // L2 weight decay on touched rows
    double* s1 = &T.s1[r * T.dim];
    double* s2 = &T.s2[r * T.dim];
    double mean_g2 = 0;
    for (int64_t j = 0; j < T.dim; ++j) mean_g2 += g[j] * g[j] / static_cast<double>(T.dim);
    const double step_size = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    switch (o.kind) {
      case OptimizerKind::kSgd:  // torch.optim.SGD: p -= lr * d_p
        for (int64_t j = 0; j < T.dim; ++j) w[j] -= lr * g[j];
        break;
      case OptimizerKind::kAdagrad:  // torch.optim.Adagrad, lr_decay 0, initial_accumulator_value 0
        for (int64_t j = 0; j < T.dim; ++j) {
          s1[j] += g[j] * g[j];
          w[j] -= lr * g[j] / (std::sqrt(s1[j]) + eps);
        }
        break;
      case OptimizerKind::kRowwiseAdagrad:  // FBGEMM: one accumulator of mean(g^2) per row
        T.rowwise[r] += mean_g2;
        for (int64_t j = 0; j < T.dim; ++j) w[j] -= lr * g[j] / (std::sqrt(T.rowwise[r]) + eps);
        break;
      case OptimizerKind::kAdam:  // torch.optim.SparseAdam on the rows present in the gradient
        for (int64_t j = 0; j < T.dim; ++j) {
          s1[j] = b1 * s1[j] + (1 - b1) * g[j];
          s2[j] = b2 * s2[j] + (1 - b2) * g[j] * g[j];
          w[j] -= step_size * s1[j] / (std::sqrt(s2[j]) + eps);
        }
        break;
      case OptimizerKind::kSm3: {  // SM3-II over the cover {rows} u {columns} (Anil et al., 2019)
        double row_max = 0;
        for (int64_t j = 0; j < T.dim; ++j) {
          const double nu = std::min(T.rowwise[r], col_before[j]) + g[j] * g[j];
          w[j] -= lr * g[j] / (std::sqrt(nu) + eps);
          row_max = std::max(row_max, nu);
          T.col[j] = std::max(T.col[j], nu);
        }
        T.rowwise[r] = row_max;
        break;
      }
      case OptimizerKind::kPartialRowwiseAdam:  // element-wise m, row-wise v of mean(g^2)
        T.rowwise[r] = b2 * T.rowwise[r] + (1 - b2) * mean_g2;
        for (int64_t j = 0; j < T.dim; ++j) {
          s1[j] = b1 * s1[j] + (1 - b1) * g[j];
          w[j] -= step_size * s1[j] / (std::sqrt(T.rowwise[r]) + eps);
        }
        break;
    }
  }
}

// ---- a small multi-feature collection and its batches ---------------------------------------------

// Table 0 (30 x 13) is shared by feature 0 (sum) and feature 1 (weighted mean); table 1 (20 x 8)
// serves feature 2 (weighted sum) and feature 3 (mean).
CollectionOptions make_options(const OptimizerOptions& opt, bool use_reference) {
  CollectionOptions o;
  for (auto [name, rows, dim] : {std::tuple{"t0", 30, 13}, std::tuple{"t1", 20, 8}}) {
    TableOptions t;
    t.name = name;
    t.num_rows = rows;
    t.dim = dim;
    t.optimizer = opt;
    t.init.bound = 0.5f;
    o.tables.push_back(t);
  }
  o.features = {{"f0", 0, PoolingMode::kSum}, {"f1", 0, PoolingMode::kMean},
                {"f2", 1, PoolingMode::kSum}, {"f3", 1, PoolingMode::kMean}};
  o.seed = 3;
  o.num_threads = 2;
  o.use_reference_kernels = use_reference;
  return o;
}

using testing_util::OwnedBatch;

OwnedBatch make_batch(const CollectionOptions& o, std::mt19937_64& rng, bool weighted_f1_f2) {
  OwnedBatch b;
  b.B = 6;
  std::uniform_int_distribution<int> len(1, 5);
  std::uniform_real_distribution<float> wdist(0.25f, 1.75f);
  for (size_t f = 0; f < o.features.size(); ++f) {
    const int64_t rows = o.tables[o.features[f].table].num_rows;
    std::uniform_int_distribution<int64_t> id(0, rows / 3);  // a narrow range: many duplicates
    std::vector<int64_t> ids, offs{0};
    for (int64_t bag = 0; bag < b.B; ++bag) {
      const int n = bag == 1 ? 0 : len(rng);
      for (int i = 0; i < n; ++i) ids.push_back(id(rng));
      offs.push_back(static_cast<int64_t>(ids.size()));
    }
    std::vector<float> w;
    if (weighted_f1_f2 && (f == 1 || f == 2))
      for (size_t i = 0; i < ids.size(); ++i) w.push_back(wdist(rng));
    b.ids.push_back(ids);
    b.offsets.push_back(offs);
    b.weights.push_back(w);
  }
  return b;
}

// d loss / d row for loss = sum(out * G): each occurrence adds w_i (/ bag length for mean) * G.
std::vector<std::map<int64_t, std::vector<double>>> oracle_grads(const EmbeddingCollection& c, const OwnedBatch& b,
                                                               const std::vector<float>& G) {
  std::vector<std::map<int64_t, std::vector<double>>> out(c.num_tables());
  for (int f = 0; f < c.num_features(); ++f) {
    const FeatureOptions& fo = c.options().features[f];
    const int64_t dim = c.options().tables[fo.table].dim, off = c.pooled_offset(f);
    for (int64_t bag = 0; bag < b.B; ++bag) {
      const int64_t lo = b.offsets[f][bag], hi = b.offsets[f][bag + 1];
      for (int64_t i = lo; i < hi; ++i) {
        double scale = b.weights[f].empty() ? 1.0 : b.weights[f][i];
        if (fo.pooling == PoolingMode::kMean) scale /= static_cast<double>(hi - lo);
        auto& g = out[fo.table][b.ids[f][i]];
        g.resize(dim, 0.0);
        for (int64_t j = 0; j < dim; ++j) g[j] += scale * G[bag * c.pooled_dim() + off + j];
      }
    }
  }
  return out;
}

std::vector<double> oracle_forward(const EmbeddingCollection& c, const std::vector<DenseTable>& T, const OwnedBatch& b) {
  std::vector<double> out(static_cast<size_t>(b.B * c.pooled_dim()), 0.0);
  for (int f = 0; f < c.num_features(); ++f) {
    const FeatureOptions& fo = c.options().features[f];
    const DenseTable& t = T[fo.table];
    for (int64_t bag = 0; bag < b.B; ++bag) {
      const int64_t lo = b.offsets[f][bag], hi = b.offsets[f][bag + 1];
      for (int64_t i = lo; i < hi; ++i) {
        double scale = b.weights[f].empty() ? 1.0 : b.weights[f][i];
        if (fo.pooling == PoolingMode::kMean) scale /= static_cast<double>(hi - lo);
        for (int64_t j = 0; j < t.dim; ++j)
          out[bag * c.pooled_dim() + c.pooled_offset(f) + j] += scale * t.w[b.ids[f][i] * t.dim + j];
      }
    }
  }
  return out;
}

DenseTable dense_copy(const EmbeddingCollection& c, int t) {
  DenseTable d;
  d.rows = c.options().tables[t].num_rows;
  d.dim = c.options().tables[t].dim;
  std::vector<float> w(static_cast<size_t>(d.rows * d.dim));
  EXPECT_TRUE(c.read_rows(t, 0, d.rows, w).ok());
  d.w.assign(w.begin(), w.end());
  d.s1.assign(w.size(), 0.0);
  d.s2.assign(w.size(), 0.0);
  d.rowwise.assign(static_cast<size_t>(d.rows), 0.0);
  d.col.assign(static_cast<size_t>(d.dim), 0.0);
  return d;
}

// Expects every weight and state value of table t to match the oracle within 1e-5 (1 + |v|).
void expect_table_matches(const EmbeddingCollection& c, int t, const DenseTable& d, int64_t step) {
  std::vector<float> w(d.w.size());
  ASSERT_TRUE(c.read_rows(t, 0, d.rows, w).ok());
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_NEAR(w[i], d.w[i], 1e-5 * (1 + std::fabs(d.w[i]))) << "table " << t << " weight " << i << " step " << step;
  const int64_t per_row = c.state_floats_per_row(t);
  std::vector<float> s(static_cast<size_t>(d.rows * per_row));
  ASSERT_TRUE(c.read_state(t, 0, d.rows, s).ok());
  const RowLayout& l = c.layout(t);
  for (int64_t r = 0; r < d.rows; ++r) {
    const float* sr = s.data() + r * per_row;
    for (int64_t j = 0; j < d.dim && l.num_elem_states >= 1; ++j)
      ASSERT_NEAR(sr[j], d.s1[r * d.dim + j], 1e-5 * (1 + std::fabs(d.s1[r * d.dim + j]))) << "state 0 row " << r;
    for (int64_t j = 0; j < d.dim && l.num_elem_states == 2; ++j)
      ASSERT_NEAR(sr[d.dim + j], d.s2[r * d.dim + j], 1e-5 * (1 + std::fabs(d.s2[r * d.dim + j]))) << "state 1 row " << r;
    if (l.has_rowwise) {
      ASSERT_NEAR(sr[per_row - 1], d.rowwise[r], 1e-5 * (1 + std::fabs(d.rowwise[r]))) << "rowwise state row " << r;
    }
  }
  const std::span<const float> col = c.column_state(t);
  ASSERT_EQ(col.size(), l.optimizer.kind == OptimizerKind::kSm3 ? static_cast<size_t>(d.dim) : 0u);
  for (size_t j = 0; j < col.size(); ++j)
    ASSERT_NEAR(col[j], d.col[j], 1e-5 * (1 + std::fabs(d.col[j]))) << "column state " << j << " step " << step;
}

struct ParityParam {
  OptimizerKind kind;
  float weight_decay;
  bool use_reference;
};

class TorchRuleParityTest : public ::testing::TestWithParam<ParityParam> {};

// 12 steps of EmbeddingCollection (fp32 rows and state; features sum, weighted mean, weighted
// sum and mean; duplicate ids; two features per table) match the independent implementation of
// the published update rule: forward outputs, weights and optimizer state within 1e-5 (1 + |v|).
TEST_P(TorchRuleParityTest, TrainingMatchesPublishedUpdateRule) {
  const ParityParam p = GetParam();
  OptimizerOptions opt;
  opt.kind = p.kind;
  opt.learning_rate = p.kind == OptimizerKind::kSgd ? 0.1f : 0.05f;
  opt.eps = default_eps(p.kind);
  opt.weight_decay = p.weight_decay;
  auto created = EmbeddingCollection::create(make_options(opt, p.use_reference));
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  EmbeddingCollection& c = **created;
  std::vector<DenseTable> dense = {dense_copy(c, 0), dense_copy(c, 1)};
  std::mt19937_64 rng(77);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (int64_t step = 1; step <= 12; ++step) {
    const OwnedBatch b = make_batch(c.options(), rng, /*weighted_f1_f2=*/true);
    const SparseBatch batch = b.view();
    std::vector<float> out(static_cast<size_t>(b.B * c.pooled_dim()));
    ASSERT_TRUE(c.forward(batch, out).ok());
    const std::vector<double> want = oracle_forward(c, dense, b);
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "forward output " << i << " step " << step;
    std::vector<float> G(out.size());
    for (auto& x : G) x = gauss(rng);
    auto report = c.backward_update(batch, G);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    ASSERT_FALSE(report->skipped_nonfinite);
    const auto grads = oracle_grads(c, b, G);
    EXPECT_EQ(report->unique_rows, static_cast<int64_t>(grads[0].size() + grads[1].size()));
    for (int t = 0; t < 2; ++t) oracle_step(dense[t], grads[t], step, opt);
    ASSERT_EQ(c.step(), step);
    for (int t = 0; t < 2; ++t) expect_table_matches(c, t, dense[t], step);
  }
}

std::vector<ParityParam> all_parity_params() {
  std::vector<ParityParam> v;
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                          OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam, OptimizerKind::kSm3}) {
    v.push_back({k, 0.0f, false});
    v.push_back({k, 0.01f, false});
    v.push_back({k, 0.0f, true});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, TorchRuleParityTest, ::testing::ValuesIn(all_parity_params()),
                         [](const ::testing::TestParamInfo<ParityParam>& i) {
                           return std::string(optimizer_name(i.param.kind)) +
                                  (i.param.weight_decay > 0 ? "_weight_decay" : "") +
                                  (i.param.use_reference ? "_reference_kernels" : "_fast_kernels");
                         });

// ---- layouts --------------------------------------------------------------------------------------

RowLayout layout_of(int64_t dim, DType dtype, OptimizerKind kind, DType state = DType::kF32) {
  OptimizerOptions o;
  o.kind = kind;
  o.state_dtype = state;
  auto l = make_row_layout(dim, dtype, o);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return l.ok() ? l.value() : RowLayout{};
}

// Fat-row strides match the documented byte counts (dim 128: fp32 Adam 1536 B, bf16 +
// RowwiseAdagrad 264 B, bf16 + Adam with int8 state 528 B, ...) and so bytes per parameter.
TEST(RowLayoutTest, StridesMatchDocumentedByteCounts) {
  struct Case {
    int64_t dim;
    DType dtype;
    OptimizerKind kind;
    DType state;
    size_t stride;
  };
  const Case cases[] = {
      {128, DType::kF32, OptimizerKind::kAdam, DType::kF32, 1536},
      {128, DType::kBF16, OptimizerKind::kRowwiseAdagrad, DType::kF32, 264},
      {128, DType::kBF16, OptimizerKind::kSm3, DType::kF32, 264},  // + 4 * dim column bytes per table
      {16, DType::kBF16, OptimizerKind::kSm3, DType::kF32, 40},
      {128, DType::kBF16, OptimizerKind::kAdam, DType::kInt8Blockwise, 528},
      {128, DType::kF32, OptimizerKind::kSgd, DType::kF32, 512},
      {128, DType::kInt8Rowwise, OptimizerKind::kSgd, DType::kF32, 136},
      {128, DType::kF16, OptimizerKind::kAdagrad, DType::kBF16, 512},
      {128, DType::kBF16, OptimizerKind::kPartialRowwiseAdam, DType::kBF16, 520},
      {128, DType::kF32, OptimizerKind::kAdam, DType::kBF16, 1024},
      {13, DType::kF32, OptimizerKind::kSgd, DType::kF32, 56},
      {13, DType::kF32, OptimizerKind::kAdagrad, DType::kF32, 104},
      {3, DType::kF16, OptimizerKind::kSgd, DType::kF32, 8},
      {70, DType::kBF16, OptimizerKind::kAdam, DType::kInt8Blockwise, 140 + 140 + 16},
      // fp8 rows: one byte per weight, 4-byte strides (2.25 and 2.0625 bytes per parameter).
      {16, DType::kFP8, OptimizerKind::kAdagrad, DType::kInt8Blockwise, 16 + 16 + 4},
      {64, DType::kFP8, OptimizerKind::kAdagrad, DType::kInt8Blockwise, 64 + 64 + 4},
      {100, DType::kFP8, OptimizerKind::kSgd, DType::kF32, 100},
      {13, DType::kFP8, OptimizerKind::kRowwiseAdagrad, DType::kF32, 16 + 4},
      // q8 rows: codes and an fp32 scale, 4-byte strides (2.5 and 2.125 bytes per parameter with
      // 8-bit Adagrad state: row-wise Adagrad's 40 and 136 bytes at dim 16 and 64).
      {16, DType::kQ8, OptimizerKind::kAdagrad, DType::kInt8Blockwise, 16 + 4 + 16 + 4},
      {64, DType::kQ8, OptimizerKind::kAdagrad, DType::kInt8Blockwise, 64 + 4 + 64 + 4},
      {13, DType::kQ8, OptimizerKind::kSgd, DType::kF32, 13 + 3 + 4},
      // 4-bit state: two codes per byte + an fp32 scale per 64 elements. q8 rows + 4-bit Adagrad
      // state: 2.0 bytes per parameter at dim 16, 1.625 at dim 64.
      {16, DType::kQ8, OptimizerKind::kAdagrad, DType::kInt4Blockwise, 16 + 4 + 8 + 4},
      {64, DType::kQ8, OptimizerKind::kAdagrad, DType::kInt4Blockwise, 64 + 4 + 32 + 4},
      {128, DType::kQ8, OptimizerKind::kAdagrad, DType::kInt4Blockwise, 204},  // docs/embedding.md's table
      {128, DType::kQ8, OptimizerKind::kAdagrad, DType::kInt8Blockwise, 268},
      {128, DType::kBF16, OptimizerKind::kAdam, DType::kInt4Blockwise, 400},
      {13, DType::kF32, OptimizerKind::kAdagrad, DType::kInt4Blockwise, 52 + 7 + 1 + 4 + 0},
      {130, DType::kBF16, OptimizerKind::kAdam, DType::kInt4Blockwise, 260 + 65 + 65 + 2 + 12 + 12},
  };
  for (const Case& c : cases) {
    const RowLayout l = layout_of(c.dim, c.dtype, c.kind, c.state);
    EXPECT_EQ(l.stride_bytes, c.stride) << "dim " << c.dim << " " << dtype_name(c.dtype) << " "
                                        << optimizer_name(c.kind) << " state " << dtype_name(c.state);
  }
  EXPECT_DOUBLE_EQ(layout_of(128, DType::kF32, OptimizerKind::kAdam).stride_bytes / 128.0, 12.0);
  EXPECT_DOUBLE_EQ(layout_of(128, DType::kBF16, OptimizerKind::kRowwiseAdagrad).stride_bytes / 128.0, 2.0625);
  EXPECT_DOUBLE_EQ(layout_of(128, DType::kBF16, OptimizerKind::kAdam, DType::kInt8Blockwise).stride_bytes / 128.0,
                   4.125);
}

// Components never overlap, fp32 parts are 4-byte aligned, and the parts add up to the stride.
TEST(RowLayoutTest, ComponentsAreDisjointAlignedAndAddUp) {
  for (int64_t dim : {1, 3, 64, 65, 130}) {
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8, DType::kQ8}) {
      for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                              OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam}) {
        for (DType s : {DType::kF32, DType::kBF16, DType::kInt8Blockwise, DType::kInt4Blockwise}) {
          const RowLayout l = layout_of(dim, d, k, s);
          SCOPED_TRACE(std::to_string(dim) + " " + std::string(optimizer_name(k)) + " " + std::string(dtype_name(s)));
          EXPECT_EQ(l.stride_bytes % dtype_traits(d).row_alignment_bytes, 0u);
          EXPECT_EQ(l.weight_bytes + l.state_bytes + l.padding_bytes(), l.stride_bytes);
          EXPECT_LT(l.padding_bytes(), kRowAlignmentBytes + 4);
          std::vector<std::pair<size_t, size_t>> parts = {{0, l.weight_bytes}};
          if (l.has_rowwise) parts.push_back({l.rowwise_offset, 4});
          if (l.num_elem_states >= 1) parts.push_back({l.m_offset, l.elem_state_bytes});
          if (l.num_elem_states == 2) parts.push_back({l.v_offset, l.elem_state_bytes});
          if ((s == DType::kInt8Blockwise || s == DType::kInt4Blockwise) && l.num_elem_states >= 1) {
            EXPECT_EQ(l.elem_state_bytes, s == DType::kInt4Blockwise ? static_cast<size_t>(dim + 1) / 2 : static_cast<size_t>(dim));
            EXPECT_EQ(l.num_blocks, (dim + kQuantBlockSize - 1) / kQuantBlockSize);
            parts.push_back({l.m_scale_offset, 4 * static_cast<size_t>(l.num_blocks)});
            if (l.num_elem_states == 2) parts.push_back({l.v_scale_offset, 4 * static_cast<size_t>(l.num_blocks)});
          }
          std::sort(parts.begin(), parts.end());
          for (size_t i = 0; i + 1 < parts.size(); ++i) EXPECT_LE(parts[i].first + parts[i].second, parts[i + 1].first);
          EXPECT_LE(parts.back().first + parts.back().second, l.stride_bytes);
          EXPECT_TRUE(!l.has_rowwise || l.rowwise_offset % 4 == 0);
          EXPECT_TRUE(s != DType::kF32 || l.num_elem_states == 0 || l.m_offset % 4 == 0);
          EXPECT_TRUE((s != DType::kInt8Blockwise && s != DType::kInt4Blockwise) || l.num_elem_states == 0 ||
                      l.m_scale_offset % 4 == 0);
        }
      }
    }
  }
}

// A collection charges rows x (stride - state) to weights and rows x state to optimizer_state.
TEST(RowLayoutTest, CollectionMemoryMatchesLayoutBytes) {
  TrackingAllocator alloc;
  {
    CollectionOptions o;
    TableOptions t;
    t.name = "t";
    t.num_rows = 1000;
    t.dim = 128;
    t.dtype = DType::kBF16;
    t.optimizer.kind = OptimizerKind::kAdam;
    t.optimizer.state_dtype = DType::kInt8Blockwise;
    o.tables = {t};
    o.features = {{"f", 0, PoolingMode::kSum}};
    auto c = EmbeddingCollection::create(o, &alloc);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    const MemoryStats s = alloc.memory_stats();
    EXPECT_EQ(s[Category::kWeights].current_bytes, 1000u * (528 - 272));
    EXPECT_EQ(s[Category::kOptimizerState].current_bytes, 1000u * 272);
    EXPECT_EQ(s.current_bytes, 1000u * 528);
  }
  EXPECT_EQ(alloc.memory_stats().current_bytes, 0u);
}

// Bad hyper-parameters and lookup-only dtypes with stateful optimizers are InvalidArgument.
TEST(RowLayoutTest, RejectsBadDimsHyperParametersAndUntrainableDTypes) {
  auto bad = [](int64_t dim, DType d, OptimizerOptions o) {
    auto l = make_row_layout(dim, d, o);
    return !l.ok() && l.status().code() == StatusCode::kInvalidArgument;
  };
  const OptimizerOptions ok;
  EXPECT_TRUE(bad(0, DType::kF32, ok));
  EXPECT_TRUE(bad(-4, DType::kF32, ok));
  for (auto mutate : std::vector<void (*)(OptimizerOptions&)>{
           [](OptimizerOptions& o) { o.learning_rate = -0.1f; }, [](OptimizerOptions& o) { o.learning_rate = NAN; },
           [](OptimizerOptions& o) { o.learning_rate = INFINITY; }, [](OptimizerOptions& o) { o.beta1 = 1.0f; },
           [](OptimizerOptions& o) { o.beta2 = -0.1f; }, [](OptimizerOptions& o) { o.eps = -1e-8f; },
           [](OptimizerOptions& o) { o.weight_decay = -1.0f; }}) {
    OptimizerOptions o;
    o.kind = OptimizerKind::kAdam;
    mutate(o);
    EXPECT_TRUE(bad(8, DType::kF32, o));
  }
  OptimizerOptions adam;
  adam.kind = OptimizerKind::kAdam;
  EXPECT_TRUE(bad(8, DType::kInt8Rowwise, adam));
  EXPECT_FALSE(bad(8, DType::kInt8Rowwise, ok));
}

// Optimizer and state dtype names parse back; unknown names are InvalidArgument.
TEST(OptimizerNamesTest, NamesRoundTripAndUnknownNamesFail) {
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                          OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam, OptimizerKind::kSm3})
    EXPECT_EQ(parse_optimizer(optimizer_name(k)).value(), k);
  EXPECT_EQ(parse_optimizer("sparse_adam").value(), OptimizerKind::kAdam);
  for (DType s : {DType::kF32, DType::kBF16, DType::kInt8Blockwise, DType::kInt4Blockwise})
    EXPECT_EQ(parse_dtype(dtype_name(s), DTypeUse::kOptimizerState).value(), s);
  EXPECT_EQ(parse_optimizer("lamb").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_dtype("fp8", DTypeUse::kOptimizerState).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(default_eps(OptimizerKind::kAdagrad), 1e-10f);
  EXPECT_EQ(default_eps(OptimizerKind::kAdam), 1e-8f);
}

// ---- low-precision state convergence ---------------------------------------------------------------

// Trains every row of a 64 x 80 table toward a fixed target (loss = 0.5 |w - target|^2, one id
// per bag) and returns the loss after each of `steps` steps.
std::vector<double> quadratic_losses(OptimizerKind kind, DType dtype, DType state, int steps) {
  constexpr int64_t kRows = 64, kDim = 80;  // 80: two 8-bit state blocks, the second partial
  CollectionOptions o;
  TableOptions t;
  t.name = "q";
  t.num_rows = kRows;
  t.dim = kDim;
  t.dtype = dtype;
  t.optimizer.kind = kind;
  t.optimizer.learning_rate = 0.05f;
  t.optimizer.eps = default_eps(kind);
  t.optimizer.state_dtype = state;
  t.init.bound = 0.1f;
  o.tables = {t};
  o.features = {{"f", 0, PoolingMode::kSum}};
  o.seed = 11;
  o.num_threads = 1;  // thread count is irrelevant here; 1 avoids OpenMP barriers under load
  auto created = EmbeddingCollection::create(o);
  EXPECT_TRUE(created.ok()) << created.status().to_string();
  EmbeddingCollection& c = **created;
  std::vector<int64_t> ids(kRows), offsets(kRows + 1);
  for (int64_t i = 0; i < kRows; ++i) ids[i] = i, offsets[i + 1] = i + 1;
  SparseBatch b{kRows, {{ids, offsets, {}}}};
  std::vector<float> target(kRows * kDim), out(target.size()), grad(target.size());
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : target) x = u(rng);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    EXPECT_TRUE(c.forward(b, out).ok());
    double loss = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      grad[i] = out[i] - target[i];
      loss += 0.5 * grad[i] * grad[i];
    }
    losses.push_back(loss);
    EXPECT_TRUE(c.backward_update(b, grad).ok());
  }
  return losses;
}

// With bf16, int8 or int4 optimizer state (and with bf16 or q8 weights) Adagrad, Adam and PartialRowwiseAdam
// still converge: the loss falls below 2% of its start and ends near the fp32 run's loss.
TEST(LowPrecisionStateTest, Bf16AndInt8StateConvergeNearFp32Result) {
  constexpr int kSteps = 150;
  for (OptimizerKind k : {OptimizerKind::kAdagrad, OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam}) {
    const std::vector<double> ref = quadratic_losses(k, DType::kF32, DType::kF32, kSteps);
    ASSERT_LT(ref.back(), 0.02 * ref.front()) << optimizer_name(k) << " fp32 did not converge";
    const std::tuple<DType, DType> variants[] = {{DType::kF32, DType::kBF16},
                                                      {DType::kF32, DType::kInt8Blockwise},
                                                      {DType::kBF16, DType::kF32},
                                                      {DType::kBF16, DType::kInt8Blockwise},
                                                      {DType::kF32, DType::kInt4Blockwise},
                                                      {DType::kQ8, DType::kInt4Blockwise}};
    for (auto [d, s] : variants) {
      const std::vector<double> l = quadratic_losses(k, d, s, kSteps);
      SCOPED_TRACE(std::string(optimizer_name(k)) + " weights " + std::string(dtype_name(d)) + " state " +
                   std::string(dtype_name(s)));
      EXPECT_NEAR(l.front(), ref.front(), 1e-2 * ref.front());
      EXPECT_LT(l.back(), 0.02 * l.front());
      EXPECT_LT(l.back(), 1.5 * ref.back() + 1e-3 * ref.front()) << "fp32 final loss " << ref.back();
    }
  }
}

}  // namespace
}  // namespace leanemb
