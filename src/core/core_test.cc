// Tests of the core module: Status / Result and their macros, the dtype traits table, fp16/bf16
// conversions (exhaustively against independent oracles and, where the CPU has it, F16C), and
// the statistics of stochastic rounding and of the counter-based RNG.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/bytes.h"
#include "core/enum_names.h"
#include "core/half.h"
#include "core/rng.h"
#include "kernels/row_access.h"
#include "leanemb/dtype.h"
#include "leanemb/status.h"

namespace leanemb {
namespace {

// ---- Status / Result / macros ------------------------------------------------------------------

Status fail_if_negative(int x) {
  if (x < 0) return invalid_argument("x is " + std::to_string(x));
  return Status();
}

Result<int> twice_if_positive(int x) {
  if (x <= 0) return out_of_range("x must be > 0, got " + std::to_string(x));
  return 2 * x;
}

// Uses both macros; `reached_end` tells whether the function ran past them.
Result<int> chain(int a, int b, bool* reached_end) {
  *reached_end = false;
  LEANEMB_RETURN_IF_ERROR(fail_if_negative(a));
  LEANEMB_ASSIGN_OR_RETURN(int doubled, twice_if_positive(b));
  *reached_end = true;
  return doubled + a;
}

// A default Status is OK; error helpers set the code and keep the message.
TEST(StatusTest, ErrorHelpersCarryCodeAndMessage) {
  EXPECT_TRUE(Status().ok());
  EXPECT_EQ(Status().to_string(), "OK");
  const Status s = invalid_argument("bad id 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad id 7");
  EXPECT_EQ(s.to_string(), "InvalidArgument: bad id 7");
  EXPECT_EQ(out_of_range("").code(), StatusCode::kOutOfRange);
  EXPECT_EQ(not_found("").code(), StatusCode::kNotFound);
  EXPECT_EQ(failed_precondition("").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(resource_exhausted("").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(unimplemented("").code(), StatusCode::kUnimplemented);
  EXPECT_EQ(internal_error("").code(), StatusCode::kInternal);
}

// Every status code has its own distinct name.
TEST(StatusTest, EveryCodeHasADistinctName) {
  std::vector<std::string> names;
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c)
    names.emplace_back(status_code_name(static_cast<StatusCode>(c)));
  EXPECT_EQ(names[0], "OK");
  EXPECT_EQ(names[static_cast<int>(StatusCode::kResourceExhausted)], "ResourceExhausted");
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_EQ(std::count(names.begin(), names.end(), "Unknown"), 0);
}

// A Result holds either its value or the error it was built from.
TEST(ResultTest, HoldsValueOrError) {
  Result<std::string> good = std::string("row");
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good.status().ok());
  EXPECT_EQ(*good, "row");
  EXPECT_EQ(good->size(), 3u);
  EXPECT_EQ(std::move(good).value(), "row");
  Result<std::string> bad = not_found("table 't'");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(bad.status().message(), "table 't'");
}

// Building a Result from an OK Status is a bug and aborts.
TEST(ResultDeathTest, OkStatusWithoutValueAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH({ Result<int> r{Status()}; (void)r; }, "");
}

// LEANEMB_CHECK aborts with file:line and the message.
TEST(CheckDeathTest, FailedCheckNamesFileLineAndMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(LEANEMB_CHECK(1 + 1 == 3, "arithmetic broke"), "core_test.cc:[0-9]+.*arithmetic broke");
}

// The macros return the first error unchanged and run to the end only when all succeed.
TEST(StatusMacroTest, ReturnFirstErrorAndAssignOnSuccess) {
  bool end = false;
  Result<int> ok = chain(1, 5, &end);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 11);
  EXPECT_TRUE(end);
  Result<int> first = chain(-2, -3, &end);
  EXPECT_EQ(first.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(first.status().message(), "x is -2");
  EXPECT_FALSE(end);
  Result<int> second = chain(1, -3, &end);
  EXPECT_EQ(second.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(second.status().message(), "x must be > 0, got -3");
  EXPECT_FALSE(end);
}

// ---- dtype ---------------------------------------------------------------------------------------

// The traits table gives each dtype's name, element size, row overhead and trainability.
TEST(DTypeTest, TraitsDescribeEveryDType) {
  EXPECT_EQ(dtype_name(DType::kF32), "fp32");
  EXPECT_EQ(dtype_name(DType::kF16), "fp16");
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_EQ(dtype_name(DType::kInt8Rowwise), "int8");
  EXPECT_EQ(dtype_row_bytes(DType::kF32, 13), 52u);
  EXPECT_EQ(dtype_row_bytes(DType::kF16, 13), 26u);
  EXPECT_EQ(dtype_row_bytes(DType::kBF16, 128), 256u);
  EXPECT_EQ(dtype_row_bytes(DType::kInt8Rowwise, 128), 136u);  // codes + fp32 scale + fp32 bias
  EXPECT_TRUE(dtype_traits(DType::kF32).trainable);
  EXPECT_TRUE(dtype_traits(DType::kF16).trainable);
  EXPECT_TRUE(dtype_traits(DType::kBF16).trainable);
  EXPECT_FALSE(dtype_traits(DType::kInt8Rowwise).trainable);
}

// parse_dtype accepts each canonical name and the documented aliases of a use, and rejects the rest.
TEST(DTypeTest, ParseAcceptsNamesAndAliasesAndRejectsOthers) {
  for (DTypeUse use : {DTypeUse::kRows, DTypeUse::kOptimizerState, DTypeUse::kPayload, DTypeUse::kActivations})
    for (DType t : allowed_dtypes(use)) {
      auto r = parse_dtype(dtype_name(t), use);
      ASSERT_TRUE(r.ok()) << dtype_name(t);
      EXPECT_EQ(*r, t);
    }
  for (DTypeUse use : {DTypeUse::kRows, DTypeUse::kPayload, DTypeUse::kActivations}) {
    EXPECT_EQ(parse_dtype("f32", use).value(), DType::kF32);
    EXPECT_EQ(parse_dtype("float32", use).value(), DType::kF32);
    EXPECT_EQ(parse_dtype("f16", use).value(), DType::kF16);
    EXPECT_EQ(parse_dtype("float16", use).value(), DType::kF16);
    EXPECT_EQ(parse_dtype("bfloat16", use).value(), DType::kBF16);
  }
  for (const char* bad : {"", "FP32", "fp64", "int4", "bf16 ", "float8"}) {
    auto r = parse_dtype(bad, DTypeUse::kRows);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("'" + std::string(bad) + "'"), std::string::npos);
  }
}

// "int8" means the row-wise format for rows and payloads and the block-wise one for optimizer state.
TEST(DTypeTest, Int8NameResolvesByUse) {
  EXPECT_EQ(parse_dtype("int8", DTypeUse::kRows).value(), DType::kInt8Rowwise);
  EXPECT_EQ(parse_dtype("int8", DTypeUse::kPayload).value(), DType::kInt8Rowwise);
  EXPECT_EQ(parse_dtype("int8", DTypeUse::kOptimizerState).value(), DType::kInt8Blockwise);
  EXPECT_EQ(parse_dtype("8bit", DTypeUse::kOptimizerState).value(), DType::kInt8Blockwise);
  EXPECT_EQ(dtype_name(DType::kInt8Rowwise), "int8");
  EXPECT_EQ(dtype_name(DType::kInt8Blockwise), "int8");
  EXPECT_FALSE(parse_dtype("int8", DTypeUse::kActivations).ok());
  EXPECT_FALSE(parse_dtype("8bit", DTypeUse::kRows).ok());
  EXPECT_EQ(parse_dtype("4bit", DTypeUse::kOptimizerState).value(), DType::kInt4Blockwise);
  EXPECT_EQ(dtype_name(DType::kInt4Blockwise), "int4");
  EXPECT_FALSE(parse_dtype("int4", DTypeUse::kRows).ok());
}

// A dtype outside a use's subset is refused with a message naming the use and the allowed names.
TEST(DTypeTest, SubsetsRefuseOtherDTypesNamingTheUse) {
  const Status s = check_dtype(DTypeUse::kOptimizerState, DType::kF16);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("optimizer state dtype fp16"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("fp32, bf16, int8 or int4"), std::string::npos) << s.message();
  auto r = parse_dtype("fp16", DTypeUse::kOptimizerState);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown optimizer state dtype 'fp16' (expected fp32, bf16, int8 or int4)"),
            std::string::npos)
      << r.status().message();
  EXPECT_FALSE(check_dtype(DTypeUse::kActivations, DType::kInt8Rowwise).ok());
  EXPECT_FALSE(check_dtype(DTypeUse::kRows, DType::kInt8Blockwise).ok());
  EXPECT_TRUE(check_dtype(DTypeUse::kPayload, DType::kInt8Rowwise).ok());
}

// ---- enum names -------------------------------------------------------------------------------

enum class Fruit : uint8_t { kApple, kPear, kPlum };

}  // namespace

template <>
struct EnumNames<Fruit> {
  static constexpr std::string_view kWhat = "fruit";
  static constexpr EnumName<Fruit> kNames[] = {
      {Fruit::kApple, "apple", "malus pomme"}, {Fruit::kPear, "pear", ""}, {Fruit::kPlum, "plum", "prune"}};
};

namespace {

// parse_enum accepts canonical names and every alias; enum_name gives the canonical name back.
TEST(EnumNamesTest, ParsesNamesAndAliasesAndNamesCanonically) {
  EXPECT_EQ(parse_enum<Fruit>("apple").value(), Fruit::kApple);
  EXPECT_EQ(parse_enum<Fruit>("malus").value(), Fruit::kApple);
  EXPECT_EQ(parse_enum<Fruit>("pomme").value(), Fruit::kApple);
  EXPECT_EQ(parse_enum<Fruit>("prune").value(), Fruit::kPlum);
  EXPECT_EQ(enum_name(Fruit::kPlum), "plum");
  EXPECT_EQ(enum_name(static_cast<Fruit>(9)), "unknown");
  EXPECT_EQ(enum_name_list<Fruit>(), "apple, pear or plum");
}

// An unknown name fails with InvalidArgument naming the kind, the string and every canonical name.
TEST(EnumNamesTest, UnknownNameListsTheAllowedOnes) {
  for (const char* bad : {"", "mal", "malus pomme", "Apple", "pear "}) {
    auto r = parse_enum<Fruit>(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), "unknown fruit '" + std::string(bad) + "' (expected apple, pear or plum)");
  }
  const Fruit two[] = {Fruit::kPear, Fruit::kPlum};
  auto r = parse_enum_in<Fruit>("apple", two, "stone fruit");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "unknown stone fruit 'apple' (expected pear or plum)");
  EXPECT_EQ(parse_enum_in<Fruit>("prune", two, "stone fruit").value(), Fruit::kPlum);
}

// ---- ByteWriter / ByteReader ------------------------------------------------------------------

// Scalars are written little-endian, back to back; strings as a u32 length and the bytes.
TEST(BytesTest, WriterLaysOutLittleEndianFields) {
  std::vector<uint8_t> b;
  ByteWriter w(&b);
  w.u8(0xab);
  w.u32(0x01020304u);
  w.i64(-2);
  w.str32("hi");
  const float f[2] = {1.0f, -0.5f};
  w.span(std::span<const float>(f));
  const std::vector<uint8_t> want = {0xab, 0x04, 0x03, 0x02, 0x01, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                     0x02, 0x00, 0x00, 0x00, 'h',  'i',  0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00,
                                     0xbf};
  EXPECT_EQ(b, want);
  EXPECT_EQ(load_le<uint32_t>(b.data() + 1), 0x01020304u);
}

// What the writer wrote, the reader reads back, ending exactly at the end.
TEST(BytesTest, ReaderReadsBackWhatTheWriterWrote) {
  std::vector<uint8_t> b;
  ByteWriter w(&b);
  w.u32(7);
  w.u64(UINT64_MAX);
  w.i32(-5);
  w.str32("name");
  const int64_t v[3] = {1, -2, 3};
  w.span(std::span<const int64_t>(v));
  ByteReader r(b);
  uint32_t a = 0;
  uint64_t c = 0;
  int32_t d = 0;
  std::string s;
  std::vector<int64_t> arr;
  ASSERT_TRUE(r.u32(&a) && r.u64(&c) && r.i32(&d) && r.str32(&s, 16) && r.array(3, &arr));
  EXPECT_EQ(a, 7u);
  EXPECT_EQ(c, UINT64_MAX);
  EXPECT_EQ(d, -5);
  EXPECT_EQ(s, "name");
  EXPECT_EQ(arr, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_TRUE(r.done());
}

// Every read of truncated input fails without reading past the end or moving the position.
TEST(BytesTest, TruncatedInputFailsAtTheFirstShortRead) {
  std::vector<uint8_t> b;
  ByteWriter w(&b);
  w.u32(3);
  w.raw("abc");
  w.u64(42);
  for (size_t cut = 0; cut < b.size(); ++cut) {
    ByteReader r(std::span<const uint8_t>(b).first(cut));
    std::string s;
    uint64_t x = 0;
    const bool ok = r.str32(&s, 16) && r.u64(&x);
    EXPECT_FALSE(ok) << "cut at " << cut;
    EXPECT_LE(r.pos(), cut);
  }
  ByteReader r(std::span<const uint8_t>(b).first(2));
  uint32_t n = 0xdead;
  EXPECT_FALSE(r.u32(&n));
  EXPECT_EQ(n, 0xdeadu);
  EXPECT_EQ(r.pos(), 0u);
  std::vector<int64_t> arr;
  EXPECT_FALSE(r.array(1, &arr));
  EXPECT_FALSE(r.array(SIZE_MAX / 4, &arr));  // a length that would overflow n * sizeof(T)
  std::span<const uint8_t> view;
  EXPECT_FALSE(r.view(3, &view));
  EXPECT_FALSE(r.skip(3));
  EXPECT_TRUE(r.skip(2) && r.done());
}

// A string longer than the caller's limit is refused even when the bytes are there.
TEST(BytesTest, StringOverTheLimitIsRefused) {
  std::vector<uint8_t> b;
  ByteWriter(&b).str32("toolong");
  std::string s;
  ByteReader r(b);
  EXPECT_FALSE(r.str32(&s, 3));
  EXPECT_TRUE(s.empty());
}

// ---- fp16 / bf16 oracles -------------------------------------------------------------------------

bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// Value of a finite non-negative half pattern, from the IEEE definition (no bit tricks).
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  return e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
}

// Round-to-nearest-even of x to half by search in the sorted table of all finite halves.
uint16_t oracle_f32_to_f16(float x) {
  static const std::vector<double> kTable = [] {
    std::vector<double> t(0x7c00);
    for (uint32_t h = 0; h < 0x7c00; ++h) t[h] = half_value(static_cast<uint16_t>(h));
    return t;
  }();
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7e00u);
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00u);  // tie at 65520 goes to even (Inf)
  const size_t lo = static_cast<size_t>(std::upper_bound(kTable.begin(), kTable.end(), a) - kTable.begin()) - 1;
  if (lo == kTable.size() - 1) return static_cast<uint16_t>(sign | lo);
  const double dlo = a - kTable[lo], dhi = kTable[lo + 1] - a;
  const size_t pick = dlo < dhi ? lo : (dhi < dlo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1));
  return static_cast<uint16_t>(sign | pick);
}

// Round-to-nearest-even of x to bf16 by comparing distances to both neighbours in double.
uint16_t oracle_f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7fc0u);
  if (std::isinf(x)) return static_cast<uint16_t>(sign | 0x7f80u);
  const uint16_t lo = static_cast<uint16_t>((u & 0x7fffffffu) >> 16), hi = static_cast<uint16_t>(lo + 1);
  const double a = std::fabs(static_cast<double>(x));
  const double vlo = bits_f32(static_cast<uint32_t>(lo) << 16);
  const double vhi = hi == 0x7f80u ? std::ldexp(1.0, 128) : bits_f32(static_cast<uint32_t>(hi) << 16);
  const double dlo = a - vlo, dhi = vhi - a;
  const uint16_t pick = dlo < dhi ? lo : (dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi));
  return static_cast<uint16_t>(sign | pick);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
bool have_f16c() { return __builtin_cpu_supports("f16c"); }
#else
uint16_t hw_f32_to_f16(float) { return 0; }
float hw_f16_to_f32(uint16_t) { return 0; }
bool have_f16c() { return false; }
#endif

// Inputs for the float -> half/bf16 checks: a stride through all float patterns, every tie
// between neighbouring halves and its two float neighbours, and the extremes.
std::vector<float> rounding_inputs() {
  std::vector<float> v;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 1999) v.push_back(bits_f32(static_cast<uint32_t>(u)));
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float mid = static_cast<float>((half_value(static_cast<uint16_t>(h)) + half_value(static_cast<uint16_t>(h + 1))) / 2);
    for (float m : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      v.push_back(m);
      v.push_back(-m);
    }
  }
  for (uint32_t b = 0; b < 0x7f80; b += 7) {  // bf16 ties: mantissa bit 15 set, rest clear
    v.push_back(bits_f32((b << 16) | 0x8000u));
    v.push_back(bits_f32((b << 16) | 0x8001u));
    v.push_back(bits_f32((b << 16) | 0x7fffu));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, std::ldexp(1.0f, -24),
                  std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), std::ldexp(1.0f, -26), std::ldexp(1.0f, -14),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::max(), bits_f32(0x7f7f0000u), bits_f32(0x7f7f8000u), inf,
                  std::numeric_limits<float>::quiet_NaN(), bits_f32(0x7f800001u), bits_f32(0xffc00000u)}) {
    v.push_back(x);
    v.push_back(-x);
  }
  return v;
}

// low_precision_roundtrip: every non-NaN half survives f16 -> f32 -> f16 bit for bit, f16_to_f32
// matches the IEEE definition (and F16C), and NaN stays a NaN of the same sign.
TEST(LowPrecisionTest, LowPrecisionRoundtripIsExactForEveryHalfBitPattern) {
  const bool hw = have_f16c();
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = f16_to_f32(h);
    const uint16_t back = f32_to_f16_rne(f);
    EXPECT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
    if (half_is_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(half_is_nan(back)) << std::hex << h;
      EXPECT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << h;
      continue;
    }
    const double mag = (h & 0x7fffu) == 0x7c00u ? std::numeric_limits<double>::infinity() : half_value(h & 0x7fffu);
    ASSERT_EQ(static_cast<double>(std::fabs(f)), mag) << std::hex << h;
    ASSERT_EQ(back, h) << std::hex << h;
    if (hw) {
      ASSERT_EQ(f32_bits(hw_f16_to_f32(h)), f32_bits(f)) << std::hex << h;
    }
  }
}

// Every non-NaN bf16 survives bf16 -> f32 -> bf16 bit for bit; NaN stays a NaN of the same sign.
TEST(LowPrecisionTest, LowPrecisionRoundtripIsExactForEveryBf16BitPattern) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = bf16_to_f32(h);
    ASSERT_EQ(f32_bits(f), static_cast<uint32_t>(h) << 16);
    const uint16_t back = f32_to_bf16_rne(f);
    if (bf16_is_nan(h)) {
      EXPECT_TRUE(bf16_is_nan(back)) << std::hex << h;
      EXPECT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

// f32_to_f16_rne equals the table oracle and F16C's round-to-nearest-even on ~2.5M inputs
// including every tie, subnormals, max finite, overflow, Inf and NaN.
TEST(LowPrecisionTest, F32ToF16RoundsToNearestEvenLikeOracleAndF16C) {
  const bool hw = have_f16c();
  int64_t mismatches = 0;
  for (float x : rounding_inputs()) {
    const uint16_t got = f32_to_f16_rne(x), want = oracle_f32_to_f16(x);
    const bool ok = std::isnan(x) ? half_is_nan(got) && (got & 0x8000u) == (want & 0x8000u) : got == want;
    const uint16_t hw_h = hw ? hw_f32_to_f16(x) : want;
    const bool hw_ok = std::isnan(x) ? half_is_nan(hw_h) : hw_h == got;
    if ((!ok || !hw_ok) && ++mismatches <= 10)
      ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << f32_bits(x) << "): got 0x" << got << ", oracle 0x"
                    << want << ", F16C 0x" << hw_h;
  }
  EXPECT_EQ(mismatches, 0);
}

// f32_to_bf16_rne equals the two-neighbour oracle, including ties, overflow to Inf and NaN.
TEST(LowPrecisionTest, F32ToBf16RoundsToNearestEvenLikeOracle) {
  int64_t mismatches = 0;
  for (float x : rounding_inputs()) {
    const uint16_t got = f32_to_bf16_rne(x), want = oracle_f32_to_bf16(x);
    const bool ok = std::isnan(x) ? bf16_is_nan(got) && (got & 0x8000u) == (want & 0x8000u) : got == want;
    if (!ok && ++mismatches <= 10)
      ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << f32_bits(x) << "): got 0x" << got << ", oracle 0x" << want;
  }
  EXPECT_EQ(mismatches, 0);
}

// ---- stochastic rounding -------------------------------------------------------------------------

struct SrCase {
  bool half;  // fp16 (true) or bf16
  uint16_t lo_bits;  // lower neighbour (magnitude order for negatives: toward zero)
  double p;          // fractional position between lo and the next pattern
};

float sr_value(const SrCase& c) {
  const uint16_t hi_bits = static_cast<uint16_t>(c.lo_bits + 1);
  const double lo = c.half ? f16_to_f32(c.lo_bits) : bf16_to_f32(c.lo_bits);
  const double hi = c.half ? f16_to_f32(hi_bits) : bf16_to_f32(hi_bits);
  return static_cast<float>(lo + c.p * (hi - lo));
}

// sr_unbiasedness: for values between two fp16 / bf16 neighbours (normal, subnormal, negative,
// near max finite), the mean of 1e6 stochastic roundings with varying RNG keys equals the value
// within 4 sigma, sigma = spacing * sqrt(p (1 - p) / N).
TEST(StochasticRoundingTest, SrUnbiasednessMeanEqualsValueWithinFourSigma) {
  const SrCase cases[] = {
      {true, 0x3c00, 0.5},   {true, 0x3c00, 0.1},    {true, 0x4a3f, 0.013}, {true, 0x0005, 0.37},
      {true, 0x8c01, 0.77},  {true, 0x7bfe, 0.25},   {false, 0x3f80, 0.5},  {false, 0x3f80, 0.003},
      {false, 0x4123, 0.91}, {false, 0xbe55, 0.333}, {false, 0x0040, 0.6},  {false, 0x7f7e, 0.42},
  };
  constexpr int64_t kN = 1000000;
  for (const SrCase& c : cases) {
    const float x = sr_value(c);
    const uint16_t hi_bits = static_cast<uint16_t>(c.lo_bits + 1);
    const double lo = c.half ? f16_to_f32(c.lo_bits) : bf16_to_f32(c.lo_bits);
    const double hi = c.half ? f16_to_f32(hi_bits) : bf16_to_f32(hi_bits);
    const double p = (static_cast<double>(x) - lo) / (hi - lo);  // exact position of the float x
    double sum = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const uint32_t bits = column_bits(row_key(7, static_cast<uint64_t>(i / 64), 3, static_cast<uint64_t>(i)),
                                        static_cast<uint32_t>(i % 64));
      const uint16_t r = c.half ? f32_to_f16_sr(x, bits) : f32_to_bf16_sr(x, bits);
      ASSERT_TRUE(r == c.lo_bits || r == hi_bits) << "x = " << x << " rounded to 0x" << std::hex << r;
      sum += c.half ? f16_to_f32(r) : bf16_to_f32(r);
    }
    const double sigma = std::fabs(hi - lo) * std::sqrt(p * (1 - p) / kN);
    EXPECT_NEAR(sum / kN, static_cast<double>(x), 4 * sigma)
        << (c.half ? "fp16" : "bf16") << " x = " << x << " p = " << p;
  }
}

// Stochastic rounding leaves representable values, +-Inf and NaN as they are, whatever the bits.
TEST(StochasticRoundingTest, ExactValuesInfAndNanAreNeverDithered) {
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t bits : {0u, 1u, 0x7fffu, 0xffffu, 0x80000000u, 0xffffffffu, 0x12345678u}) {
    for (float x : {0.0f, -0.0f, 1.0f, -3.5f, 2048.0f, std::ldexp(1.0f, -24)}) {  // in both formats
      EXPECT_EQ(f32_to_f16_sr(x, bits), f32_to_f16_rne(x)) << x;
      EXPECT_EQ(f32_to_bf16_sr(x, bits), f32_to_bf16_rne(x)) << x;
    }
    EXPECT_EQ(f32_to_f16_sr(65504.0f, bits), 0x7bffu);             // max finite half
    EXPECT_EQ(f32_to_bf16_sr(bits_f32(0x7f7f0000u), bits), 0x7f7fu);  // max finite bf16
    EXPECT_EQ(f32_to_f16_sr(inf, bits), 0x7c00u);
    EXPECT_EQ(f32_to_f16_sr(-inf, bits), 0xfc00u);
    EXPECT_EQ(f32_to_bf16_sr(inf, bits), 0x7f80u);
    EXPECT_EQ(f32_to_bf16_sr(-inf, bits), 0xff80u);
    EXPECT_TRUE(half_is_nan(f32_to_f16_sr(std::numeric_limits<float>::quiet_NaN(), bits)));
    EXPECT_TRUE(bf16_is_nan(f32_to_bf16_sr(std::numeric_limits<float>::quiet_NaN(), bits)));
    EXPECT_TRUE(bf16_is_nan(f32_to_bf16_sr(bits_f32(0x7f800001u), bits)));  // low-payload NaN
    EXPECT_EQ(f32_to_f16_sr(1e6f, bits), 0x7bffu);  // documented saturation beyond 65504
  }
}

// stochastic_rounding_determinism: the RNG and rounding are pure functions of (seed, step,
// table, row, column); the vectorized row store gives exactly the scalar per-element result, and
// changing any key component changes the decisions.
TEST(StochasticRoundingTest, StochasticRoundingDeterminismIsAPureFunctionOfTheKey) {
  constexpr int64_t kDim = 67;
  std::vector<float> w(kDim);
  for (int64_t j = 0; j < kDim; ++j) w[j] = 0.1f * static_cast<float>(j) + 1e-3f;
  std::vector<uint16_t> row_h(kDim), row_b(kDim), again_b(kDim);
  const uint32_t key = row_key(42, 5, 2, 1000);
  ASSERT_EQ(key, row_key(42, 5, 2, 1000));
  kernels::store_row_sr<DType::kF16>(reinterpret_cast<uint8_t*>(row_h.data()), w.data(), kDim, key, 0);
  kernels::store_row_sr<DType::kBF16>(reinterpret_cast<uint8_t*>(row_b.data()), w.data(), kDim, key, 0);
  kernels::store_row_sr<DType::kBF16>(reinterpret_cast<uint8_t*>(again_b.data()), w.data(), kDim, key, 0);
  EXPECT_EQ(row_b, again_b);
  for (int64_t j = 0; j < kDim; ++j) {
    const uint32_t bits = column_bits(key, static_cast<uint32_t>(j));
    ASSERT_EQ(row_h[j], f32_to_f16_sr(w[j], bits)) << j;
    ASSERT_EQ(row_b[j], f32_to_bf16_sr(w[j], bits)) << j;
  }
  // Each key component matters: a different seed, step, table or row gives different bits.
  const uint32_t others[] = {row_key(43, 5, 2, 1000), row_key(42, 6, 2, 1000), row_key(42, 5, 3, 1000),
                             row_key(42, 5, 2, 1001)};
  for (uint32_t other : others) {
    EXPECT_NE(other, key);
    int differ = 0;
    for (uint32_t c = 0; c < 64; ++c) differ += column_bits(other, c) != column_bits(key, c);
    EXPECT_EQ(differ, 64);
  }
}

// ---- counter-based RNG ---------------------------------------------------------------------------

// Checks that `n` 32-bit outputs of gen(i) have mean 2^31 and each bit set half of the time,
// all within 4 sigma.
template <typename Gen>
void expect_uniform_bits(Gen gen, int64_t n, const char* what) {
  double sum = 0;
  int64_t ones[32] = {0};
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t x = gen(i);
    sum += x;
    for (int b = 0; b < 32; ++b) ones[b] += (x >> b) & 1u;
  }
  const double mean_sigma = 4294967296.0 / std::sqrt(12.0 * static_cast<double>(n));
  EXPECT_NEAR(sum / static_cast<double>(n), 2147483648.0, 4 * mean_sigma) << what;
  const double bit_sigma = 0.5 / std::sqrt(static_cast<double>(n));
  for (int b = 0; b < 32; ++b)
    EXPECT_NEAR(static_cast<double>(ones[b]) / static_cast<double>(n), 0.5, 4 * bit_sigma) << what << " bit " << b;
}

// column_bits over consecutive columns and rows, and row_key over consecutive rows and steps,
// have the mean and per-bit balance of uniform 32-bit numbers.
TEST(RngTest, OutputsHaveUniformMeanAndBalancedBits) {
  constexpr int64_t kN = 1 << 20;
  expect_uniform_bits([](int64_t i) { return column_bits(row_key(1, 1, 0, static_cast<uint64_t>(i >> 7)),
                                                         static_cast<uint32_t>(i & 127)); },
                      kN, "column_bits");
  expect_uniform_bits([](int64_t i) { return row_key(0, 1, 0, static_cast<uint64_t>(i)); }, kN, "row_key(row)");
  expect_uniform_bits([](int64_t i) { return row_key(9, static_cast<uint64_t>(i), 1, 5); }, kN, "row_key(step)");
}

}  // namespace
}  // namespace leanemb
