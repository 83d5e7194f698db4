// The plain checkpoint format's load (docs/formats/checkpoint.md): a plain checkpoint and the
// chain it extends into any EmbeddingTables (table_checkpoint.h). Moved from src/dist (issue 38):
// the format is unchanged.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "leanemb/json.h"
#include "table/column_state_ckpt.h"
#include "table/delta_rows.h"
#include "table/linked_tables.h"
#include "table/table_checkpoint.h"

namespace leanemb::table_ckpt {

Result<std::vector<std::unique_ptr<ckpt::CheckpointReader>>> open_chain(const std::string& dir, ckpt::Env* env) {
  std::vector<std::unique_ptr<ckpt::CheckpointReader>> chain;
  LEANEMB_ASSIGN_OR_RETURN(std::vector<ckpt::CheckpointRef> refs, ckpt::checkpoint_chain(dir, env));
  for (const ckpt::CheckpointRef& ref : refs) {
    LEANEMB_ASSIGN_OR_RETURN(auto r, ckpt::CheckpointReader::open(ref.path, env));
    chain.push_back(std::move(r));
  }
  return chain;
}

namespace {


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

// The changed rows of an incremental checkpoint (delta_rows.h) over rows already loaded,
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
Status read_dynamic(const ckpt::CheckpointReader& r, EmbeddingTables& tables, EmbeddingCollection& local) {
  for (int t = 0; t < tables.num_tables(); ++t) {
    const TableOptions& to = tables.options().tables[static_cast<size_t>(t)];
    if (!to.dynamic.enabled) continue;
    const TableOptions& mine = local.options().tables[static_cast<size_t>(t)];
    const uint32_t held = mine.shard.held_partitions ? mine.shard.held_partitions : mine.dynamic.partitions;
    for (uint32_t k = 0; k < held; ++k) {
      const uint32_t g = mine.shard.first_partition + k;
      auto state = r.read_blob(dynamic_blob(to.name, g));
      if (!state.ok())
        return Status(state.status().code(), "dynamic table '" + to.name + "': partition " + std::to_string(g) +
                                                 " missing (were dynamic.partitions changed?): " + state.status().message());
      LEANEMB_RETURN_IF_ERROR(local.load_dynamic_partition(t, k, state.value()));
    }
  }
  return Status();
}

// A sparse base (delta_rows.h) into `tables`: every row its initial bytes, then the base's rows.
// Its initial rows must be the collection's (the same initializer, seed and table order).
Status read_sparse_base(const ckpt::CheckpointReader& r, EmbeddingTables& tables, EmbeddingCollection& local, int64_t chunk_rows,
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
    LEANEMB_RETURN_IF_ERROR(local.reset_rows_to_initial(t));
  }
  return apply_delta(r, tables, chunk_rows, use);
}

// Table t from the links of `r` (linked_tables.h), checked against the collection's table.
Status read_linked(const ckpt::CheckpointReader& r, EmbeddingTables& tables, EmbeddingCollection& local, int t, int64_t chunk_rows) {
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
  return load_linked_table(r, lt, tables, &local, t, chunk_rows, same_initial ? nullptr : &ir, nullptr);
}

}  // namespace

Status read_plain_chain(const std::vector<std::unique_ptr<ckpt::CheckpointReader>>& chain, EmbeddingTables& tables,
                        EmbeddingCollection& local, int64_t chunk_rows) {
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
      LEANEMB_RETURN_IF_ERROR(read_sparse_base(*chain.front(), tables, local, chunk_rows, from_root));
    } else {
      LEANEMB_RETURN_IF_ERROR(read_plain_rows(*chain.front(), tables, chunk_rows, from_root));
    }
  }
  for (size_t t = 0; t < T; ++t)
    if (linked_at[t] == 0) LEANEMB_RETURN_IF_ERROR(read_linked(*chain.front(), tables, local, static_cast<int>(t), chunk_rows));
  for (size_t k = 1; k < chain.size(); ++k) {
    std::vector<bool> use(T, false);
    for (size_t t = 0; t < T; ++t) use[t] = static_cast<int>(k) > linked_at[t];
    for (size_t t = 0; t < T; ++t)
      if (static_cast<int>(k) == linked_at[t]) LEANEMB_RETURN_IF_ERROR(read_linked(*chain[k], tables, local, static_cast<int>(t), chunk_rows));
    LEANEMB_RETURN_IF_ERROR(apply_delta(*chain[k], tables, chunk_rows, use));
  }
  LEANEMB_RETURN_IF_ERROR(read_dynamic(*chain.back(), tables, local));
  return read_column_state_blobs(*chain.back(), local);  // blobs are whole in every link
}

}  // namespace leanemb::table_ckpt
