// Tests of the kernels: every fast kernel against the scalar reference (bit for bit) over
// dtype x pooling x corner case (kEmptyBag, kDuplicateIds, kDimNotMultipleOf8, kOneRowTable,
// kSingleBag) and thread counts; fused updates over optimizer x weight dtype x state dtype x
// weight decay. The 8-bit block quantization and the fp16 stochastic-rounding store are
// quant_store_test.cc's; the dedup's sort and the scans dedup_scan_test.cc's.
//
// Out-of-range ids (FBGEMM's kOutOfRangeId) are not a kernel case here: kernels REQUIRE valid
// ids and the API rejects or drops bad ones before any kernel runs (see table_test's
// bad_ids_matrix and skip tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/isa.h"
#include "kernels/isa_testing.h"
#include "kernels/kernels.h"
#include "kernels/row_access.h"
#include "leanemb/optimizer.h"

namespace leanemb::kernels {
namespace {

// A table of fat rows in host memory, with its layout.
struct HostTable {
  RowLayout layout;
  int64_t num_rows = 0;
  std::vector<uint64_t> storage;  // uint64_t backing keeps rows 8-byte aligned

  uint8_t* base() { return reinterpret_cast<uint8_t*>(storage.data()); }
  size_t bytes() const { return static_cast<size_t>(num_rows) * layout.stride_bytes; }
  // SM3: the column accumulators and the step's new ones (empty for other optimizers).
  std::vector<float> col, col_next;
  TableView view(uint32_t table_index = 0) {
    TableView v{base(), &layout, num_rows, table_index};
    if (!col.empty()) {
      v.sm3_col = col.data();
      v.sm3_col_next = col_next.data();
    }
    return v;
  }
  // A step's update calls go between begin_step and end_step (as backward_update's do).
  void begin_step() { col_next = col; }
  void end_step() { col.swap(col_next); }
  std::vector<uint8_t> raw() { return std::vector<uint8_t>(base(), base() + bytes()); }
};

// A table whose weights are uniform in [-scale, scale] (stored rounded to nearest) and whose
// optimizer state is zero.
HostTable make_table(int64_t num_rows, int64_t dim, DType dtype, const OptimizerOptions& opt, uint64_t seed,
                     float scale = 1.0f) {
  HostTable t;
  auto l = make_row_layout(dim, dtype, opt);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  t.layout = l.value();
  t.num_rows = num_rows;
  t.storage.assign((t.bytes() + 7) / 8, 0);
  if (opt.kind == OptimizerKind::kSm3) t.col.assign(static_cast<size_t>(dim), 0.0f);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> w(static_cast<size_t>(dim));
  for (int64_t r = 0; r < num_rows; ++r) {
    for (auto& x : w) x = u(rng);
    ref_store_weights_rne(t.layout, t.base() + static_cast<size_t>(r) * t.layout.stride_bytes, w.data());
  }
  return t;
}

enum class CornerCase { kRandom, kEmptyBag, kDuplicateIds, kOneRowTable, kSingleBag };
const char* corner_name(CornerCase c) {
  switch (c) {
    case CornerCase::kRandom: return "random";
    case CornerCase::kEmptyBag: return "kEmptyBag";
    case CornerCase::kDuplicateIds: return "kDuplicateIds";
    case CornerCase::kOneRowTable: return "kOneRowTable";
    case CornerCase::kSingleBag: return "kSingleBag";
  }
  return "?";
}

struct Bags {
  int64_t num_rows = 0;
  std::vector<int64_t> ids, offsets{0};
  std::vector<float> weights;
  int64_t batch_size() const { return static_cast<int64_t>(offsets.size()) - 1; }
  void add_bag(std::initializer_list<int64_t> bag) {
    ids.insert(ids.end(), bag.begin(), bag.end());
    offsets.push_back(static_cast<int64_t>(ids.size()));
  }
};

// The bags of one corner case, with per-id weights in [-2, 2].
Bags make_bags(CornerCase c, std::mt19937_64& rng) {
  Bags b;
  b.num_rows = c == CornerCase::kOneRowTable ? 1 : 50;
  std::uniform_int_distribution<int64_t> id(0, b.num_rows - 1), len(0, 6);
  switch (c) {
    case CornerCase::kRandom:
    case CornerCase::kOneRowTable:
      for (int bag = 0; bag < 17; ++bag) {
        const int64_t n = len(rng);
        for (int64_t i = 0; i < n; ++i) b.ids.push_back(id(rng));
        b.offsets.push_back(static_cast<int64_t>(b.ids.size()));
      }
      break;
    case CornerCase::kEmptyBag:
      for (auto bag : {std::initializer_list<int64_t>{}, {3, 9, 41}, {}, {}, {0, 49}, {}}) b.add_bag(bag);
      break;
    case CornerCase::kDuplicateIds:
      for (auto bag : {std::initializer_list<int64_t>{7, 7, 7}, {1, 2, 1, 2}, {7}, {49, 0, 49, 49, 0}, {2}}) b.add_bag(bag);
      break;
    case CornerCase::kSingleBag:
      for (int64_t i = 0; i < 9; ++i) b.ids.push_back(id(rng));
      b.offsets.push_back(9);
      break;
  }
  std::uniform_real_distribution<float> w(-2.0f, 2.0f);
  for (size_t i = 0; i < b.ids.size(); ++i) b.weights.push_back(w(rng));
  return b;
}

std::string dtype_label(DType t) { return std::string(dtype_name(t)); }

// ---- pooled and sequence lookup ------------------------------------------------------------------

struct LookupParam {
  DType dtype;
  PoolingMode pooling;
  bool weighted;
};

class PooledLookupTest : public ::testing::TestWithParam<LookupParam> {};

// Runs the reference and the fast kernel (1, 2 and 3 threads) on one case; outputs must be
// bitwise equal, and the columns beyond dim (ldo > dim) must stay untouched.
void expect_fast_equals_reference(HostTable& t, const Bags& bags, const LookupParam& p) {
  const int64_t dim = t.layout.dim, ldo = dim + 3, B = bags.batch_size();
  PooledArgs a;
  a.ids = bags.ids.data();
  a.offsets = bags.offsets.data();
  a.weights = p.weighted ? bags.weights.data() : nullptr;
  a.batch_size = B;
  a.pooling = p.pooling;
  a.ldo = ldo;
  const float kSentinel = -12345.5f;
  std::vector<float> want(static_cast<size_t>(B * ldo), kSentinel);
  a.out = want.data();
  ref_pooled_lookup(t.view(), a);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = dim; j < ldo; ++j) ASSERT_EQ(want[b * ldo + j], kSentinel) << "reference wrote past dim";
  for_each_isa([&] {
    for (int threads : {1, 2, 3}) {
      std::vector<float> got(want.size(), kSentinel);
      a.out = got.data();
      pooled_lookup(t.view(), a, threads);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
          << "fast pooled lookup differs from the reference with " << threads << " threads";
    }
  });
}

// The fast pooled lookup (every build the CPU runs) equals the scalar reference bit for bit for
// every corner case and dims 1 .. 257 (not multiples of 8 or 16, one and several 128-column
// blocks).
TEST_P(PooledLookupTest, FastKernelMatchesReferenceBitwiseOnEveryCornerCase) {
  const LookupParam p = GetParam();
  std::mt19937_64 rng(1234);
  for (int64_t dim : {1, 3, 8, 13, 16, 17, 64, 127, 128, 130, 257}) {
    for (CornerCase c : {CornerCase::kRandom, CornerCase::kEmptyBag, CornerCase::kDuplicateIds,
                         CornerCase::kOneRowTable, CornerCase::kSingleBag}) {
      SCOPED_TRACE(std::string(corner_name(c)) + " dim " + std::to_string(dim));
      const Bags bags = make_bags(c, rng);
      HostTable t = make_table(bags.num_rows, dim, p.dtype, OptimizerOptions{}, rng());
      expect_fast_equals_reference(t, bags, p);
    }
  }
}

// The reference pooled lookup computes sum_i w_i * row(id_i) (divided by the bag length for
// mean, zeros for empty bags), checked against a double-precision sum on kEmptyBag and
// kDuplicateIds.
TEST_P(PooledLookupTest, ReferencePoolsWeightedRowsOfEachBag) {
  const LookupParam p = GetParam();
  std::mt19937_64 rng(99);
  for (CornerCase c : {CornerCase::kEmptyBag, CornerCase::kDuplicateIds}) {
    const Bags bags = make_bags(c, rng);
    HostTable t = make_table(bags.num_rows, 13, p.dtype, OptimizerOptions{}, 5);
    const int64_t B = bags.batch_size(), dim = 13;
    std::vector<float> out(static_cast<size_t>(B * dim));
    PooledArgs a{bags.ids.data(), bags.offsets.data(), p.weighted ? bags.weights.data() : nullptr, B, p.pooling,
                 out.data(), dim};
    ref_pooled_lookup(t.view(), a);
    std::vector<float> row(dim);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> want(dim, 0.0);
      const int64_t lo = bags.offsets[b], hi = bags.offsets[b + 1];
      for (int64_t i = lo; i < hi; ++i) {
        ref_load_weights(t.layout, t.base() + bags.ids[i] * t.layout.stride_bytes, row.data());
        for (int64_t j = 0; j < dim; ++j) want[j] += (p.weighted ? bags.weights[i] : 1.0) * row[j];
      }
      for (int64_t j = 0; j < dim; ++j) {
        if (p.pooling == PoolingMode::kMean && hi > lo) want[j] /= static_cast<double>(hi - lo);
        EXPECT_NEAR(out[b * dim + j], want[j], 1e-5 * (1 + std::fabs(want[j]))) << corner_name(c) << " bag " << b;
      }
    }
  }
}

std::vector<LookupParam> all_lookup_params() {
  std::vector<LookupParam> v;
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8, DType::kQ8, DType::kInt8Rowwise})
    for (PoolingMode p : {PoolingMode::kSum, PoolingMode::kMean})
      for (bool w : {false, true}) v.push_back({d, p, w});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, PooledLookupTest, ::testing::ValuesIn(all_lookup_params()),
                         [](const ::testing::TestParamInfo<LookupParam>& i) {
                           return dtype_label(i.param.dtype) + "_" + std::string(pooling_name(i.param.pooling)) +
                                  (i.param.weighted ? "_weighted" : "_unweighted");
                         });

// The fast sequence lookup copies each id's row exactly like the reference, in every build, for
// every dtype, dims 1..130, duplicate ids and 1-3 threads.
TEST(SequenceLookupTest, FastKernelMatchesReferenceBitwise) {
  for_each_isa([&] {
    std::mt19937_64 rng(7);
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8, DType::kQ8, DType::kInt8Rowwise}) {
      for (int64_t dim : {1, 3, 13, 130}) {
        SCOPED_TRACE(dtype_label(d) + " dim " + std::to_string(dim));
        HostTable t = make_table(20, dim, d, OptimizerOptions{}, rng());
        std::vector<int64_t> ids = {0, 19, 5, 5, 5, 7, 0, 12};
        std::vector<float> want(ids.size() * dim), got(want.size());
        ref_sequence_lookup(t.view(), ids.data(), static_cast<int64_t>(ids.size()), want.data());
        std::vector<float> row(dim);
        ref_load_weights(t.layout, t.base() + 19 * t.layout.stride_bytes, row.data());
        ASSERT_EQ(std::memcmp(want.data() + dim, row.data(), dim * 4), 0);
        for (int threads : {1, 2, 3}) {
          std::fill(got.begin(), got.end(), -1.0f);
          sequence_lookup(t.view(), ids.data(), static_cast<int64_t>(ids.size()), got.data(), threads);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << threads << " threads";
        }
      }
    }
  });
}

// Int8 rowwise rows store min as bias and (max - min) / 255 as scale, so every weight loads back
// within half a step; a constant row loads back exactly.
TEST(Int8RowwiseTest, StoreLoadsBackWithinHalfAQuantizationStep) {
  auto l = make_row_layout(37, DType::kInt8Rowwise, OptimizerOptions{});
  ASSERT_TRUE(l.ok());
  std::vector<uint8_t> row(l->stride_bytes);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-3.0f, 5.0f);
  std::vector<float> w(37), back(37);
  for (auto& x : w) x = u(rng);
  ref_store_weights_rne(*l, row.data(), w.data());
  ref_load_weights(*l, row.data(), back.data());
  const float lo = *std::min_element(w.begin(), w.end()), hi = *std::max_element(w.begin(), w.end());
  const float step = (hi - lo) / 255.0f;
  for (int j = 0; j < 37; ++j) EXPECT_LE(std::fabs(back[j] - w[j]), 0.5f * step * 1.0001f) << j;
  std::fill(w.begin(), w.end(), -0.75f);
  ref_store_weights_rne(*l, row.data(), w.data());
  ref_load_weights(*l, row.data(), back.data());
  EXPECT_EQ(back, w);
}

// ---- row initialization ------------------------------------------------------------------------

// The vectorized uniform draws give the reference's bits in every build, for every dim (vector
// body and tail), and stay inside (-bound, bound).
TEST(InitKernelsTest, UniformFillMatchesReferenceBitForBit) {
  for_each_isa([&] {
    std::mt19937 rng(11);
    for (int64_t d : {1, 7, 8, 13, 64, 128, 129}) {
      for (int k = 0; k < 50; ++k) {
        const uint32_t key = static_cast<uint32_t>(rng());
        const float bound = k % 2 ? 0.05f : 1.0f / std::sqrt(1e7f);
        std::vector<float> fast(static_cast<size_t>(d)), ref(static_cast<size_t>(d));
        uniform_fill(key, d, bound, fast.data());
        ref_uniform_fill(key, d, bound, ref.data());
        ASSERT_EQ(0, std::memcmp(fast.data(), ref.data(), fast.size() * 4)) << "d=" << d << " key=" << key;
        for (float x : fast) ASSERT_TRUE(x > -bound && x < bound) << x;
      }
    }
  });
}

// The vectorized round-to-nearest store writes the reference's bytes in every build for fp32,
// fp16 and bf16 rows, including ties, values that overflow fp16, subnormals, infinities and NaN.
TEST(InitKernelsTest, StoreWeightsRneMatchesReference) {
  for_each_isa([&] {
    std::mt19937_64 rng(5);
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8, DType::kQ8, DType::kInt8Rowwise}) {
      for (int64_t d : {1, 9, 16, 37, 128}) {
        auto l = make_row_layout(d, dt, OptimizerOptions{});
        ASSERT_TRUE(l.ok());
        std::vector<float> w(static_cast<size_t>(d));
        for (size_t j = 0; j < w.size(); ++j) {
          uint32_t bits = static_cast<uint32_t>(rng());
          if (j % 5 == 1) bits = (bits & 0xffff0000u) | 0x8000u;  // a bf16 tie
          if (j % 5 == 2) bits = (bits & 0x807fffffu) | (static_cast<uint32_t>(100 + rng() % 60) << 23);
          std::memcpy(&w[j], &bits, 4);
          if (dt == DType::kInt8Rowwise && !std::isfinite(w[j])) w[j] = 0.5f;
        }
        if (d >= 9 && dt != DType::kInt8Rowwise) {
          w[3] = 70000.0f;                                 // overflows fp16
          w[4] = std::numeric_limits<float>::infinity();
          w[5] = std::numeric_limits<float>::quiet_NaN();
          w[6] = 1e-40f;                                   // fp32 subnormal
          w[7] = 3e-6f;                                    // fp16 subnormal
        }
        std::vector<uint8_t> fast(l->stride_bytes, 0xab), ref(l->stride_bytes, 0xab);
        store_weights_rne(*l, fast.data(), w.data());
        ref_store_weights_rne(*l, ref.data(), w.data());
        EXPECT_EQ(fast, ref) << dtype_name(dt) << " d=" << d;
      }
    }
  });
}

// ---- fused optimizer updates ---------------------------------------------------------------------

struct UpdateParam {
  OptimizerKind kind;
  DType dtype;
};

class UpdateRowsTest : public ::testing::TestWithParam<UpdateParam> {};

OptimizerOptions make_optimizer(OptimizerKind kind, DType state, float weight_decay) {
  OptimizerOptions o;
  o.kind = kind;
  o.learning_rate = 0.05f;
  o.eps = default_eps(kind);
  o.weight_decay = weight_decay;
  o.state_dtype = state;
  return o;
}

// Runs `steps` updates of random distinct rows with random gradients through update_rows and
// ref_update_row on two copies of one table and compares the raw bytes after each step.
void expect_update_matches_reference(const OptimizerOptions& opt, DType dtype, int64_t dim, int steps) {
  constexpr int64_t kRows = 40;
  HostTable fast = make_table(kRows, dim, dtype, opt, 11), ref = make_table(kRows, dim, dtype, opt, 11);
  const std::vector<uint8_t> initial = ref.raw();
  std::mt19937_64 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (int s = 1; s <= steps; ++s) {
    std::vector<int64_t> rows(kRows);
    for (int64_t r = 0; r < kRows; ++r) rows[r] = r;
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(static_cast<size_t>(5 + s * 3));  // distinct rows, unsorted, a growing subset
    std::vector<float> grads(rows.size() * dim);
    for (auto& x : grads) x = g(rng);
    const UpdateStep us{2024, s};
    // Each step runs on another kernel build (isa.h) the CPU supports.
    set_isa_limit(static_cast<Isa>(std::min(s % 3, static_cast<int>(cpu_isa()))));
    fast.begin_step();
    ref.begin_step();
    update_rows(fast.view(3), rows.data(), grads.data(), static_cast<int64_t>(rows.size()), us, 1 + s % 3);
    set_isa_limit(Isa::kV4);
    for (size_t u = 0; u < rows.size(); ++u) ref_update_row(ref.view(3), rows[u], grads.data() + u * dim, us);
    fast.end_step();
    ref.end_step();
    const std::vector<uint8_t> got = fast.raw(), want = ref.raw();
    ASSERT_EQ(got, want) << "step " << s << ": fast update differs from the reference";
    ASSERT_EQ(fast.col, ref.col) << "step " << s << ": SM3 column state differs";
  }
  EXPECT_NE(ref.raw(), initial) << "the updates changed nothing";
}

// update_rows equals ref_update_row byte for byte (weights and state) over several steps, for
// every state dtype, with and without weight decay, for dims 1, 13 and 70.
TEST_P(UpdateRowsTest, FusedUpdateMatchesReferenceByteForByte) {
  const UpdateParam p = GetParam();
  for (DType st : {DType::kF32, DType::kBF16, DType::kInt8Blockwise, DType::kInt4Blockwise}) {
    for (float wd : {0.0f, 0.01f}) {
      for (int64_t dim : {1, 13, 70}) {
        SCOPED_TRACE(std::string("state ") + std::string(dtype_name(st)) + " wd " + std::to_string(wd) +
                     " dim " + std::to_string(dim));
        expect_update_matches_reference(make_optimizer(p.kind, st, wd), p.dtype, dim, 4);
      }
    }
  }
}

// fp16 rows holding every kind of half the fast update's load converts in hardware (VCVTPH2PS,
// which quiets signaling NaNs) and the reference converts in integers: signaling and quiet NaNs
// of both signs, infinities, subnormals, zeros, 65504. The updated rows are the reference's byte
// for byte for every optimizer, with and without weight decay, on every kernel build. One special
// value per row: with weight decay a NaN weight makes a NaN gradient, and the row-wise
// optimizers' sums of squares, vectorized in another order than the reference's, would carry
// another NaN's payload where a row holds two NaNs of different payloads.
TEST(UpdateRowsF16Test, SpecialHalvesMatchTheReference) {
  const uint16_t specials[] = {0x7c01, 0xfc01, 0x7d00, 0x7e00, 0xfe00, 0x7fff, 0x7c00, 0xfc00,
                               0x0001, 0x83ff, 0x0000, 0x8000, 0x7bff, 0xfbff, 0x3c00, 0x0400};
  constexpr int64_t kRows = 16, kDim = 37;
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                          OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam, OptimizerKind::kSm3})
    for (float wd : {0.0f, 0.01f}) {
      const OptimizerOptions opt = make_optimizer(k, DType::kF32, wd);
      for_each_isa([&] {
        SCOPED_TRACE(std::string(optimizer_name(k)) + " wd " + std::to_string(wd));
        HostTable fast = make_table(kRows, kDim, DType::kF16, opt, 5), ref = make_table(kRows, kDim, DType::kF16, opt, 5);
        for (HostTable* t : {&fast, &ref})
          for (int64_t r = 0; r < kRows; ++r)
            reinterpret_cast<uint16_t*>(t->base() + r * t->layout.stride_bytes)[(r * 5) % kDim] = specials[r];
        std::vector<int64_t> rows(kRows);
        for (int64_t r = 0; r < kRows; ++r) rows[static_cast<size_t>(r)] = kRows - 1 - r;
        std::vector<float> grads(static_cast<size_t>(kRows * kDim));
        for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.25f * static_cast<float>(static_cast<int>(i % 7) - 3);
        const UpdateStep us{7, 1};
        fast.begin_step();
        ref.begin_step();
        update_rows(fast.view(3), rows.data(), grads.data(), kRows, us, 1);
        for (int64_t u = 0; u < kRows; ++u) ref_update_row(ref.view(3), rows[static_cast<size_t>(u)], grads.data() + u * kDim, us);
        ASSERT_EQ(fast.raw(), ref.raw());
        ASSERT_EQ(fast.col_next.size(), ref.col_next.size());  // bytes, not ==: NaN payloads count
        if (!fast.col_next.empty()) {
          ASSERT_EQ(0, std::memcmp(fast.col_next.data(), ref.col_next.data(), fast.col_next.size() * 4));
        }
      });
    }
}

std::vector<UpdateParam> all_update_params() {
  std::vector<UpdateParam> v;
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                          OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam, OptimizerKind::kSm3})
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8, DType::kQ8}) v.push_back({k, d});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, UpdateRowsTest, ::testing::ValuesIn(all_update_params()),
                         [](const ::testing::TestParamInfo<UpdateParam>& i) {
                           return std::string(optimizer_name(i.param.kind)) + "_" + dtype_label(i.param.dtype);
                         });

// ---- segment reduce and the fused backward --------------------------------------------------------

// A backward's contributions: `runs` unique rows (distinct, unsorted) whose runs hold 1, 2, ...
// contributions (one long run of 40), each a [dim] vector of a [bags, dim] gradient buffer
// with a scale in [-2, 2].
struct Segments {
  int64_t dim = 0;
  std::vector<int64_t> rows, seg{0};
  std::vector<float> grad, scale;
  std::vector<const float*> ptr;
  SegmentSource source(float multiplier) const {
    return SegmentSource{seg.data(), ptr.data(), scale.data(), dim, multiplier};
  }
  int64_t num_unique() const { return static_cast<int64_t>(rows.size()); }
};

Segments make_segments(int64_t num_rows, int64_t runs, int64_t dim, std::mt19937_64& rng) {
  Segments sg;
  sg.dim = dim;
  const int64_t bags = 23;
  sg.grad.resize(static_cast<size_t>(bags * dim));
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& x : sg.grad) x = g(rng);
  std::vector<int64_t> all(num_rows);
  for (int64_t r = 0; r < num_rows; ++r) all[r] = r;
  std::shuffle(all.begin(), all.end(), rng);
  std::uniform_real_distribution<float> sc(-2.0f, 2.0f);
  for (int64_t u = 0; u < runs; ++u) {
    sg.rows.push_back(all[u]);
    const int64_t len = u == 2 ? 40 : 1 + u % 3;
    for (int64_t k = 0; k < len; ++k) {
      sg.ptr.push_back(sg.grad.data() + static_cast<int64_t>(rng() % bags) * dim);
      sg.scale.push_back(sc(rng));
    }
    sg.seg.push_back(static_cast<int64_t>(sg.ptr.size()));
  }
  return sg;
}

// reduce_segments (every build) equals ref_reduce_segments bit for bit on any row range, for
// dims that are and are not multiples of 8 and 16 and span several 128-column blocks.
TEST(ReduceSegmentsTest, FastReduceMatchesReferenceBitwise) {
  std::mt19937_64 rng(21);
  for (int64_t dim : {1, 7, 13, 16, 64, 70, 128, 130, 257}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const Segments sg = make_segments(100, 37, dim, rng);
    const SegmentSource src = sg.source(0.75f);
    for (const auto& range : {std::pair<int64_t, int64_t>{0, 37}, {3, 20}, {36, 37}, {5, 5}}) {
      const int64_t u0 = range.first, u1 = range.second;  // plain locals: C++20 lambdas cannot capture bindings in clang 14
      std::vector<float> want(static_cast<size_t>((u1 - u0) * dim) + 1, -1.0f);
      ASSERT_TRUE(ref_reduce_segments(src, u0, u1, want.data()));
      for_each_isa([&] {
        std::vector<float> got(want.size(), -1.0f);
        ASSERT_TRUE(reduce_segments(src, u0, u1, got.data()));
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "rows [" << u0 << ", " << u1 << ")";
      });
    }
  }
}

// reduce_segments reports a sum that overflows to Inf and a NaN contribution, like the reference.
TEST(ReduceSegmentsTest, ReportsNonFiniteSums) {
  std::mt19937_64 rng(4);
  for (int64_t dim : {5, 16, 130}) {
    Segments sg = make_segments(50, 6, dim, rng);
    std::vector<float> out(static_cast<size_t>(6 * dim));
    for (float bad : {3e38f, std::numeric_limits<float>::quiet_NaN()}) {
      Segments s2 = sg;
      s2.grad.assign(sg.grad.size(), 1.0f);
      s2.grad[static_cast<size_t>(dim - 1)] = bad;  // last column of bag 0
      for (size_t k = 0; k < s2.ptr.size(); ++k) s2.ptr[k] = s2.grad.data();
      for (auto& x : s2.scale) x = 2.0f;
      const SegmentSource src = s2.source(1.0f);
      EXPECT_FALSE(ref_reduce_segments(src, 0, 6, out.data()));
      for_each_isa([&] { EXPECT_FALSE(reduce_segments(src, 0, 6, out.data())) << "bad value " << bad << " dim " << dim; });
    }
  }
}

// reduce_and_update (every build, 1-3 threads) leaves the bytes ref_reduce_segments followed
// by ref_update_row leaves, for every optimizer, weight dtype and state dtype, over several
// steps and dims (vector tails, several 128-column blocks).
TEST(ReduceAndUpdateTest, FusedBackwardMatchesReferenceByteForByte) {
  std::mt19937_64 rng(77);
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kRowwiseAdagrad,
                             OptimizerKind::kAdam, OptimizerKind::kPartialRowwiseAdam, OptimizerKind::kSm3}) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8, DType::kQ8}) {
      for (DType st : {DType::kF32, DType::kBF16, DType::kInt8Blockwise, DType::kInt4Blockwise}) {
        for (int64_t dim : {13, 128, 130}) {
          SCOPED_TRACE(std::string(optimizer_name(kind)) + " " + dtype_label(dt) + " state " +
                       std::string(dtype_name(st)) + " dim " + std::to_string(dim));
          const OptimizerOptions opt = make_optimizer(kind, st, dim == 13 ? 0.01f : 0.0f);
          HostTable fast = make_table(60, dim, dt, opt, 5), ref = make_table(60, dim, dt, opt, 5);
          int step = 0;
          for_each_isa([&] {
            for (int threads : {1, 3}) {
              ++step;
              const Segments sg = make_segments(60, 29, dim, rng);
              const SegmentSource src = sg.source(0.5f);
              const UpdateStep us{99, step};
              std::vector<float> scratch(reduce_and_update_scratch_floats(dim, threads));
              fast.begin_step();
              ref.begin_step();
              reduce_and_update(fast.view(2), src, sg.rows.data(), sg.num_unique(), us, threads, scratch.data());
              std::vector<float> g(static_cast<size_t>(sg.num_unique() * dim));
              ASSERT_TRUE(ref_reduce_segments(src, 0, sg.num_unique(), g.data()));
              for (int64_t u = 0; u < sg.num_unique(); ++u) ref_update_row(ref.view(2), sg.rows[u], g.data() + u * dim, us);
              fast.end_step();
              ref.end_step();
              ASSERT_EQ(fast.raw(), ref.raw()) << "step " << step << ", " << threads << " threads";
              ASSERT_EQ(fast.col, ref.col) << "step " << step << ", " << threads << " threads";
            }
          });
        }
      }
    }
  }
}

// SM3: every row of a step reads the column accumulators of before the step, so updating the
// step's rows in reverse order leaves the same bytes and column state; and the state is the
// rule's: row_acc = max_j nu_j, col_acc_j = max over the step's rows of nu_j, checked on the
// first step, where nu = g^2.
TEST(Sm3UpdateTest, RowOrderDoesNotMatterAndAccumulatorsFollowTheRule) {
  constexpr int64_t kRows = 9, kDim = 21;
  const OptimizerOptions opt = make_optimizer(OptimizerKind::kSm3, DType::kF32, 0.0f);
  HostTable a = make_table(kRows, kDim, DType::kBF16, opt, 3), b = make_table(kRows, kDim, DType::kBF16, opt, 3);
  std::mt19937_64 rng(8);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int step = 1; step <= 3; ++step) {
    std::vector<int64_t> rows = {7, 2, 5, 0, 8};
    std::vector<float> g(rows.size() * kDim);
    for (auto& x : g) x = nd(rng);
    a.begin_step();
    b.begin_step();
    for (size_t u = 0; u < rows.size(); ++u) ref_update_row(a.view(), rows[u], g.data() + u * kDim, {1, step});
    for (size_t u = rows.size(); u-- > 0;) ref_update_row(b.view(), rows[u], g.data() + u * kDim, {1, step});
    a.end_step();
    b.end_step();
    ASSERT_EQ(a.raw(), b.raw()) << "step " << step;
    ASSERT_EQ(a.col, b.col) << "step " << step;
    if (step > 1) continue;
    for (int64_t j = 0; j < kDim; ++j) {
      float want = 0.0f;
      for (size_t u = 0; u < rows.size(); ++u) want = std::max(want, g[u * kDim + j] * g[u * kDim + j]);
      EXPECT_EQ(a.col[j], want) << "column " << j;
    }
    for (size_t u = 0; u < rows.size(); ++u) {
      float want = 0.0f;
      for (int64_t j = 0; j < kDim; ++j) want = std::max(want, g[u * kDim + j] * g[u * kDim + j]);
      EXPECT_EQ(ref_load_rowwise_state(a.layout, a.base() + rows[u] * a.layout.stride_bytes), want) << "row " << rows[u];
    }
  }
}

// Rows not passed to update_rows keep their bytes exactly (lazy, sparse semantics).
TEST(UpdateRowsSparsityTest, UntouchedRowsKeepTheirBytes) {
  const OptimizerOptions opt = make_optimizer(OptimizerKind::kAdam, DType::kF32, 0.01f);
  HostTable t = make_table(10, 16, DType::kBF16, opt, 1);
  const std::vector<uint8_t> before = t.raw();
  const int64_t rows[] = {7, 2};
  std::vector<float> grads(32, 0.5f);
  update_rows(t.view(), rows, grads.data(), 2, UpdateStep{1, 1}, 2);
  const size_t stride = t.layout.stride_bytes;
  const std::vector<uint8_t> after = t.raw();
  for (int64_t r = 0; r < 10; ++r) {
    const bool same = std::equal(before.begin() + r * stride, before.begin() + (r + 1) * stride, after.begin() + r * stride);
    EXPECT_EQ(same, r != 7 && r != 2) << "row " << r;
  }
}

// sum_squares combines 8 lane sums in the documented order and agrees with a double sum.
TEST(SumSquaresTest, UsesEightLanesInDocumentedOrder) {
  std::vector<float> g(29);
  for (int j = 0; j < 29; ++j) g[j] = 0.37f * static_cast<float>(j) - 3.1f;
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  double d = 0;
  for (int j = 0; j < 29; ++j) {
    s[j % 8] += g[j] * g[j];
    d += static_cast<double>(g[j]) * g[j];
  }
  const float want = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  EXPECT_EQ(f32_bits(sum_squares(g.data(), 29)), f32_bits(want));
  EXPECT_NEAR(sum_squares(g.data(), 29), d, 1e-5 * d);
  EXPECT_EQ(sum_squares(g.data(), 0), 0.0f);
}


// A row cache's slot rows as int32 (key_rows32) give the update kernels the same stochastic-
// rounding keys as the same rows as int64 (key_rows), through a shard's stride and offset.
TEST(TableViewTest, Int32KeyRowsGiveTheKeysOfInt64KeyRows) {
  const int64_t r64[] = {5, 0, 2147483647, 9};
  const int32_t r32[] = {5, 0, 2147483647, 9};
  TableView a, b;
  a.key_stride = b.key_stride = 3;
  a.key_offset = b.key_offset = 1;
  a.key_rows = r64;
  b.key_rows32 = r32;
  for (int64_t s = 0; s < 4; ++s) EXPECT_EQ(a.key_row(s), b.key_row(s)) << "slot " << s;
  EXPECT_EQ(b.key_row(2), uint64_t{2147483647} * 3 + 1);
}

}  // namespace
}  // namespace leanemb::kernels
