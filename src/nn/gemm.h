// Deterministic fp32 GEMM on OpenBLAS: the only place in leanemb that calls BLAS.
//
// Why not a plain cblas_sgemm: OpenBLAS 0.3.21 (Debian 12, DYNAMIC_ARCH, Zen kernels) gives
// different bits with 1 and 2 threads for the same inputs (measured on the DLRM shapes: up to a
// few units in the last place in most outputs; see docs/nn.md). Its own threading splits the
// work in a way that depends on the thread count. gemm() instead splits C into panels of
// gemm_panel_rows(m) rows (and, for short C, gemm_panel_cols columns), a function of the shape
// only, and computes each panel with a single-threaded OpenBLAS call; the threads of
// parallel_for (core/parallel.h) take panels. Every element of C is then computed by the same
// kernel with the same blocking whatever the thread count, so results are bit-identical for any
// OMP_NUM_THREADS (tested in nn_test, NnGemmTest).
//
// gemm() forces OpenBLAS's own thread count to 1 (openblas_set_num_threads(1)) whenever it finds
// it different: OpenBLAS threads would otherwise nest inside the parallel panels.
//
// Thread safety: gemm() may be called from several threads on disjoint outputs; it runs its
// panels with parallel_for (serially when called from inside a parallel job).
#pragma once

#include <cstdint>

namespace leanemb::nn {

enum class Trans : uint8_t { kNo = 0, kYes = 1 };

// Rows of C per single-threaded OpenBLAS call for a C of m rows: about m / 8 rounded up to a
// multiple of 64, within [64, 512]. Every panel packs all of op(B) again, so panels should be
// tall; eight of them keep up to eight threads busy. Depends on m only, never on threads.
int64_t gemm_panel_rows(int64_t m);
// Columns of C per call: all n, except for a C of at most 64 rows (one row panel, as the weight
// gradients of narrow layers: out x in) and n >= 128, which is cut into column panels of about
// n / 8 columns rounded up to a multiple of 64, within [64, 512]. Depends on the shape only.
int64_t gemm_panel_cols(int64_t m, int64_t n);

// C [m, n] = alpha * op(A) [m, k] * op(B) [k, n] + beta * C, every matrix row-major fp32.
//   op(A) = A [m, k] (lda >= k) for Trans::kNo, A^T where A is [k, m] (lda >= m) for kYes;
//   op(B) = B [k, n] (ldb >= n) for kNo,        B^T where B is [n, k] (ldb >= k) for kYes;
//   ldc >= n. beta = 0: C is not read (may hold anything, even NaN).
// pseudocode: for each panel P of rows [r, r + gemm_panel_rows(m)) and columns
//             [c, c + gemm_panel_cols(m, n)) of C (parallel_for):
//               cblas_sgemm(row-major, op(A)[P rows, :], op(B)[:, P cols], C[P])
// REQUIRES: m, n, k >= 0 and below 2^31; pointers valid for the shapes (may be null when the
// matrix is empty).
void gemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace leanemb::nn
