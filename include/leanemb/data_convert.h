// TSV -> binary conversion (leanemb convert). Reads one input file (TSV, or binary to re-block
// it) and writes every good record, all categorical values kept (no max_len) as 64-bit hashes,
// so table sizes and max_len are still chosen at read time. Malformed lines follow the same
// policy as the reader; their count is stored in the output header.
//
// Thread safety: a pure function of its options and files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "leanemb/data_malformed.h"

namespace leanemb::data {

struct ConvertOptions {
  std::string input;   // TSV (or binary) file
  std::string output;  // binary file to write (via output.tmp, renamed when complete)
  int num_dense = 13;
  int num_sparse = 26;
  MalformedPolicy malformed;  // fails the conversion (no output) above max_rate
  size_t read_chunk_bytes = size_t{4} << 20;
  size_t block_bytes = size_t{1} << 20;  // payload per checksummed block
  // Called every few thousand records with the input bytes read and the records written so far
  // (a terminal's progress line, core/progress.h); null = none.
  std::function<void(int64_t bytes_read, int64_t records)> progress;
};

struct ConvertReport {
  DataStats stats;         // lines, malformed by kind, bytes read
  int64_t records = 0;     // records written
  double seconds = 0.0;
};

// Errors: InvalidArgument (bad options, malformed rate above the limit), NotFound, IoError,
// DataLoss (a corrupt binary input). On error no output file exists.
Result<ConvertReport> convert_to_binary(const ConvertOptions& options);

}  // namespace leanemb::data
