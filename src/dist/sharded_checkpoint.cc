// Sharded checkpoints: per-rank shard checkpoints, a global checkpoint committed last, loading
// at another world size, and the shard-count-independent embedding digest.
//
// "sharded/layout" blob (little-endian; str = u32 length + bytes):
//   "leanemb-sharded-v1" (18 bytes); u32 world_size P; i64 step; i64 collection_step
//   u32 num_tables; per table: str name; i64 num_rows; i64 dim; str dtype; str optimizer;
//     str state_dtype; u64 stride_bytes; u8 sharding (0 table, 1 row_modulo, 2 row_range);
//     i32 owner (table-wise: the rank holding it; else -1)
//   u32 num_shards (= P); per shard r: str directory relative to out_dir; u64 MANIFEST size;
//     u64 XXH3-64 (seed 0) of the MANIFEST bytes
// "shard/info" blob: "leanemb-shard-v1" (16 bytes); u32 rank; u32 P; i64 step.
//
// This file: the view of a collection's rows, verify and find, and the sharded collection's load
// (the cross-rank steps around src/table/sharded_checkpoint_load.cc); the layout blob and
// opening a global checkpoint and its shards are src/table/sharded_layout.cc (a local collection
// loads sharded checkpoints too); the save and digest paths are in sharded_checkpoint_save.cc and
// _digest.cc, their shared pieces in sharded_checkpoint_internal.h.
#include "dist/sharded_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "table/delta_rows.h"
#include "dist/sharded_checkpoint_internal.h"
#include "dist/sharded_collection.h"

namespace leanemb::dist {

namespace sharded_ckpt_internal {

Result<ShardView> ShardView::of(EmbeddingTables& tables) {
  ShardView v;
  const EmbeddingTables::LocalShard part = tables.local_shard();
  if (part.local == nullptr) return invalid_argument("dist: checkpoints need a collection with local rows");
  v.local_ = part.local;
  if (part.plan != nullptr) {
    v.comm_ = part.comm;
    v.plan_ = part.plan;
    return v;
  }
  // One process: a world of one, and a plan that gives it every row.
  LEANEMB_ASSIGN_OR_RETURN(v.world_, LocalWorld::create(1, CommOptions{}));
  LEANEMB_ASSIGN_OR_RETURN(v.own_comm_, v.world_->communicator(0));
  v.comm_ = v.own_comm_.get();
  LEANEMB_ASSIGN_OR_RETURN(ShardPlan plan, table_ckpt::one_rank_plan(*part.local));
  v.own_plan_ = std::make_shared<ShardPlan>(std::move(plan));
  v.plan_ = v.own_plan_.get();
  return v;
}

}  // namespace sharded_ckpt_internal

using sharded_ckpt_internal::kLayoutBlob;
using sharded_ckpt_internal::open_global;
using sharded_ckpt_internal::open_shard_chain;
using sharded_ckpt_internal::OpenedGlobal;
using sharded_ckpt_internal::ShardView;

// ---- load: src/table/sharded_checkpoint_load.cc with the cross-rank agreement -------------------

namespace {

// The load target of view `v`: its rows, its plan and rank, and every phase's verdict agreed
// over its communicator. REQUIRES: v outlives the target.
table_ckpt::LoadTarget load_target(const ShardView& v, bool one_process) {
  table_ckpt::LoadTarget t;
  t.local = &v.local();
  t.plan = &v.plan();
  t.rank = v.communicator().rank();
  Communicator* comm = &v.communicator();
  t.agree = [comm](const Status& mine, const std::string& what) { return agree(*comm, mine, what); };
  t.one_process = one_process;
  return t;
}

}  // namespace

Result<ShardedLoadInfo> load_sharded_checkpoint(const std::string& global_dir, EmbeddingTables& tables,
                                                const ShardedLoadOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(const ShardView view, ShardView::of(tables));
  return table_ckpt::load_sharded(global_dir, load_target(view, false), options.env, options.chunk_rows);
}

Result<int64_t> ShardedEmbeddingCollection::load(const std::string& dir, const TablesLoadOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(const ShardView view, ShardView::of(*this));
  return table_ckpt::load_tables(dir, options, *this, load_target(view, communicator() == nullptr));
}

// ---- verify / find ----------------------------------------------------------------------------

Status verify_sharded_checkpoint(const std::string& global_dir, ckpt::Env* env, bool verify_blocks) {
  LEANEMB_ASSIGN_OR_RETURN(OpenedGlobal g, open_global(global_dir, env));
  if (verify_blocks) LEANEMB_RETURN_IF_ERROR(g.reader->verify().status());
  for (int r = 0; r < g.layout.world_size; ++r) {
    LEANEMB_ASSIGN_OR_RETURN(auto chain, open_shard_chain(g.out_dir, g.layout, g.plan, r, env));
    if (!verify_blocks) continue;
    for (const auto& link : chain) {
      if (Status s = link->verify().status(); !s.ok()) return Status(s.code(), "shard " + std::to_string(r) + ": " + s.message());
    }
  }
  return Status();
}

namespace {

// verify_tables_checkpoint of one checkpoint (not its chain); a sharded one with every link of
// every shard's chain (num_links and base_step: shard 0's chain, the same on every shard).
Result<ckpt::VerifyReport> verify_one(const std::string& dir, ckpt::Env* env) {
  LEANEMB_ASSIGN_OR_RETURN(auto reader, ckpt::CheckpointReader::open(dir, env));
  LEANEMB_ASSIGN_OR_RETURN(ckpt::VerifyReport rep, reader->verify());
  if (!is_sharded_checkpoint(*reader)) return rep;
  LEANEMB_ASSIGN_OR_RETURN(OpenedGlobal g, open_global(dir, env));
  for (int r = 0; r < g.layout.world_size; ++r) {
    LEANEMB_ASSIGN_OR_RETURN(auto chain, open_shard_chain(g.out_dir, g.layout, g.plan, r, env));
    for (const auto& link : chain) {
      auto s = link->verify();
      if (!s.ok()) return Status(s.status().code(), "shard " + std::to_string(r) + ": " + s.status().message());
      rep.num_entries += s->num_entries;
      rep.entry_bytes += s->entry_bytes;
      rep.num_files += s->num_files;
      rep.file_bytes += s->file_bytes;
      rep.num_blocks += s->num_blocks;
    }
    if (r == 0) {
      rep.num_links = chain.size();
      rep.base_step = chain.front()->step();
    }
    ++rep.num_shards;
  }
  return rep;
}

}  // namespace

Result<ckpt::VerifyReport> verify_tables_checkpoint(const std::string& dir, ckpt::Env* env) {
  LEANEMB_ASSIGN_OR_RETURN(std::vector<ckpt::CheckpointRef> chain, ckpt::checkpoint_chain(dir, env));
  LEANEMB_ASSIGN_OR_RETURN(ckpt::VerifyReport rep, verify_one(dir, env));
  if (rep.num_shards > 0) return rep;  // a global checkpoint has no parent; its shards' chains are counted
  rep.num_links = chain.size();
  rep.base_step = chain.front().step;
  if (auto root = ckpt::CheckpointReader::open(chain.front().path, env); root.ok()) rep.sparse_base = table_ckpt::is_sparse_base(**root);
  for (size_t k = 0; k + 1 < chain.size(); ++k) {
    auto link = verify_one(chain[k].path, env);
    if (!link.ok()) return Status(link.status().code(), "'" + dir + "' extends '" + chain[k].path + "': " + link.status().message());
    rep.num_entries += link->num_entries;
    rep.entry_bytes += link->entry_bytes;
    rep.num_files += link->num_files;
    rep.file_bytes += link->file_bytes;
    rep.num_blocks += link->num_blocks;
    rep.num_linked_files += link->num_linked_files;
    rep.linked_bytes += link->linked_bytes;
  }
  return rep;
}

Result<ckpt::LatestCheckpoint> find_latest_complete_sharded(const std::string& out_dir, const ckpt::FindOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(std::vector<ckpt::CheckpointRef> refs, ckpt::list_checkpoints(out_dir, options.env));
  ckpt::LatestCheckpoint latest;
  for (auto it = refs.rbegin(); it != refs.rend(); ++it) {
    const Status s = verify_sharded_checkpoint(it->path, options.env, options.verify_blocks);
    if (s.ok()) {
      latest.ref = *it;
      return latest;
    }
    latest.skipped.push_back("'" + it->path + "': " + s.to_string());
    if (options.warn_to_stderr) std::fprintf(stderr, "leanemb: warning: skipping sharded checkpoint %s\n", latest.skipped.back().c_str());
  }
  std::string msg = "no complete sharded checkpoint under '" + ckpt::checkpoints_dir(out_dir) + "'";
  for (const std::string& s : latest.skipped) msg += "; skipped " + s;
  return not_found(msg);
}

bool is_sharded_checkpoint(const ckpt::CheckpointReader& r) { return table_ckpt::is_sharded(r); }

Result<ckpt::LatestCheckpoint> find_latest_tables_checkpoint(const std::string& out_dir, const ckpt::FindOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(ckpt::LatestCheckpoint latest, ckpt::find_latest_complete(out_dir, options));
  auto r = ckpt::CheckpointReader::open(latest.ref.path, options.env);
  if (!r.ok() || !is_sharded_checkpoint(*r.value())) return latest;
  // A global manifest is complete only with every shard it names.
  return find_latest_complete_sharded(out_dir, options);
}

}  // namespace leanemb::dist
