// Internal kernel interface: pooled/sequence lookup and fused per-row optimizer updates over
// fat rows (see include/leanemb/optimizer.h for the layout), each in two implementations:
//   ref_*   scalar, element by element, written for clarity: the test oracle;
//   (plain) the fast kernels: vectorizable loops compiled for AVX-512, AVX2+FMA+F16C and the
//           baseline ISA, picked at run time (isa.h; LEANEMB_ISA caps the choice), parallel
//           over bags / rows.
// Both follow the same arithmetic order, so for identical inputs they agree bit for bit
// (the build uses -ffp-contract=off so no FMA contraction changes rounding).
//
// REQUIRES for every kernel: ids already validated (0 <= id < num_rows), offsets valid.
#pragma once

#include <cstddef>
#include <cstdint>

#include "leanemb/embedding.h"
#include "leanemb/memory.h"
#include "leanemb/optimizer.h"

namespace leanemb::kernels {

struct TableView {
  uint8_t* base = nullptr;        // row r starts at base + r * layout->stride_bytes
  const RowLayout* layout = nullptr;
  int64_t num_rows = 0;
  uint32_t table_index = 0;       // part of the stochastic-rounding key
  // Staged rows (a step's rows copied to a dense buffer, e.g. with their optimizer state fetched
  // from the host tier): the row numbers passed to the update kernels are slots in this buffer,
  // and key_rows[slot] is the table row whose stochastic-rounding key the update uses, so staged
  // and in-place updates give identical bits. Null: the row number is the table row.
  const int64_t* key_rows = nullptr;
  // The same as int32 (a row cache over a table of at most 2^31 rows keeps its slots' rows in 4
  // bytes, src/tiered/cache_index.h): read, and widened, instead of key_rows when set.
  const int32_t* key_rows32 = nullptr;
  // Then the row's global key (docs/embedding.md, "The table stack"): row_keys[row] when set
  // (a dynamic table: the raw id that holds the row), else row * key_stride + key_offset (a
  // shard's local row -> global row; 1 and 0 for a whole table).
  const int64_t* row_keys = nullptr;
  int64_t key_stride = 1;
  int64_t key_offset = 0;
  // The tier the rows at `base` live in. Kernels ignore it; a KernelBackend (backend.h) records
  // the bytes a lookup or update of rows off the device reads and writes over the host link.
  Tier tier = Tier::kDevice;
  // SM3 (OptimizerKind::kSm3) only: the table's column accumulators before this step [dim], read
  // by every row's update, and the step's new ones [dim], which the caller fills with sm3_col
  // first and the update kernels raise to each updated row's nu_j (an exact max, so the order of
  // rows and threads does not matter). Both null for the other optimizers.
  const float* sm3_col = nullptr;
  float* sm3_col_next = nullptr;
  uint64_t key_row(int64_t r) const {
    const int64_t row = key_rows32 ? int64_t{key_rows32[r]} : key_rows ? key_rows[r] : r;
    return static_cast<uint64_t>(row_keys ? row_keys[row] : row * key_stride + key_offset);
  }
};

struct PooledArgs {
  const int64_t* ids = nullptr;      // [nnz]
  const int64_t* offsets = nullptr;  // [B + 1]
  const float* weights = nullptr;    // [nnz] or null
  int64_t batch_size = 0;            // B
  PoolingMode pooling = PoolingMode::kSum;  // kSum or kMean
  float* out = nullptr;              // out[b * ldo + j], j < dim
  int64_t ldo = 0;                   // leading dimension of out (floats)
};

// For each bag b: out[b] = sum_i w_i * row(ids[i]) (kMean: divided by the bag length, an
// empty bag gives zeros).
void pooled_lookup(const TableView& t, const PooledArgs& a, int num_threads);
// Several features' pooled lookups in one parallel_for over all their bags (core/parallel.h), as
// one TBE call: no barrier between features.
struct PooledJob {
  TableView table;
  PooledArgs args;
};
void pooled_lookup_multi(const PooledJob* jobs, int num_jobs, int num_threads);
void ref_pooled_lookup(const TableView& t, const PooledArgs& a);

// out[i, :] = row(ids[i]) for i < nnz (fp32 [nnz, dim]).
void sequence_lookup(const TableView& t, const int64_t* ids, int64_t nnz, float* out, int num_threads);
void ref_sequence_lookup(const TableView& t, const int64_t* ids, int64_t nnz, float* out);

struct UpdateStep {
  uint64_t seed = 0;   // stochastic-rounding seed
  int64_t step = 1;    // 1-based count of this table's updates (Adam bias correction, SR key)
};

// Applies the table's optimizer to rows[u] with gradient grads[u * dim ...] for u < num_unique.
// REQUIRES: rows distinct; grads finite (the caller checks).
void update_rows(const TableView& t, const int64_t* rows, const float* grads, int64_t num_unique,
                 const UpdateStep& s, int num_threads);
void ref_update_row(const TableView& t, int64_t row, const float* grad, const UpdateStep& s);

// ---- segment reduce (the backward's per-row gradient sum) ------------------------------------
// Contributions of a table's ids, sorted by row (and by position within a row): contribution k
// adds scale[k] * ptr[k][0 .. dim) to its row's gradient; run u is k in [seg[u], seg[u + 1]).
struct SegmentSource {
  const int64_t* seg = nullptr;        // [U + 1] start of each unique row's run
  const float* const* ptr = nullptr;   // [n] gradient vector of contribution k ([dim] fp32)
  const float* scale = nullptr;        // [n] weight of contribution k
  int64_t dim = 0;
  float multiplier = 1.0f;             // applied after the sum
};

// out[(u - u0) * dim + j] = multiplier * sum_{k in run u, in order} scale[k] * ptr[k][j]
// for u in [u0, u1). Returns false if any output is Inf or NaN.
bool reduce_segments(const SegmentSource& s, int64_t u0, int64_t u1, float* out);
bool ref_reduce_segments(const SegmentSource& s, int64_t u0, int64_t u1, float* out);

// Fused backward for one table: for every unique row u (rows[u]), reduce its gradient (as
// reduce_segments) into a small per-thread buffer and apply the optimizer (as update_rows), so
// no [U, dim] gradient buffer exists. REQUIRES: the reduced gradients are known to be finite
// (the caller proves it or does not ask). scratch: reduce_and_update_scratch_floats() floats.
void reduce_and_update(const TableView& t, const SegmentSource& s, const int64_t* rows, int64_t num_unique,
                       const UpdateStep& step, int num_threads, float* scratch);
size_t reduce_and_update_scratch_floats(int64_t dim, int num_threads);

// ---- row element helpers (shared by reference code, tests and table I/O) ---------------------
// Dequantized weights of one row: out [dim].
void ref_load_weights(const RowLayout& l, const uint8_t* row, float* out);
// Stores weights rounded to nearest (int8: recomputes the row's scale and bias).
void ref_store_weights_rne(const RowLayout& l, uint8_t* row, const float* w);
// The same for fp32 / fp16 / bf16 rows, vectorized (int8 goes to the reference); bit-identical.
void store_weights_rne(const RowLayout& l, uint8_t* row, const float* w);
// The uniform initializer's draws for the row with RNG key `key` (core/rng.h row_key):
// out[j] = (2 u_j - 1) * bound, u_j = ((column_bits(key, j) >> 8) + 0.5) / 2^24, in (-bound, bound).
// uniform_fill is vectorized and bit-identical to ref_uniform_fill.
void uniform_fill(uint32_t key, int64_t d, float bound, float* out);
void ref_uniform_fill(uint32_t key, int64_t d, float bound, float* out);
// Per-element state k (0 = m/sum, 1 = v) of one row as fp32: out [dim].
void ref_load_elem_state(const RowLayout& l, const uint8_t* row, int k, float* out);
float ref_load_rowwise_state(const RowLayout& l, const uint8_t* row);

// Deterministic sum of squares: 8 lane partial sums (lane = j mod 8), combined pairwise
// ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)). Both kernel families use this exact order.
float sum_squares(const float* g, int64_t n);

// store_row_sr<DType::kF16> (row_access.h) as the fast update kernels run it for the active
// build (vectorized in x86-64-v3 and v4); bit-identical.
void store_row_sr_f16_fast(uint8_t* row, const float* w, int64_t d, uint32_t key, uint32_t column0);
// q8_store<sr> and load_row<DType::kQ8> (row_access.h) as the fast kernels run them for the
// active build (vectorized in x86-64-v3 and v4, q8_vec.h); bit-identical.
void q8_store_fast(uint8_t* row, const float* w, int64_t d, uint32_t key, uint32_t column0, bool sr);
void q8_load_fast(float* out, const uint8_t* row, int64_t d);
// quant4_store_array and quant4_load_array (quant4.h) as the fast kernels run them for the active build (vectorized in
// x86-64-v3 and v4, quant4_vec.h); bit-identical.
void quant4_store_fast(const float* x, int64_t d, bool is_signed, uint8_t* codes, uint8_t* scales, uint32_t key,
                       uint32_t column0);
void quant4_load_fast(const uint8_t* codes, const uint8_t* scales, int64_t d, bool is_signed, float* out);

// ---- 8-bit block-wise state ------------------------------------------------------------------
// Dynamic-exponent code books: signed (Adam m, 128 magnitudes x sign) and unsigned (Adam v,
// Adagrad sum, 256 magnitudes). Values are in [-1, 1] / [0, 1] and scaled by the block absmax.
const float* quant_codebook(bool is_signed);  // [256]
// Quantizes n (<= kQuantBlockSize) values: writes codes [n] and returns the block scale.
float quantize_block(const float* x, int64_t n, bool is_signed, uint8_t* codes);
void dequantize_block(const uint8_t* codes, int64_t n, bool is_signed, float scale, float* out);
// The same, vectorized for the active build (isa.h; quant8_vec.h), bit-identical to the above.
float quantize_block_fast(const float* x, int64_t n, bool is_signed, uint8_t* codes);
void dequantize_block_fast(const uint8_t* codes, int64_t n, bool is_signed, float scale, float* out);
// The reference's code for one element x of a block whose scale is 1 / inv.
uint8_t quant8_code(float x, float inv, bool is_signed);

// ---- dedup -----------------------------------------------------------------------------------
// Sorts `keys` ([n] values row << 32 | src) ascending by the row part, stably, using the row's
// low `row_bits` bits (LSD radix sort, radix_digit_bits(row_bits)-bit digits). scratch: [n].
// Large calls (>= 2^16 keys) split each pass over up to num_threads contiguous parts
// (histograms per part, then each part scatters its own keys): the same output as one thread.
void radix_sort_row_src(uint64_t* keys, uint64_t* scratch, int64_t n, int row_bits, int num_threads = 1);
// The radix sort's digit width for rows of `row_bits` bits: the fewest passes of at most 12
// bits, the bits spread evenly over them (24 -> 12, 21 -> 11, 32 -> 11).
int radix_digit_bits(int row_bits);
// The distinct values of rows[0..n) in the order of their first occurrence: writes them to
// uniq and returns their count U; inv[i] = the position of rows[i] in uniq. Rows lie in
// [0, 2^32) and n < 2^32 - 1. keys: [2n] scratch. One serial pass of a linear-probing hash set
// kept at most half full (row << 32 | index + 1 per entry), n / 2 entries first, rebuilt twice
// as large from uniq when half full. Measured against the radix-sort version it
// replaced (BM_UniqueFirstOccurrence, one thread, Intel Xeon with AMX): 1.21 ms against 2.28
// ms for 262,144 Zipf(1.15) ids over 1e7 rows, 0.56 against 0.68 ms for 81,920 Zipf(1.05) ids
// over 2e6 rows.
int64_t unique_first_occurrence(const int64_t* rows, int64_t n, int64_t* uniq, uint32_t* inv, uint64_t* keys);

// ---- scans (scan.cc) ---------------------------------------------------------------------------
// The largest bit pattern of |x[i]| (x's bits & 0x7fffffff), 0 for n = 0: read as a float it is
// max |x[i]| when below 0x7f800000, and it is >= 0x7f800000 exactly when some x[i] is +-Inf or NaN.
uint32_t max_abs_bits(const float* x, int64_t n);
// How many v[i] lie outside [0, bound) (bound >= 0).
int64_t count_outside(const int64_t* v, int64_t n, int64_t bound);

}  // namespace leanemb::kernels
