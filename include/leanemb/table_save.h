// The options and results of EmbeddingTables::save / load (leanemb/tables.h): what a table
// checkpoint writes and reads (docs/formats/checkpoint.md, docs/dist.md "Sharded checkpoints").
// The formats and the other checkpoint functions (verify, find, digest) are described in
// leanemb/table_checkpoint.h.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace leanemb {

namespace ckpt {
class Env;
}

// A caller blob stored in the checkpoint (dense parameters, reader position, ...). With a sharded
// collection rank 0's are written, the others' ignored. Names must be valid checkpoint entry
// names and must not start with "sharded/".
struct CheckpointBlob {
  std::string name;
  std::span<const uint8_t> bytes;  // not kept after the call
};

// Incremental checkpoints (docs/formats/checkpoint.md, "Chains"). A plain checkpoint of a local
// collection that tracks its changed rows (EmbeddingCollection::track_changes) whose change base
// is a complete checkpoint of out_dir (same step and id) holds only the rows changed since that
// base, as table "delta/<name>" of their fat rows and blobs "delta_rows/<name>/<k>" of their row
// numbers (src/table/delta_rows.h), and extends it (WriterOptions::parent_step); the caller's
// blobs and a dynamic table's partitions are written whole. A full checkpoint is written instead
// when there is no such base, every full_every-th link (the chain then holds at most full_every
// checkpoints), or when the links' changed rows would pass max_chain_fraction of the tables' rows
// (a sparse base's own rows not counted). That full checkpoint is a sparse base (only the rows
// changed since the tables' initial state) when the collection tracked its changes from its
// initial rows or from a chain rooted at a sparse base, and that is smaller than every row.
// After every commit the collection's changes are reset to the new checkpoint. A sharded
// collection keeps a chain per rank of its shards (its local collection tracks the changes;
// dist::ShardedSaveOptions::incremental; no sparse bases, no linked rows).
struct IncrementalOptions {
  bool enabled = false;
  int full_every = 8;               // >= 1 (1: every checkpoint full)
  double max_chain_fraction = 0.5;  // in (0, 1]
  // Tables whose rows live in a log-layout file store on out_dir's file system
  // (EmbeddingCollection::can_link_rows) are kept by hard links of the store's files instead of
  // copies, in every checkpoint, full or not (docs/formats/checkpoint.md, "Linked rows"): a
  // checkpoint then writes only their changed rows still in the cache (into the store) and where
  // each row is. One-process collections only; independent of `enabled`.
  bool link_store_rows = false;
};

struct TablesSaveOptions {
  ckpt::Env* env = nullptr;         // this rank's file system; nullptr: the real one
  uint32_t block_bytes = 1u << 20;  // as WriterOptions::block_bytes
  int keep_last = 3;                // as WriterOptions::keep_last (0 keeps all)
  int64_t chunk_rows = 65536;       // rows copied per read_raw_rows / append_rows
  // Called after each chunk of rows this rank writes with (rows written, rows to write), on the
  // calling thread (`leanemb train`'s progress line). Null: none.
  std::function<void(int64_t, int64_t)> progress;
  IncrementalOptions incremental;
};

struct TablesSaveInfo {
  std::string path;                   // <out_dir>/checkpoints/step-<N> (the global directory)
  std::vector<std::string> warnings;  // cleanup failures (the commit stands)
  std::vector<std::string> set_aside; // plain: incomplete step directories moved aside (CommitInfo)
  int64_t parent_step = -1;           // the checkpoint an incremental one extends (-1: full)
  bool sparse_base = false;           // full, as a sparse base (only the rows changed since create)
  int64_t rows_written = 0;           // embedding rows written (all of them when full), linked tables' not counted
  int64_t rows_linked = 0;            // rows of linked tables kept by links (IncrementalOptions::link_store_rows)
  int linked_tables = 0;              // tables kept by links
  uint64_t entry_bytes = 0;           // plain: logical bytes of all entries (CommitInfo::entry_bytes);
                                      // sharded: the fat rows' bytes (rows x stride)
};

struct TablesLoadOptions {
  ckpt::Env* env = nullptr;
  int64_t chunk_rows = 65536;  // rows copied per call
  // Plain checkpoints do not record the collection's step counter (the caller's blobs do): the
  // step to set (< 0: leave it). Sharded checkpoints set their recorded one.
  int64_t collection_step = -1;
};

}  // namespace leanemb
