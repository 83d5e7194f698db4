// Internal to src/dist (not installed, not for callers outside it): the pieces of the
// shard-count-independent embedding digest (dist::collection_digest, sharded_checkpoint.h),
// shared by sharded_checkpoint.cc and training_digest.cc so that every digest of the same
// rows is computed by the same code. Defined in sharded_checkpoint_digest.cc.
//
// The scheme: per table a 128-bit sum (each half mod 2^64) over its global rows g of
// XXH3-128(fat row bytes, seed = XXH3-64(g as u64, seed = table_seed(name))); then
// finish_digest hashes the step and, per table in order, its TableLayout fields and its sum.
//
// Thread safety: pure functions.
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "table/sharded_layout.h"

namespace leanemb::dist::digest_internal {

// One table as the sharded layout records it (table/sharded_layout.h); the digest uses
// name .. stride_bytes.
using table_ckpt::TableLayout;

// A table's row-hash sum; sums of disjoint row sets add (wrapping), in any order.
struct RowSum {
  uint64_t lo = 0, hi = 0;
};

// XXH3-64 of the table name (seed 0): the seed of the table's row seeds.
uint64_t table_seed(std::string_view name);

// Adds `count` rows to *sum: rows is [count, stride] fat bytes; row i is global row
// global_row(i). REQUIRES: rows.size() >= count * stride.
void add_rows(RowSum* sum, uint64_t seed, std::span<const uint8_t> rows, size_t stride, int64_t count,
              const std::function<int64_t(int64_t)>& global_row);

// The 32-hex-digit digest of `step` and the tables in order with their sums.
// REQUIRES: sums.size() == tables.size().
std::string finish_digest(int64_t step, const std::vector<TableLayout>& tables, const std::vector<RowSum>& sums);

}  // namespace leanemb::dist::digest_internal
