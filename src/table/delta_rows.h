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
#include "leanemb/embedding.h"
#include "leanemb/status.h"
#include "leanemb/table_options.h"
#include "leanemb/tables.h"

namespace leanemb::table_ckpt {

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

// Table t's changed rows (EmbeddingCollection::changed_rows, ascending) as table "delta/<name>" of
// their fat rows with meta `meta`, and blobs "delta_rows/<name>/<k>" of their row numbers, chunk_rows
// rows at a time; on_rows(n) after each chunk (null: none). Plain links and sparse bases
// (table_checkpoint_save.cc), and the links of a sharded collection's shard chains
// (src/dist/sharded_checkpoint_save.cc). Errors: the writer's, the rows'.
Status write_changed_rows(ckpt::CheckpointWriter& w, const EmbeddingCollection& emb, int t, std::span<const uint8_t> meta,
                          int64_t chunk_rows, const std::function<void(int64_t)>& on_rows);

// A sparse base: the root of a chain that holds, like a link, only changed rows, but changed
// since the tables' initial state (the rows create gave them) instead of since a parent. It has
// no parent, and each "delta/<name>" table's meta has "initial", what its other rows hold:
//   {"init": "uniform" | "normal" | "zeros", "bound": f, "mean": f, "std": f, "seed": u64,
//    "table": index in the collection, "dynamic": bool}
// with the uniform bound resolved (the one the initializer used). Loading one gives every row
// its initial bytes first (EmbeddingCollection::reset_rows_to_initial), then its rows.
struct InitialRows {
  TableOptions options;  // init (bound resolved), num_rows, dynamic.enabled
  uint64_t seed = 0;
  int table = 0;
  // Row `row`'s initial fat-row bytes in layout l (zeros for a dynamic table). tmp: [dim] floats.
  void row(int64_t row, const RowLayout& l, float* tmp, uint8_t* out) const;
};
// The "initial" meta of table `table` (options `to`) of a collection created with `seed`.
std::string initial_rows_meta_json(const TableOptions& to, uint64_t seed, int table);
// From the meta of a sparse base's table of num_rows rows. Errors: DataLoss naming `where`.
Result<InitialRows> parse_initial_rows(std::span<const uint8_t> meta, int64_t num_rows, const std::string& where);
// True if `r` is a sparse base: no parent and a "delta/" table.
bool is_sparse_base(const ckpt::CheckpointReader& r);

// Rows given one at a time (a delta's, a linked table's), written to table t of `tables` in runs
// of consecutive rows, one write_raw_rows call per run of at most max_rows. Call flush() last.
class RowRunWriter {
 public:
  RowRunWriter(EmbeddingTables& tables, int t, size_t stride, int64_t max_rows)
      : tables_(tables), t_(t), stride_(stride), max_rows_(max_rows) {}
  Status add(int64_t row, std::span<const uint8_t> fat);
  Status flush();

 private:
  EmbeddingTables& tables_;
  int t_;
  size_t stride_;
  int64_t max_rows_;
  std::vector<uint8_t> run_;
  int64_t begin_ = 0, rows_ = 0;
};

}  // namespace leanemb::table_ckpt
