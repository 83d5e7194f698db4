// Internal to the library (not installed): the plain checkpoint format of a collection's tables
// (docs/formats/checkpoint.md; the public side is EmbeddingTables::save / load, leanemb/tables.h,
// and leanemb/table_checkpoint.h):
//   table_checkpoint_save.cc   EmbeddingCollection::save: a plain checkpoint, full, incremental
//                              (delta_rows.h) or a sparse base, linked tables (linked_tables.h)
//   table_checkpoint_load.cc   a plain checkpoint and its chain into any EmbeddingTables
// Loading either format (EmbeddingCollection::load, and each rank's part of the sharded
// collection's) and reading the sharded format's layout: sharded_layout.h. Saving the sharded
// format is src/dist's (sharded_checkpoint.h).
//
// Thread safety: as the collection (one call at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "leanemb/checkpoint.h"
#include "leanemb/embedding.h"
#include "leanemb/status.h"
#include "leanemb/tables.h"

namespace leanemb::table_ckpt {

inline constexpr char kPlainPrefix[] = "emb/";  // the tables of a plain (one-process) checkpoint

// A dynamic table's id partition `g` (global index): blob "dyn/<table>/<g>" (the partition's
// IdMap state; its rows are rows of the table like any other), in plain checkpoints and shards.
inline std::string dynamic_blob(const std::string& table, uint32_t g) { return "dyn/" + table + "/" + std::to_string(g); }

// The readers of the checkpoint `dir` and of the chain it extends, oldest first (one reader for
// a checkpoint that extends none). Errors: as ckpt::checkpoint_chain and CheckpointReader::open.
Result<std::vector<std::unique_ptr<ckpt::CheckpointReader>>> open_chain(const std::string& dir, ckpt::Env* env);

// A plain checkpoint and the chain it extends (a chain of plain checkpoints, oldest first) into
// `tables`, whose rows on this process are `local` (tables.local_shard().local): the base's rows
// (a sparse base's over the initial rows), each link's changed rows, the newest link's dynamic
// partitions, the column-state blobs. Rows go through the tables' global-row writer, so a sharded
// collection keeps the rows it owns. Not collective by itself (the caller agrees on the verdict).
Status read_plain_chain(const std::vector<std::unique_ptr<ckpt::CheckpointReader>>& chain, EmbeddingTables& tables,
                        EmbeddingCollection& local, int64_t chunk_rows);

}  // namespace leanemb::table_ckpt
