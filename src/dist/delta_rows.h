// The rows of an incremental checkpoint's table (docs/formats/checkpoint.md, "Chains"): table
// "delta/<name>" holds the changed fat rows in ascending row order, and blobs
// "delta_rows/<name>/<k>" the row numbers of its rows [k * kDeltaIdsPerBlob, ...), each as
//   u64 count, then count LEB128 varints of the gaps: row_i - row_{i-1} - 1 (row_{-1} = -1).
// Ascending rows of a table's changes are mostly close together: 1-3 bytes per row instead of 8.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "leanemb/checkpoint.h"
#include "leanemb/status.h"

namespace leanemb::dist {

inline constexpr int64_t kDeltaIdsPerBlob = int64_t{1} << 20;
inline constexpr char kDeltaPrefix[] = "delta/";
inline constexpr char kDeltaRowsPrefix[] = "delta_rows/";

// "delta_rows/<table>/<k>"
std::string delta_rows_blob(const std::string& table, int64_t k);
// REQUIRES: rows strictly ascending, >= 0.
std::vector<uint8_t> encode_delta_rows(std::span<const int64_t> rows);
// The rows of one blob, checked: `count` of them, strictly ascending, below num_rows, no trailing
// bytes. Errors: DataLoss naming `where`.
Result<std::vector<int64_t>> decode_delta_rows(std::span<const uint8_t> bytes, int64_t count, int64_t num_rows,
                                               const std::string& where);

// Calls fn(row, fat row) for every row of incremental checkpoint r's table `table` (its table
// "delta/<table>" of fat rows and their row-number blobs), in ascending row order, reading
// chunk_rows rows at a time; num_rows bounds the row numbers. Errors: DataLoss (no such table, a
// malformed blob), the reader's, fn's (which stop the walk).
Status for_each_delta_row(const ckpt::CheckpointReader& r, const std::string& table, int64_t num_rows, int64_t chunk_rows,
                          const std::function<Status(int64_t, std::span<const uint8_t>)>& fn);

}  // namespace leanemb::dist
