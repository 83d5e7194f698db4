// Internal to src/dist (not installed, not for callers outside it): what the source files of
// the sharded checkpoints (sharded_checkpoint.h) share:
//   sharded_checkpoint.cc         ShardView, verify / find, load_sharded_checkpoint and
//                                 ShardedEmbeddingCollection::load (the cross-rank steps around
//                                 src/table/sharded_checkpoint_load.cc)
//   sharded_checkpoint_save.cc    save_sharded_checkpoint, ShardedEmbeddingCollection::save
//   sharded_checkpoint_digest.cc  the embedding digests (digest_internal.h)
//   sharded_checkpoint_prune.cc   prune_shards
// The blob formats are described at the top of sharded_checkpoint.cc; the layout blob and
// opening a checkpoint's shards are src/table/sharded_layout.h.
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
#include "table/shard_plan.h"
#include "dist/sharded_checkpoint.h"
#include "leanemb/embedding.h"
#include "table/sharded_layout.h"
#include "table/table_checkpoint.h"

namespace leanemb::dist::sharded_ckpt_internal {

using digest_internal::TableLayout;

// The layout and opening a checkpoint's shards: src/table/sharded_layout.h (a local collection
// loads sharded checkpoints too).
using table_ckpt::decode_layout;
using table_ckpt::encode_layout;
using table_ckpt::env_or_posix;
using table_ckpt::kLayoutBlob;
using table_ckpt::kLayoutMagic;
using table_ckpt::kMaxRecordString;
using table_ckpt::kRowsPrefix;
using table_ckpt::kShardInfoBlob;
using table_ckpt::kShardMagic;
using table_ckpt::Layout;
using table_ckpt::open_global;
using table_ckpt::open_shard;
using table_ckpt::open_shard_chain;
using table_ckpt::OpenedGlobal;
using table_ckpt::ShardRecord;
using table_ckpt::table_layout;
inline constexpr char kDigestMagic[] = "leanemb-embedding-digest-v1";
using table_ckpt::kPlainPrefix;  // the tables of a plain (one-process) checkpoint

// The records use core/bytes.h.
using ::leanemb::ByteReader;
using ::leanemb::ByteWriter;

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

// "rank-<r>-of-<P>": a shard's directory name (under shards/, or shards/step-<N>/ before chains).
inline std::string shard_dir_name(int rank, int p) { return "rank-" + std::to_string(rank) + "-of-" + std::to_string(p); }

// Rank 0 after a global commit (sharded_checkpoint_prune.cc): removes the shard checkpoints
// that no global checkpoint under out_dir needs (the shards each one names and every link of
// their chains), rank directories none of them needs, and old-layout shards/step-<N>
// directories; appends what it removed and its failures (the commit stands).
void prune_shards(const std::string& out_dir, ckpt::Env* env, std::vector<std::string>* removed, std::vector<std::string>* warnings);

// A dynamic table's id partition `g` (global index) in a shard: blob "dyn/<table>/<g>", as in a
// plain checkpoint (table/table_checkpoint.h).
using table_ckpt::dynamic_blob;

}  // namespace leanemb::dist::sharded_ckpt_internal
