// Linked tables in plain checkpoints (docs/formats/checkpoint.md, "Linked rows"): a table whose
// rows live in a log-layout file store (EmbeddingCollection::can_link_rows) is checkpointed by
// hard-linking the store's files into the checkpoint instead of copying its rows:
//
//   blob "links/<name>"          JSON: the table's meta as in "delta/<name>" (dim, dtype,
//                                optimizer, state_dtype, stride_bytes, table_rows, initial) plus
//                                the files' layout ("row_bytes", "block_bytes", "segment_bytes"),
//                                "places" (rows with a place), "dir" (where the files are,
//                                relative to the checkpoint) and "files" [{name, bytes, hash}]
//   blobs "link_places/<name>/<k>"  places [k x N, (k + 1) x N) of the table's (N =
//                                "places_per_blob", 2^20), in ascending row order: u64
//                                count, then per place three LEB128
//                                varints: the gap to the row before (row_i - row_{i-1} - 1), the
//                                file's index in "files", the row's byte offset in the file
//   files <dir>/<name>           the linked files (CheckpointWriter::add_linked_file)
//
// A linked table is a complete state: rows with a place hold the bytes there, every other row
// its initial bytes (as a sparse base's). In a chain, the newest checkpoint holding the table
// as links is the table's root; links after it may hold its changed rows ("delta/<name>").
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "table/delta_rows.h"
#include "leanemb/checkpoint.h"
#include "leanemb/embedding.h"
#include "leanemb/linked_rows.h"
#include "leanemb/status.h"

namespace leanemb::table_ckpt {

inline constexpr char kLinksPrefix[] = "links/";
inline constexpr char kLinkPlacesPrefix[] = "link_places/";
inline constexpr int64_t kPlacesPerBlob = int64_t{1} << 20;
// Testing: the places per blob the writer uses from now on (0: kPlacesPerBlob); the blob records
// it ("places_per_blob"), so readers take any. Returns the previous value.
int64_t set_places_per_blob_for_testing(int64_t n);

// Links table t into the checkpoint `w` writes (files under <staging>/links/<t>/, then the
// blobs above). Returns the rows with a place. Errors: the store's, the writer's.
Result<int64_t> write_linked_table(ckpt::CheckpointWriter& w, EmbeddingCollection& emb, int t, uint64_t seed);

// True if checkpoint `r` holds table `name` as linked rows.
bool has_linked_table(const ckpt::CheckpointReader& r, const std::string& name);

// A linked table as read from a checkpoint (its blob, checked).
struct LinkedTable {
  std::string name;
  int64_t num_rows = 0;  // the table's rows
  std::vector<uint8_t> meta;  // the JSON (for the table checks and the initial rows)
  std::string dir;       // where the files are (absolute: the checkpoint's directory + "dir")
  int64_t places_per_blob = kPlacesPerBlob;
  LinkedRows linked;
};
// Errors: DataLoss (a malformed blob, naming it).
Result<LinkedTable> read_linked_table(const ckpt::CheckpointReader& r, const std::string& name);

// The table's places blob by blob (next(): the next blob's, checked; empty after the last).
class PlaceCursor {
 public:
  PlaceCursor(const ckpt::CheckpointReader& r, const LinkedTable& lt);
  Result<std::span<const RowPlace>> next();  // valid until the next call

 private:
  const ckpt::CheckpointReader& r_;
  const LinkedTable& lt_;
  int64_t k_ = 0, prev_ = -1;
  std::vector<RowPlace> places_;
};
// The table's places, a chunk at a time, in ascending row order. Errors: DataLoss (a malformed
// places blob), the reader's, fn's.
Status for_each_place_chunk(const ckpt::CheckpointReader& r, const LinkedTable& lt,
                            const std::function<Status(std::span<const RowPlace>)>& fn);
// fn(row, fat row) for every row with a place, in the order of the files and the rows' places in
// them (each file read once, front to back), its bytes read from the linked files. Holds every
// place of the table in memory (16 bytes each). Errors: as above, NotFound / IoError / DataLoss
// (a file), fn's.
Status for_each_linked_row(const ckpt::CheckpointReader& r, const LinkedTable& lt,
                           const std::function<Status(int64_t, std::span<const uint8_t>)>& fn);

// Loads linked table `lt` into table t of `tables`: a local table that holds its initial rows
// and can link takes the files as they are (adopt_linked_rows: no row copied); any other table
// gets its initial rows and then each row with a place (copied). `writer_initial`: the rows
// without a place hold these initial bytes, not the collection's (another seed or initializer:
// every row is written); null: the collection's. `adopted` (may be null): which way it went.
Status load_linked_table(const ckpt::CheckpointReader& r, const LinkedTable& lt, EmbeddingTables& tables,
                         EmbeddingCollection* local, int t, int64_t chunk_rows, const InitialRows* writer_initial, bool* adopted);

}  // namespace leanemb::table_ckpt
