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
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/half.h"
#include "kernels/kernels.h"

namespace leanemb::kernels {

namespace {

struct Book {
  std::vector<float> mags;      // sorted magnitudes
  std::vector<uint8_t> lut;     // bucket (fp32 bits >> 15) -> floor index into mags
  std::array<float, 256> codebook{};
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
  return b;
}

const Book& book(bool is_signed) {
  static const Book kSigned = make_book(true);
  static const Book kUnsigned = make_book(false);
  return is_signed ? kSigned : kUnsigned;
}

inline uint8_t nearest_mag(const Book& b, float a) {
  // a in [0, 1]
  uint32_t idx = b.lut[f32_bits(a) >> 15];
  const size_t last = b.mags.size() - 1;
  if (idx < last && (a - b.mags[idx]) > (b.mags[idx + 1] - a)) ++idx;
  return static_cast<uint8_t>(idx);
}

}  // namespace

const float* quant_codebook(bool is_signed) { return book(is_signed).codebook.data(); }

float quantize_block(const float* x, int64_t n, bool is_signed, uint8_t* codes) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  if (absmax == 0.0f) {
    for (int64_t i = 0; i < n; ++i) codes[i] = 0;
    return 0.0f;
  }
  const Book& b = book(is_signed);
  const float inv = 1.0f / absmax;
  for (int64_t i = 0; i < n; ++i) {
    float a = std::min(std::fabs(x[i]) * inv, 1.0f);
    uint8_t m = nearest_mag(b, a);
    if (is_signed) codes[i] = static_cast<uint8_t>(m | ((x[i] < 0.0f && m != 0) ? 0x80u : 0u));
    else codes[i] = m;
  }
  return absmax;
}

void dequantize_block(const uint8_t* codes, int64_t n, bool is_signed, float scale, float* out) {
  const float* cb = quant_codebook(is_signed);
  for (int64_t i = 0; i < n; ++i) out[i] = cb[codes[i]] * scale;
}

}  // namespace leanemb::kernels
