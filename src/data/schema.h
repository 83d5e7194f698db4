// DataSchema: the shape of one CTR record (label, dense features, categorical features) and the
// value transforms every reader and writer of src/data applies, so that a TSV line, its binary
// conversion and the synthetic generator all produce bit-identical records.
//
//   label     0 or 1, stored as fp32
//   dense     x -> log(1 + max(x, 0)) computed in double, rounded to fp32 (DLRM's transform);
//             an empty field is 0
//   sparse    each value is 1..16 hex digits (case-insensitive) = a uint64 v; its hash is
//             XXH3_64bits_withSeed(8 little-endian bytes of v, seed = feature index). Row ids are
//             hash % num_rows (IdMode::kModulo) or the hash itself (IdMode::kRaw, for dynamic
//             tables: the 64 bits are carried in int64 storage and may read as negative).
//
// IdMapper applies the id mapping of a whole schema quickly; Record is one parsed record in
// hashed form (before row mapping and batching).
//
// Ownership: value types. Thread safety: plain values, pure functions; an IdMapper is immutable
// and may be shared between threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::data {

// How a categorical value's 64-bit hash becomes a row id.
enum class IdMode : uint8_t {
  kModulo,  // id = hash % num_rows of the feature's table, in [0, num_rows)
  kRaw,     // id = the 64 hash bits reinterpreted as int64 (for IdMap / dynamic tables)
};

std::string_view id_mode_name(IdMode m);
Result<IdMode> parse_id_mode(std::string_view s);  // "modulo" | "raw"

struct SparseFeatureSchema {
  // Rows of the table this feature looks up; ids are hash % num_rows. Must be > 0 with
  // IdMode::kModulo; ignored with IdMode::kRaw.
  int64_t num_rows = 0;
  // Keep the first max_len values of a multi-hot field, drop the rest (counted in
  // DataStats::truncated_values). 0 = no limit.
  int64_t max_len = 0;
  // The feature's ids are the 64 hash bits (as IdMode::kRaw) whatever the schema's id_mode: the
  // feature looks up a dynamic table. num_rows is then ignored.
  bool raw_ids = false;
};

struct DataSchema {
  int num_dense = 13;   // integer columns I1..I13 after the label
  int num_sparse = 26;  // categorical columns C1..C26 after the dense ones
  // [num_sparse] per-feature settings.
  std::vector<SparseFeatureSchema> sparse;
  IdMode id_mode = IdMode::kModulo;
  // Categorical values: false = 1..16 hex digits each (Criteo's hashed form; anything else is
  // malformed); true = any non-empty strings without ',' or tab, each hashed with
  // hash_categorical_string (data.categorical = "string", docs/data.md).
  bool string_values = false;

  int num_fields() const { return 1 + num_dense + num_sparse; }  // TSV columns per line
};

// A schema with `num_dense` dense and `num_sparse` sparse features whose tables have
// num_rows[f] rows (num_rows may hold one value, used for every feature, or num_sparse values)
// and max_len for every feature.
// Errors: InvalidArgument when num_rows has another length or a value <= 0 (modulo mode).
Result<DataSchema> make_schema(int num_dense, int num_sparse, std::span<const int64_t> num_rows,
                               int64_t max_len = 0, IdMode id_mode = IdMode::kModulo);

// Checks counts (num_dense in [0, 4096], num_sparse in [0, 4096], at least one feature),
// sparse.size() == num_sparse, num_rows > 0 in modulo mode, max_len >= 0.
// Errors: InvalidArgument naming the field and feature.
Status validate_schema(const DataSchema& schema);

// The dense transform: log(1 + max(x, 0)) in double, rounded to fp32. NaN is the caller's
// problem (parsers reject non-finite input before calling this).
float transform_dense(double x);

// Hash of categorical value `value` (the number the hex string spells) of feature `feature`.
uint64_t hash_categorical(uint64_t value, int feature);
// Hash of a categorical value given as any string (DataSchema::string_values): the string's
// bytes hashed to a uint64 v = XXH3_64bits(bytes), then hash_categorical(v, feature).
uint64_t hash_categorical_string(std::string_view value, int feature);

// Row id of a hash under `mode` for a feature with `num_rows` rows (the definition; IdMapper
// computes the same faster).
inline int64_t map_id(uint64_t hash, IdMode mode, int64_t num_rows) {
  return mode == IdMode::kRaw ? static_cast<int64_t>(hash) : static_cast<int64_t>(hash % static_cast<uint64_t>(num_rows));
}

// map_id for every feature of a schema, with each modulo replaced by multiplications by a
// precomputed 128-bit reciprocal (Lemire, Kaser & Kurz 2019, "Faster remainder by direct
// computation": exact for every 64-bit hash and divisor). Immutable after construction.
class IdMapper {
 public:
  IdMapper() = default;
  // REQUIRES: validate_schema(schema) is OK.
  explicit IdMapper(const DataSchema& schema);
  int64_t operator()(size_t feature, uint64_t hash) const {
    if (raw_) return static_cast<int64_t>(hash);
    const Divisor& d = divisors_[feature];
    if (d.rows == 0) return static_cast<int64_t>(hash);  // SparseFeatureSchema::raw_ids
    const unsigned __int128 low = d.m * hash;  // fraction bits of hash / rows, mod 2^128
    const unsigned __int128 bottom = (static_cast<unsigned __int128>(static_cast<uint64_t>(low)) * d.rows) >> 64;
    const unsigned __int128 top = static_cast<unsigned __int128>(static_cast<uint64_t>(low >> 64)) * d.rows;
    return static_cast<int64_t>(static_cast<uint64_t>((bottom + top) >> 64));
  }

 private:
  struct Divisor {
    unsigned __int128 m = 0;  // ceil(2^128 / rows) mod 2^128
    uint64_t rows = 1;  // 0: raw ids
  };
  bool raw_ = false;
  std::vector<Divisor> divisors_;
};

// One record in hashed form, as the sources produce it and the shuffle buffer holds it.
// Vectors keep their capacity when a Record is reused, so steady-state reading allocates nothing.
struct Record {
  float label = 0.0f;
  std::vector<float> dense;      // [num_dense] transformed values
  std::vector<uint32_t> counts;  // [num_sparse] values kept per feature (after max_len)
  std::vector<uint64_t> hashes;  // [sum(counts)] feature-major: feature 0's values, then 1's, ...
};

}  // namespace leanemb::data
