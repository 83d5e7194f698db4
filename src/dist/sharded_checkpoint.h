// Sharded checkpoints of any EmbeddingTables (a sharded collection; a local one is a world of one
// rank): crash-safe, loadable at any world size
// (resharding), with a digest that does not depend on the shard count. Layout and protocol in
// docs/dist.md ("Sharded checkpoints") and docs/formats/checkpoint.md.
//
//   <out_dir>/shards/step-<N>/rank-<r>-of-<P>/checkpoints/step-<N>/   rank r's shard: a normal
//        checkpoint (CheckpointWriter) with table "rows/<name>" = its own rows of each table, in
//        local row order (fat bytes: weights and optimizer state exactly as stored), and blob
//        "shard/info" (rank, P, step)
//   <out_dir>/checkpoints/step-<N>/    the global checkpoint, written by rank 0 last, after
//        every rank committed its shard: blob "sharded/layout" (P, step, every table's shape,
//        row layout and sharding, each shard's directory and the XXH3-64 of its MANIFEST) and
//        the caller's blobs (dense parameters, ...).
// Which global row a shard's local row is follows from the sharding recorded in the layout
// (ShardPlan with the saved P). A global checkpoint is complete only if its own manifest is
// valid and every shard it names exists, has the recorded MANIFEST and verifies; a checkpoint
// missing a shard is never taken (find_latest_complete_sharded falls back to an older one).
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

namespace leanemb::ckpt {
class Env;
}

namespace leanemb::dist {

// A caller blob stored in the global checkpoint (rank 0's are written; others are ignored).
// Names must be valid checkpoint entry names and must not start with "sharded/".
struct ShardedBlob {
  std::string name;
  std::span<const uint8_t> bytes;
};

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
};

struct ShardedSaveInfo {
  int64_t step = 0;
  std::string global_dir;                 // <out_dir>/checkpoints/step-<N>
  std::string shard_dir;                  // this rank's shard checkpoint directory
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

// Everything `--resume`, `leanemb test` / `predict` and `load_tables_checkpoint` would read of
// checkpoint `dir`, checked: its manifest and every block, when it is the global directory
// of a sharded checkpoint every shard it names (verify_sharded_checkpoint), and when it is
// incremental every link of its chain (num_links, base_step; the counts are summed). The report is the
// global directory's with the shards' files, bytes and blocks added (num_shards set).
// Errors: as ckpt::verify and verify_sharded_checkpoint; a shard's name it.
Result<ckpt::VerifyReport> verify_tables_checkpoint(const std::string& dir, ckpt::Env* env = nullptr);

// The newest complete sharded checkpoint under <out_dir>/checkpoints (FindOptions as for
// ckpt::find_latest_complete; skipped directories are listed with the reason).
// Errors: NotFound (none complete), IoError.
Result<ckpt::LatestCheckpoint> find_latest_complete_sharded(const std::string& out_dir,
                                                            const ckpt::FindOptions& options = {});

struct ShardedLoadOptions {
  ckpt::Env* env = nullptr;
  int64_t chunk_rows = 4096;
};

struct ShardedLoadInfo {
  int64_t step = 0;              // the checkpoint's step N
  int64_t collection_step = 0;   // the collection's step counter, now set on every rank
  int saved_world_size = 0;      // P of the saving run
  int64_t rows_loaded = 0;       // global rows copied into this rank's collection
};

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

// ---- any collection, either format ----------------------------------------------------------
// A local collection writes a plain checkpoint (one directory: tables "emb/<name>" of global
// rows, dynamic partitions as blobs "dyn/<name>/<g>", the caller's blobs); a sharded one writes
// the sharded checkpoint above. Loading takes either format at any world size.

// Incremental checkpoints (docs/formats/checkpoint.md, "Chains"). A plain checkpoint of a local
// collection that tracks its changed rows (EmbeddingCollection::track_changes) whose change base
// is a complete checkpoint of out_dir (same step and id) holds only the rows changed since that
// base, as table "delta/<name>" of their fat rows and blobs "delta_rows/<name>/<k>" of their row
// numbers (dist/delta_rows.h), and extends it
// (WriterOptions::parent_step); the caller's blobs and a dynamic table's partitions are written
// whole. A full checkpoint is written instead when there is no such base, every full_every-th
// link (the chain then holds at most full_every checkpoints), or when the links' changed rows
// would pass max_chain_fraction of the tables' rows (a sparse base's own rows not counted). That
// full checkpoint is a sparse base (delta_rows.h: only the rows
// changed since the tables' initial state) when the collection tracked its changes from its
// initial rows or from a chain rooted at a sparse base, and that is smaller than every row.
// After every commit the collection's changes are reset to the new checkpoint. Sharded
// collections always write full checkpoints.
struct IncrementalOptions {
  bool enabled = false;
  int full_every = 8;               // >= 1 (1: every checkpoint full)
  double max_chain_fraction = 0.5;  // in (0, 1]
};

struct TablesSaveOptions {
  ckpt::Env* env = nullptr;
  uint32_t block_bytes = 1u << 20;
  int keep_last = 3;          // as WriterOptions::keep_last
  int64_t chunk_rows = 65536;  // rows copied per call
  std::function<void(int64_t, int64_t)> progress;  // as ShardedSaveOptions::progress
  IncrementalOptions incremental;
};

struct TablesSaveInfo {
  std::string path;                   // <out_dir>/checkpoints/step-<N> (the global directory)
  std::vector<std::string> warnings;  // cleanup failures (the commit stands)
  std::vector<std::string> set_aside; // plain: incomplete step directories moved aside (CommitInfo)
  int64_t parent_step = -1;           // the checkpoint an incremental one extends (-1: full)
  bool sparse_base = false;           // full, as a sparse base (only the rows changed since create)
  int64_t rows_written = 0;           // embedding rows written (all of them when full)
  uint64_t entry_bytes = 0;           // plain: logical bytes of all entries (CommitInfo::entry_bytes);
                                      // sharded: the fat rows' bytes (rows x stride)
};

// Collective for a sharded collection (only rank 0's blobs are written). Errors: the writers'.
Result<TablesSaveInfo> save_tables_checkpoint(const std::string& out_dir, int64_t step, EmbeddingTables& tables,
                                              std::span<const ShardedBlob> blobs = {}, const TablesSaveOptions& options = {});

// True if `r` is the global directory of a sharded checkpoint.
bool is_sharded_checkpoint(const ckpt::CheckpointReader& r);

// The newest complete checkpoint of either format under <out_dir>/checkpoints (a sharded one
// counts only with every shard). Errors: NotFound, IoError.
Result<ckpt::LatestCheckpoint> find_latest_tables_checkpoint(const std::string& out_dir, const ckpt::FindOptions& options = {});

struct TablesLoadOptions {
  ckpt::Env* env = nullptr;
  int64_t chunk_rows = 65536;
  // Plain checkpoints do not record the collection's step counter (the caller's blobs do): the
  // step to set (< 0: leave it). Sharded checkpoints set their recorded one.
  int64_t collection_step = -1;
};

// Loads rows, dynamic partitions and the step counter of checkpoint `dir` into `tables`; an
// incremental checkpoint's whole chain is read (its base, then each link's changed rows, then
// the newest link's dynamic partitions). A local collection that tracks changes gets the loaded
// checkpoint as its change base. Collective. Returns the collection step set. Errors: InvalidArgument (tables differ),
// NotFound / DataLoss (missing or corrupt files), IoError; every rank fails if one does.
Result<int64_t> load_tables_checkpoint(const std::string& dir, EmbeddingTables& tables, const TablesLoadOptions& options = {});

}  // namespace leanemb::dist
