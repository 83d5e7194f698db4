// Checkpoints: crash-safe snapshots of training state (docs/formats/checkpoint.md).
//
// A checkpoint is a set of named entries of two kinds:
//   blob   name -> bytes (dense params, optimizer state, loss scaler, RNG counters, reader
//          position, step, config text, ...), held in memory by the caller;
//   table  name -> row_bytes, total_rows, meta bytes and the rows, streamed in row-range chunks
//          in any order (tables may be larger than memory; embedding fat rows are the use).
// It lives in <out_dir>/checkpoints/step-<N>/: data files cut into checksummed blocks, and a
// MANIFEST (entries, sizes, where each chunk is, format version, step, its own checksum)
// written last. Commit is atomic: everything is written into step-<N>.tmp/ and fsynced, then the
// directory is renamed to step-<N> and checkpoints/ is fsynced. A directory without a valid
// manifest, or a .tmp, is never taken as a checkpoint. A commit of step N makes N the newest
// checkpoint: complete directories of steps >= N are removed before it is published (ones
// without a valid manifest are moved into <out_dir>/corrupt/, never deleted), leftovers (.tmp,
// .deleting) and all but the newest `keep_last` complete checkpoints after. A directory without
// a valid manifest is never deleted by a commit. One process writes a given out_dir at a time
// (`leanemb train` holds <out_dir>/LOCK, leanemb/run_dir.h).
//
// Writing:   auto w = CheckpointWriter::create(out_dir, step);  w->add_blob(...);
//            w->add_table(...); w->append_rows(...) ...;  w->commit();
// Resuming:  auto latest = find_latest_complete(out_dir);   // NotFound: start fresh
//            auto r = CheckpointReader::open(latest->ref.path);  r->read_blob / r->read_rows
//
// Every function takes an Env (leanemb/env.h): nullptr means the real file system; tests pass
// a FaultInjectionEnv.
//
// Ownership: a writer or reader owns its open files; the Env must outlive them.
// Thread safety: a CheckpointWriter must be used by one thread at a time. CheckpointReader's
// const methods may be called from several threads at once (reads are serialized inside).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/env.h"
#include "leanemb/status.h"

namespace leanemb::ckpt {

enum class EntryKind : uint8_t { kBlob = 1, kTable = 2 };
std::string_view entry_kind_name(EntryKind kind);  // "blob", "table"

struct WriterOptions {
  Env* env = nullptr;                // nullptr: the real file system
  uint32_t block_bytes = 1u << 20;   // payload bytes per checksummed block, in [1, 64 MiB]
  // Complete checkpoints kept after a commit, this one included; 0 keeps all of them.
  int keep_last = 3;
  // The format written: 2 (a random checkpoint id in the manifest, bound into every block
  // checksum) or 1 (the previous format, no id: for tests of reading old checkpoints).
  uint32_t format_version = 2;
  // Incremental checkpoints (docs/formats/checkpoint.md, "Chains"): the step of the complete
  // checkpoint under the same out_dir that this one extends (-1: none; a full checkpoint).
  // create() opens it and records its step and id in the reserved blob "ckpt/parent"; a reader
  // of this checkpoint then needs it (checkpoint_chain), and cleanup keeps it as long as this
  // one is kept. The entries that say what changed are the caller's (dist/sharded_checkpoint.h).
  int64_t parent_step = -1;
};

// The checkpoint an incremental checkpoint extends: its step and id (32 hex digits).
struct ParentRef {
  int64_t step = -1;
  std::string id_hex;
};
inline constexpr std::string_view kParentBlob = "ckpt/parent";

// Files a checkpoint holds besides its data files, hard-linked into its directory by the caller
// (CheckpointWriter::add_linked_file; a table's store files: leanemb/linked_rows.h). Recorded in
// the reserved blob kLinkedFilesBlob; a reader checks each one's size at open and its hash in
// verify(). docs/formats/checkpoint.md, "Linked files".
struct LinkedFile {
  std::string path;    // relative to the checkpoint's directory
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;   // XXH3-64 of its bytes
};
inline constexpr std::string_view kLinkedFilesBlob = "ckpt/linked_files";

struct CommitInfo {
  int64_t step = 0;
  std::string path;                   // <out_dir>/checkpoints/step-<N>
  uint64_t entry_bytes = 0;           // logical bytes of all entries
  std::vector<std::string> removed;   // directories removed (older complete ones, leftovers)
  // "FROM -> TO": step directories >= this step without a valid manifest, moved into
  // <out_dir>/corrupt/ (never deleted) to make room for this one.
  std::vector<std::string> set_aside;
  // Cleanup failures after the checkpoint was published (the commit itself succeeded).
  std::vector<std::string> warnings;
};

class CheckpointWriter {
 public:
  // Starts checkpoint `step` in <out_dir>/checkpoints/step-<N>.tmp/ (out_dir and checkpoints/
  // are created if missing; a leftover step-<N>.tmp is removed). Nothing is visible to readers
  // before commit().
  // Errors: InvalidArgument (step < 0, block_bytes or keep_last out of range), IoError,
  // IoError "disk full: ...", NotFound (parent of out_dir missing).
  static Result<std::unique_ptr<CheckpointWriter>> create(const std::string& out_dir, int64_t step,
                                                          const WriterOptions& options = {});
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Adds blob `name` with content `bytes` (written now; the span is not kept).
  // Errors: InvalidArgument (bad, duplicate or reserved name: kParentBlob), IoError (also "disk full"; then the
  // writer is failed: every later call returns FailedPrecondition), FailedPrecondition.
  Status add_blob(std::string_view name, std::span<const uint8_t> bytes);

  // Declares table `name` of `total_rows` rows of `row_bytes` bytes each; `meta` is stored with
  // it (e.g. dtype, dim and optimizer of the rows; at most 1 MiB). Rows follow with append_rows.
  // Errors: InvalidArgument (bad or duplicate name, row_bytes not in [1, 2^32], total_rows < 0,
  // meta too large), FailedPrecondition.
  Status add_table(std::string_view name, uint64_t row_bytes, int64_t total_rows,
                   std::span<const uint8_t> meta = {});

  // Appends rows [row_begin, row_begin + n) of table `name`: rows is [n, row_bytes] bytes,
  // row-major. Chunks may come in any order but may not overlap; consecutive chunks are merged.
  // The bytes are written now in blocks; the span is not kept.
  // Errors: NotFound (no such table), InvalidArgument (rows.size() not a multiple of row_bytes,
  // a blob of that name, overlap with rows already written), OutOfRange (rows beyond
  // total_rows), IoError (writer failed), FailedPrecondition.
  Status append_rows(std::string_view name, int64_t row_begin, std::span<const uint8_t> rows);

  // The directory being written (<out_dir>/checkpoints/step-<N>.tmp): files the caller links
  // there move with the commit.
  const std::string& staging_dir() const;
  // Records a file the caller has put at `path` under staging_dir() (a hard link of a file that
  // never changes again), `bytes` long with XXH3-64 `xxh3`. commit() fsyncs the directories that
  // hold such files and records them (kLinkedFilesBlob). Errors: InvalidArgument (an absolute
  // path, "..", a name of the format's own files, a path given twice), FailedPrecondition.
  Status add_linked_file(std::string_view path, uint64_t bytes, uint64_t xxh3);
  // Publishes the checkpoint (see the header comment) and cleans up. After it returns OK the
  // checkpoint survives a crash; on error the previous checkpoints are intact and this one is
  // either absent or complete. Either way the writer is finished.
  // Errors: FailedPrecondition (a table has rows never written: nothing is done and the writer
  // stays usable; called twice; failed earlier), IoError.
  Result<CommitInfo> commit();

  // Removes the .tmp directory of an uncommitted checkpoint. A writer destroyed without a
  // successful commit() does the same (best effort); a crash leaves it, and the next successful
  // commit removes it.
  Status abandon();

 private:
  struct Impl;
  explicit CheckpointWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct EntryInfo {
  std::string name;
  EntryKind kind = EntryKind::kBlob;
  uint64_t size_bytes = 0;      // blob: its size; table: row_bytes * total_rows
  uint64_t row_bytes = 0;       // tables only
  int64_t total_rows = 0;       // tables only
  std::vector<uint8_t> meta;    // tables only
  size_t num_chunks = 0;        // tables only: how the rows are stored (not part of the digest)
};

struct VerifyReport {
  int64_t step = 0;
  size_t num_entries = 0;
  uint64_t entry_bytes = 0;     // logical bytes of all entries
  size_t num_files = 0;         // data files
  uint64_t file_bytes = 0;      // bytes of the data files on disk (checksums included)
  uint64_t num_blocks = 0;      // blocks checked
  size_t num_shards = 0;        // a sharded checkpoint's shards, each verified (0: not sharded)
  uint32_t format_version = 0;  // the manifest's (docs/formats/checkpoint.md)
  std::string checkpoint_id;    // 32 hex digits (format version 2), "none" for version 1
  // dist::verify_tables_checkpoint of an incremental checkpoint: the links of its chain checked
  // (the counts above are their sums) and the step of its full base; 1 and this step otherwise.
  size_t num_links = 1;
  int64_t base_step = -1;
  bool sparse_base = false;  // the chain's root holds only the rows changed since the initial rows
  size_t num_linked_files = 0;   // linked files (kLinkedFilesBlob), each hashed
  uint64_t linked_bytes = 0;
};

class CheckpointReader {
 public:
  // Opens the checkpoint directory `dir` (step-<N>): reads and checks the manifest (checksum,
  // version, consistency) and the size of every data file. Block checksums are checked as
  // blocks are read (or all at once by verify()).
  // Errors: NotFound (no MANIFEST: not a checkpoint, or an incomplete one), DataLoss (corrupt
  // manifest, missing or wrongly sized data file or linked file), Unimplemented (newer format),
  // IoError.
  static Result<std::unique_ptr<CheckpointReader>> open(const std::string& dir, Env* env = nullptr);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  int64_t step() const;
  const std::string& dir() const;
  uint32_t format_version() const;
  // The checkpoint id bound into every block checksum: 32 hex digits, "none" (version 1).
  std::string id_hex() const;
  const std::vector<EntryInfo>& entries() const;   // sorted by name (bytewise)
  const EntryInfo* find(std::string_view name) const;  // nullptr if there is no such entry
  // The checkpoint this one extends (WriterOptions::parent_step), or none for a full one.
  const std::optional<ParentRef>& parent() const;
  // The files linked into the checkpoint (kLinkedFilesBlob; empty: none). open() checked that
  // each exists with its size; verify() checks their hashes.
  const std::vector<LinkedFile>& linked_files() const;

  // The content of blob `name`. Errors: NotFound, InvalidArgument (a table), DataLoss (a block
  // fails its checksum: the message names file, block and entry), IoError.
  Result<std::vector<uint8_t>> read_blob(std::string_view name) const;

  // Rows [row_begin, row_begin + count) of table `name` into out: [count, row_bytes] bytes,
  // from whichever chunks hold them. Errors: NotFound, InvalidArgument (a blob, or out.size()
  // != count * row_bytes), OutOfRange (rows beyond total_rows), DataLoss, IoError.
  Status read_rows(std::string_view name, int64_t row_begin, int64_t count, std::span<uint8_t> out) const;

  // Reads every block of every data file and checks its checksum, then (hash_linked_files) every
  // linked file's hash (each file once per process: the links of a chain share them).
  // Errors: DataLoss naming the file, the block (index and byte offset) and the entries in it;
  // DataLoss naming a linked file whose bytes differ.
  Result<VerifyReport> verify(bool hash_linked_files = true) const;

  // 32 hex digits: XXH3-128 of the logical content (step, and per entry in name order its kind,
  // name, and bytes or row_bytes/total_rows/meta/rows in row order). Independent of block size,
  // of how tables were chunked and of which files hold what. Errors: as read_blob.
  Result<std::string> digest() const;

 private:
  struct Impl;
  explicit CheckpointReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// CheckpointReader::open(dir)->verify() and ->digest().
Result<VerifyReport> verify(const std::string& dir, Env* env = nullptr);
Result<std::string> digest(const std::string& dir, Env* env = nullptr);

struct CheckpointRef {
  int64_t step = -1;
  std::string path;  // <out_dir>/checkpoints/step-<N>
};

// <out_dir>/checkpoints
std::string checkpoints_dir(const std::string& out_dir);

// Every step-<N> directory under <out_dir>/checkpoints (complete or not; .tmp excluded), by
// increasing step. Empty if checkpoints/ does not exist. Errors: IoError.
Result<std::vector<CheckpointRef>> list_checkpoints(const std::string& out_dir, Env* env = nullptr);

// The checkpoints a restore of `dir` reads, oldest first: the full checkpoint at the root of its
// chain, then each incremental one up to `dir` itself ([dir] for a full checkpoint). Each
// parent must be a complete checkpoint in the same checkpoints/ directory with the id its child
// recorded; verify_blocks: every block of every link is checked too.
// Errors: NotFound (a parent is missing, naming it), DataLoss (a parent's id differs: it was
// replaced by another checkpoint of that step; a corrupt link), as open() and verify().
Result<std::vector<CheckpointRef>> checkpoint_chain(const std::string& dir, Env* env = nullptr, bool verify_blocks = false);

struct FindOptions {
  Env* env = nullptr;
  // true: read and check every block (a checkpoint whose data rotted is skipped too);
  // false: check only the manifest and the data file sizes (fast). Either way linked files are
  // checked by size only: hashing them reads a whole store (tens of GB) at every --resume;
  // `leanemb ckpt verify` / `list` hash them.
  bool verify_blocks = true;
  // Print "leanemb: warning: ..." to stderr for each checkpoint skipped.
  bool warn_to_stderr = true;
};

struct LatestCheckpoint {
  CheckpointRef ref;
  std::vector<std::string> skipped;  // one line per newer directory skipped, with the reason
};

// The newest complete checkpoint under <out_dir>/checkpoints: newer directories that fail the
// checks are skipped (with a warning), falling back to older ones. An incremental checkpoint is
// complete only with its whole chain (checkpoint_chain, with verify_blocks).
// Errors: NotFound (none complete: start fresh; the message lists what was skipped), IoError.
Result<LatestCheckpoint> find_latest_complete(const std::string& out_dir, const FindOptions& options = {});

}  // namespace leanemb::ckpt
