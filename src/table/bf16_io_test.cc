// bf16 outputs and output gradients (EmbeddingTables::forward_bf16, accumulate_bf16,
// backward_update_bf16): outputs equal forward's fp32 outputs rounded to nearest even; the rows
// after an update equal backward_update's fed the same bf16 gradients as fp32, bit for bit, on
// every residency and at every scratch size (chunks of bags), micro-batched or not.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <tuple>

#include "core/half.h"
#include "leanemb/memory_system.h"
#include "leanemb/tables.h"
#include "table/owned_batch_testing.h"
#include "table/two_tables_testing.h"

namespace leanemb {
namespace {

using testing_util::OwnedBatch;

using Kind = testing_util::StackKind;
constexpr const auto& kRows = testing_util::kTwoTableRows;
constexpr const auto& kDims = testing_util::kTwoTableDims;
const char* kind_name(Kind k) { return testing_util::stack_kind_name(k); }

constexpr int64_t kBags = 10;

// Two features over their own tables: a pooled one (weighted) and one of `second`'s pooling; a
// row cache of half the rows (chunks evict rows that the update maps again).
std::unique_ptr<EmbeddingTables> make(Kind kind, OptimizerKind opt, PoolingMode second, std::unique_ptr<MemorySystem>* mem) {
  return testing_util::make_two_tables({kind, opt, PoolingMode::kSum, second, false, 0.5, 5}, mem);
}

// Bags of 0-6 ids (repeats within and across bags); weights on feature 0.
OwnedBatch batch_for(int step) {
  return testing_util::two_tables_batch({}, 300 + static_cast<uint64_t>(step), kBags, 7);
}

// Outputs or gradients of a batch in both forms: fp32 [pooled] + [seq...], and bf16 alike.
struct Buffers {
  std::vector<float> pooled;
  std::vector<std::vector<float>> seq;
  std::vector<uint16_t> pooled16;
  std::vector<std::vector<uint16_t>> seq16;
  std::vector<std::span<float>> seq_out() { return {seq.begin(), seq.end()}; }
  std::vector<std::span<const float>> seq_in() const { return {seq.begin(), seq.end()}; }
  std::vector<std::span<uint16_t>> seq16_out() { return {seq16.begin(), seq16.end()}; }
  std::vector<std::span<const uint16_t>> seq16_in() const { return {seq16.begin(), seq16.end()}; }
};
Buffers buffers_for(const EmbeddingTables& t, const OwnedBatch& b) {
  Buffers x;
  x.pooled.resize(static_cast<size_t>(b.B * t.pooled_dim()));
  x.pooled16.resize(x.pooled.size());
  for (int f = 0; f < 2; ++f) {
    if (t.options().features[static_cast<size_t>(f)].pooling != PoolingMode::kNone) continue;
    x.seq.emplace_back(b.ids[static_cast<size_t>(f)].size() * static_cast<size_t>(kDims[f]));
    x.seq16.emplace_back(x.seq.back().size());
  }
  return x;
}

// Gradients drawn in bf16 (the AMP gradient), and their fp32 values (exact).
Buffers grads_for(const EmbeddingTables& t, const OwnedBatch& b, int step) {
  Buffers g = buffers_for(t, b);
  std::mt19937_64 rng(900 + static_cast<uint64_t>(step));
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, std::vector<uint16_t>& h) {
    for (size_t i = 0; i < v.size(); ++i) {
      h[i] = f32_to_bf16_rne(n(rng));
      v[i] = bf16_to_f32(h[i]);
    }
  };
  fill(g.pooled, g.pooled16);
  for (size_t s = 0; s < g.seq.size(); ++s) fill(g.seq[s], g.seq16[s]);
  return g;
}

// Fat rows of every id the batches use, by id.
std::vector<uint8_t> rows_by_id(EmbeddingTables& t, Kind kind) {
  std::vector<uint8_t> out;
  for (int tb = 0; tb < 2; ++tb) {
    const size_t stride = t.layout(tb).stride_bytes;
    for (int64_t id = 0; id < kRows[tb] / 2; ++id) {
      const int64_t row = kind == Kind::kDynamic ? t.dynamic_row(tb, id).value() : id;
      const size_t at = out.size();
      out.resize(at + stride, 0xEE);
      if (row >= 0) {
        EXPECT_TRUE(t.read_raw_rows(tb, row, 1, std::span<uint8_t>(out).subspan(at, stride)).ok());
      }
    }
  }
  return out;
}

bool same_bits(const std::vector<uint16_t>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != f32_to_bf16_rne(b[i])) return false;
  return a.size() == b.size();
}

// kind, optimizer, second feature's pooling, scratch floats (0: the batch's largest bag only).
using Param = std::tuple<Kind, OptimizerKind, PoolingMode, int64_t>;
class Bf16IoTest : public ::testing::TestWithParam<Param> {};

// Four steps: forward_bf16 gives the fp32 outputs rounded; backward_update_bf16 (or micro-batches
// of accumulate_bf16 on odd steps) gives backward_update's rows fed the same bf16 gradients.
TEST_P(Bf16IoTest, MatchesTheFp32PathFedTheSameBf16Values) {
  const auto [kind, opt, second, scratch_floats] = GetParam();
  std::unique_ptr<MemorySystem> m1, m2;
  auto ref = make(kind, opt, second, &m1), got = make(kind, opt, second, &m2);
  ASSERT_TRUE(ref && got);
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const OwnedBatch b = batch_for(step);
    std::vector<float> scratch(static_cast<size_t>(scratch_floats > 0 ? scratch_floats : got->bf16_min_scratch_floats(b.view())));
    Buffers out_ref = buffers_for(*ref, b), out_got = buffers_for(*got, b);
    ASSERT_TRUE(ref->forward(b.view(), out_ref.pooled, out_ref.seq_out()).ok());
    const Status fs = got->forward_bf16(b.view(), out_got.pooled16, out_got.seq16_out(), scratch);
    ASSERT_TRUE(fs.ok()) << fs.to_string();
    EXPECT_TRUE(same_bits(out_got.pooled16, out_ref.pooled)) << "pooled outputs are not the fp32 ones rounded";
    for (size_t s = 0; s < out_ref.seq.size(); ++s) {
      EXPECT_TRUE(same_bits(out_got.seq16[s], out_ref.seq[s])) << "sequence outputs are not the fp32 ones rounded";
    }
    const Buffers g = grads_for(*ref, b, step);
    auto r1 = ref->backward_update(b.view(), g.pooled, g.seq_in());
    ASSERT_TRUE(r1.ok()) << r1.status().to_string();
    Result<UpdateReport> r2 = UpdateReport{};
    if (step % 2 == 0) {
      r2 = got->backward_update_bf16(b.view(), g.pooled16, g.seq16_in(), scratch);
    } else {  // two micro-batches: bags [0, 4) and [4, 10)
      ASSERT_TRUE(got->begin_accumulation(b.view()).ok());
      for (const auto& [b0, b1] : {std::pair<int64_t, int64_t>{0, 4}, {4, kBags}}) {
        const auto pd = static_cast<size_t>(got->pooled_dim());
        std::vector<std::span<const uint16_t>> seq;
        for (size_t s = 0; s < g.seq16.size(); ++s) {
          const auto& off = b.offsets[1];
          seq.push_back(std::span<const uint16_t>(g.seq16[s]).subspan(static_cast<size_t>(off[static_cast<size_t>(b0)] * kDims[1]),
                                                                     static_cast<size_t>((off[static_cast<size_t>(b1)] - off[static_cast<size_t>(b0)]) * kDims[1])));
        }
        const auto pooled = std::span<const uint16_t>(g.pooled16).subspan(static_cast<size_t>(b0) * pd, static_cast<size_t>(b1 - b0) * pd);
        const Status as = got->accumulate_bf16(b.view(), b0, b1, pooled, seq, scratch);
        ASSERT_TRUE(as.ok()) << as.to_string();
      }
      r2 = got->apply_accumulated();
    }
    ASSERT_TRUE(r2.ok()) << r2.status().to_string();
    EXPECT_EQ(r1.value().unique_rows, r2.value().unique_rows);
    EXPECT_EQ(rows_by_id(*ref, kind), rows_by_id(*got, kind)) << "rows or optimizer state differ";
  }
  EXPECT_EQ(ref->step(), got->step());
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [kind, opt, pooling, scratch] = info.param;
  return std::string(kind_name(kind)) + "_" + std::string(optimizer_name(opt)) + "_" + std::string(pooling_name(pooling)) + "_" +
         (scratch > 0 ? std::to_string(scratch) : std::string("onebag")) + "_floats";
}

// Scratch sizes: one bag (a chunk per bag, or fewer where bags are short), ~3 bags, the whole batch.
INSTANTIATE_TEST_SUITE_P(ChunkSizes, Bf16IoTest,
                         ::testing::Combine(::testing::Values(Kind::kResident, Kind::kCached),
                                            ::testing::Values(OptimizerKind::kSgd, OptimizerKind::kAdam),
                                            ::testing::Values(PoolingMode::kMean, PoolingMode::kNone),
                                            ::testing::Values(int64_t{0}, int64_t{200}, int64_t{4096})),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Residencies, Bf16IoTest,
                         ::testing::Combine(::testing::Values(Kind::kStateOnHost, Kind::kDynamic),
                                            ::testing::Values(OptimizerKind::kAdam), ::testing::Values(PoolingMode::kNone),
                                            ::testing::Values(int64_t{0}, int64_t{200})),
                         param_name);

// Rows after a step do not depend on the scratch size (chunks of 1 bag up to the whole batch).
TEST(Bf16IoScratchTest, RowsAreIdenticalAcrossChunkSizes) {
  std::vector<std::vector<uint8_t>> rows;
  for (const int64_t scratch_floats : {int64_t{0}, int64_t{150}, int64_t{600}, int64_t{1} << 16}) {
    std::unique_ptr<MemorySystem> m;
    auto t = make(Kind::kResident, OptimizerKind::kAdam, PoolingMode::kNone, &m);
    ASSERT_TRUE(t);
    for (int step = 0; step < 3; ++step) {
      const OwnedBatch b = batch_for(step);
      std::vector<float> scratch(static_cast<size_t>(scratch_floats > 0 ? scratch_floats : t->bf16_min_scratch_floats(b.view())));
      Buffers out = buffers_for(*t, b);
      ASSERT_TRUE(t->forward_bf16(b.view(), out.pooled16, out.seq16_out(), scratch).ok());
      const Buffers g = grads_for(*t, b, step);
      ASSERT_TRUE(t->backward_update_bf16(b.view(), g.pooled16, g.seq16_in(), scratch).ok());
    }
    rows.push_back(rows_by_id(*t, Kind::kResident));
  }
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_EQ(rows[0], rows[i]) << "scratch size " << i;
}

// A scratch smaller than one bag's outputs fails before any call, and nothing changes.
TEST(Bf16IoScratchTest, AScratchSmallerThanABagFailsAndChangesNothing) {
  std::unique_ptr<MemorySystem> m;
  auto t = make(Kind::kResident, OptimizerKind::kAdam, PoolingMode::kNone, &m);
  ASSERT_TRUE(t);
  const OwnedBatch b = batch_for(0);
  const int64_t need = t->bf16_min_scratch_floats(b.view());
  ASSERT_GT(need, t->pooled_dim());
  std::vector<float> scratch(static_cast<size_t>(need - 1));
  Buffers out = buffers_for(*t, b);
  EXPECT_EQ(t->forward_bf16(b.view(), out.pooled16, out.seq16_out(), scratch).code(), StatusCode::kInvalidArgument);
  const std::vector<uint8_t> before = rows_by_id(*t, Kind::kResident);
  const Buffers g = grads_for(*t, b, 0);
  auto r = t->backward_update_bf16(b.view(), g.pooled16, g.seq16_in(), scratch);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(before, rows_by_id(*t, Kind::kResident));
  EXPECT_EQ(t->step(), 0);
  // The accumulation was discarded: a new step can begin.
  scratch.resize(static_cast<size_t>(need));
  EXPECT_TRUE(t->backward_update_bf16(b.view(), g.pooled16, g.seq16_in(), scratch).ok());
  EXPECT_EQ(t->step(), 1);
}

}  // namespace
}  // namespace leanemb
