// model.table_rows = "auto" (docs/train.md "Deriving table_rows from the data"): a counting pass
// over the training files gives each sparse feature's number of distinct values, and each
// feature's table gets that many rows.
//
// The pass reads data.train once in file order with the trainer's reader and rules (schema,
// data.categorical hashing, data.max_len truncation, malformed lines skipped and counted, the
// malformed-rate limit), takes every value's 64-bit hash (IdMode::kRaw) and counts the distinct
// hashes per feature in a hash set (about 8 bytes x 2 per distinct value while it runs). The
// chosen sizes are then written to <out>/table_rows.json so that a resumed run reads them back
// instead of counting again (the files may have grown; the tables in the checkpoint have the
// first sizes), and `leanemb test` / `predict` / `export` take them from the checkpoint's
// tables.
//
// Rule: rows = distinct values (at least 1). Ids stay hash % rows: with as many rows as values,
// values still share rows (for n values in n rows about 1/e of the rows stay empty and a value
// shares its row with about one other on average), exactly as with any hand-chosen size; a value
// not seen in the training files (eval, predict) lands on the row of its hash % rows like any
// other value. A larger table lowers collisions: set the sizes by hand then, from the counts
// printed.
//
// Thread safety: plain functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "leanemb/status.h"
#include "ctr/ctr_config.h"

namespace leanemb::ctr {

struct DistinctCounts {
  std::vector<int64_t> distinct;  // [num_sparse] distinct values per feature in data.train
  int64_t records = 0;            // records read
  int64_t malformed = 0;          // malformed lines skipped
};

// The counting pass over c.train_files (see above). Errors: the reader's (NotFound,
// InvalidArgument above the malformed rate, IoError, DataLoss).
Result<DistinctCounts> count_distinct_values(const CtrConfig& c);

// The table_rows of distinct counts (the rule above).
std::vector<int64_t> table_rows_of(const DistinctCounts& d);

// The sizes in a table_rows.json written by resolve_table_rows: num_sparse values >= 1.
// Errors: NotFound (no such file), DataLoss (not such a file).
Result<std::vector<int64_t>> read_table_rows_file(const std::string& path, int num_sparse);

// For a config with table_rows_auto: fills c->table_rows. With `resume` and a readable
// <run_dir>/table_rows.json of the same number of features, its sizes are used ("read"); else
// the counting pass runs and, with `write`, the file is (re)written. *said receives one line
// for the user. Errors: count_distinct_values's; DataLoss for an unreadable table_rows.json on
// resume; IoError writing it.
Status resolve_table_rows(CtrConfig* c, const std::string& run_dir, bool resume, bool write, std::string* said);

}  // namespace leanemb::ctr
