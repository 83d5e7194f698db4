// Table checkpoints: every row of an EmbeddingTables (weights and optimizer state, byte for
// byte), dynamic tables' id maps and the step counter, crash-safe, in the checkpoint format of
// leanemb/checkpoint.h (docs/formats/checkpoint.md, docs/dist.md "Sharded checkpoints"). Saving
// and loading are the tables' own methods (EmbeddingTables::save / load, leanemb/tables.h; their
// options in leanemb/table_save.h); this header describes the formats and holds what needs no
// collection: verify, find the newest, and the digest. This is what `leanemb train`,
// `leanemb ckpt` and leanemb.torch use.
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
// Ownership: save / load read the collection through EmbeddingTables (read_raw_rows /
// write_raw_rows, local_shard()); nothing is kept after they return. One writer per out_dir at a time (the
// caller's lock, as `leanemb train` holds <out_dir>/LOCK).
// Thread safety: as the collection (one call at a time).
//
// The plain format lives in src/table (table_checkpoint.h: save of a local collection, the plain
// chain's load), the sharded format, the load of either format, verify, find and the digests in
// src/dist (sharded_checkpoint.h), which may include src/table but not the reverse.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "leanemb/checkpoint.h"
#include "leanemb/env.h"
#include "leanemb/status.h"
#include "leanemb/table_save.h"
#include "leanemb/tables.h"

namespace leanemb::dist {

// Saving and loading are EmbeddingTables::save / load (the free functions save_tables_checkpoint
// and load_tables_checkpoint are gone). Their option and result types live in
// leanemb/table_save.h (namespace leanemb); these names stay for callers written against them.
using ShardedBlob = ::leanemb::CheckpointBlob;
using ::leanemb::IncrementalOptions;
using ::leanemb::TablesLoadOptions;
using ::leanemb::TablesSaveInfo;
using ::leanemb::TablesSaveOptions;

// Everything `--resume`, `leanemb test` / `predict` and EmbeddingTables::load would read of
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
