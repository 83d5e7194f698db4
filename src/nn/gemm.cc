// Panel-parallel GEMM over single-threaded OpenBLAS calls (see gemm.h for why).
#include "nn/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>

#include "core/parallel.h"
#include "leanemb/status.h"

// Declared here as well as in OpenBLAS's cblas.h, so that the build does not depend on which
// cblas.h the Debian alternatives system selected (netlib's lacks these).
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace leanemb::nn {

int64_t gemm_panel_rows(int64_t m) {
  const int64_t eighth = (m + 7) / 8;
  return std::clamp<int64_t>((eighth + 63) / 64 * 64, 64, 512);
}

int64_t gemm_panel_cols(int64_t m, int64_t n) {
  if (m > 64 || n < 128) return std::max<int64_t>(n, 1);  // row panels carry the work
  const int64_t eighth = (n + 7) / 8;
  return std::clamp<int64_t>((eighth + 63) / 64 * 64, 64, 512);
}

void gemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  LEANEMB_CHECK(m >= 0 && n >= 0 && k >= 0 && m < INT_MAX && n < INT_MAX && k < INT_MAX,
                "gemm shape out of range: " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
  if (m == 0 || n == 0) return;
  if (k == 0) {  // C = beta * C; no BLAS call with a possibly null A or B
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  const CBLAS_TRANSPOSE ta = trans_a == Trans::kYes ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b == Trans::kYes ? CblasTrans : CblasNoTrans;
  // Row r of op(A) starts at a + r * lda (kNo) or at column r of A, a + r (kYes).
  const int64_t a_row_step = trans_a == Trans::kYes ? 1 : lda;
  // Column j of op(B) starts at b + j (kNo) or at row j of B, b + j * ldb (kYes).
  const int64_t b_col_step = trans_b == Trans::kYes ? ldb : 1;
  const int64_t panel_rows = gemm_panel_rows(m), panel_cols = gemm_panel_cols(m, n);
  const int64_t row_panels = (m + panel_rows - 1) / panel_rows, col_panels = (n + panel_cols - 1) / panel_cols;
  parallel_for(row_panels * col_panels, 1, [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r0 = p / col_panels * panel_rows, c0 = p % col_panels * panel_cols;
      const int64_t rows = std::min(panel_rows, m - r0), cols = std::min(panel_cols, n - c0);
      cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(k), alpha,
                  a + r0 * a_row_step, static_cast<int>(std::max<int64_t>(lda, 1)), b + c0 * b_col_step,
                  static_cast<int>(std::max<int64_t>(ldb, 1)), beta, c + r0 * ldc + c0, static_cast<int>(ldc));
    }
  });
}

}  // namespace leanemb::nn
