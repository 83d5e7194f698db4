// 8-bit block-wise dynamic-exponent quantization of optimizer state.
//
// Code books (values in [0, 1], sorted ascending, index = code):
//   unsigned: 0, then decades d = 10^-7 .. 10^0 holding 1, 2, 4, ..., 128 values
//             10^e * (0.1 + 0.9 * (k + 1) / n), k < n   -> 1 + 255 = 256 codes, top = 1.0
//   signed:   magnitudes 0, then decades 10^-6 .. 10^0 holding 1, 2, ..., 64 values -> 128;
//             code = sign << 7 | magnitude index
// Quantization is round-to-nearest (ties to the smaller magnitude), so it is deterministic.
// Nearest search: a look-up table indexed by the top 16 bits of the fp32 magnitude gives the
// largest code <= the bucket start; the answer is that code or the next one, because every
// code spacing is wider than a bucket (buckets are 2^-8 relative, spacings >= 0.7%).
//
// Inputs the rule above leaves open (they gave out-of-range look-ups before): a = |x| / absmax
// is computed as |x| * (1 / absmax), which is NaN for x = 0 when 1 / absmax overflows (absmax
// below 2^-128, a decayed state block), for x = +-Inf when absmax is Inf, and for x = NaN. Zero
// quantizes to code 0 always; every other NaN a is taken as 1 (the largest code).
//
// The vectorized quantizer (quant8_vec.h) uses the code books' structure: the codes are linear
// within each decade, so the region tables below give the nearest code as base + round(t) with
// t = (a - lo) * inv_step, and lanes whose t lies near a half-integer (where rounding of the
// code values or of the reference's comparison could decide) take the scalar rule.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/half.h"
#include "kernels/isa.h"
#include "kernels/isa_builds.h"
#include "kernels/kernels.h"
#include "kernels/quant8_vec.h"

namespace leanemb::kernels {

namespace {

struct Book {
  std::vector<float> mags;      // sorted magnitudes
  std::vector<uint8_t> lut;     // bucket (fp32 bits >> 15) -> floor index into mags
  std::array<float, 256> codebook{};
  Quant8Regions regions{};
};

Book make_book(bool is_signed) {
  Book b;
  b.mags.push_back(0.0f);
  const int first_exp = is_signed ? -6 : -7;
  int n = 1;
  for (int e = first_exp; e <= 0; ++e, n *= 2) {
    const double scale = std::pow(10.0, e);
    for (int k = 0; k < n; ++k) b.mags.push_back(static_cast<float>(scale * (0.1 + 0.9 * (k + 1) / n)));
  }
  std::sort(b.mags.begin(), b.mags.end());
  const uint32_t one_bucket = f32_bits(1.0f) >> 15;
  b.lut.resize(one_bucket + 1);
  for (uint32_t bucket = 0; bucket <= one_bucket; ++bucket) {
    const float start = bits_f32(bucket << 15);
    auto it = std::upper_bound(b.mags.begin(), b.mags.end(), start);
    b.lut[bucket] = static_cast<uint8_t>((it - b.mags.begin()) - 1);
  }
  if (is_signed) {
    for (int i = 0; i < 128; ++i) {
      b.codebook[i] = b.mags[i];
      b.codebook[128 + i] = -b.mags[i];
    }
  } else {
    for (int i = 0; i < 256; ++i) b.codebook[i] = b.mags[i];
  }
  // Region r holds codes 2^r - 1 .. 2^(r+1) - 1: code 0 and the first decade's one code (r = 0),
  // then each decade with the previous decade's top code as its start.
  Quant8Regions& q = b.regions;
  q.count = is_signed ? 7 : 8;
  for (int r = 0; r < 16; ++r) {
    if (r >= q.count) {
      q.bound[r] = 2.0f;  // never exceeded: a <= 1
      q.lo[r] = 0.0f;
      q.inv_step[r] = 0.0f;
      q.base[r] = 0;
      continue;
    }
    const int first = (1 << r) - 1, last = (1 << (r + 1)) - 1;
    q.bound[r] = r == 0 ? -1.0f : b.mags[first];
    q.lo[r] = b.mags[first];
    q.inv_step[r] = static_cast<float>((1 << r) / (static_cast<double>(b.mags[last]) - b.mags[first]));
    q.base[r] = first;
    q.off[r] = static_cast<float>(first - static_cast<double>(q.lo[r]) * q.inv_step[r]);
  }
  for (int i = 0; i < 32; ++i) {
    const double start = std::ldexp(1.0, i - 27), end = std::ldexp(1.0, i - 26);
    q.binade_region[i] = 0;
    q.binade_bound[i] = 2.0f;  // none in this binade: never exceeded
    for (int r = 1; r < q.count; ++r) {
      if (q.bound[r] < start) ++q.binade_region[i];
      else if (q.bound[r] < end) q.binade_bound[i] = q.bound[r];
    }
    if (i == 0) LEANEMB_CHECK(q.binade_region[0] == 0 && q.binade_bound[0] == 2.0f, "quant8: a bound below 2^-26");
  }
  return b;
}

// Namespace-scope constants (built before main), so the hot paths pay no static guard.
const Book kSignedBook = make_book(true);
const Book kUnsignedBook = make_book(false);

const Book& book(bool is_signed) { return is_signed ? kSignedBook : kUnsignedBook; }

inline uint8_t nearest_mag(const Book& b, float a) {
  // a in [0, 1] (quant_input)
  uint32_t idx = b.lut[f32_bits(a) >> 15];
  const size_t last = b.mags.size() - 1;
  if (idx < last && (a - b.mags[idx]) > (b.mags[idx + 1] - a)) ++idx;
  return static_cast<uint8_t>(idx);
}

// The code of x in a block with inv = 1 / absmax: the index of the nearest magnitude, and for
// the signed book bit 7 set when x is negative and that magnitude is not 0.
inline uint8_t code_of(const Book& b, float x, float inv, bool is_signed) {
  const uint8_t m = nearest_mag(b, quant_input(x, inv));
  return is_signed ? static_cast<uint8_t>(m | ((x < 0.0f && m != 0) ? 0x80u : 0u)) : m;
}

}  // namespace

const float* quant_codebook(bool is_signed) { return book(is_signed).codebook.data(); }
const Quant8Regions& quant8_regions(bool is_signed) { return book(is_signed).regions; }

uint8_t quant8_code(float x, float inv, bool is_signed) { return code_of(book(is_signed), x, inv, is_signed); }

float quantize_block(const float* x, int64_t n, bool is_signed, uint8_t* codes) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  if (absmax == 0.0f) {
    for (int64_t i = 0; i < n; ++i) codes[i] = 0;
    return 0.0f;
  }
  const Book& b = book(is_signed);
  const float inv = 1.0f / absmax;
  for (int64_t i = 0; i < n; ++i) codes[i] = code_of(b, x[i], inv, is_signed);
  return absmax;
}

void dequantize_block(const uint8_t* codes, int64_t n, bool is_signed, float scale, float* out) {
  const float* cb = quant_codebook(is_signed);
  for (int64_t i = 0; i < n; ++i) out[i] = cb[codes[i]] * scale;
}

namespace {
// One build per ISA of the block quantizer and dequantizer (isa_builds.h; quant8_vec.h).
#define LEANEMB_QUANTIZE_BODY(I) return quantize_block_t<I>(x, n, is_signed, codes);
#define LEANEMB_DEQUANTIZE_BODY(I) dequantize_block_t<I>(codes, n, is_signed, scale, out);
LEANEMB_ISA_BUILDS(float, quantize, (const float* x, int64_t n, bool is_signed, uint8_t* codes), LEANEMB_QUANTIZE_BODY)
LEANEMB_ISA_BUILDS(void, dequantize, (const uint8_t* codes, int64_t n, bool is_signed, float scale, float* out),
                   LEANEMB_DEQUANTIZE_BODY)
#undef LEANEMB_QUANTIZE_BODY
#undef LEANEMB_DEQUANTIZE_BODY
}  // namespace

float quantize_block_fast(const float* x, int64_t n, bool is_signed, uint8_t* codes) {
  const Isa isa = active_isa();
  LEANEMB_RETURN_ISA_CALL(isa, quantize, x, n, is_signed, codes);
}

void dequantize_block_fast(const uint8_t* codes, int64_t n, bool is_signed, float scale, float* out) {
  const Isa isa = active_isa();
  LEANEMB_RETURN_ISA_CALL(isa, dequantize, codes, n, is_signed, scale, out);
}

}  // namespace leanemb::kernels
