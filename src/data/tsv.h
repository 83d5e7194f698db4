// Criteo-style TSV: one record per line, `label \t I1..I{num_dense} \t C1..C{num_sparse}`.
//
//   label   "0" or "1" (any number equal to 0 or 1 is accepted, e.g. "1.0")
//   I_j     an integer (or any finite decimal number); empty = 0; transformed by transform_dense
//   C_f     empty (a bag with no ids), one hex value, or a ','-separated list of hex values
//           (multi-hot, our extension); each value is hashed with hash_categorical
//
// LineReader streams a file in chunks of `chunk_bytes` (the file is never loaded whole) and
// yields lines without their "\n" (and without a "\r" before it); a last line without "\n" is a
// line. parse_tsv_line turns one line into a Record or says why it is malformed.
//
// Ownership: LineReader owns its file and buffer; returned string_views point into the buffer
// and are valid until the next call. Thread safety: one object per thread; parse_tsv_line is pure.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/io.h"
#include "leanemb/data_malformed.h"
#include "data/schema.h"

namespace leanemb::data {

struct ParseError {
  MalformedKind kind = MalformedKind::kFieldCount;
  std::string detail;  // "label 'x' is not a number", naming the column (I3, C7) where it helps
};

// Parses one line into *out (its vectors are resized, keeping capacity). Values of a
// categorical field beyond schema.sparse[f].max_len are dropped and added to *truncated.
// Returns false and fills *error when the line is malformed (then *out is unspecified and
// *truncated unchanged). REQUIRES: validate_schema(schema) is OK (num_rows is not used).
bool parse_tsv_line(std::string_view line, const DataSchema& schema, Record* out, int64_t* truncated,
                    ParseError* error);

// Appends `r` as one TSV line (with "\n") to *out. Dense values are written as given in
// `raw_dense` [num_dense] (integers; INT64_MIN = empty field); categorical values as lowercase
// hex, `values` [sum(counts)] feature-major with `counts` [num_sparse].
void append_tsv_line(float label, std::span<const int64_t> raw_dense, std::span<const uint32_t> counts,
                     std::span<const uint64_t> values, std::string* out);

class LineReader {
 public:
  // Lines longer than this fail (the input is probably not TSV).
  static constexpr size_t kMaxLineBytes = size_t{64} << 20;

  // REQUIRES: chunk_bytes >= 1. Reads from the file's current position.
  LineReader(InputFile file, size_t chunk_bytes);

  // Sets *line to the next line; false at end of file.
  // Errors: IoError; InvalidArgument for a line over kMaxLineBytes (naming file and line).
  Result<bool> next(std::string_view* line);
  int64_t line_number() const { return line_number_; }  // 1-based number of the last line returned
  int64_t bytes_read() const { return bytes_read_; }
  const std::string& path() const { return file_.path(); }

 private:
  InputFile file_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  size_t scanned_ = 0;  // [begin_, scanned_) holds no '\n'
  bool eof_ = false;
  int64_t line_number_ = 0;
  int64_t bytes_read_ = 0;
};

}  // namespace leanemb::data
