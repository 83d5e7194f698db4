// The vectorized q8 store and load (q8_vec.h) against the scalar q8_store<kSr> / load_row<kQ8>
// (row_access.h), byte for byte, in every kernel build the CPU runs (and an opt-in exhaustive
// check of the store over every float).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/isa_testing.h"
#include "kernels/kernels.h"
#include "kernels/row_access.h"

namespace leanemb::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One row of kind `kind` (0-9), d values.
std::vector<float> make_row(int kind, int64_t d, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), e(-150.0f, 128.0f);
  std::vector<float> w(static_cast<size_t>(d));
  const float absmax = std::exp2(std::uniform_real_distribution<float>(-40.0f, 40.0f)(rng));
  for (int64_t j = 0; j < d; ++j) {
    float v = 0.0f;
    switch (kind) {
      case 0: v = u(rng) * 0.3f; break;  // ordinary weights
      case 1: v = 0.0f; break;           // all zero (+-0 below)
      case 2: v = std::copysign(std::exp2(e(rng)), u(rng)); break;  // every magnitude, incl. subnormals
      case 3: v = bits_f32(static_cast<uint32_t>(rng()) & 0x807fffffu); break;  // fp32 subnormals only
      case 4: {  // exact multiples of the scale: t lands on integers and half-integers
        const float scale = absmax / 127.0f;
        v = static_cast<float>(static_cast<int>(rng() % 509) - 254) * 0.5f * scale;
        break;
      }
      case 5: v = j % 7 == 0 ? u(rng) * 1e30f : u(rng) * 1e-30f; break;  // tiny t next to a huge absmax
      default: {  // ordinary values sprinkled with specials
        const float specials[] = {0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN, 3.4028235e38f, -1e-45f, 1.0f, -127.0f};
        v = rng() % 4 == 0 ? specials[rng() % 10] : u(rng) * absmax;
        break;
      }
    }
    w[static_cast<size_t>(j)] = v;
  }
  if (kind == 1) {
    for (int64_t j = 0; j < d; j += 3) w[static_cast<size_t>(j)] = -0.0f;
  }
  if (kind == 4 && d > 0) w[static_cast<size_t>(rng() % static_cast<uint64_t>(d))] = rng() % 2 ? absmax : -absmax;
  if (kind == 7) {  // NaNs only, or NaNs with one value
    for (auto& x : w) x = kNaN;
    if (d > 1) w[1] = u(rng);
  }
  return w;
}

// Both stores (stochastic and round-to-nearest) for dims 1..80 and a few wide ones (vector
// bodies and every tail length), rows of every kind, random keys and first columns; the guard
// bytes after the scale must stay untouched.
TEST(Q8VecTest, FastStoreMatchesScalarByteForByte) {
  std::mt19937_64 rng(39);
  std::vector<int64_t> dims;
  for (int64_t d = 1; d <= 80; ++d) dims.push_back(d);
  for (int64_t d : {127, 128, 129, 255, 256, 1000}) dims.push_back(d);
  for_each_isa([&] {
    int64_t rows = 0;
    for (int64_t d : dims) {
      for (int trial = 0; trial < 40; ++trial) {
        const std::vector<float> w = make_row(trial % 10, d, rng);
        const uint32_t key = static_cast<uint32_t>(rng()), column0 = static_cast<uint32_t>(rng() % 5000);
        for (bool sr : {true, false}) {
          std::vector<uint8_t> want(static_cast<size_t>(d) + 8, 0xab), got(static_cast<size_t>(d) + 8, 0xab);
          if (sr) q8_store<true>(want.data(), w.data(), d, key, column0);
          else q8_store<false>(want.data(), w.data(), d, key, column0);
          q8_store_fast(got.data(), w.data(), d, key, column0, sr);
          ASSERT_EQ(got, want) << "d " << d << " trial " << trial << " sr " << sr;
          ++rows;
        }
      }
    }
    EXPECT_EQ(rows, static_cast<int64_t>(dims.size()) * 80);
  });
}

// Many keys over one row whose t values sit just below and above integers, so that t + u lands
// on both sides of the floor's steps.
TEST(Q8VecTest, FastStochasticStoreMatchesScalarAcrossKeys) {
  constexpr int64_t d = 37;
  std::vector<float> w(d);
  for (int64_t j = 0; j < d; ++j) {
    const float base = static_cast<float>(j - 18) * 7.0f;
    w[static_cast<size_t>(j)] = j % 2 ? std::nextafter(base, kInf) : std::nextafter(base, -kInf);
  }
  w[0] = 127.0f;  // scale 1: t = w
  for_each_isa([&] {
    for (uint32_t k = 0; k < 4000; ++k) {
      const uint32_t key = k * 2654435761u;
      std::vector<uint8_t> want(d + 4), got(d + 4);
      q8_store<true>(want.data(), w.data(), d, key, k);
      q8_store_fast(got.data(), w.data(), d, key, k, true);
      ASSERT_EQ(got, want) << "key " << key;
    }
  });
}

// Every float bit pattern (2^32 values in rows of 64, each row with a 127 that makes the scale 1
// unless the row holds a larger magnitude, so t = w covers every float in [-127, 127]) through
// the fast store and the scalar one, stochastic (a key per row) and round-to-nearest (a few
// minutes per build): run by hand with --gtest_also_run_disabled_tests
// --gtest_filter='*Exhaustive*' after changing the store.
TEST(Q8VecTest, DISABLED_ExhaustiveFastStoreOverEveryFloat) {
  for_each_isa([&] {
    constexpr int64_t kRow = 65;
    std::vector<float> w(kRow, 127.0f);
    std::vector<uint8_t> want(kRow + 4), got(kRow + 4);
    int64_t mismatches = 0;
    for (uint64_t start = 0; start < (uint64_t{1} << 32); start += 64) {
      for (int64_t k = 0; k < 64; ++k) w[static_cast<size_t>(k)] = bits_f32(static_cast<uint32_t>(start + static_cast<uint64_t>(k)));
      const uint32_t key = static_cast<uint32_t>(start >> 6) * 2654435761u;
      for (bool sr : {true, false}) {
        if (sr) q8_store<true>(want.data(), w.data(), kRow, key, 3);
        else q8_store<false>(want.data(), w.data(), kRow, key, 3);
        q8_store_fast(got.data(), w.data(), kRow, key, 3, sr);
        if (want != got && ++mismatches <= 5) ADD_FAILURE() << "row from bits " << start << " sr " << sr;
      }
    }
    EXPECT_EQ(mismatches, 0);
  });
}

// The load: random codes (every int8, -128 too) and scales (ordinary, subnormal, 0, Inf, NaN).
TEST(Q8VecTest, FastLoadMatchesScalarBitForBit) {
  std::mt19937_64 rng(8);
  const float scales[] = {0.0f, 1e-3f, 0.75f, 1e-40f, 3e38f, kInf, kNaN, -2.5f};
  for_each_isa([&] {
    for (int64_t d = 1; d <= 70; ++d) {
      for (float scale : scales) {
        std::vector<uint8_t> row(static_cast<size_t>(d) + 4);
        for (auto& b : row) b = static_cast<uint8_t>(rng());
        store_f32(row.data() + d, scale);
        std::vector<float> want(static_cast<size_t>(d) + 1, 5.0f), got(static_cast<size_t>(d) + 1, 5.0f);
        load_row<DType::kQ8>(want.data(), row.data(), d);
        q8_load_fast(got.data(), row.data(), d);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "d " << d << " scale " << scale;
      }
    }
  });
}

}  // namespace
}  // namespace leanemb::kernels
