// The training digest (training_digest.h). The embedding part of a plain checkpoint goes
// through the same digest_internal functions as collection_digest and the sharded digests, so
// equal rows give equal strings by construction; only the table list and the row source differ.
#include "leanemb/training_digest.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>
#include <tuple>
#include <vector>

#include "ckpt/xxh128_stream.h"
#include "leanemb/json.h"
#include "table/delta_rows.h"
#include "table/linked_tables.h"
#include "dist/digest_internal.h"
#include "dist/sharded_checkpoint.h"
#include "leanemb/checkpoint.h"
#include "leanemb/dtype.h"
#include "leanemb/optimizer.h"

namespace leanemb::dist {

namespace {

using digest_internal::RowSum;
using digest_internal::TableLayout;
using nlohmann::json;
using table_ckpt::for_each_delta_row;
using table_ckpt::for_each_linked_row;
using table_ckpt::has_linked_table;
using table_ckpt::InitialRows;
using table_ckpt::is_sparse_base;
using table_ckpt::kDeltaPrefix;
using table_ckpt::kLinksPrefix;
using table_ckpt::LinkedTable;
using table_ckpt::parse_initial_rows;
using table_ckpt::read_linked_table;

constexpr char kTrainingMagic[] = "leanemb-training-digest-v1";
using table_ckpt::kLayoutBlob;  // a sharded checkpoint's layout (table/sharded_layout.h)
constexpr std::string_view kEmbPrefix = "emb/";
constexpr std::string_view kDensePrefix = "dense/";
constexpr int64_t kChunkRows = 4096;

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::span<const uint8_t> as_bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// Blob `name` of the checkpoint; DataLoss naming it if it is missing or a table.
Result<std::vector<uint8_t>> required_blob(const ckpt::CheckpointReader& r, std::string_view name) {
  const ckpt::EntryInfo* e = r.find(name);
  if (e == nullptr) return data_loss("checkpoint '" + r.dir() + "': no blob '" + std::string(name) + "'");
  if (e->kind != ckpt::EntryKind::kBlob)
    return data_loss("checkpoint '" + r.dir() + "': entry '" + std::string(name) + "' is a table, expected a blob");
  return r.read_blob(name);
}

struct TrainState {
  int64_t step = 0, samples = 0, skipped_steps = 0, collection_step = 0;
  std::vector<std::string> tables;  // "tables": the embedding tables in collection order
};

Result<TrainState> read_train_state(const ckpt::CheckpointReader& r) {
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> b, required_blob(r, "train/state"));
  const json j = parse_json_or_discarded(b.data(), b.size());
  auto bad = [&](const std::string& what) { return data_loss("checkpoint '" + r.dir() + "': blob 'train/state': " + what); };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  TrainState s;
  const std::pair<const char*, int64_t*> fields[] = {
      {"step", &s.step}, {"samples", &s.samples}, {"skipped_steps", &s.skipped_steps}, {"collection_step", &s.collection_step}};
  for (const auto& [key, out] : fields) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return bad(std::string("no integer \"") + key + "\"");
    *out = it->get<int64_t>();
  }
  const auto tables = j.find("tables");
  if (tables != j.end()) {
    if (!tables->is_array()) return bad("\"tables\" is not a list of names");
    for (const auto& n : *tables) {
      if (!n.is_string()) return bad("\"tables\" is not a list of names");
      s.tables.push_back(n.get<std::string>());
    }
  }
  return s;
}

// The TableLayout of plain table entry `e` ("emb/<name>", or a sparse base's "delta/<name>",
// whose meta gives the table's rows) from its meta JSON and shape.
Result<TableLayout> plain_table_layout(const ckpt::EntryInfo& e, const std::string& dir) {
  auto bad = [&](const std::string& what) { return data_loss("checkpoint '" + dir + "': table '" + e.name + "': " + what); };
  if (e.kind != ckpt::EntryKind::kTable) return bad("is a blob, expected a table of embedding rows");
  if (e.total_rows < 1 && !starts_with(e.name, kDeltaPrefix)) return bad("has no rows");
  const json m = parse_json_or_discarded(e.meta.data(), e.meta.size());
  if (m.is_discarded() || !m.is_object()) return bad("meta is not a JSON object");
  TableLayout t;
  const bool sparse = starts_with(e.name, kDeltaPrefix);
  t.name = e.name.substr(sparse ? std::string_view(kDeltaPrefix).size() : kEmbPrefix.size());
  t.num_rows = e.total_rows;
  if (sparse) {
    const auto rows = m.find("table_rows");
    if (rows == m.end() || !rows->is_number_integer() || rows->get<int64_t>() < 1) return bad("meta has no positive integer \"table_rows\"");
    t.num_rows = rows->get<int64_t>();
  }
  const auto dim = m.find("dim"), stride = m.find("stride_bytes");
  if (dim == m.end() || !dim->is_number_integer() || dim->get<int64_t>() < 1) return bad("meta has no positive integer \"dim\"");
  t.dim = dim->get<int64_t>();
  const std::pair<const char*, std::string*> strs[] = {{"dtype", &t.dtype}, {"optimizer", &t.optimizer}, {"state_dtype", &t.state_dtype}};
  for (const auto& [key, out] : strs) {
    const auto it = m.find(key);
    if (it == m.end() || !it->is_string()) return bad(std::string("meta has no string \"") + key + "\"");
    *out = it->get<std::string>();
  }
  if (stride == m.end() || !stride->is_number_unsigned() || stride->get<uint64_t>() != e.row_bytes)
    return bad("meta \"stride_bytes\" is not the table's row size " + std::to_string(e.row_bytes));
  t.stride_bytes = e.row_bytes;
  return t;
}

// Adds to `sum` the rows of incremental checkpoint `r`'s table (table/delta_rows.h) that no newer
// link gave (`seen`), and marks them seen.
Status add_delta_rows(const ckpt::CheckpointReader& r, const TableLayout& tl, uint64_t seed, std::vector<bool>* seen, RowSum* sum) {
  const std::string entry = kDeltaPrefix + tl.name;
  const ckpt::EntryInfo* e = r.find(entry);
  if (e == nullptr || e->kind != ckpt::EntryKind::kTable || e->row_bytes != tl.stride_bytes)
    return data_loss("incremental checkpoint '" + r.dir() + "': no table '" + entry + "' of " + std::to_string(tl.stride_bytes) + "-byte rows");
  return for_each_delta_row(r, tl.name, tl.num_rows, kChunkRows, [&](int64_t row, std::span<const uint8_t> fat) {
    if ((*seen)[static_cast<size_t>(row)]) return Status();
    (*seen)[static_cast<size_t>(row)] = true;
    digest_internal::add_rows(sum, seed, fat, tl.stride_bytes, 1, [&](int64_t) { return row; });
    return Status();
  });
}

// Adds to `sum` the rows of a sparse base's table that no link gave (`seen`): their initial
// bytes, as the base's meta describes them (delta_rows.h, InitialRows).
// `meta`: the JSON holding "initial" (a sparse base's table, or a linked table's blob), `entry`
// its name in checkpoint `dir`.
Status add_initial_rows(std::span<const uint8_t> meta, const std::string& dir, const std::string& entry, const TableLayout& tl,
                        uint64_t seed, const std::vector<bool>& seen, RowSum* sum) {
  LEANEMB_ASSIGN_OR_RETURN(InitialRows ir, parse_initial_rows(meta, tl.num_rows, "'" + dir + "': table '" + entry + "'"));
  OptimizerOptions opt;
  LEANEMB_ASSIGN_OR_RETURN(const DType dtype, parse_dtype(tl.dtype, DTypeUse::kRows));
  LEANEMB_ASSIGN_OR_RETURN(opt.kind, parse_optimizer(tl.optimizer));
  LEANEMB_ASSIGN_OR_RETURN(opt.state_dtype, parse_dtype(tl.state_dtype, DTypeUse::kOptimizerState));
  LEANEMB_ASSIGN_OR_RETURN(const RowLayout l, make_row_layout(tl.dim, dtype, opt));
  if (l.stride_bytes != tl.stride_bytes)
    return data_loss("'" + dir + "': table '" + entry + "': rows of " + std::to_string(tl.stride_bytes) + " bytes, but this build lays them out in " +
                     std::to_string(l.stride_bytes));
  // Rows in blocks over the threads, each summing its own (sums of disjoint rows add); `seen` is
  // only read here.
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (tl.num_rows + kBlock - 1) / kBlock;
#pragma omp parallel
  {
    RowSum mine;
    std::vector<uint8_t> row(tl.stride_bytes);
    std::vector<float> tmp(static_cast<size_t>(tl.dim));
#pragma omp for schedule(dynamic, 4)
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t g = b * kBlock; g < std::min(tl.num_rows, (b + 1) * kBlock); ++g) {
        if (seen[static_cast<size_t>(g)]) continue;
        ir.row(g, l, tmp.data(), row.data());
        digest_internal::add_rows(&mine, seed, row, tl.stride_bytes, 1, [g](int64_t) { return g; });
      }
    }
#pragma omp critical
    {
      sum->lo += mine.lo;
      sum->hi += mine.hi;
    }
  }
  return Status();
}

// One table's part of the embedding digest of a plain chain (oldest first): each row counts
// once, with its newest bytes. The table's root is the newest link holding it as links
// (linked_tables.h: rows at their places, the others initial), else the chain's root (a full
// checkpoint's rows, or a sparse base's rows and the others initial); the links after the root
// hold its changed rows.
Result<TableLayout> table_digest(const std::vector<const ckpt::CheckpointReader*>& chain, const std::string& name, RowSum* sum) {
  size_t root = 0;
  for (size_t k = chain.size(); k-- > 0;) {
    if (has_linked_table(*chain[k], name)) {
      root = k;
      break;
    }
  }
  const ckpt::CheckpointReader& r = *chain[root];
  const bool linked = has_linked_table(r, name);
  const bool sparse = !linked && is_sparse_base(r);
  TableLayout tl;
  LinkedTable lt;
  if (linked) {
    LEANEMB_ASSIGN_OR_RETURN(lt, read_linked_table(r, name));
    ckpt::EntryInfo e;  // the rows' shape, as a sparse base's table would give it
    e.kind = ckpt::EntryKind::kTable;
    e.name = kDeltaPrefix + name;
    e.row_bytes = lt.linked.row_bytes;
    e.meta = lt.meta;
    LEANEMB_ASSIGN_OR_RETURN(tl, plain_table_layout(e, r.dir()));
  } else {
    const ckpt::EntryInfo* e = r.find((sparse ? std::string(kDeltaPrefix) : std::string(kEmbPrefix)) + name);
    if (e == nullptr) return data_loss("checkpoint '" + r.dir() + "': train/state lists table '" + name + "', which it does not hold");
    LEANEMB_ASSIGN_OR_RETURN(tl, plain_table_layout(*e, r.dir()));
  }
  const uint64_t seed = digest_internal::table_seed(tl.name);
  const bool whole = chain.size() == root + 1 && !linked && !sparse;  // no row given twice: no `seen`
  std::vector<bool> seen(whole ? 0 : static_cast<size_t>(tl.num_rows), false);
  for (size_t k = chain.size(); k-- > root + 1;) LEANEMB_RETURN_IF_ERROR(add_delta_rows(*chain[k], tl, seed, &seen, sum));
  if (linked) {
    LEANEMB_RETURN_IF_ERROR(for_each_linked_row(r, lt, [&](int64_t row, std::span<const uint8_t> fat) {
      if (seen[static_cast<size_t>(row)]) return Status();
      seen[static_cast<size_t>(row)] = true;
      digest_internal::add_rows(sum, seed, fat, tl.stride_bytes, 1, [&](int64_t) { return row; });
      return Status();
    }));
    LEANEMB_RETURN_IF_ERROR(add_initial_rows(lt.meta, r.dir(), kLinksPrefix + name, tl, seed, seen, sum));
    return tl;
  }
  if (sparse) {
    LEANEMB_RETURN_IF_ERROR(add_delta_rows(r, tl, seed, &seen, sum));
    LEANEMB_RETURN_IF_ERROR(add_initial_rows(r.find(kDeltaPrefix + name)->meta, r.dir(), kDeltaPrefix + name, tl, seed, seen, sum));
    return tl;
  }
  const std::string entry = std::string(kEmbPrefix) + tl.name;
  std::vector<uint8_t> rows;
  for (int64_t r0 = 0; r0 < tl.num_rows; r0 += kChunkRows) {
    const int64_t c = std::min(kChunkRows, tl.num_rows - r0);
    rows.resize(static_cast<size_t>(c) * tl.stride_bytes);
    LEANEMB_RETURN_IF_ERROR(r.read_rows(entry, r0, c, rows));
    for (int64_t i = 0; i < c; ++i) {
      if (!whole && seen[static_cast<size_t>(r0 + i)]) continue;
      digest_internal::add_rows(sum, seed, std::span<const uint8_t>(rows.data() + static_cast<size_t>(i) * tl.stride_bytes, tl.stride_bytes),
                                tl.stride_bytes, 1, [&](int64_t) { return r0 + i; });
    }
  }
  return tl;
}

// The embedding digest of a plain trainer checkpoint's chain (oldest first): its tables in the
// order train/state lists them (the collection's order, which a sharded layout of the same
// model also has).
Result<std::string> plain_embedding_digest(const std::vector<const ckpt::CheckpointReader*>& chain, const TrainState& st) {
  const ckpt::CheckpointReader& r = *chain.front();
  if (st.tables.empty())
    return data_loss("checkpoint '" + r.dir() + "': blob 'train/state' has no \"tables\" (the table order; a checkpoint of an older build)");
  // Every table of the root is one train/state lists (links, or the root's own rows).
  size_t held = 0;
  for (const ckpt::EntryInfo& e : r.entries()) {
    const bool rows = e.kind == ckpt::EntryKind::kTable && (starts_with(e.name, kEmbPrefix) || starts_with(e.name, kDeltaPrefix));
    held += rows || (e.kind == ckpt::EntryKind::kBlob && starts_with(e.name, kLinksPrefix)) ? 1 : 0;
  }
  if (held != st.tables.size())
    return data_loss("checkpoint '" + r.dir() + "': " + std::to_string(held) + " tables, but train/state lists " + std::to_string(st.tables.size()));
  std::vector<TableLayout> tables;
  std::vector<RowSum> sums(st.tables.size());
  for (size_t t = 0; t < st.tables.size(); ++t) {
    LEANEMB_ASSIGN_OR_RETURN(TableLayout tl, table_digest(chain, st.tables[t], &sums[t]));
    tables.push_back(std::move(tl));
  }
  return digest_internal::finish_digest(st.collection_step, tables, sums);
}

}  // namespace

Result<std::string> training_digest(const std::string& dir, ckpt::Env* env) {
  LEANEMB_ASSIGN_OR_RETURN(auto r, ckpt::CheckpointReader::open(dir, env));
  LEANEMB_ASSIGN_OR_RETURN(TrainState st, read_train_state(*r));
  std::string emb;
  if (r->find(kLayoutBlob) != nullptr) {
    LEANEMB_ASSIGN_OR_RETURN(emb, sharded_checkpoint_digest(dir, env));
  } else {
    // The rows of the checkpoint's whole chain (a full checkpoint is a chain of one); the blobs
    // below are its own.
    LEANEMB_ASSIGN_OR_RETURN(std::vector<ckpt::CheckpointRef> chain, ckpt::checkpoint_chain(dir, env));
    std::vector<std::unique_ptr<ckpt::CheckpointReader>> older;  // the links before `r`, oldest first
    for (size_t k = 0; k + 1 < chain.size(); ++k) {
      LEANEMB_ASSIGN_OR_RETURN(auto link, ckpt::CheckpointReader::open(chain[k].path, env));
      older.push_back(std::move(link));
    }
    std::vector<const ckpt::CheckpointReader*> links;
    for (const auto& link : older) links.push_back(link.get());
    links.push_back(r.get());
    LEANEMB_ASSIGN_OR_RETURN(emb, plain_embedding_digest(links, st));
  }
  ckpt::Xxh128Stream h;
  h.bytes(kTrainingMagic, sizeof(kTrainingMagic) - 1);
  h.sized(as_bytes(emb));
  std::vector<const ckpt::EntryInfo*> dense;
  for (const ckpt::EntryInfo& e : r->entries()) {  // bytewise name order
    if (starts_with(e.name, kDensePrefix)) dense.push_back(&e);
  }
  h.u64(dense.size());
  for (const ckpt::EntryInfo* e : dense) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> b, required_blob(*r, e->name));
    h.sized(as_bytes(e->name));
    h.sized(b);
  }
  for (const char* name : {"amp/loss_scaler", "train/reader"}) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> b, required_blob(*r, name));
    h.sized(b);
  }
  for (int64_t v : {st.step, st.samples, st.skipped_steps, st.collection_step}) h.u64(static_cast<uint64_t>(v));
  return h.hex();
}

}  // namespace leanemb::dist
