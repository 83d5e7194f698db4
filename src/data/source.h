// RecordSource: the records of one input file, in file order, whatever its format. The format is
// detected from the first bytes (the binary magic "LEANEMBD"; anything else is TSV).
//
// TSV sources skip malformed lines, reporting each to the MalformedTracker (which may fail the
// read when the malformed rate is too high); binary sources add their header's count of lines
// dropped at conversion to DataStats::converted_malformed. Both count records, truncated values
// and bytes in the tracker's stats.
//
// Ownership: a source owns its file; the tracker is borrowed and must outlive the source.
// Thread safety: one source per thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "leanemb/data_malformed.h"
#include "data/schema.h"

namespace leanemb::data {

enum class FileFormat : uint8_t { kTsv, kBinary };

class RecordSource {
 public:
  virtual ~RecordSource() = default;
  // Fills *r with the next good record; false at end of file. Errors: those of the format
  // (IoError, DataLoss) and the tracker's malformed-rate failure (InvalidArgument).
  virtual Result<bool> next(Record* r) = 0;
  virtual FileFormat format() const = 0;
};

// Reads the first bytes of `path` and says which format it holds. Errors: NotFound, IoError.
Result<FileFormat> detect_format(const std::string& path);

// Opens `path` for `schema` (num_dense/num_sparse must match a binary file's header; max_len
// applies to both formats). TSV is read in chunks of `chunk_bytes`.
// Errors: NotFound, IoError, DataLoss, InvalidArgument (schema does not match the file).
Result<std::unique_ptr<RecordSource>> open_record_source(const std::string& path, const DataSchema& schema,
                                                         MalformedTracker* tracker, size_t chunk_bytes);

}  // namespace leanemb::data
