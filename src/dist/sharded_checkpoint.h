// Sharded checkpoints of any EmbeddingTables (a sharded collection; a local one is a world of one
// rank): crash-safe, loadable at any world size (resharding), with a digest that does not depend
// on the shard count. Layout and protocol in docs/dist.md ("Sharded checkpoints") and
// docs/formats/checkpoint.md.
//
//   <out_dir>/shards/rank-<r>-of-<P>/checkpoints/step-<N>/   rank r's shard: a normal
//        checkpoint (CheckpointWriter) with table "rows/<name>" = its own rows of each table, in
//        local row order (fat bytes: weights and optimizer state exactly as stored), and blob
//        "shard/info" (rank, P, step); with incremental checkpoints a link of the rank's shard
//        chain instead (table "delta/<name>" and blobs "delta_rows/<name>/<k>": the rows changed
//        since its parent, the rank's previous shard checkpoint). Checkpoints written before
//        shard chains have their shards in <out_dir>/shards/step-<N>/rank-<r>-of-<P>/ (the
//        layout names the directory: both load).
//   <out_dir>/checkpoints/step-<N>/    the global checkpoint, written by rank 0 last, after
//        every rank committed its shard: blob "sharded/layout" (P, step, every table's shape,
//        row layout and sharding, each shard's directory and the XXH3-64 of its MANIFEST) and
//        the caller's blobs (dense parameters, ...).
// Which global row a shard's local row is follows from the sharding recorded in the layout
// (ShardPlan with the saved P). A global checkpoint is complete only if its own manifest is
// valid and every shard it names exists, has the recorded MANIFEST and verifies, with its whole
// chain (each parent exists with the recorded id and verifies); a checkpoint missing a shard or
// a link is never taken (find_latest_complete_sharded falls back to an older one).
//
// Loading at P' (any P' >= 1): each rank reads the global rows it owns under its own plan from
// whichever shards hold them (rows are keyed by global row id), copies the fat bytes exactly
// into its local collection and sets the step. The sharding kind may differ too.
//
// Collectives: save, load and sharded_collection_digest are collective over the collection's
// communicator (every rank calls them with the same arguments, except that only rank 0's
// blobs are written); every rank returns the same verdict. The out_dir must be one directory
// visible to every rank (a shared file system across nodes).
//
// The entry points for either format (EmbeddingTables::save / load, and
// verify_tables_checkpoint, tables_digest, ...) are public: leanemb/table_checkpoint.h. This
// header adds the sharded format's own functions and the per-format digests.
//
// Thread safety: as the collection (one call at a time, the communicator used by no one else).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/sharded_collection.h"
#include "leanemb/checkpoint.h"
#include "leanemb/embedding.h"
#include "leanemb/table_checkpoint.h"
#include "table/sharded_layout.h"

namespace leanemb::dist {

struct ShardedSaveOptions {
  ckpt::Env* env = nullptr;         // this rank's Env; nullptr: the real file system
  uint32_t block_bytes = 1u << 20;  // as WriterOptions::block_bytes
  // Global checkpoints kept after a commit, this one included (0 keeps all). Shard directories
  // that no remaining global checkpoint names are removed after each commit.
  int keep_last = 3;
  int64_t chunk_rows = 4096;        // rows copied per read_raw_rows / append_rows
  // Called after each chunk of rows this rank writes, with (rows written, rows to write), on the
  // calling thread (`leanemb train`'s progress line on a terminal). Null: none.
  std::function<void(int64_t, int64_t)> progress;
  // Incremental checkpoints (leanemb/table_save.h; link_store_rows is one-process only and
  // ignored here): each rank's shard extends its previous shard checkpoint with the rows changed
  // since (its local collection tracks them: EmbeddingCollection::track_changes), a full shard
  // every full_every-th checkpoint or when the chains' rows would pass max_chain_fraction of all
  // rows. The ranks agree, so a global checkpoint's shards are all links or all full.
  IncrementalOptions incremental;
};

struct ShardedSaveInfo {
  int64_t step = 0;
  std::string global_dir;                 // <out_dir>/checkpoints/step-<N>
  std::string shard_dir;                  // this rank's shard checkpoint directory
  int64_t parent_step = -1;               // the shard checkpoints' parent step (-1: full shards)
  int64_t rows_written = 0;               // every rank's embedding rows written (all of them when full)
  uint64_t row_bytes = 0;                 // their fat-row bytes
  std::vector<std::string> removed;       // rank 0: global and shard directories removed
  std::vector<std::string> warnings;      // rank 0: cleanup failures (the commit stands)
};

// Writes checkpoint `step` of `coll` (see the header comment). Collective. If any rank fails
// to write its shard, no rank writes the global manifest and every rank returns an error
// naming the failed rank(s) (a rank's own error first on that rank).
// Errors: InvalidArgument (step < 0, chunk_rows < 1, keep_last < 0; a reserved blob name on rank 0 fails
// like a shard write of rank 0), the checkpoint writer's errors (IoError, ResourceExhausted,
// ...; the other ranks get IoError naming the failed ranks), Internal (a collective failed).
Result<ShardedSaveInfo> save_sharded_checkpoint(const std::string& out_dir, int64_t step,
                                                EmbeddingTables& coll,
                                                std::span<const ShardedBlob> blobs = {},
                                                const ShardedSaveOptions& options = {});

// Checks global checkpoint `global_dir` (<out_dir>/checkpoints/step-<N>) and every shard it
// names: manifests (shard MANIFEST bytes equal to the recorded checksum), the shard's info and
// tables, and with verify_blocks every block's checksum. No communicator needed.
// Errors: NotFound (no manifest or a missing shard), DataLoss (corrupt or mismatched), IoError.
Status verify_sharded_checkpoint(const std::string& global_dir, ckpt::Env* env = nullptr, bool verify_blocks = true);

// The newest complete sharded checkpoint under <out_dir>/checkpoints (FindOptions as for
// ckpt::find_latest_complete; skipped directories are listed with the reason).
// Errors: NotFound (none complete), IoError.
Result<ckpt::LatestCheckpoint> find_latest_complete_sharded(const std::string& out_dir,
                                                            const ckpt::FindOptions& options = {});

struct ShardedLoadOptions {
  ckpt::Env* env = nullptr;
  int64_t chunk_rows = 4096;
};

// step (the checkpoint's N), collection_step (now set on every rank), saved_world_size (P of
// the saving run), rows_loaded (global rows copied into this rank's collection).
using ShardedLoadInfo = table_ckpt::ShardedLoadInfo;

// Loads global checkpoint `global_dir` into `coll` at the collection's world size. Collective.
// Tables must match by name, count, rows, dim, dtype, optimizer, state dtype and row stride.
// On error every rank fails; after an error in the copy phase (e.g. DataLoss in a block) the
// collection's rows are a mix of old and loaded rows: load again or recreate it.
// Errors: InvalidArgument (tables differ, with the difference), NotFound / DataLoss (missing
// or corrupt files), IoError, Internal (a collective failed).
Result<ShardedLoadInfo> load_sharded_checkpoint(const std::string& global_dir, EmbeddingTables& coll,
                                                const ShardedLoadOptions& options = {});

// Embedding digest, 32 hex digits, equal for the same rows whatever the shard count:
// XXH3-128 over the step and, per table in order, its name, shape and row layout and a 128-bit
// sum (mod 2^64 per half) over its global rows g of XXH3-128(fat row bytes, seed =
// XXH3-64(g as u64, seed = XXH3-64(table name))). The sum makes the order of the rows (and so
// the sharding) irrelevant while each row stays bound to its global row id.
Result<std::string> collection_digest(const EmbeddingCollection& coll);
// Collective: each rank sums its own rows, the sums are all-reduced; every rank gets the digest.
Result<std::string> sharded_collection_digest(EmbeddingTables& coll);
// From a global checkpoint on disk (reads every shard; no communicator). Equal to
// collection_digest / sharded_collection_digest of the collection that was saved.
Result<std::string> sharded_checkpoint_digest(const std::string& global_dir, ckpt::Env* env = nullptr);

}  // namespace leanemb::dist
