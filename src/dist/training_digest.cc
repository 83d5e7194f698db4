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
#include "dist/delta_rows.h"
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

constexpr char kTrainingMagic[] = "leanemb-training-digest-v1";
constexpr char kLayoutBlob[] = "sharded/layout";  // as in sharded_checkpoint.cc
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

// Adds to `sum` the rows of incremental checkpoint `r`'s table (dist/delta_rows.h) that no newer
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
Status add_initial_rows(const ckpt::CheckpointReader& r, const TableLayout& tl, uint64_t seed, const std::vector<bool>& seen, RowSum* sum) {
  const std::string entry = kDeltaPrefix + tl.name;
  LEANEMB_ASSIGN_OR_RETURN(InitialRows ir, parse_initial_rows(r.find(entry)->meta, tl.num_rows, "'" + r.dir() + "': table '" + entry + "'"));
  OptimizerOptions opt;
  LEANEMB_ASSIGN_OR_RETURN(const DType dtype, parse_dtype(tl.dtype, DTypeUse::kRows));
  LEANEMB_ASSIGN_OR_RETURN(opt.kind, parse_optimizer(tl.optimizer));
  LEANEMB_ASSIGN_OR_RETURN(opt.state_dtype, parse_dtype(tl.state_dtype, DTypeUse::kOptimizerState));
  LEANEMB_ASSIGN_OR_RETURN(const RowLayout l, make_row_layout(tl.dim, dtype, opt));
  if (l.stride_bytes != tl.stride_bytes)
    return data_loss("'" + r.dir() + "': table '" + entry + "': rows of " + std::to_string(tl.stride_bytes) + " bytes, but this build lays them out in " +
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

// The embedding digest of a plain trainer checkpoint: its tables in the order train/state lists
// them (the collection's order, which a sharded layout of the same model also has). `r` is the
// full checkpoint at the root of the chain; `deltas` the incremental ones over it, oldest first
// (empty for a full checkpoint): each row counts with its newest bytes. A sparse root counts
// as the oldest link, and the rows no link holds with their initial bytes.
Result<std::string> plain_embedding_digest(const ckpt::CheckpointReader& r, const TrainState& st,
                                           std::vector<const ckpt::CheckpointReader*> deltas) {
  if (st.tables.empty())
    return data_loss("checkpoint '" + r.dir() + "': blob 'train/state' has no \"tables\" (the table order; a checkpoint of an older build)");
  const bool sparse = is_sparse_base(r);
  const std::string prefix = sparse ? std::string(kDeltaPrefix) : std::string(kEmbPrefix);
  if (sparse) deltas.insert(deltas.begin(), &r);
  size_t emb_entries = 0;
  for (const ckpt::EntryInfo& e : r.entries()) emb_entries += e.kind == ckpt::EntryKind::kTable && starts_with(e.name, prefix) ? 1 : 0;
  if (emb_entries != st.tables.size())
    return data_loss("checkpoint '" + r.dir() + "': " + std::to_string(emb_entries) + " '" + prefix + "' tables, but train/state lists " +
                     std::to_string(st.tables.size()));
  std::vector<TableLayout> tables;
  for (const std::string& name : st.tables) {
    const ckpt::EntryInfo* e = r.find(prefix + name);
    if (e == nullptr) return data_loss("checkpoint '" + r.dir() + "': train/state lists table '" + name + "', which it does not hold");
    LEANEMB_ASSIGN_OR_RETURN(TableLayout t, plain_table_layout(*e, r.dir()));
    tables.push_back(std::move(t));
  }
  std::vector<RowSum> sums(tables.size());
  std::vector<uint8_t> rows;
  for (size_t t = 0; t < tables.size(); ++t) {
    const TableLayout& tl = tables[t];
    const uint64_t seed = digest_internal::table_seed(tl.name);
    std::vector<bool> seen(deltas.empty() ? 0 : static_cast<size_t>(tl.num_rows), false);
    for (auto it = deltas.rbegin(); it != deltas.rend(); ++it) LEANEMB_RETURN_IF_ERROR(add_delta_rows(**it, tl, seed, &seen, &sums[t]));
    if (sparse) {
      LEANEMB_RETURN_IF_ERROR(add_initial_rows(r, tl, seed, seen, &sums[t]));
      continue;
    }
    const std::string entry = std::string(kEmbPrefix) + tl.name;
    for (int64_t r0 = 0; r0 < tl.num_rows; r0 += kChunkRows) {
      const int64_t c = std::min(kChunkRows, tl.num_rows - r0);
      rows.resize(static_cast<size_t>(c) * tl.stride_bytes);
      LEANEMB_RETURN_IF_ERROR(r.read_rows(entry, r0, c, rows));
      if (deltas.empty()) {
        digest_internal::add_rows(&sums[t], seed, rows, tl.stride_bytes, c, [&](int64_t i) { return r0 + i; });
        continue;
      }
      for (int64_t i = 0; i < c; ++i) {
        if (seen[static_cast<size_t>(r0 + i)]) continue;
        digest_internal::add_rows(&sums[t], seed, std::span<const uint8_t>(rows.data() + static_cast<size_t>(i) * tl.stride_bytes, tl.stride_bytes),
                                  tl.stride_bytes, 1, [&](int64_t) { return r0 + i; });
      }
    }
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
    std::vector<const ckpt::CheckpointReader*> deltas;
    for (size_t k = 1; k < older.size(); ++k) deltas.push_back(older[k].get());
    if (!older.empty()) deltas.push_back(r.get());
    LEANEMB_ASSIGN_OR_RETURN(emb, plain_embedding_digest(older.empty() ? *r : *older.front(), st, deltas));
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
