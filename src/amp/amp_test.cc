// Tests of src/amp: the LossScaler against GradScaler's update rule (traces with injected
// infs), its byte serialization, the non-finite check, and the precision conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "amp/loss_scaler.h"
#include "amp/precision.h"
#include "core/half.h"
#include "kernels/isa_testing.h"

namespace leanemb::amp {
namespace {

LossScaler make_scaler(int64_t interval) {
  auto s = LossScaler::create({.growth_interval = interval});
  EXPECT_TRUE(s.ok());
  return *s;
}

// Defaults are GradScaler's: 2^16, x2, x0.5, 2000.
TEST(AmpLossScalerTest, DefaultsAreTorchGradScalerDefaults) {
  auto s = LossScaler::create();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->scale(), 65536.0f);
  EXPECT_EQ(s->inv_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(s->options().growth_factor, 2.0);
  EXPECT_EQ(s->options().backoff_factor, 0.5);
  EXPECT_EQ(s->options().growth_interval, 2000);
}

// Injected infs at chosen steps: each halves the scale, resets the clean-step counter and counts
// as skipped; 3 clean steps in a row (the interval) double the scale.
TEST(AmpLossScalerTest, TraceFollowsGradScalerRule) {
  LossScaler s = make_scaler(3);
  const bool inf_at[] = {false, true, false, false, false, true, true, false, false, false, false};
  const float want_scale[] = {65536, 32768, 32768, 32768, 65536, 32768, 16384, 16384, 16384, 32768, 32768};
  const int64_t want_tracker[] = {1, 0, 1, 2, 0, 0, 0, 1, 2, 0, 1};
  for (size_t t = 0; t < std::size(inf_at); ++t) {
    s.update(inf_at[t]);
    EXPECT_EQ(s.scale(), want_scale[t]) << "after step " << t;
    EXPECT_EQ(s.growth_tracker(), want_tracker[t]) << "after step " << t;
  }
  EXPECT_EQ(s.num_skipped_steps(), 3);
  EXPECT_EQ(s.num_updates(), 11);
}

// The scale stops growing where the next growth would overflow fp32.
TEST(AmpLossScalerTest, ScaleNeverGrowsToInfinity) {
  LossScaler s = *LossScaler::create({.init_scale = 1e38f, .growth_interval = 1});
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1e38f * 2.0f);
  EXPECT_TRUE(std::isfinite(s.scale()));
}

// save() / load() restores everything: the restored scaler continues the same trace.
TEST(AmpLossScalerTest, SaveAndLoadRestoreTheState) {
  LossScaler a = make_scaler(4);
  for (bool f : {false, true, false, false}) a.update(f);
  const std::vector<uint8_t> bytes = a.save();
  ASSERT_EQ(bytes.size(), 54u);
  EXPECT_EQ(bytes[0], 1);  // format version
  LossScaler b = make_scaler(2000);
  ASSERT_TRUE(b.load(bytes).ok());
  EXPECT_EQ(b.options().growth_interval, 4);
  for (bool f : {false, false, true, false}) {
    a.update(f);
    b.update(f);
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.growth_tracker(), b.growth_tracker());
  }
  EXPECT_EQ(b.num_skipped_steps(), 2);
}

// Corrupt, truncated or future-version bytes are refused and leave the scaler unchanged.
TEST(AmpLossScalerTest, LoadRejectsBadBytes) {
  LossScaler s = make_scaler(10);
  s.update(true);
  const std::vector<uint8_t> good = s.save();
  LossScaler t = make_scaler(10);
  auto expect_code = [&](std::vector<uint8_t> bytes, StatusCode code) {
    EXPECT_EQ(t.load(bytes).code(), code);
    EXPECT_EQ(t.scale(), 65536.0f);
  };
  expect_code({}, StatusCode::kDataLoss);
  expect_code(std::vector<uint8_t>(good.begin(), good.end() - 1), StatusCode::kDataLoss);
  std::vector<uint8_t> v = good;
  v[0] = 2;
  expect_code(v, StatusCode::kUnimplemented);
  v = good;
  v[0] = 0;
  expect_code(v, StatusCode::kDataLoss);
  v = good;
  v[5] = 0xff;  // the scale's sign and top exponent bits: a negative scale
  expect_code(v, StatusCode::kDataLoss);
  v = good;
  v[30] = 99;  // growth tracker 99 >= interval 10
  expect_code(v, StatusCode::kDataLoss);
}

// Bad options are InvalidArgument; a disabled scaler keeps scale 1 and still counts skips.
TEST(AmpLossScalerTest, OptionsAreValidatedAndDisabledScalerStaysAtOne) {
  EXPECT_EQ(LossScaler::create({.init_scale = 0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LossScaler::create({.growth_factor = 1.0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LossScaler::create({.backoff_factor = 1.0}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LossScaler::create({.growth_interval = 0}).status().code(), StatusCode::kInvalidArgument);
  LossScaler off = *LossScaler::create({.growth_interval = 1, .enabled = false});
  off.update(true);
  off.update(false);
  EXPECT_EQ(off.scale(), 1.0f);
  EXPECT_EQ(off.inv_scale(), 1.0f);
  EXPECT_EQ(off.num_skipped_steps(), 1);
}

// found_nonfinite sees +Inf, -Inf and NaN at every position (vector body and tail), and
// nothing in finite data including the largest float and subnormals.
TEST(AmpNonfiniteTest, FindsInfAndNanAnywhere) {
  const float bad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  for (size_t n : {1u, 7u, 8u, 33u}) {
    std::vector<float> v(n, std::numeric_limits<float>::max());
    v[0] = -std::numeric_limits<float>::denorm_min();
    EXPECT_FALSE(found_nonfinite(v)) << n;
    for (size_t i = 0; i < n; ++i) {
      for (float b : bad) {
        std::vector<float> w = v;
        w[i] = b;
        EXPECT_TRUE(found_nonfinite(w)) << "n " << n << " at " << i;
      }
    }
  }
  EXPECT_FALSE(found_nonfinite({}));
}

// Rounding and packing agree with src/core/half.h; 16-bit storage round-trips grid values;
// fp16 overflows to Inf.
TEST(AmpPrecisionTest, RoundingAndStorageMatchHalfConversions) {
  std::vector<float> x = {1.0f + 1.0f / 512, -3.14159f, 1e-3f, 70000.0f, 0.0f};
  for (DType p : {DType::kBF16, DType::kF16}) {
    std::vector<float> r = x, back(x.size());
    round_to_precision(r, p);
    std::vector<uint16_t> packed(x.size());
    pack(x, p, packed.data());
    unpack(packed.data(), p, back);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = p == DType::kBF16 ? bf16_to_f32(f32_to_bf16_rne(x[i])) : f16_to_f32(f32_to_f16_rne(x[i]));
      EXPECT_EQ(f32_bits(r[i]), f32_bits(want)) << dtype_name(p) << " " << i;
      EXPECT_EQ(f32_bits(back[i]), f32_bits(want)) << dtype_name(p) << " " << i;
    }
  }
  std::vector<float> big = {70000.0f};
  round_to_precision(big, DType::kF16);
  EXPECT_TRUE(std::isinf(big[0]));
  EXPECT_EQ(precision_bytes(DType::kF32), 4u);
  EXPECT_EQ(precision_bytes(DType::kBF16), 2u);
  EXPECT_EQ(*parse_dtype("bfloat16", DTypeUse::kActivations), DType::kBF16);
  EXPECT_EQ(parse_dtype("int8", DTypeUse::kActivations).status().code(), StatusCode::kInvalidArgument);
}

// The vectorized rounding, packing and unpacking equal the scalar conversions of src/core/half.h
// on every kind of bit pattern (random words: NaNs, infinities, subnormals, ties), rounding in
// place and as a copy, in every kernel build the CPU runs (kernels/isa.h).
TEST(AmpPrecisionTest, VectorizedRoundingEqualsScalarConversionsOnAnyBits) {
  std::mt19937 gen(3);
  std::vector<float> x(4099);
  for (float& v : x) v = bits_f32(static_cast<uint32_t>(gen()));
  for (size_t i = 0; i < 64; ++i) x[i] = bits_f32(0x3f808000u + static_cast<uint32_t>(i) * 0x10000u);  // ties
  std::vector<uint16_t> halves(x.size());
  for (uint16_t& h : halves) h = static_cast<uint16_t>(gen());
  kernels::for_each_isa([&] {
    for (DType p : {DType::kF32, DType::kBF16, DType::kF16}) {
      std::vector<float> in_place = x, copy(x.size());
      round_to_precision(in_place, p);
      copy_rounded(x, p, copy.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = p == DType::kF32   ? x[i]
                           : p == DType::kBF16 ? bf16_to_f32(f32_to_bf16_rne(x[i]))
                                                   : f16_to_f32(f32_to_f16_rne(x[i]));
        ASSERT_EQ(f32_bits(in_place[i]), f32_bits(want)) << dtype_name(p) << " " << i;
        ASSERT_EQ(f32_bits(copy[i]), f32_bits(want)) << dtype_name(p) << " " << i;
      }
      if (p == DType::kF32) continue;
      std::vector<uint16_t> packed(x.size());
      pack(x, p, packed.data());
      std::vector<float> unpacked(x.size());
      unpack(halves.data(), p, unpacked);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(packed[i], p == DType::kBF16 ? f32_to_bf16_rne(x[i]) : f32_to_f16_rne(x[i]))
            << dtype_name(p) << " " << i;
        ASSERT_EQ(f32_bits(unpacked[i]), f32_bits(p == DType::kBF16 ? bf16_to_f32(halves[i]) : f16_to_f32(halves[i])))
            << dtype_name(p) << " " << i;
      }
    }
  });
}

}  // namespace
}  // namespace leanemb::amp
