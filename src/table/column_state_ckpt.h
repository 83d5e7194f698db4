// Checkpoint blobs of the optimizer state a table keeps outside its fat rows
// (EmbeddingCollection::column_state: SM3's column accumulators). One blob per such table,
// "optstate/<table>": its [dim] fp32 values, little-endian host bytes. A sharded checkpoint keeps
// it in the global checkpoint (every rank holds the same values after each step), a plain one
// beside the tables; tables without such state write and read nothing.
//
// Thread safety: as the collection (one call at a time).
#pragma once

#include <string>

#include "leanemb/checkpoint.h"
#include "leanemb/embedding.h"

namespace leanemb::table_ckpt {

inline std::string column_state_blob(const std::string& table) { return "optstate/" + table; }

// Adds the blobs of every table of `local` that has column state to `w`. Errors: the writer's.
Status add_column_state_blobs(ckpt::CheckpointWriter& w, const EmbeddingCollection& local);

// Restores every such table's column state from `r`. Errors: InvalidArgument naming the table
// when its blob is missing (a checkpoint of another optimizer, or of a build before SM3),
// DataLoss when the blob's size is not dim * 4; nothing is changed on error.
Status read_column_state_blobs(const ckpt::CheckpointReader& r, EmbeddingCollection& local);

}  // namespace leanemb::table_ckpt
