// Counter-based random numbers: a pure function of (seed, step, table, row, column), so a
// stochastic-rounding decision never depends on thread count, schedule or cache placement.
//
// The generator is a hash, not a stream: row_key() mixes (seed, step, table, row) with the
// 64-bit finalizer of SplitMix64; column_bits() mixes the row key with the column through the
// 32-bit finalizer of MurmurHash3. Both finalizers are bijective avalanche mixers, so distinct
// inputs give well-spread 32-bit outputs; sr_unbiasedness tests the statistics we rely on.
#pragma once

#include <cstdint>

namespace leanemb {

inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// Key of one (seed, step, table, row); feed it to column_bits for each column.
inline uint32_t row_key(uint64_t seed, uint64_t step, uint32_t table, uint64_t row) {
  uint64_t h = mix64(seed ^ 0x6c65616e656d6221ull);
  h = mix64(h ^ step);
  h = mix64(h ^ (static_cast<uint64_t>(table) << 40) ^ row);
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// 32 random bits for one column of a row: fmix32(key ^ column_term(col)). The term is affine in the
// column, so a loop over consecutive columns may add kColumnGolden per column instead.
inline constexpr uint32_t kColumnGolden = 0x9e3779b9u, kColumnOffset = 0x7f4a7c15u;
inline constexpr uint32_t column_term(uint32_t col) { return col * kColumnGolden + kColumnOffset; }
inline uint32_t column_bits(uint32_t key, uint32_t col) { return fmix32(key ^ column_term(col)); }

}  // namespace leanemb
