// save_sharded_checkpoint (every rank writes its shard, full or as a link of its shard chain,
// rank 0 commits the global checkpoint last and prunes the shard checkpoints no kept checkpoint
// needs: sharded_checkpoint_prune.cc) and ShardedEmbeddingCollection::save (a local
// collection's plain format: src/table/table_checkpoint_save.cc).
// Formats: sharded_checkpoint.cc; shared pieces: sharded_checkpoint_internal.h.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dist/sharded_checkpoint.h"
#include "dist/sharded_checkpoint_internal.h"
#include "table/column_state_ckpt.h"
#include "table/delta_rows.h"

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
using sharded_ckpt_internal::prune_shards;
using sharded_ckpt_internal::shard_dir_name;
using sharded_ckpt_internal::xxh64;
using table_ckpt::kDeltaPrefix;
using table_ckpt::write_changed_rows;

namespace {

// A shard's out_dir relative to out_dir: with incremental checkpoints one per rank and world
// size, shards/rank-<r>-of-<P>, holding the rank's shard chains (bases and links side by side);
// full checkpoints keep one out_dir per step, shards/step-<N>/rank-<r>-of-<P>. The layout records
// the directory, so a reader takes either.
std::string shard_rel_dir(int64_t step, int rank, int p, bool chained) {
  return chained ? "shards/" + shard_dir_name(rank, p) : "shards/" + ckpt::step_dir_name(step) + "/" + shard_dir_name(rank, p);
}

struct WrittenShard {
  std::string dir;
  std::string id;  // the shard checkpoint's id (the base of the rank's changes once the global commits)
  uint64_t manifest_bytes = 0;
  uint64_t manifest_hash = 0;
  int64_t rows_written = 0;
  uint64_t row_bytes = 0;  // fat-row bytes of the rows written
};

// This rank's view of an incremental shard checkpoint `step` (IncrementalOptions): whether its
// chain can grow (the collection tracks changes from a shard checkpoint of this rank's out_dir,
// below `step`, with that id, in a chain of fewer than full_every checkpoints), that base's
// step, the chain's links' rows plus the changed rows, and the rank's rows.
struct ChainView {
  bool can_extend = false;
  int64_t base_step = -1;
  int64_t chain_rows = 0;
  int64_t total_rows = 0;
};

ChainView chain_view(const std::string& shard_out, int64_t step, const EmbeddingCollection& local, const IncrementalOptions& inc,
                     ckpt::Env* env) {
  ChainView v;
  for (int t = 0; t < local.num_tables(); ++t) {
    v.total_rows += local.options().tables[static_cast<size_t>(t)].num_rows;
    v.chain_rows += local.num_changed_rows(t);
  }
  const EmbeddingCollection::ChangeBase& base = local.change_base();
  if (!inc.enabled || !local.tracks_changes() || base.step < 0 || base.step >= step) return v;
  const std::string dir = ckpt::join_path(ckpt::checkpoints_dir(shard_out), ckpt::step_dir_name(base.step));
  auto chain = ckpt::checkpoint_chain(dir, env);
  if (!chain.ok() || static_cast<int>(chain->size()) >= inc.full_every) return v;
  for (size_t k = 0; k < chain->size(); ++k) {
    auto r = ckpt::CheckpointReader::open((*chain)[k].path, env);
    if (!r.ok() || (k + 1 == chain->size() && (*r)->id_hex() != base.id)) return v;
    for (const ckpt::EntryInfo& e : (*r)->entries())
      if (k > 0 && e.name.rfind(kDeltaPrefix, 0) == 0) v.chain_rows += e.total_rows;
  }
  v.can_extend = true;
  v.base_step = base.step;
  return v;
}

// The step every rank's shard checkpoint `step` extends, or -1 (all full): agreed through the
// communicator, so a global checkpoint is all links or all bases. A link only if every rank's
// chain can grow from the same step and all the chains' rows stay within max_chain_fraction of
// all the rows. Collective.
Result<int64_t> agree_parent(const ShardView& coll, const std::string& shard_out, int64_t step, const IncrementalOptions& inc,
                             ckpt::Env* env) {
  Communicator& comm = coll.communicator();
  const int p = comm.size();
  const ChainView v = chain_view(shard_out, step, coll.local(), inc, env);
  // [P]: base step + 1 of the ranks that can extend (0: cannot); then the sums of the rows.
  std::vector<int64_t> all(static_cast<size_t>(p + 2), 0);
  all[static_cast<size_t>(comm.rank())] = v.can_extend ? v.base_step + 1 : 0;
  all[static_cast<size_t>(p)] = v.chain_rows;
  all[static_cast<size_t>(p + 1)] = v.total_rows;
  LEANEMB_RETURN_IF_ERROR(comm.all_reduce(std::span<int64_t>(all), ReduceOp::kSum));
  for (int k = 0; k < p; ++k)
    if (all[static_cast<size_t>(k)] == 0 || all[static_cast<size_t>(k)] != all[0]) return int64_t{-1};
  const double rows = static_cast<double>(all[static_cast<size_t>(p)]), total = static_cast<double>(all[static_cast<size_t>(p + 1)]);
  return rows <= inc.max_chain_fraction * total ? all[0] - 1 : int64_t{-1};
}

// The rank's rows of every table: "rows/<name>" of every local row (a full shard), or with a
// parent "delta/<name>" of the rows changed since it (write_changed_rows); dynamic partitions whole.
Status write_shard_rows(ckpt::CheckpointWriter& w, const ShardView& coll, const ShardedSaveOptions& o, bool delta, WrittenShard* ws) {
  const EmbeddingCollection& local = coll.local();
  const int rank = coll.communicator().rank();
  std::vector<uint8_t> rows;
  int64_t to_write = 0;
  for (int t = 0; t < local.num_tables(); ++t) to_write += delta ? local.num_changed_rows(t) : coll.plan().local_num_rows(t, rank);
  for (int t = 0; t < local.num_tables(); ++t) {
    const size_t stride = local.layout(t).stride_bytes;
    const TableOptions& to = local.options().tables[static_cast<size_t>(t)];
    const int64_t n = coll.plan().local_num_rows(t, rank);
    auto wrote = [&](int64_t c) {
      ws->rows_written += c;
      ws->row_bytes += static_cast<uint64_t>(c) * stride;
      if (o.progress) o.progress(ws->rows_written, to_write);
    };
    if (delta) {
      const std::string meta = "{\"table_rows\":" + std::to_string(n) + "}";
      LEANEMB_RETURN_IF_ERROR(write_changed_rows(w, local, t, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(meta.data()), meta.size()),
                                                 o.chunk_rows, wrote));
    } else {
      const std::string name = kRowsPrefix + to.name;
      LEANEMB_RETURN_IF_ERROR(w.add_table(name, stride, n));
      for (int64_t l0 = 0; l0 < n; l0 += o.chunk_rows) {
        const int64_t c = std::min(o.chunk_rows, n - l0);
        rows.resize(static_cast<size_t>(c) * stride);
        LEANEMB_RETURN_IF_ERROR(local.read_raw_rows(t, l0, c, rows));
        LEANEMB_RETURN_IF_ERROR(w.append_rows(name, l0, rows));
        wrote(c);
      }
    }
    if (!to.dynamic.enabled) continue;
    const uint32_t held = to.shard.held_partitions ? to.shard.held_partitions : to.dynamic.partitions;
    for (uint32_t k = 0; k < held; ++k) {
      LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> state, local.save_dynamic_partition(t, k));
      LEANEMB_RETURN_IF_ERROR(w.add_blob(dynamic_blob(to.name, to.shard.first_partition + k), state));
    }
  }
  return Status();
}

// Rank r's shard checkpoint `step` in <out_dir>/shards/rank-<r>-of-<P>: full, or extending its
// shard checkpoint `parent_step` (>= 0).
Result<WrittenShard> write_shard(const std::string& out_dir, int64_t step, int64_t parent_step, const ShardView& coll,
                                 const ShardedSaveOptions& o) {
  Communicator& comm = coll.communicator();
  const std::string shard_out = ckpt::join_path(out_dir, shard_rel_dir(step, comm.rank(), comm.size(), o.incremental.enabled));
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
  wo.keep_last = 0;  // pruning is by the global level (prune_shards)
  wo.parent_step = parent_step;
  LEANEMB_ASSIGN_OR_RETURN(auto w, ckpt::CheckpointWriter::create(shard_out, step, wo));
  std::vector<uint8_t> info_bytes;
  ByteWriter info(&info_bytes);
  info.raw(kShardMagic);
  info.put<uint32_t>(static_cast<uint32_t>(comm.rank()));
  info.put<uint32_t>(static_cast<uint32_t>(comm.size()));
  info.put<int64_t>(step);
  LEANEMB_RETURN_IF_ERROR(w->add_blob(kShardInfoBlob, info.bytes()));
  WrittenShard ws;
  LEANEMB_RETURN_IF_ERROR(write_shard_rows(*w, coll, o, parent_step >= 0, &ws));
  LEANEMB_ASSIGN_OR_RETURN(ckpt::CommitInfo ci, w->commit());
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> m, env->read_file(ckpt::join_path(ci.path, ckpt::kManifestName)));
  auto r = ckpt::CheckpointReader::open(ci.path, o.env);
  ws.dir = ci.path;
  ws.id = r.ok() ? (*r)->id_hex() : std::string();  // unreadable: the next checkpoint is full
  ws.manifest_bytes = m.size();
  ws.manifest_hash = xxh64(m);
  return ws;
}

// Rank 0, after the shards: the global checkpoint naming them (`all`: the agreed vector of
// save_sharded_checkpoint), keep_last, then prune_shards.
Status write_global(const std::string& out_dir, int64_t step, const ShardView& coll, std::span<const ShardedBlob> blobs,
                    const ShardedSaveOptions& options, const std::vector<int64_t>& all, ShardedSaveInfo* info) {
  const int p = coll.communicator().size();
  Layout l;
  l.world_size = p;
  l.step = step;
  l.collection_step = coll.step();
  for (int t = 0; t < coll.local().num_tables(); ++t) l.tables.push_back(table_layout(coll.local(), coll.plan(), t));
  for (int k = 0; k < p; ++k) {
    l.shards.push_back({shard_rel_dir(step, k, p, options.incremental.enabled), static_cast<uint64_t>(all[static_cast<size_t>(p + k)]),
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
  info->removed = ci.removed;
  info->warnings = ci.warnings;
  prune_shards(out_dir, options.env, &info->removed, &info->warnings);
  return Status();
}

}  // namespace

Result<ShardedSaveInfo> save_sharded_checkpoint(const std::string& out_dir, int64_t step, EmbeddingTables& tables,
                                                std::span<const ShardedBlob> blobs, const ShardedSaveOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(const ShardView coll, ShardView::of(tables));
  Communicator& comm = coll.communicator();
  const std::string what = "dist: sharded checkpoint step " + std::to_string(step) + " in '" + out_dir + "'";
  const IncrementalOptions& inc = options.incremental;
  // Arguments are checked on every rank alike (same arguments everywhere), before any collective.
  if (step < 0) return invalid_argument(what + ": step must be >= 0");
  if (options.chunk_rows < 1) return invalid_argument(what + ": chunk_rows must be >= 1");
  if (options.keep_last < 0) return invalid_argument(what + ": keep_last must be >= 0 (0 keeps all)");
  if (inc.enabled && (inc.full_every < 1 || !(inc.max_chain_fraction > 0.0 && inc.max_chain_fraction <= 1.0)))
    return invalid_argument(what + ": incremental checkpoints: full_every must be >= 1 and max_chain_fraction in (0, 1]");
  const int p = comm.size();
  const std::string shard_out = ckpt::join_path(out_dir, shard_rel_dir(step, comm.rank(), p, inc.enabled));
  LEANEMB_ASSIGN_OR_RETURN(const int64_t parent_step, agree_parent(coll, shard_out, step, inc, options.env));
  // Rank 0's blobs are checked as part of its shard, so that every rank still agrees.
  Status blob_names;
  if (comm.rank() == 0) {
    for (const ShardedBlob& b : blobs)
      if (b.name.rfind("sharded/", 0) == 0) blob_names = invalid_argument("blob name '" + b.name + "' is reserved");
  }
  Result<WrittenShard> shard =
      blob_names.ok() ? write_shard(out_dir, step, parent_step, coll, options) : Result<WrittenShard>(blob_names);
  // Flags [P], each shard's MANIFEST size and hash [2P], rows and row bytes written [2], summed:
  // every rank learns all.
  std::vector<int64_t> all(static_cast<size_t>(3 * p + 2), 0);
  const auto r = static_cast<size_t>(comm.rank());
  all[r] = shard.ok() ? 0 : 1;
  if (shard.ok()) {
    all[static_cast<size_t>(p) + r] = static_cast<int64_t>(shard->manifest_bytes);
    all[static_cast<size_t>(2 * p) + r] = static_cast<int64_t>(shard->manifest_hash);
    all[static_cast<size_t>(3 * p)] = shard->rows_written;
    all[static_cast<size_t>(3 * p + 1)] = static_cast<int64_t>(shard->row_bytes);
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
  info.parent_step = parent_step;
  info.rows_written = all[static_cast<size_t>(3 * p)];
  info.row_bytes = static_cast<uint64_t>(all[static_cast<size_t>(3 * p + 1)]);
  Status global;
  if (comm.rank() == 0) global = write_global(out_dir, step, coll, blobs, options, all, &info);
  LEANEMB_RETURN_IF_ERROR(agree(comm, global, what + ": writing the global manifest"));
  // The new shard checkpoint is the base of this rank's changes from now on.
  if (coll.local().tracks_changes()) coll.local().reset_changes({step, shard->id});
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
  so.incremental = o.incremental;
  LEANEMB_ASSIGN_OR_RETURN(ShardedSaveInfo s, save_sharded_checkpoint(out_dir, step, *this, blobs, so));
  TablesSaveInfo info;
  info.path = s.global_dir;
  info.warnings = s.warnings;
  info.parent_step = s.parent_step;
  info.rows_written = s.rows_written;  // every rank's rows written (all of them when full)
  info.entry_bytes = s.row_bytes;      // their fat rows' bytes (blobs not counted)
  return info;
}

}  // namespace leanemb::dist
