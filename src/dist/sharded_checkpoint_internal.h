// Internal to src/dist (not installed, not for callers outside it): what the source files of
// the sharded checkpoints (sharded_checkpoint.h) share:
//   sharded_checkpoint.cc         the "sharded/layout" blob, opening a global checkpoint and its
//                                 shards, verify / find
//   sharded_checkpoint_save.cc    save_sharded_checkpoint, ShardedEmbeddingCollection::save
//   sharded_checkpoint_load.cc    load_sharded_checkpoint (at any world size), EmbeddingTables::load
//                                 (either format; the plain chain: src/table/table_checkpoint.h)
//   sharded_checkpoint_digest.cc  the embedding digests (digest_internal.h)
// The blob formats are described at the top of sharded_checkpoint.cc.
//
// Thread safety: pure functions and value types, except ShardView (one call at a time, like the
// collection it views).
#pragma once

#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/env.h"
#include "core/bytes.h"
#include "ckpt/format.h"
#include "dist/communicator.h"
#include "dist/digest_internal.h"
#include "dist/local_comm.h"
#include "dist/shard_plan.h"
#include "dist/sharded_checkpoint.h"
#include "leanemb/embedding.h"
#include "table/table_checkpoint.h"

namespace leanemb::dist::sharded_ckpt_internal {

using digest_internal::TableLayout;

inline constexpr char kLayoutBlob[] = "sharded/layout";
inline constexpr char kLayoutMagic[] = "leanemb-sharded-v1";
inline constexpr char kShardInfoBlob[] = "shard/info";
inline constexpr char kShardMagic[] = "leanemb-shard-v1";
inline constexpr char kRowsPrefix[] = "rows/";
inline constexpr char kDigestMagic[] = "leanemb-embedding-digest-v1";
using table_ckpt::kPlainPrefix;  // the tables of a plain (one-process) checkpoint

inline ckpt::Env* env_or_posix(ckpt::Env* env) { return env != nullptr ? env : ckpt::posix_env(); }

// ---- byte encoding ------------------------------------------------------------------------

// The records use core/bytes.h; strings (table names, dtype and optimizer names, shard
// directories) are a u32 length and at most kMaxRecordString bytes.
using ::leanemb::ByteReader;
using ::leanemb::ByteWriter;
inline constexpr size_t kMaxRecordString = 4096;

// ---- the layout -----------------------------------------------------------------------------

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
TableLayout table_layout(const EmbeddingCollection& local, const ShardPlan& plan, int t);

inline uint64_t xxh64(std::span<const uint8_t> b) { return XXH3_64bits(b.data(), b.size()); }

// The rows of this process as the checkpoint code sees them, for any EmbeddingTables: a sharded
// collection's communicator, plan and local collection, or for a local collection a world of
// one rank and the plan of one rank (every row local, global row = local row).
class ShardView {
 public:
  // The view of a ShardedEmbeddingCollection or an EmbeddingCollection (else InvalidArgument).
  static Result<ShardView> of(EmbeddingTables& tables);
  Communicator& communicator() const { return *comm_; }
  const ShardPlan& plan() const { return *plan_; }
  EmbeddingCollection& local() const { return *local_; }
  int64_t step() const { return local_->step(); }

 private:
  std::shared_ptr<LocalWorld> world_;
  std::shared_ptr<Communicator> own_comm_;
  std::shared_ptr<ShardPlan> own_plan_;
  Communicator* comm_ = nullptr;
  const ShardPlan* plan_ = nullptr;
  EmbeddingCollection* local_ = nullptr;
};

// A dynamic table's id partition `g` (global index) in a shard: blob "dyn/<table>/<g>", as in a
// plain checkpoint (table/table_checkpoint.h).
using table_ckpt::dynamic_blob;

// Opens shard r of a global checkpoint and checks it against the layout (not the blocks); every
// error names the shard.
Result<std::unique_ptr<ckpt::CheckpointReader>> open_shard(const std::string& out_dir, const Layout& l, const ShardPlan& plan,
                                                           int r, ckpt::Env* env);

struct OpenedGlobal {
  std::unique_ptr<ckpt::CheckpointReader> reader;
  Layout layout;
  ShardPlan plan = std::move(ShardPlan::create({}).value());
  std::string out_dir;
};

// Opens global checkpoint directory `global_dir` (.../checkpoints/step-<N>) and decodes its layout.
Result<OpenedGlobal> open_global(const std::string& global_dir, ckpt::Env* env);

}  // namespace leanemb::dist::sharded_ckpt_internal
