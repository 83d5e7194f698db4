// save_sharded_checkpoint (every rank writes its shard, rank 0 commits the global checkpoint
// last and prunes the shards no checkpoint names) and ShardedEmbeddingCollection::save (a local
// collection's plain format: src/table/table_checkpoint_save.cc).
// Formats: sharded_checkpoint.cc; shared pieces: sharded_checkpoint_internal.h.
#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "dist/sharded_checkpoint.h"
#include "dist/sharded_checkpoint_internal.h"
#include "table/column_state_ckpt.h"

namespace leanemb::dist {

using sharded_ckpt_internal::ByteWriter;
using table_ckpt::add_column_state_blobs;
using sharded_ckpt_internal::dynamic_blob;
using sharded_ckpt_internal::encode_layout;
using sharded_ckpt_internal::env_or_posix;
using sharded_ckpt_internal::kLayoutBlob;
using sharded_ckpt_internal::kRowsPrefix;
using sharded_ckpt_internal::kShardInfoBlob;
using sharded_ckpt_internal::kShardMagic;
using sharded_ckpt_internal::Layout;
using sharded_ckpt_internal::ShardView;
using sharded_ckpt_internal::table_layout;
using sharded_ckpt_internal::xxh64;

namespace {

std::string rank_dir_name(int rank, int p) { return "rank-" + std::to_string(rank) + "-of-" + std::to_string(p); }

std::string shard_rel_dir(int64_t step, int rank, int p) {
  return "shards/" + ckpt::step_dir_name(step) + "/" + rank_dir_name(rank, p);
}

struct WrittenShard {
  std::string dir;
  uint64_t manifest_bytes = 0;
  uint64_t manifest_hash = 0;
};

Result<WrittenShard> write_shard(const std::string& out_dir, int64_t step, const ShardView& coll,
                                 const ShardedSaveOptions& o) {
  Communicator& comm = coll.communicator();
  const ShardPlan& plan = coll.plan();
  const EmbeddingCollection& local = coll.local();
  const std::string shard_out = ckpt::join_path(out_dir, shard_rel_dir(step, comm.rank(), comm.size()));
  ckpt::Env* env = env_or_posix(o.env);
  // Parents of the shard's out_dir (the writer creates only the last level); ranks may race
  // here, and create_dir accepts an existing directory.
  for (const std::string& d : {out_dir, ckpt::join_path(out_dir, "shards"), ckpt::parent_dir(shard_out)}) {
    if (env->file_exists(d)) continue;
    LEANEMB_RETURN_IF_ERROR(env->create_dir(d));
    LEANEMB_RETURN_IF_ERROR(env->sync_dir(ckpt::parent_dir(d)));
  }
  ckpt::WriterOptions wo;
  wo.env = o.env;
  wo.block_bytes = o.block_bytes;
  wo.keep_last = 0;  // one checkpoint per shard directory; pruning is by the global level
  LEANEMB_ASSIGN_OR_RETURN(auto w, ckpt::CheckpointWriter::create(shard_out, step, wo));
  std::vector<uint8_t> info_bytes;
  ByteWriter info(&info_bytes);
  info.raw(kShardMagic);
  info.put<uint32_t>(static_cast<uint32_t>(comm.rank()));
  info.put<uint32_t>(static_cast<uint32_t>(comm.size()));
  info.put<int64_t>(step);
  LEANEMB_RETURN_IF_ERROR(w->add_blob(kShardInfoBlob, info.bytes()));
  std::vector<uint8_t> rows;
  int64_t written = 0, to_write = 0;
  for (int t = 0; t < local.num_tables(); ++t) to_write += plan.local_num_rows(t, comm.rank());
  for (int t = 0; t < local.num_tables(); ++t) {
    const size_t stride = local.layout(t).stride_bytes;
    const int64_t n = plan.local_num_rows(t, comm.rank());
    const std::string name = kRowsPrefix + local.options().tables[static_cast<size_t>(t)].name;
    LEANEMB_RETURN_IF_ERROR(w->add_table(name, stride, n));
    for (int64_t l0 = 0; l0 < n; l0 += o.chunk_rows) {
      const int64_t c = std::min(o.chunk_rows, n - l0);
      rows.resize(static_cast<size_t>(c) * stride);
      LEANEMB_RETURN_IF_ERROR(local.read_raw_rows(t, l0, c, rows));
      LEANEMB_RETURN_IF_ERROR(w->append_rows(name, l0, rows));
      written += c;
      if (o.progress) o.progress(written, to_write);
    }
    const TableOptions& to = local.options().tables[static_cast<size_t>(t)];
    if (!to.dynamic.enabled) continue;
    const uint32_t held = to.shard.held_partitions ? to.shard.held_partitions : to.dynamic.partitions;
    for (uint32_t k = 0; k < held; ++k) {
      LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> state, local.save_dynamic_partition(t, k));
      LEANEMB_RETURN_IF_ERROR(w->add_blob(dynamic_blob(to.name, to.shard.first_partition + k), state));
    }
  }
  LEANEMB_ASSIGN_OR_RETURN(ckpt::CommitInfo ci, w->commit());
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> m, env->read_file(ckpt::join_path(ci.path, ckpt::kManifestName)));
  return WrittenShard{ci.path, m.size(), xxh64(m)};
}

// Removes shards/step-<M> directories that no global checkpoint names, and, in the directory
// of the checkpoint just committed, rank directories of other world sizes.
void prune_shards(const std::string& out_dir, int64_t step, int p, ckpt::Env* env, ShardedSaveInfo* info) {
  env = env_or_posix(env);
  auto warn = [&](const Status& s) { info->warnings.push_back(s.to_string()); };
  const std::string root = ckpt::join_path(out_dir, "shards");
  auto refs = ckpt::list_checkpoints(out_dir, env);
  if (!refs.ok()) return warn(refs.status());
  std::set<int64_t> named;
  for (const auto& r : *refs) named.insert(r.step);
  auto names = env->list_dir(root);
  if (!names.ok()) return warn(names.status());
  bool removed = false;
  for (const std::string& name : *names) {
    const auto s = ckpt::parse_step_dir_name(name);
    if (!s || named.count(*s) != 0) continue;
    const std::string path = ckpt::join_path(root, name);
    if (Status st = env->remove_all(path); !st.ok()) return warn(st);
    info->removed.push_back(path);
    removed = true;
  }
  if (removed) {
    if (Status st = env->sync_dir(root); !st.ok()) warn(st);
  }
  const std::string mine = ckpt::join_path(root, ckpt::step_dir_name(step));
  auto ranks = env->list_dir(mine);
  if (!ranks.ok()) return warn(ranks.status());
  std::set<std::string> current;
  for (int k = 0; k < p; ++k) current.insert(rank_dir_name(k, p));
  for (const std::string& name : *ranks) {
    if (current.count(name) != 0) continue;
    const std::string path = ckpt::join_path(mine, name);
    if (Status st = env->remove_all(path); !st.ok()) return warn(st);
    info->removed.push_back(path);
  }
}

}  // namespace

Result<ShardedSaveInfo> save_sharded_checkpoint(const std::string& out_dir, int64_t step, EmbeddingTables& tables,
                                                std::span<const ShardedBlob> blobs, const ShardedSaveOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(const ShardView coll, ShardView::of(tables));
  Communicator& comm = coll.communicator();
  const std::string what = "dist: sharded checkpoint step " + std::to_string(step) + " in '" + out_dir + "'";
  // Arguments are checked on every rank alike (same arguments everywhere), before any collective.
  if (step < 0) return invalid_argument(what + ": step must be >= 0");
  if (options.chunk_rows < 1) return invalid_argument(what + ": chunk_rows must be >= 1");
  if (options.keep_last < 0) return invalid_argument(what + ": keep_last must be >= 0 (0 keeps all)");
  const int p = comm.size();
  // Rank 0's blobs are checked as part of its shard, so that every rank still agrees.
  Status blob_names;
  if (comm.rank() == 0) {
    for (const ShardedBlob& b : blobs)
      if (b.name.rfind("sharded/", 0) == 0) blob_names = invalid_argument("blob name '" + b.name + "' is reserved");
  }
  Result<WrittenShard> shard = blob_names.ok() ? write_shard(out_dir, step, coll, options) : Result<WrittenShard>(blob_names);
  // Flags [P] and each shard's MANIFEST size and hash [2P], summed: every rank learns all.
  std::vector<int64_t> all(static_cast<size_t>(3 * p), 0);
  const auto r = static_cast<size_t>(comm.rank());
  all[r] = shard.ok() ? 0 : 1;
  if (shard.ok()) {
    all[static_cast<size_t>(p) + r] = static_cast<int64_t>(shard->manifest_bytes);
    all[static_cast<size_t>(2 * p) + r] = static_cast<int64_t>(shard->manifest_hash);
  }
  LEANEMB_RETURN_IF_ERROR(comm.all_reduce(std::span<int64_t>(all), ReduceOp::kSum));
  const std::vector<int64_t> flags(all.begin(), all.begin() + p);
  if (std::any_of(flags.begin(), flags.end(), [](int64_t f) { return f != 0; })) {
    const std::string msg = what + ": rank(s) " + flagged_ranks(flags) + " failed to write their shard; no global checkpoint written";
    if (!shard.ok()) return Status(shard.status().code(), msg + "; rank " + std::to_string(comm.rank()) + ": " + shard.status().message());
    return io_error(msg);
  }
  ShardedSaveInfo info;
  info.step = step;
  info.shard_dir = shard->dir;
  info.global_dir = ckpt::join_path(ckpt::checkpoints_dir(out_dir), ckpt::step_dir_name(step));
  Status global;
  if (comm.rank() == 0) {
    global = [&]() -> Status {
      Layout l;
      l.world_size = p;
      l.step = step;
      l.collection_step = coll.step();
      for (int t = 0; t < coll.local().num_tables(); ++t) l.tables.push_back(table_layout(coll.local(), coll.plan(), t));
      for (int k = 0; k < p; ++k) {
        l.shards.push_back({shard_rel_dir(step, k, p), static_cast<uint64_t>(all[static_cast<size_t>(p + k)]),
                            static_cast<uint64_t>(all[static_cast<size_t>(2 * p + k)])});
      }
      ckpt::WriterOptions wo;
      wo.env = options.env;
      wo.block_bytes = options.block_bytes;
      wo.keep_last = options.keep_last;
      LEANEMB_ASSIGN_OR_RETURN(auto w, ckpt::CheckpointWriter::create(out_dir, step, wo));
      LEANEMB_RETURN_IF_ERROR(w->add_blob(kLayoutBlob, encode_layout(l)));
      LEANEMB_RETURN_IF_ERROR(add_column_state_blobs(*w, coll.local()));
      for (const ShardedBlob& b : blobs) LEANEMB_RETURN_IF_ERROR(w->add_blob(b.name, b.bytes));
      LEANEMB_ASSIGN_OR_RETURN(ckpt::CommitInfo ci, w->commit());
      info.removed = ci.removed;
      info.warnings = ci.warnings;
      prune_shards(out_dir, step, p, options.env, &info);
      return Status();
    }();
  }
  LEANEMB_RETURN_IF_ERROR(agree(comm, global, what + ": writing the global manifest"));
  return info;
}

Result<TablesSaveInfo> ShardedEmbeddingCollection::save(const std::string& out_dir, int64_t step,
                                                        std::span<const CheckpointBlob> blobs, const TablesSaveOptions& o) {
  ShardedSaveOptions so;
  so.env = o.env;
  so.block_bytes = o.block_bytes;
  so.keep_last = o.keep_last;
  so.chunk_rows = o.chunk_rows;
  so.progress = o.progress;
  LEANEMB_ASSIGN_OR_RETURN(ShardedSaveInfo s, save_sharded_checkpoint(out_dir, step, *this, blobs, so));
  TablesSaveInfo info;
  info.path = s.global_dir;
  info.warnings = s.warnings;
  for (int t = 0; t < num_tables(); ++t) {  // every global row, as fat rows (blobs not counted)
    const int64_t n = options().tables[static_cast<size_t>(t)].num_rows;
    info.rows_written += n;
    info.entry_bytes += static_cast<uint64_t>(n) * layout(t).stride_bytes;
  }
  return info;
}

}  // namespace leanemb::dist
