// Linked rows: a table's rows kept by hard links of its store's files instead of copies
// (docs/tiered.md, "file, log layout"; docs/formats/checkpoint.md, "Linked rows").
//
// A log-layout file store writes each segment file once, from empty to sealed, so a checkpoint
// can hold the store's rows by hard-linking its sealed files and recording where each row's
// newest copy is (a place: file and byte offset). The store goes on writing new files; the
// linked ones keep their bytes as long as a link to them exists. Restoring links the files back
// into a new store (no row copied) or, for another kind of table, reads the rows from them.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb {

struct LinkedRowFile {
  std::string name;    // in the directory the files were linked into
  uint64_t bytes = 0;  // its size
  uint64_t hash = 0;   // XXH3-64 of its bytes
};

struct LinkedRows {
  std::vector<LinkedRowFile> files;
  // The layout the places assume: a store adopts the files only when its own is the same.
  size_t row_bytes = 0;
  uint32_t block_bytes = 0;
  uint64_t segment_bytes = 0;
  uint64_t rows = 0;  // rows with a place
};

struct RowPlace {
  int64_t row = 0;
  uint32_t file = 0;    // index in LinkedRows::files
  uint64_t offset = 0;  // of the row's bytes in that file
};

// Receives places in ascending row order, a chunk at a time.
using RowPlaceSink = std::function<Status(std::span<const RowPlace>)>;
// Gives places, a chunk at a time; an empty chunk: no more.
using RowPlaceSource = std::function<Result<std::span<const RowPlace>>()>;

}  // namespace leanemb
