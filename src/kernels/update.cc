// Fast fused optimizer updates: one unique row at a time, converted to fp32 scratch arrays,
// updated with vectorizable loops in the same arithmetic order as ref_update_row, and stored
// back (weights with stochastic rounding). Rows are split into parallel_for chunks that threads
// claim (core/parallel.h); rows are independent, so the result does not depend on the thread
// count.
//
// The fused backward (reduce_and_update) streams over a chunk's unique rows: for row u it
// reduces u's gradient contributions into an L1-resident scratch row and updates u at once,
// while the fat row kRowsAhead rows on and the gradient vectors kGradsAhead contributions on
// are prefetched. Each loop is built for every ISA of isa.h (the x86-64-v4 reduce keeps a
// 128-column block of the gradient in eight 16-lane registers); the per-element arithmetic is
// the reference's in every build.
//
// The loops are in update_loops.h; their builds, one per ISA, in update_base.cc, update_v3.cc
// and update_v4.cc (one translation unit each, so they compile in parallel); this file has the
// entry points and the dispatch.
#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "kernels/isa.h"
#include "kernels/isa_builds.h"
#include "kernels/kernels.h"
#include "kernels/update_builds.h"
#include "kernels/update_loops.h"

namespace leanemb::kernels {

namespace {

bool run_loop(Isa isa, Loop k, const RangeJob& j) {
  using namespace update_detail;
  LEANEMB_RETURN_ISA_CALL(isa, run, k, j);
}

constexpr int64_t kScratchRows = 6;  // w, g, m, v, the reduced gradient and SM3's column maxes

#define LEANEMB_STORE_F16_BODY(I) store_weights_sr<I, DType::kF16>(row, w, d, key, c0);
LEANEMB_ISA_BUILDS(void, store_f16, (uint8_t* row, const float* w, int64_t d, uint32_t key, uint32_t c0),
                   LEANEMB_STORE_F16_BODY)
#undef LEANEMB_STORE_F16_BODY

#define LEANEMB_STORE_Q8_BODY(I)                 \
  if (sr) q8_store_t<I, true>(row, w, d, key, c0); \
  else q8_store_t<I, false>(row, w, d, key, c0);
LEANEMB_ISA_BUILDS(void, store_q8, (uint8_t* row, const float* w, int64_t d, uint32_t key, uint32_t c0, bool sr),
                   LEANEMB_STORE_Q8_BODY)
#undef LEANEMB_STORE_Q8_BODY

#define LEANEMB_STORE_Q4_BODY(I) quant4_store_array_t<I>(x, d, is_signed, codes, scales, key, c0);
LEANEMB_ISA_BUILDS(void, store_q4,
                   (const float* x, int64_t d, bool is_signed, uint8_t* codes, uint8_t* scales, uint32_t key, uint32_t c0),
                   LEANEMB_STORE_Q4_BODY)
#undef LEANEMB_STORE_Q4_BODY

#define LEANEMB_LOAD_Q4_BODY(I) quant4_load_array_t<I>(codes, scales, d, is_signed, out);
LEANEMB_ISA_BUILDS(void, load_q4, (const uint8_t* codes, const uint8_t* scales, int64_t d, bool is_signed, float* out),
                   LEANEMB_LOAD_Q4_BODY)
#undef LEANEMB_LOAD_Q4_BODY

#define LEANEMB_LOAD_Q8_BODY(I) load_row_q8_t<I>(out, row, d);
LEANEMB_ISA_BUILDS(void, load_q8, (float* out, const uint8_t* row, int64_t d), LEANEMB_LOAD_Q8_BODY)
#undef LEANEMB_LOAD_Q8_BODY

}  // namespace

void store_row_sr_f16_fast(uint8_t* row, const float* w, int64_t d, uint32_t key, uint32_t column0) {
  const Isa isa = active_isa();
  LEANEMB_RETURN_ISA_CALL(isa, store_f16, row, w, d, key, column0);
}

void q8_store_fast(uint8_t* row, const float* w, int64_t d, uint32_t key, uint32_t column0, bool sr) {
  const Isa isa = active_isa();
  LEANEMB_RETURN_ISA_CALL(isa, store_q8, row, w, d, key, column0, sr);
}

void quant4_store_fast(const float* x, int64_t d, bool is_signed, uint8_t* codes, uint8_t* scales, uint32_t key,
                       uint32_t column0) {
  const Isa isa = active_isa();
  LEANEMB_RETURN_ISA_CALL(isa, store_q4, x, d, is_signed, codes, scales, key, column0);
}

void quant4_load_fast(const uint8_t* codes, const uint8_t* scales, int64_t d, bool is_signed, float* out) {
  const Isa isa = active_isa();
  LEANEMB_RETURN_ISA_CALL(isa, load_q4, codes, scales, d, is_signed, out);
}

void q8_load_fast(float* out, const uint8_t* row, int64_t d) {
  const Isa isa = active_isa();
  LEANEMB_RETURN_ISA_CALL(isa, load_q8, out, row, d);
}

bool reduce_segments(const SegmentSource& s, int64_t u0, int64_t u1, float* out) {
  RangeJob j{};
  j.s = &s;
  j.u0 = u0;
  j.u1 = u1;
  j.out = out;
  return run_loop(active_isa(), Loop::kReduce, j);
}

size_t reduce_and_update_scratch_floats(int64_t dim, int num_threads) {
  return static_cast<size_t>(num_threads) * static_cast<size_t>(kScratchRows) * static_cast<size_t>(dim);
}

namespace {
// SM3: zeroes the per-worker column maxes ([workers] rows of `dim` floats, `stride` apart) before
// a loop, and raises t.sm3_col_next to them after it. nu >= 0, so 0 is max's identity, and max
// is exact: the result does not depend on which worker updated which row.
bool is_sm3(const TableView& t) { return t.layout->optimizer.kind == OptimizerKind::kSm3; }
void sm3_clear(float* part, int workers, int64_t dim, size_t stride) {
  for (int w = 0; w < workers; ++w) std::fill(part + w * stride, part + w * stride + dim, 0.0f);
}
void sm3_combine(const TableView& t, const float* part, int workers, size_t stride) {
  const int64_t d = t.layout->dim;
  for (int w = 0; w < workers; ++w)
    for (int64_t j = 0; j < d; ++j) t.sm3_col_next[j] = std::max(t.sm3_col_next[j], part[w * stride + j]);
}

// Unique rows per parallel_for chunk: about kChunkWork element updates, in whole fused chunks.
int64_t update_grain(int64_t dim) {
  constexpr int64_t kRowsPerGrain = 16;  // whole groups of rows, so the prefetch has a run ahead
  return (grain_for(4 * dim) + kRowsPerGrain - 1) / kRowsPerGrain * kRowsPerGrain;
}
}  // namespace

void reduce_and_update(const TableView& t, const SegmentSource& s, const int64_t* rows, int64_t num_unique,
                       const UpdateStep& step, int num_threads, float* scratch) {
  const int64_t d = t.layout->dim;
  const Isa isa = active_isa();
  const bool sm3 = is_sm3(t);
  const size_t per_worker = static_cast<size_t>(kScratchRows) * static_cast<size_t>(d);
  const int workers = parallel_threads(num_threads);
  if (sm3) {
    LEANEMB_CHECK(t.sm3_col != nullptr && t.sm3_col_next != nullptr, "sm3 update without column state");
    sm3_clear(scratch + 5 * d, workers, d, per_worker);
  }
  parallel_for(num_unique, update_grain(d), [&](int64_t u0, int64_t u1, int worker) {
    float* mine = scratch + static_cast<size_t>(worker) * per_worker;
    RangeJob j{};
    j.t = &t;
    j.s = &s;
    j.rows = rows;
    j.step = &step;
    j.sc = Scratch{mine, mine + d, mine + 2 * d, mine + 3 * d, t.sm3_col, mine + 5 * d};
    j.out = mine + 4 * d;
    j.u0 = u0;
    j.u1 = u1;
    run_loop(isa, Loop::kFused, j);
  }, num_threads);
  if (sm3) sm3_combine(t, scratch + 5 * d, workers, per_worker);
}

void update_rows(const TableView& t, const int64_t* rows, const float* grads, int64_t num_unique,
                 const UpdateStep& s, int num_threads) {
  const int64_t d = t.layout->dim;
  const Isa isa = active_isa();
  const bool sm3 = is_sm3(t);
  const int workers = parallel_threads(num_threads);
  std::vector<float> part(sm3 ? static_cast<size_t>(workers * d) : 0);  // SM3's per-worker column maxes
  if (sm3) LEANEMB_CHECK(t.sm3_col != nullptr && t.sm3_col_next != nullptr, "sm3 update without column state");
  parallel_for(num_unique, update_grain(d), [&](int64_t u0, int64_t u1, int worker) {
    // fp32 scratch of 4 rows (16 * dim bytes), reused for every row of the chunk.
    std::vector<float> buf(static_cast<size_t>(4 * d));
    RangeJob j{};
    j.t = &t;
    j.rows = rows;
    j.grads = grads;
    j.step = &s;
    j.sc = Scratch{buf.data(), buf.data() + d, buf.data() + 2 * d, buf.data() + 3 * d, t.sm3_col,
                   sm3 ? part.data() + worker * d : nullptr};
    j.u0 = u0;
    j.u1 = u1;
    run_loop(isa, Loop::kUpdate, j);
  }, num_threads);
  if (sm3) sm3_combine(t, part.data(), workers, static_cast<size_t>(d));
}

}  // namespace leanemb::kernels
