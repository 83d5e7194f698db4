// load_sharded_checkpoint (each rank copies the rows it owns from the shards that hold them,
// whatever the saving world size) and load_tables_checkpoint (either format).
// Formats: sharded_checkpoint.cc; shared pieces: sharded_checkpoint_internal.h.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dist/column_state_ckpt.h"
#include "dist/delta_rows.h"
#include "dist/linked_tables.h"
#include "dist/sharded_checkpoint.h"
#include "leanemb/json.h"
#include "dist/sharded_checkpoint_internal.h"

namespace leanemb::dist {

using sharded_ckpt_internal::dynamic_blob;
using sharded_ckpt_internal::kPlainPrefix;
using sharded_ckpt_internal::kRowsPrefix;
using sharded_ckpt_internal::Layout;
using sharded_ckpt_internal::open_global;
using sharded_ckpt_internal::open_shard;
using sharded_ckpt_internal::OpenedGlobal;
using sharded_ckpt_internal::ShardView;
using sharded_ckpt_internal::table_layout;
using sharded_ckpt_internal::TableLayout;

namespace {

// Copies the rows this rank owns under `mine` from the shards that hold them, in chunks of this
// rank's local rows: each chunk is assembled in memory (from one read per shard and run of
// consecutive saved rows) and written with one call, so a store behind the table (the file
// store: large aligned writes) sees whole ranges whatever the old and new process counts.
Status copy_rows(const OpenedGlobal& g, const std::vector<std::unique_ptr<ckpt::CheckpointReader>>& shards,
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
          if (!shards[sh]) return internal_error("sharded checkpoint: shard " + std::to_string(sh) + " not open");
          LEANEMB_RETURN_IF_ERROR(shards[sh]->read_rows(name, v[a].saved_row, len, in));
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

// The IdMap states of the dynamic partitions this rank holds, from the shards that saved them
// (shard s of a world of P_s held partitions [s * G / P_s, (s + 1) * G / P_s)).
Status copy_dynamic(const OpenedGlobal& g, const std::vector<std::unique_ptr<ckpt::CheckpointReader>>& shards,
                    EmbeddingCollection& local) {
  for (int t = 0; t < local.num_tables(); ++t) {
    const TableOptions& to = local.options().tables[static_cast<size_t>(t)];
    if (!to.dynamic.enabled) continue;
    const uint32_t G = to.dynamic.partitions, held = to.shard.held_partitions ? to.shard.held_partitions : G;
    for (uint32_t k = 0; k < held; ++k) {
      const uint32_t part = to.shard.first_partition + k;
      const auto s = static_cast<size_t>(static_cast<int64_t>(part) * g.layout.world_size / G);
      if (s >= shards.size() || !shards[s]) return internal_error("dynamic table '" + to.name + "': shard " + std::to_string(s) + " not open");
      auto bytes = shards[s]->read_blob(dynamic_blob(to.name, part));
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

// ", it has tables a, b" (the plain checkpoint's tables), or "" when it has none.
std::string saved_tables(const ckpt::CheckpointReader& r) {
  std::string names;
  for (const ckpt::EntryInfo& e : r.entries()) {
    if (e.kind != ckpt::EntryKind::kTable || e.name.rfind(kPlainPrefix, 0) != 0) continue;
    names += (names.empty() ? "" : ", ") + e.name.substr(std::strlen(kPlainPrefix));
  }
  return names.empty() ? "" : " (it has tables " + names + ")";
}

// Every field of a plain checkpoint's table that differs from the collection's, "field saved in
// the checkpoint, now in the config; ..." (empty when the rows can be copied). The entry's meta
// (write_plain: dim, dtype, optimizer, state dtype, row stride) names the cause; the row count
// and stride come from the entry itself, so a checkpoint without meta is still checked.
std::string plain_table_diff(const ckpt::EntryInfo& e, const RowLayout& l, const TableOptions& to) {
  std::string diff;
  auto cmp = [&](const char* field, const std::string& saved, const std::string& now) {
    if (saved != now) diff += (diff.empty() ? "" : "; ") + std::string(field) + " " + saved + " in the checkpoint, " + now + " in the config";
  };
  cmp("rows", std::to_string(e.total_rows), std::to_string(to.num_rows));
  const nlohmann::json m = parse_json_or_discarded(e.meta.data(), e.meta.size());
  auto str = [&](const char* key) -> std::string {
    if (!m.is_object() || !m.contains(key)) return "";
    const nlohmann::json& v = m[key];
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  const size_t rows_only = diff.size();
  const std::string dim = str("dim"), dtype = str("dtype"), opt = str("optimizer"), sdt = str("state_dtype");
  if (!dim.empty()) cmp("dim", dim, std::to_string(l.dim));
  if (!dtype.empty()) cmp("dtype", dtype, std::string(dtype_name(l.weight_dtype)));
  if (!opt.empty()) cmp("optimizer", opt, std::string(optimizer_name(l.optimizer.kind)));
  if (!sdt.empty()) cmp("state dtype", sdt, std::string(dtype_name(l.optimizer.state_dtype)));
  // The row stride follows from the fields above; it is named only when they do not explain it
  // (no meta, or another build's layout).
  if (diff.size() == rows_only) cmp("row bytes", std::to_string(e.row_bytes), std::to_string(l.stride_bytes));
  return diff;
}

// The tables "emb/<name>" of a plain checkpoint into `tables`, local or sharded: rows go
// through the global-row writer (each rank keeps the rows it owns).
// `use[t]`: table t is read from here (false: from links elsewhere in the chain).
Status read_plain_rows(const ckpt::CheckpointReader& r, EmbeddingTables& tables, int64_t chunk_rows, const std::vector<bool>& use) {
  std::vector<uint8_t> rows;
  for (int t = 0; t < tables.num_tables(); ++t) {
    if (!use[static_cast<size_t>(t)]) continue;
    const RowLayout& l = tables.layout(t);
    const TableOptions& to = tables.options().tables[static_cast<size_t>(t)];
    const std::string name = kPlainPrefix + to.name;
    const ckpt::EntryInfo* e = r.find(name);
    if (!e) return invalid_argument("table " + to.name + " is not in the checkpoint" + saved_tables(r));
    const std::string diff = plain_table_diff(*e, l, to);
    if (!diff.empty()) return invalid_argument("table " + to.name + " in the checkpoint does not match the config: " + diff);
    for (int64_t r0 = 0; r0 < to.num_rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, to.num_rows - r0);
      rows.resize(static_cast<size_t>(n) * l.stride_bytes);
      LEANEMB_RETURN_IF_ERROR(r.read_rows(name, r0, n, rows));
      LEANEMB_RETURN_IF_ERROR(tables.write_raw_rows(t, r0, n, rows));
    }
  }
  return Status();
}

// The changed rows of an incremental checkpoint (dist/delta_rows.h) over rows already loaded,
// row by row through the global-row writer.
Status apply_delta(const ckpt::CheckpointReader& r, EmbeddingTables& tables, int64_t chunk_rows, const std::vector<bool>& use) {
  for (int t = 0; t < tables.num_tables(); ++t) {
    if (!use[static_cast<size_t>(t)]) continue;
    const RowLayout& l = tables.layout(t);
    const TableOptions& to = tables.options().tables[static_cast<size_t>(t)];
    const std::string name = kDeltaPrefix + to.name;
    const ckpt::EntryInfo* e = r.find(name);
    if (!e || e->kind != ckpt::EntryKind::kTable) return data_loss("incremental checkpoint '" + r.dir() + "' has no table '" + name + "'");
    const nlohmann::json m = parse_json_or_discarded(e->meta.data(), e->meta.size());
    ckpt::EntryInfo as_table = *e;  // the shape the rows belong to, checked as a full table's
    as_table.total_rows = m.is_object() && m.contains("table_rows") && m["table_rows"].is_number_integer() ? m["table_rows"].get<int64_t>() : -1;
    const std::string diff = plain_table_diff(as_table, l, to);
    if (!diff.empty()) return invalid_argument("table " + to.name + " in the checkpoint does not match the config: " + diff);
    // Runs of consecutive rows are written with one call (up to chunk_rows rows).
    RowRunWriter runs(tables, t, l.stride_bytes, chunk_rows);
    LEANEMB_RETURN_IF_ERROR(for_each_delta_row(r, to.name, to.num_rows, chunk_rows,
                                               [&](int64_t row, std::span<const uint8_t> fat) { return runs.add(row, fat); }));
    LEANEMB_RETURN_IF_ERROR(runs.flush());
  }
  return Status();
}

// The dynamic tables' partitions of a plain checkpoint (blobs "dyn/<name>/<g>") this process holds.
Status read_dynamic(const ckpt::CheckpointReader& r, EmbeddingTables& tables, const ShardView& view) {
  for (int t = 0; t < tables.num_tables(); ++t) {
    const TableOptions& to = tables.options().tables[static_cast<size_t>(t)];
    if (!to.dynamic.enabled) continue;
    const TableOptions& mine = view.local().options().tables[static_cast<size_t>(t)];
    const uint32_t held = mine.shard.held_partitions ? mine.shard.held_partitions : mine.dynamic.partitions;
    for (uint32_t k = 0; k < held; ++k) {
      const uint32_t g = mine.shard.first_partition + k;
      auto state = r.read_blob(dynamic_blob(to.name, g));
      if (!state.ok())
        return Status(state.status().code(), "dynamic table '" + to.name + "': partition " + std::to_string(g) +
                                                 " missing (were dynamic.partitions changed?): " + state.status().message());
      LEANEMB_RETURN_IF_ERROR(view.local().load_dynamic_partition(t, k, state.value()));
    }
  }
  return Status();
}

// A sparse base (delta_rows.h) into `tables`: every row its initial bytes, then the base's rows.
// Its initial rows must be the collection's (the same initializer, seed and table order).
Status read_sparse_base(const ckpt::CheckpointReader& r, EmbeddingTables& tables, const ShardView& view, int64_t chunk_rows,
                        const std::vector<bool>& use) {
  for (int t = 0; t < tables.num_tables(); ++t) {
    if (!use[static_cast<size_t>(t)]) continue;
    const TableOptions& to = tables.options().tables[static_cast<size_t>(t)];
    const ckpt::EntryInfo* e = r.find(kDeltaPrefix + to.name);
    if (e == nullptr) return invalid_argument("table " + to.name + " is not in the checkpoint '" + r.dir() + "' (a sparse base)");
    LEANEMB_ASSIGN_OR_RETURN(InitialRows ir, parse_initial_rows(e->meta, to.num_rows, "'" + r.dir() + "': table '" + e->name + "'"));
    const std::string want = initial_rows_meta_json(to, tables.options().seed, t);
    const std::string have = initial_rows_meta_json(ir.options, ir.seed, ir.table);
    if (want != have)
      return invalid_argument("table " + to.name + ": the checkpoint holds the rows changed since other initial rows (" + have +
                              ") than the collection's (" + want + "); create it with the run's seed and initializer");
    LEANEMB_RETURN_IF_ERROR(view.local().reset_rows_to_initial(t));
  }
  return apply_delta(r, tables, chunk_rows, use);
}

// Table t from the links of `r` (linked_tables.h), checked against the collection's table.
Status read_linked(const ckpt::CheckpointReader& r, EmbeddingTables& tables, const ShardView& view, int t, int64_t chunk_rows) {
  const TableOptions& to = tables.options().tables[static_cast<size_t>(t)];
  LEANEMB_ASSIGN_OR_RETURN(const LinkedTable lt, read_linked_table(r, to.name));
  ckpt::EntryInfo as_table;  // the shape of the rows, checked as a full table's
  as_table.kind = ckpt::EntryKind::kTable;
  as_table.name = kLinksPrefix + to.name;
  as_table.row_bytes = lt.linked.row_bytes;
  as_table.total_rows = lt.num_rows;
  as_table.meta = lt.meta;
  const std::string diff = plain_table_diff(as_table, tables.layout(t), to);
  if (!diff.empty()) return invalid_argument("table " + to.name + " in the checkpoint does not match the config: " + diff);
  LEANEMB_ASSIGN_OR_RETURN(InitialRows ir, parse_initial_rows(lt.meta, to.num_rows, "'" + r.dir() + "': blob '" + as_table.name + "'"));
  // Rows without a place hold the writer's initial bytes: another initializer or seed than the
  // collection's gets them written (every row).
  const bool same_initial = initial_rows_meta_json(to, tables.options().seed, t) == initial_rows_meta_json(ir.options, ir.seed, ir.table);
  return load_linked_table(r, lt, tables, &view.local(), t, chunk_rows, same_initial ? nullptr : &ir, nullptr);
}

// A plain checkpoint and the chain it extends (oldest first): the base's rows (a sparse base's
// over the initial rows), each link's changed rows, the newest link's dynamic partitions.
Status read_plain_chain(const std::vector<std::unique_ptr<ckpt::CheckpointReader>>& chain, EmbeddingTables& tables,
                        const ShardView& view, int64_t chunk_rows) {
  if (is_sharded_checkpoint(*chain.front()))
    return data_loss("'" + chain.back()->dir() + "' extends the sharded checkpoint '" + chain.front()->dir() + "' (not supported)");
  // A table held as links restarts at the newest link holding it (its whole state); later links
  // may hold its changed rows. The other tables read the chain from its root.
  const size_t T = static_cast<size_t>(tables.num_tables());
  std::vector<int> linked_at(T, -1);
  std::vector<bool> from_root(T, true);
  for (size_t t = 0; t < T; ++t) {
    for (size_t k = chain.size(); k-- > 0;) {
      if (has_linked_table(*chain[k], tables.options().tables[t].name)) {
        linked_at[t] = static_cast<int>(k);
        from_root[t] = false;
        break;
      }
    }
  }
  if (std::find(from_root.begin(), from_root.end(), true) != from_root.end()) {
    if (is_sparse_base(*chain.front())) {
      LEANEMB_RETURN_IF_ERROR(read_sparse_base(*chain.front(), tables, view, chunk_rows, from_root));
    } else {
      LEANEMB_RETURN_IF_ERROR(read_plain_rows(*chain.front(), tables, chunk_rows, from_root));
    }
  }
  for (size_t t = 0; t < T; ++t)
    if (linked_at[t] == 0) LEANEMB_RETURN_IF_ERROR(read_linked(*chain.front(), tables, view, static_cast<int>(t), chunk_rows));
  for (size_t k = 1; k < chain.size(); ++k) {
    std::vector<bool> use(T, false);
    for (size_t t = 0; t < T; ++t) use[t] = static_cast<int>(k) > linked_at[t];
    for (size_t t = 0; t < T; ++t)
      if (static_cast<int>(k) == linked_at[t]) LEANEMB_RETURN_IF_ERROR(read_linked(*chain[k], tables, view, static_cast<int>(t), chunk_rows));
    LEANEMB_RETURN_IF_ERROR(apply_delta(*chain[k], tables, chunk_rows, use));
  }
  return read_dynamic(*chain.back(), tables, view);
}

}  // namespace

Result<ShardedLoadInfo> load_sharded_checkpoint(const std::string& global_dir, EmbeddingTables& tables,
                                                const ShardedLoadOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(const ShardView coll, ShardView::of(tables));
  Communicator& comm = coll.communicator();
  const std::string what = "dist: loading sharded checkpoint '" + global_dir + "'";
  const int rank = comm.rank();
  // Phase 1: open and check everything this rank needs; no row changes yet.
  OpenedGlobal g;
  std::vector<std::unique_ptr<ckpt::CheckpointReader>> shards;
  Status opened = [&]() -> Status {
    if (options.chunk_rows < 1) return invalid_argument("chunk_rows must be >= 1");
    LEANEMB_ASSIGN_OR_RETURN(g, open_global(global_dir, options.env));
    LEANEMB_RETURN_IF_ERROR(check_tables(g.layout, coll.local(), coll.plan(), "tables do not match"));
    shards.resize(static_cast<size_t>(g.layout.world_size));
    for (int s = 0; s < g.layout.world_size; ++s) {
      // Every shard may hold a dynamic table's partitions this rank needs; the others only if
      // their rows overlap this rank's.
      bool needed = false;
      for (size_t t = 0; t < g.layout.tables.size() && !needed; ++t)
        needed = g.plan.local_num_rows(static_cast<int>(t), s) > 0 && coll.plan().local_num_rows(static_cast<int>(t), rank) > 0;
      if (!needed) continue;
      LEANEMB_ASSIGN_OR_RETURN(shards[static_cast<size_t>(s)], open_shard(g.out_dir, g.layout, g.plan, s, options.env));
    }
    return Status();
  }();
  LEANEMB_RETURN_IF_ERROR(agree(comm, opened, what));
  // Phase 2: copy the rows, set the step.
  ShardedLoadInfo info;
  info.step = g.layout.step;
  info.collection_step = g.layout.collection_step;
  info.saved_world_size = g.layout.world_size;
  Status copied = copy_rows(g, shards, coll.plan(), rank, coll.local(), options.chunk_rows, &info.rows_loaded);
  if (copied.ok()) copied = copy_dynamic(g, shards, coll.local());
  if (copied.ok()) copied = read_column_state_blobs(*g.reader, coll.local());
  if (copied.ok()) coll.local().set_step(g.layout.collection_step);
  LEANEMB_RETURN_IF_ERROR(agree(comm, copied, what));
  return info;
}

Result<int64_t> load_tables_checkpoint(const std::string& dir, EmbeddingTables& tables, const TablesLoadOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(const ShardView view, ShardView::of(tables));
  Communicator& comm = view.communicator();
  auto opened = ckpt::CheckpointReader::open(dir, options.env);
  LEANEMB_RETURN_IF_ERROR(agree(comm, opened.status(), "loading tables from '" + dir + "'"));
  if (is_sharded_checkpoint(*opened.value())) {
    ShardedLoadOptions lo;
    lo.env = options.env;
    lo.chunk_rows = options.chunk_rows;
    LEANEMB_ASSIGN_OR_RETURN(ShardedLoadInfo li, load_sharded_checkpoint(dir, tables, lo));
    if (tables.communicator() == nullptr && view.local().tracks_changes())
      view.local().reset_changes({opened.value()->step(), opened.value()->id_hex()});
    return li.collection_step;
  }
  std::vector<std::unique_ptr<ckpt::CheckpointReader>> chain;
  Status st = [&]() -> Status {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<ckpt::CheckpointRef> refs, ckpt::checkpoint_chain(dir, options.env));
    for (const ckpt::CheckpointRef& ref : refs) {
      LEANEMB_ASSIGN_OR_RETURN(auto r, ckpt::CheckpointReader::open(ref.path, options.env));
      chain.push_back(std::move(r));
    }
    return Status();
  }();
  if (st.ok()) st = read_plain_chain(chain, tables, view, options.chunk_rows);
  if (st.ok()) st = read_column_state_blobs(*chain.back(), view.local());  // blobs are whole in every link
  LEANEMB_RETURN_IF_ERROR(agree(comm, st, "loading tables from '" + dir + "'"));
  if (options.collection_step >= 0) tables.set_step(options.collection_step);
  // The loaded checkpoint is the base of the changes from now on.
  if (tables.communicator() == nullptr && view.local().tracks_changes())
    view.local().reset_changes({chain.back()->step(), chain.back()->id_hex()});
  return options.collection_step;
}

}  // namespace leanemb::dist
