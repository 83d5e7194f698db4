// The sharded checkpoint's layout as a reader needs it, and loading a table checkpoint of either
// format into one process's rows (a local collection, or one rank's part of a sharded one).
// Here in src/table because a local collection loads sharded checkpoints too; the sharded
// collection (src/dist) saves them and adds the cross-rank steps through LoadTarget::agree.
// The blob formats: src/dist/sharded_checkpoint.cc and docs/formats/checkpoint.md.
//
// Not installed, not for callers outside src/table and src/dist.
// Thread safety: pure functions and value types; load_* as the collection (one call at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "leanemb/checkpoint.h"
#include "leanemb/embedding.h"
#include "leanemb/env.h"
#include "leanemb/status.h"
#include "leanemb/table_save.h"
#include "table/shard_plan.h"

namespace leanemb::table_ckpt {

inline constexpr char kLayoutBlob[] = "sharded/layout";
inline constexpr char kLayoutMagic[] = "leanemb-sharded-v1";
inline constexpr char kShardInfoBlob[] = "shard/info";
inline constexpr char kShardMagic[] = "leanemb-shard-v1";
inline constexpr char kRowsPrefix[] = "rows/";
// Strings in the records (table names, dtype and optimizer names, shard directories) are a u32
// length and at most this many bytes.
inline constexpr size_t kMaxRecordString = 4096;

inline ckpt::Env* env_or_posix(ckpt::Env* env) { return env != nullptr ? env : ckpt::posix_env(); }

// One table as the sharded layout records it; the embedding digest uses name .. stride_bytes.
struct TableLayout {
  std::string name;
  int64_t num_rows = 0;
  int64_t dim = 0;
  std::string dtype, optimizer, state_dtype;  // dtype_name (rows, state), optimizer_name
  uint64_t stride_bytes = 0;
  ShardingKind kind = ShardingKind::kRowModulo;  // sharding only; not digested
  int32_t owner = -1;                            // sharding only; not digested
};

struct ShardRecord {
  std::string rel_dir;
  uint64_t manifest_bytes = 0;
  uint64_t manifest_hash = 0;
};

struct Layout {
  int world_size = 0;
  int64_t step = 0;
  int64_t collection_step = 0;
  std::vector<TableLayout> tables;
  std::vector<ShardRecord> shards;
};

// The "sharded/layout" blob of l; and back (DataLoss naming `where` for bad bytes).
std::vector<uint8_t> encode_layout(const Layout& l);
Result<Layout> decode_layout(std::span<const uint8_t> bytes, const std::string& where);

// The layout's record of table t of `local` under `plan`.
TableLayout table_layout(const EmbeddingCollection& local, const dist::ShardPlan& plan, int t);

// The plan of a world of one rank that holds every row of `local` (global row = local row).
Result<dist::ShardPlan> one_rank_plan(const EmbeddingCollection& local);

// Whether `r` is a sharded checkpoint's global directory (it has the layout blob).
bool is_sharded(const ckpt::CheckpointReader& r);

// Opens shard r of a global checkpoint and checks it against the layout (not the blocks); every
// error names the shard.
Result<std::unique_ptr<ckpt::CheckpointReader>> open_shard(const std::string& out_dir, const Layout& l,
                                                           const dist::ShardPlan& plan, int r, ckpt::Env* env);

// Shard r's chain, oldest first: the full shard checkpoint it extends (table "rows/<name>"),
// then each link (tables "delta/<name>" and blobs "delta_rows/<name>/<k>" of local row numbers:
// the rows changed since the link's parent, docs/formats/checkpoint.md, "Sharded chains"), the
// shard the layout names last. One element for a full shard. Each link is opened and checked
// as open_shard checks the newest (its parent exists with the recorded id; not the blocks).
Result<std::vector<std::unique_ptr<ckpt::CheckpointReader>>> open_shard_chain(const std::string& out_dir, const Layout& l,
                                                                            const dist::ShardPlan& plan, int r, ckpt::Env* env);

struct OpenedGlobal {
  std::unique_ptr<ckpt::CheckpointReader> reader;
  Layout layout;
  dist::ShardPlan plan = std::move(dist::ShardPlan::create({}).value());
  std::string out_dir;
};

// Opens global checkpoint directory `global_dir` (.../checkpoints/step-<N>) and decodes its layout.
Result<OpenedGlobal> open_global(const std::string& global_dir, ckpt::Env* env);

// This process's rows as a load sees them: the local collection, the plan that assigns global
// rows to ranks, this rank, and the cross-rank agreement on each phase's verdict (every rank
// returns the same; a local collection: as the world of one rank does).
struct LoadTarget {
  EmbeddingCollection* local = nullptr;
  const dist::ShardPlan* plan = nullptr;
  int rank = 0;
  std::function<Status(const Status& mine, const std::string& what)> agree;
  bool one_process = true;  // a local collection: the loaded checkpoint becomes its change base
};

// The verdict of a world of one rank (dist::agree's message for it).
Status agree_alone(const Status& mine, const std::string& what);

struct ShardedLoadInfo {
  int64_t step = 0;              // the checkpoint's step N
  int64_t collection_step = 0;   // the collection's step counter, now set on every rank
  int saved_world_size = 0;      // P of the saving run
  int64_t rows_loaded = 0;       // global rows copied into this rank's collection
};

// Loads global checkpoint `global_dir` into the target's rows (dist::load_sharded_checkpoint).
Result<ShardedLoadInfo> load_sharded(const std::string& global_dir, const LoadTarget& target, ckpt::Env* env,
                                     int64_t chunk_rows);

// EmbeddingTables::load of either format into `tables` through `target` (its local part).
Result<int64_t> load_tables(const std::string& dir, const TablesLoadOptions& options, EmbeddingTables& tables,
                            const LoadTarget& target);

}  // namespace leanemb::table_ckpt
