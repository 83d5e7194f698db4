// The training digest of a `leanemb train` checkpoint: one 32-hex-digit fingerprint of the
// training state a resume restores (embedding rows with their optimizer state, dense
// parameters and their optimizer state, loss scaler, data-reader position, step counters),
// equal for the same state whether one process wrote a plain checkpoint or P processes wrote a
// sharded one. Format details: docs/formats/checkpoint.md, "Training digest".
//
// Two kinds of checkpoint directory (<out>/checkpoints/step-<N>) are accepted:
//   sharded  it has blob "sharded/layout" (table_checkpoint.h): the embedding part is
//            sharded_checkpoint_digest(dir) (every shard it names is read).
//   plain    the trainer's own checkpoint: tables "emb/<name>" (total_rows rows of fat bytes,
//            meta JSON {"dim","dtype","optimizer","state_dtype","stride_bytes"}); the
//            embedding part is computed exactly as collection_digest() would for a collection
//            with those tables (global row = row index, step = train/state "collection_step"),
//            with the tables in the order train/state's "tables" lists them (the trainer
//            writes the collection's order, C1, C2, ..., C10, ..., which is also the table
//            order of a sharded layout of the same model; the manifest's own order, bytewise
//            by name, C1, C10, C2, ..., is not used). A plain checkpoint without "tables" (an
//            older build's) is DataLoss.
//
// Training digest = XXH3-128 (canonical form, 32 lowercase hex digits) of:
//   "leanemb-training-digest-v1"                         (26 bytes)
//   u64 32; the embedding digest (32 ASCII hex digits)
//   u64 num_dense; per blob whose name starts with "dense/", in bytewise name order:
//       u64 name length; name; u64 size; bytes
//   u64 size; bytes of blob "amp/loss_scaler"
//   u64 size; bytes of blob "train/reader"
//   i64 step; i64 samples; i64 skipped_steps; i64 collection_step    (from train/state JSON)
// (little-endian). Not covered: other blobs or tables (e.g. config text), train/state's other
// keys ("format"), file layout, block size, chunking, the shard count and the sharding.
//
// Thread safety: none needed (reads files only; no shared state).
#pragma once

#include <string>

#include "leanemb/env.h"
#include "leanemb/status.h"

namespace leanemb::dist {

// The training digest of checkpoint directory `dir` (see above); env nullptr: the real file
// system. Block checksums are checked as blocks are read.
// Errors: NotFound (no MANIFEST in dir, or a shard of a sharded checkpoint is missing),
// DataLoss (a required blob is missing, naming it; train/state is not JSON or lacks one of the
// four integers; an emb/ table whose meta or shape is invalid; no emb/ table in a plain
// checkpoint; a blob/table of the wrong kind; corrupt data), Unimplemented (newer format),
// IoError.
Result<std::string> training_digest(const std::string& dir, ckpt::Env* env = nullptr);

}  // namespace leanemb::dist
