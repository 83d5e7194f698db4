#include "data/schema.h"

#include "core/enum_names.h"

// Inline XXH3 (same algorithm and results as libxxhash) so the 8-byte case is specialized.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>

namespace leanemb {
template <>
struct EnumNames<data::IdMode> {
  static constexpr std::string_view kWhat = "id mode";
  static constexpr EnumName<data::IdMode> kNames[] = {{data::IdMode::kModulo, "modulo", ""},
                                                      {data::IdMode::kRaw, "raw", ""}};
};
}  // namespace leanemb

namespace leanemb::data {

static_assert(std::endian::native == std::endian::little, "src/data assumes a little-endian host");

std::string_view id_mode_name(IdMode m) { return enum_name(m); }
Result<IdMode> parse_id_mode(std::string_view s) { return parse_enum<IdMode>(s); }

Result<DataSchema> make_schema(int num_dense, int num_sparse, std::span<const int64_t> num_rows, int64_t max_len,
                               IdMode id_mode) {
  DataSchema s;
  s.num_dense = num_dense;
  s.num_sparse = num_sparse;
  s.id_mode = id_mode;
  if (num_sparse < 0 || num_sparse > 4096) return invalid_argument("schema: num_sparse must be in [0, 4096]");
  const size_t n = static_cast<size_t>(num_sparse);
  if (id_mode == IdMode::kModulo && n > 0 && num_rows.size() != 1 && num_rows.size() != n)
    return invalid_argument("schema: expected 1 or " + std::to_string(n) + " num_rows values, got " +
                            std::to_string(num_rows.size()));
  s.sparse.resize(n);
  for (size_t f = 0; f < n; ++f) {
    s.sparse[f].max_len = max_len;
    if (!num_rows.empty()) s.sparse[f].num_rows = num_rows.size() == 1 ? num_rows[0] : num_rows[std::min(f, num_rows.size() - 1)];
  }
  LEANEMB_RETURN_IF_ERROR(validate_schema(s));
  return s;
}

Status validate_schema(const DataSchema& s) {
  if (s.num_dense < 0 || s.num_dense > 4096)
    return invalid_argument("schema: num_dense must be in [0, 4096], got " + std::to_string(s.num_dense));
  if (s.num_sparse < 0 || s.num_sparse > 4096)
    return invalid_argument("schema: num_sparse must be in [0, 4096], got " + std::to_string(s.num_sparse));
  if (s.num_dense + s.num_sparse == 0) return invalid_argument("schema: needs at least one dense or sparse feature");
  if (s.sparse.size() != static_cast<size_t>(s.num_sparse))
    return invalid_argument("schema: sparse holds " + std::to_string(s.sparse.size()) + " features, num_sparse is " +
                            std::to_string(s.num_sparse));
  for (size_t f = 0; f < s.sparse.size(); ++f) {
    if (s.id_mode == IdMode::kModulo && !s.sparse[f].raw_ids && s.sparse[f].num_rows <= 0)
      return invalid_argument("schema: sparse feature " + std::to_string(f) + " needs num_rows > 0 (got " +
                              std::to_string(s.sparse[f].num_rows) + ")");
    if (s.sparse[f].max_len < 0)
      return invalid_argument("schema: sparse feature " + std::to_string(f) + " has max_len < 0");
  }
  return Status::ok_status();
}

namespace {
float transform_dense_slow(double x) { return static_cast<float>(std::log1p(x > 0.0 ? x : 0.0)); }
constexpr int kDenseTableSize = 4096;  // Criteo's dense values are mostly small integers
}  // namespace

IdMapper::IdMapper(const DataSchema& schema) : raw_(schema.id_mode == IdMode::kRaw) {
  if (raw_) return;
  for (const SparseFeatureSchema& f : schema.sparse) {
    Divisor d;
    if (f.raw_ids) {
      divisors_.push_back(Divisor{0, 0});
      continue;
    }
    d.rows = static_cast<uint64_t>(f.num_rows);
    d.m = ~static_cast<unsigned __int128>(0) / d.rows + 1;  // rows = 1 wraps to 0: every id is 0
    divisors_.push_back(d);
  }
}

float transform_dense(double x) {
  static const auto table = [] {
    std::array<float, kDenseTableSize> t{};
    for (int i = 0; i < kDenseTableSize; ++i) t[static_cast<size_t>(i)] = transform_dense_slow(i);
    return t;
  }();
  if (x >= 0.0 && x < kDenseTableSize) {
    const int i = static_cast<int>(x);
    if (i == x) return table[static_cast<size_t>(i)];  // same value, without the log1p
  }
  return transform_dense_slow(x);
}

uint64_t hash_categorical(uint64_t value, int feature) {
  unsigned char bytes[8];
  std::memcpy(bytes, &value, 8);  // little-endian host (static_assert above)
  return XXH3_64bits_withSeed(bytes, 8, static_cast<XXH64_hash_t>(feature));
}

uint64_t hash_categorical_string(std::string_view value, int feature) {
  return hash_categorical(XXH3_64bits(value.data(), value.size()), feature);
}

}  // namespace leanemb::data
