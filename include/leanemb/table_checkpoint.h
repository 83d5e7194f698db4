// Table checkpoints: save and load every row of an EmbeddingTables (weights and optimizer state,
// byte for byte), dynamic tables' id maps and the step counter, crash-safe, in the checkpoint
// format of leanemb/checkpoint.h (docs/formats/checkpoint.md, docs/dist.md "Sharded
// checkpoints"). This is what `leanemb train`, `leanemb ckpt` and leanemb.torch's save / load use.
//
// Two formats, chosen by the collection:
//   plain    a local collection (one process): one directory <out_dir>/checkpoints/step-<N>/
//            with tables "emb/<name>" of global rows, dynamic partitions as blobs
//            "dyn/<name>/<g>" and the caller's blobs; optionally incremental (below);
//   sharded  a sharded collection (DistributionOptions::comm): each rank writes its own rows as
//            a shard under <out_dir>/shards/, then rank 0 writes the global directory
//            <out_dir>/checkpoints/step-<N>/ naming every shard.
// Loading takes either format at any world size (a sharded checkpoint loads into one process,
// and a plain one into a sharded collection): rows are keyed by their global row id.
//
// Collectives: with a sharded collection, save, load and tables_digest are collective over its
// communicator (every rank calls them with the same arguments, except that only rank 0's blobs
// are written); every rank returns the same verdict (an error on one rank fails every rank).
// The out_dir must be one directory visible to every rank.
//
// Ownership: functions read the collection through EmbeddingTables (read_raw_rows /
// write_raw_rows); nothing is kept after they return. One writer per out_dir at a time (the
// caller's lock, as `leanemb train` holds <out_dir>/LOCK).
// Thread safety: as the collection (one call at a time).
//
// The implementation lives in src/dist (the sharded format's own functions and the per-format
// digests: src/dist/sharded_checkpoint.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "leanemb/checkpoint.h"
#include "leanemb/env.h"
#include "leanemb/status.h"
#include "leanemb/tables.h"

namespace leanemb::dist {

// A caller blob stored in the checkpoint (dense parameters, reader position, ...). With a sharded
// collection rank 0's are written, the others' ignored. Names must be valid checkpoint entry
// names and must not start with "sharded/".
struct ShardedBlob {
  std::string name;
  std::span<const uint8_t> bytes;  // not kept after the call
};

// Incremental checkpoints (docs/formats/checkpoint.md, "Chains"). A plain checkpoint of a local
// collection that tracks its changed rows (EmbeddingCollection::track_changes) whose change base
// is a complete checkpoint of out_dir (same step and id) holds only the rows changed since that
// base, as table "delta/<name>" of their fat rows and blobs "delta_rows/<name>/<k>" of their row
// numbers (src/dist/delta_rows.h), and extends it (WriterOptions::parent_step); the caller's
// blobs and a dynamic table's partitions are written whole. A full checkpoint is written instead
// when there is no such base, every full_every-th link (the chain then holds at most full_every
// checkpoints), or when the links' changed rows would pass max_chain_fraction of the tables' rows
// (a sparse base's own rows not counted). That full checkpoint is a sparse base (only the rows
// changed since the tables' initial state) when the collection tracked its changes from its
// initial rows or from a chain rooted at a sparse base, and that is smaller than every row.
// After every commit the collection's changes are reset to the new checkpoint. Sharded
// collections always write full checkpoints.
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

// Writes checkpoint `step` of `tables` into <out_dir>/checkpoints/step-<N> (the format the
// collection calls for, see the header comment) with the caller's `blobs`. Collective for a
// sharded collection. Errors: InvalidArgument (step < 0, options out of range, a reserved blob
// name), the checkpoint writer's (IoError, "disk full", ResourceExhausted), Internal (a
// collective failed); with a sharded collection every rank fails if one does.
Result<TablesSaveInfo> save_tables_checkpoint(const std::string& out_dir, int64_t step, EmbeddingTables& tables,
                                              std::span<const ShardedBlob> blobs = {}, const TablesSaveOptions& options = {});

struct TablesLoadOptions {
  ckpt::Env* env = nullptr;
  int64_t chunk_rows = 65536;  // rows copied per call
  // Plain checkpoints do not record the collection's step counter (the caller's blobs do): the
  // step to set (< 0: leave it). Sharded checkpoints set their recorded one.
  int64_t collection_step = -1;
};

// Loads rows, dynamic partitions and the step counter of checkpoint `dir` (a step-<N>
// directory) into `tables`; tables are matched by name and must agree in rows, dim, dtype,
// optimizer and state dtype. An incremental checkpoint's whole chain is read (its base, then
// each link's changed rows, then the newest link's dynamic partitions). A local collection that
// tracks changes gets the loaded checkpoint as its change base. Collective. Returns the
// collection step set. After an error in the copy phase (e.g. DataLoss in a block) the rows are
// a mix of old and loaded ones: load again or recreate the collection.
// Errors: InvalidArgument (tables differ, naming every field), NotFound / DataLoss (missing or
// corrupt files), IoError; every rank fails if one does.
Result<int64_t> load_tables_checkpoint(const std::string& dir, EmbeddingTables& tables, const TablesLoadOptions& options = {});

// Everything `--resume`, `leanemb test` / `predict` and load_tables_checkpoint would read of
// checkpoint `dir`, checked: its manifest and every block, when it is the global directory of a
// sharded checkpoint every shard it names, and when it is incremental every link of its chain
// (num_links, base_step; the counts are summed). The report is the global directory's with the
// shards' files, bytes and blocks added (num_shards set). No communicator needed.
// Errors: as ckpt::verify; NotFound (a missing shard or link), DataLoss naming the shard.
Result<ckpt::VerifyReport> verify_tables_checkpoint(const std::string& dir, ckpt::Env* env = nullptr);

// True if `r` is the global directory of a sharded checkpoint.
bool is_sharded_checkpoint(const ckpt::CheckpointReader& r);

// The newest complete checkpoint of either format under <out_dir>/checkpoints (a sharded one
// counts only with every shard; options as ckpt::find_latest_complete). Errors: NotFound (none
// complete: start fresh), IoError.
Result<ckpt::LatestCheckpoint> find_latest_tables_checkpoint(const std::string& out_dir, const ckpt::FindOptions& options = {});

// The embedding digest (32 hex digits; docs/dist.md, "Digest"): XXH3-128 over the step and, per
// table, its name, shape, row layout and an order-free sum over its global rows g of a hash of
// the fat row bound to g. Equal for the same rows, optimizer state and step whatever the world
// size and sharding. Collective for a sharded collection. Errors: the row readers'.
Result<std::string> tables_digest(EmbeddingTables& tables);

}  // namespace leanemb::dist
