// Loading a table checkpoint of either format into one process's rows (table/sharded_layout.h):
// load_sharded (each rank copies the rows it owns from the shards that hold them, whatever the
// saving world size), load_tables (either format; the plain chain is table_checkpoint_load.cc)
// and EmbeddingCollection::load. The sharded collection adds the cross-rank steps
// (src/dist/sharded_checkpoint.cc) through LoadTarget::agree.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "table/column_state_ckpt.h"
#include "table/delta_rows.h"
#include "table/sharded_layout.h"
#include "table/table_checkpoint.h"

namespace leanemb::table_ckpt {

using dist::ShardPlan;

namespace {

// Copies the rows this rank owns under `mine` from the shards that hold them, in chunks of this
// rank's local rows: each chunk is assembled in memory (from one read per shard and run of
// consecutive saved rows) and written with one call, so a store behind the table (the file
// store: large aligned writes) sees whole ranges whatever the old and new process counts.
using ShardChain = std::vector<std::unique_ptr<ckpt::CheckpointReader>>;  // oldest first (open_shard_chain)

Status copy_rows(const OpenedGlobal& g, const std::vector<ShardChain>& shards,
                 const ShardPlan& mine, int rank, EmbeddingCollection& local, int64_t chunk_rows, int64_t* loaded) {
  std::vector<uint8_t> out, in;
  struct Need {
    int64_t saved_row;  // local row in the saved shard
    int64_t pos;        // row in the chunk
  };
  std::vector<std::vector<Need>> need(static_cast<size_t>(g.layout.world_size));
  for (size_t t = 0; t < g.layout.tables.size(); ++t) {
    const int ti = static_cast<int>(t);
    const size_t stride = g.layout.tables[t].stride_bytes;
    const std::string name = kRowsPrefix + g.layout.tables[t].name;
    const int64_t n = mine.local_num_rows(ti, rank);
    for (int64_t l0 = 0; l0 < n; l0 += chunk_rows) {
      const int64_t c = std::min(chunk_rows, n - l0);
      for (auto& v : need) v.clear();
      for (int64_t i = 0; i < c; ++i) {
        const int64_t gr = mine.global_row(ti, rank, l0 + i);
        need[static_cast<size_t>(g.plan.owner(ti, gr))].push_back({g.plan.local_row(ti, gr), i});
      }
      out.resize(static_cast<size_t>(c) * stride);
      for (size_t sh = 0; sh < need.size(); ++sh) {
        std::vector<Need>& v = need[sh];
        std::sort(v.begin(), v.end(), [](const Need& a, const Need& b) { return a.saved_row < b.saved_row; });
        for (size_t a = 0; a < v.size();) {  // runs of consecutive saved rows: one read each
          size_t b = a + 1;
          while (b < v.size() && v[b].saved_row == v[b - 1].saved_row + 1) ++b;
          const auto len = static_cast<int64_t>(b - a);
          in.resize(static_cast<size_t>(len) * stride);
          if (shards[sh].empty()) return internal_error("sharded checkpoint: shard " + std::to_string(sh) + " not open");
          LEANEMB_RETURN_IF_ERROR(shards[sh].front()->read_rows(name, v[a].saved_row, len, in));
          for (size_t k = a; k < b; ++k)
            std::memcpy(out.data() + static_cast<size_t>(v[k].pos) * stride, in.data() + (k - a) * stride, stride);
          a = b;
        }
      }
      LEANEMB_RETURN_IF_ERROR(local.write_raw_rows(ti, l0, c, out));
      *loaded += c;
    }
  }
  return Status();
}

// Then each link of every shard chain, oldest first: the link's changed rows that this rank owns
// under `mine` replace the base's (a row takes its newest bytes; rows_loaded counts them once,
// in copy_rows).
Status copy_delta_rows(const OpenedGlobal& g, const std::vector<ShardChain>& shards, const ShardPlan& mine, int rank,
                       EmbeddingCollection& local, int64_t chunk_rows) {
  for (size_t sh = 0; sh < shards.size(); ++sh) {
    const int s = static_cast<int>(sh);
    for (size_t k = 1; k < shards[sh].size(); ++k) {
      for (size_t t = 0; t < g.layout.tables.size(); ++t) {
        const int ti = static_cast<int>(t);
        RowRunWriter out(local, ti, g.layout.tables[t].stride_bytes, chunk_rows);
        LEANEMB_RETURN_IF_ERROR(for_each_delta_row(*shards[sh][k], g.layout.tables[t].name, g.plan.local_num_rows(ti, s), chunk_rows,
                                                   [&](int64_t saved_row, std::span<const uint8_t> fat) -> Status {
                                                     const int64_t gr = g.plan.global_row(ti, s, saved_row);
                                                     if (mine.owner(ti, gr) != rank) return Status();
                                                     return out.add(mine.local_row(ti, gr), fat);
                                                   }));
        LEANEMB_RETURN_IF_ERROR(out.flush());
      }
    }
  }
  return Status();
}

// Whether this rank's local rows are exactly shard `rank`'s of the saved layout (same world size
// and sharding): its shard chain can then be the base of the collection's changes.
bool same_shard(const OpenedGlobal& g, const EmbeddingCollection& local, const ShardPlan& plan, int rank) {
  if (g.layout.world_size != plan.world_size() || rank >= g.layout.world_size) return false;
  for (int t = 0; t < local.num_tables(); ++t) {
    const TableLayout b = table_layout(local, plan, t);
    const TableLayout& a = g.layout.tables[static_cast<size_t>(t)];
    if (a.kind != b.kind || a.owner != b.owner) return false;
  }
  return true;
}

// The IdMap states of the dynamic partitions this rank holds, from the shards that saved them
// (shard s of a world of P_s held partitions [s * G / P_s, (s + 1) * G / P_s)).
Status copy_dynamic(const OpenedGlobal& g, const std::vector<ShardChain>& shards,
                    EmbeddingCollection& local) {
  for (int t = 0; t < local.num_tables(); ++t) {
    const TableOptions& to = local.options().tables[static_cast<size_t>(t)];
    if (!to.dynamic.enabled) continue;
    const uint32_t G = to.dynamic.partitions, held = to.shard.held_partitions ? to.shard.held_partitions : G;
    for (uint32_t k = 0; k < held; ++k) {
      const uint32_t part = to.shard.first_partition + k;
      const auto s = static_cast<size_t>(static_cast<int64_t>(part) * g.layout.world_size / G);
      if (s >= shards.size() || shards[s].empty()) return internal_error("dynamic table '" + to.name + "': shard " + std::to_string(s) + " not open");
      auto bytes = shards[s].back()->read_blob(dynamic_blob(to.name, part));  // the newest link's
      if (!bytes.ok()) {
        return Status(bytes.status().code(), "dynamic table '" + to.name + "': partition " + std::to_string(part) + " of " +
                                                 std::to_string(G) + " is not in shard " + std::to_string(s) +
                                                 " (were dynamic.partitions changed?): " + bytes.status().message());
      }
      LEANEMB_RETURN_IF_ERROR(local.load_dynamic_partition(t, k, bytes.value()));
    }
  }
  return Status();
}

// InvalidArgument naming every difference of the first table that differs between the saved
// tables and the collection's.
Status check_tables(const Layout& saved, const EmbeddingCollection& local, const ShardPlan& plan, const std::string& where) {
  if (saved.tables.size() != static_cast<size_t>(local.num_tables()))
    return invalid_argument(where + ": it has " + std::to_string(saved.tables.size()) + " tables, the collection " +
                            std::to_string(local.num_tables()));
  for (int t = 0; t < local.num_tables(); ++t) {
    const TableLayout& a = saved.tables[static_cast<size_t>(t)];
    const TableLayout b = table_layout(local, plan, t);
    std::string diff;
    auto cmp = [&](const char* field, const std::string& x, const std::string& y) {
      if (x != y) diff += (diff.empty() ? "" : "; ") + std::string(field) + " " + x + " in the checkpoint, " + y + " in the collection";
    };
    cmp("name", a.name, b.name);
    cmp("rows", std::to_string(a.num_rows), std::to_string(b.num_rows));
    cmp("dim", std::to_string(a.dim), std::to_string(b.dim));
    cmp("dtype", a.dtype, b.dtype);
    cmp("optimizer", a.optimizer, b.optimizer);
    cmp("state dtype", a.state_dtype, b.state_dtype);
    cmp("row stride", std::to_string(a.stride_bytes), std::to_string(b.stride_bytes));
    if (!diff.empty()) return invalid_argument(where + ": table " + std::to_string(t) + " ('" + b.name + "') differs: " + diff);
  }
  return Status();
}

}  // namespace

Status agree_alone(const Status& mine, const std::string& what) {
  if (mine.ok()) return mine;
  return Status(mine.code(), what + ": rank(s) 0 failed; rank 0: " + mine.message());
}

Result<ShardedLoadInfo> load_sharded(const std::string& global_dir, const LoadTarget& target, ckpt::Env* env,
                                     int64_t chunk_rows) {
  const std::string what = "dist: loading sharded checkpoint '" + global_dir + "'";
  const int rank = target.rank;
  EmbeddingCollection& local = *target.local;
  const ShardPlan& plan = *target.plan;
  // Phase 1: open and check everything this rank needs; no row changes yet.
  OpenedGlobal g;
  std::vector<ShardChain> shards;
  Status opened = [&]() -> Status {
    if (chunk_rows < 1) return invalid_argument("chunk_rows must be >= 1");
    LEANEMB_ASSIGN_OR_RETURN(g, open_global(global_dir, env));
    LEANEMB_RETURN_IF_ERROR(check_tables(g.layout, local, plan, "tables do not match"));
    shards.resize(static_cast<size_t>(g.layout.world_size));
    for (int s = 0; s < g.layout.world_size; ++s) {
      // Every shard may hold a dynamic table's partitions this rank needs; the others only if
      // their rows overlap this rank's.
      bool needed = false;
      for (size_t t = 0; t < g.layout.tables.size() && !needed; ++t)
        needed = g.plan.local_num_rows(static_cast<int>(t), s) > 0 && plan.local_num_rows(static_cast<int>(t), rank) > 0;
      if (!needed) continue;
      LEANEMB_ASSIGN_OR_RETURN(shards[static_cast<size_t>(s)], open_shard_chain(g.out_dir, g.layout, g.plan, s, env));
    }
    return Status();
  }();
  LEANEMB_RETURN_IF_ERROR(target.agree(opened, what));
  // Phase 2: copy the rows, set the step.
  ShardedLoadInfo info;
  info.step = g.layout.step;
  info.collection_step = g.layout.collection_step;
  info.saved_world_size = g.layout.world_size;
  Status copied = copy_rows(g, shards, plan, rank, local, chunk_rows, &info.rows_loaded);
  if (copied.ok()) copied = copy_delta_rows(g, shards, plan, rank, local, chunk_rows);
  if (copied.ok()) copied = copy_dynamic(g, shards, local);
  if (copied.ok()) copied = read_column_state_blobs(*g.reader, local);
  if (copied.ok()) local.set_step(g.layout.collection_step);
  LEANEMB_RETURN_IF_ERROR(target.agree(copied, what));
  // A rank of a sharded collection whose rows are a saved shard's: that shard's newest
  // checkpoint is the base of its changes (the next sharded save can extend its chain); else
  // none (the next one is full). A one-process collection: load_tables.
  if (!target.one_process && local.tracks_changes()) {
    const auto r = static_cast<size_t>(rank);
    if (same_shard(g, local, plan, rank) && r < shards.size() && !shards[r].empty()) {
      local.reset_changes({shards[r].back()->step(), shards[r].back()->id_hex()});
    } else {
      local.reset_changes({});
    }
  }
  return info;
}

Result<int64_t> load_tables(const std::string& dir, const TablesLoadOptions& options, EmbeddingTables& tables,
                            const LoadTarget& target) {
  const std::string what = "loading tables from '" + dir + "'";
  EmbeddingCollection& local = *target.local;
  auto opened = ckpt::CheckpointReader::open(dir, options.env);
  LEANEMB_RETURN_IF_ERROR(target.agree(opened.status(), what));
  if (is_sharded(*opened.value())) {
    LEANEMB_ASSIGN_OR_RETURN(ShardedLoadInfo li, load_sharded(dir, target, options.env, options.chunk_rows));
    // A plain checkpoint cannot extend a sharded one (its chain would not load): the next
    // checkpoint of a one-process collection is full.
    if (target.one_process && local.tracks_changes()) local.reset_changes({});
    return li.collection_step;
  }
  auto chain = open_chain(dir, options.env);
  Status st = chain.status();
  if (st.ok() && is_sharded(*chain->front()))
    st = data_loss("'" + chain->back()->dir() + "' extends the sharded checkpoint '" + chain->front()->dir() + "' (not supported)");
  if (st.ok()) st = read_plain_chain(*chain, tables, local, options.chunk_rows);
  LEANEMB_RETURN_IF_ERROR(target.agree(st, what));
  if (options.collection_step >= 0) tables.set_step(options.collection_step);
  // The loaded checkpoint is the base of the changes from now on; a rank of a sharded collection
  // has no shard to extend (its next sharded checkpoint is full).
  if (local.tracks_changes()) {
    local.reset_changes(target.one_process ? EmbeddingCollection::ChangeBase{chain->back()->step(), chain->back()->id_hex()}
                                           : EmbeddingCollection::ChangeBase{});
  }
  return options.collection_step;
}

}  // namespace leanemb::table_ckpt

namespace leanemb {

// A local collection as a world of one rank holding every row.
Result<int64_t> EmbeddingCollection::load(const std::string& dir, const TablesLoadOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(const dist::ShardPlan plan, table_ckpt::one_rank_plan(*this));
  table_ckpt::LoadTarget target;
  target.local = this;
  target.plan = &plan;
  target.agree = table_ckpt::agree_alone;
  return table_ckpt::load_tables(dir, options, *this, target);
}

}  // namespace leanemb
