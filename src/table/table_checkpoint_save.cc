// EmbeddingCollection::save: a plain checkpoint of a local collection (docs/formats/checkpoint.md):
// every table's rows as "emb/<name>", or only the rows changed since the base (an incremental
// link or a sparse base: delta_rows.h), tables in a log-layout store kept by links
// (linked_tables.h), dynamic partitions and column state as blobs. Moved from src/dist (issue 38):
// the format is unchanged.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "leanemb/embedding.h"
#include "leanemb/json.h"
#include "table/column_state_ckpt.h"
#include "table/delta_rows.h"
#include "table/linked_tables.h"
#include "table/table_checkpoint.h"

namespace leanemb {

namespace table_ckpt {

// Each chunk of rows is read with one call (read_raw_rows_at: a cache reads its resident rows
// from their slots and the others from its store in one batch).
Status write_changed_rows(ckpt::CheckpointWriter& w, const EmbeddingCollection& emb, int t, std::span<const uint8_t> meta,
                          int64_t chunk_rows, const std::function<void(int64_t)>& on_rows) {
  const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
  const size_t stride = emb.layout(t).stride_bytes;
  const std::string name = kDeltaPrefix + to.name;
  LEANEMB_RETURN_IF_ERROR(w.add_table(name, stride, emb.num_changed_rows(t), meta));
  const int64_t chunk = std::min(chunk_rows, kDeltaIdsPerBlob);
  std::vector<int64_t> ids(static_cast<size_t>(chunk)), block;
  std::vector<uint8_t> fat;
  int64_t pos = 0, k = 0;
  for (int64_t from = 0;;) {
    // At most the rest of the current id block, so that blocks hold exactly kDeltaIdsPerBlob.
    const int64_t room = std::min<int64_t>(chunk, kDeltaIdsPerBlob - static_cast<int64_t>(block.size()));
    const int64_t n = emb.changed_rows(t, from, std::span<int64_t>(ids.data(), static_cast<size_t>(room)));
    if (n == 0) break;
    fat.resize(static_cast<size_t>(n) * stride);
    LEANEMB_RETURN_IF_ERROR(emb.read_raw_rows_at(t, std::span<const int64_t>(ids.data(), static_cast<size_t>(n)), fat));
    LEANEMB_RETURN_IF_ERROR(w.append_rows(name, pos, fat));
    block.insert(block.end(), ids.begin(), ids.begin() + n);
    if (static_cast<int64_t>(block.size()) == kDeltaIdsPerBlob) {
      LEANEMB_RETURN_IF_ERROR(w.add_blob(delta_rows_blob(to.name, k++), encode_delta_rows(block)));
      block.clear();
    }
    pos += n;
    from = ids[static_cast<size_t>(n - 1)] + 1;
    if (on_rows) on_rows(n);
  }
  if (!block.empty()) LEANEMB_RETURN_IF_ERROR(w.add_blob(delta_rows_blob(to.name, k), encode_delta_rows(block)));
  return Status();
}

namespace {

std::vector<uint8_t> json_bytes(const nlohmann::json& j) {
  const std::string s = dump_json(j);
  return std::vector<uint8_t>(s.begin(), s.end());
}

nlohmann::json plain_meta(const RowLayout& l) {
  return {{"dim", l.dim}, {"dtype", std::string(dtype_name(l.weight_dtype))},
          {"optimizer", std::string(optimizer_name(l.optimizer.kind))},
          {"state_dtype", std::string(dtype_name(l.optimizer.state_dtype))}, {"stride_bytes", l.stride_bytes}};
}

Status write_dynamic(ckpt::CheckpointWriter& w, EmbeddingCollection& emb, int t) {
  const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
  if (!to.dynamic.enabled) return Status();
  for (uint32_t g = 0; g < to.dynamic.partitions; ++g) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> state, emb.save_dynamic_partition(t, g));
    LEANEMB_RETURN_IF_ERROR(w.add_blob(dynamic_blob(to.name, g), state));
  }
  return Status();
}

// `linked[t]`: table t is kept by links (written elsewhere), not here.
Status write_plain(ckpt::CheckpointWriter& w, EmbeddingCollection& emb, int64_t chunk_rows,
                   const std::function<void(int64_t, int64_t)>& progress, const std::vector<bool>& linked) {
  std::vector<uint8_t> rows;
  int64_t written = 0, to_write = 0;
  for (int t = 0; t < emb.num_tables(); ++t) to_write += linked[static_cast<size_t>(t)] ? 0 : emb.options().tables[static_cast<size_t>(t)].num_rows;
  for (int t = 0; t < emb.num_tables(); ++t) {
    if (linked[static_cast<size_t>(t)]) continue;
    const RowLayout& l = emb.layout(t);
    const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
    const std::string name = kPlainPrefix + to.name;
    LEANEMB_RETURN_IF_ERROR(w.add_table(name, l.stride_bytes, to.num_rows, json_bytes(plain_meta(l))));
    for (int64_t r0 = 0; r0 < to.num_rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, to.num_rows - r0);
      rows.resize(static_cast<size_t>(n) * l.stride_bytes);
      LEANEMB_RETURN_IF_ERROR(emb.read_raw_rows(t, r0, n, rows));
      LEANEMB_RETURN_IF_ERROR(w.append_rows(name, r0, rows));
      written += n;
      if (progress) progress(written, to_write);
    }
    LEANEMB_RETURN_IF_ERROR(write_dynamic(w, emb, t));
  }
  return Status();
}

// The changed rows of every table (write_changed_rows): table "delta/<name>" of their fat rows
// and blobs "delta_rows/<name>/<k>" of their row numbers (delta_rows.h).
// `sparse_base`: the rows changed since the initial rows, as the root of a chain (each table's
// meta then says what its other rows hold: delta_rows.h, InitialRows).
Status write_delta(ckpt::CheckpointWriter& w, EmbeddingCollection& emb, int64_t chunk_rows,
                   const std::function<void(int64_t, int64_t)>& progress, bool sparse_base, const std::vector<bool>& linked) {
  int64_t written = 0, to_write = 0;
  for (int t = 0; t < emb.num_tables(); ++t) to_write += linked[static_cast<size_t>(t)] ? 0 : emb.num_changed_rows(t);
  for (int t = 0; t < emb.num_tables(); ++t) {
    if (linked[static_cast<size_t>(t)]) continue;
    const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
    nlohmann::json meta = plain_meta(emb.layout(t));
    meta["table_rows"] = to.num_rows;
    if (sparse_base) meta["initial"] = parse_json_or_discarded(initial_rows_meta_json(to, emb.options().seed, t));
    LEANEMB_RETURN_IF_ERROR(write_changed_rows(w, emb, t, json_bytes(meta), chunk_rows, [&](int64_t n) {
      written += n;
      if (progress) progress(written, to_write);
    }));
    LEANEMB_RETURN_IF_ERROR(write_dynamic(w, emb, t));
  }
  return Status();
}

// The step of the checkpoint an incremental checkpoint `step` of `emb` would extend, or -1 (a
// full one): see IncrementalOptions.
int64_t delta_parent(const std::string& out_dir, int64_t step, const EmbeddingCollection& emb, const IncrementalOptions& inc,
                     ckpt::Env* env, const std::vector<bool>& linked) {
  const EmbeddingCollection::ChangeBase& base = emb.change_base();
  if (!inc.enabled || !emb.tracks_changes() || base.step < 0 || base.step >= step) return -1;
  const std::string dir = ckpt::join_path(ckpt::checkpoints_dir(out_dir), ckpt::step_dir_name(base.step));
  auto chain = ckpt::checkpoint_chain(dir, env);
  if (!chain.ok() || static_cast<int>(chain->size()) >= inc.full_every) return -1;
  // The links' rows (a sparse base's own rows not counted) against the tables' rows.
  int64_t chain_rows = 0, total = 0;
  for (size_t k = 0; k < chain->size(); ++k) {
    auto r = ckpt::CheckpointReader::open((*chain)[k].path, env);
    if (!r.ok() || (k + 1 == chain->size() && (*r)->id_hex() != base.id)) return -1;
    if (k == 0) continue;
    for (const ckpt::EntryInfo& e : (*r)->entries())
      if (e.name.rfind(kDeltaPrefix, 0) == 0) chain_rows += e.total_rows;
  }
  for (int t = 0; t < emb.num_tables(); ++t) {
    if (linked[static_cast<size_t>(t)]) continue;  // links hold their whole table in every checkpoint
    chain_rows += emb.num_changed_rows(t);
    total += emb.options().tables[static_cast<size_t>(t)].num_rows;
  }
  return static_cast<double>(chain_rows) <= inc.max_chain_fraction * static_cast<double>(total) ? base.step : -1;
}

// Whether the next full checkpoint can be a sparse base (delta_rows.h): the changes count from
// the initial rows, or from a chain rooted at a sparse base, whose rows (the root's and every
// link's) are then marked changed too, so that the marks hold every row changed since create.
bool widen_to_initial(const std::string& out_dir, EmbeddingCollection& emb, ckpt::Env* env, const std::vector<bool>& linked) {
  const EmbeddingCollection::ChangeBase& base = emb.change_base();
  if (base.initial) return true;
  if (base.step < 0) return false;
  const std::string dir = ckpt::join_path(ckpt::checkpoints_dir(out_dir), ckpt::step_dir_name(base.step));
  auto chain = ckpt::checkpoint_chain(dir, env);
  if (!chain.ok()) return false;
  std::vector<std::unique_ptr<ckpt::CheckpointReader>> links;
  for (const ckpt::CheckpointRef& ref : *chain) {
    auto r = ckpt::CheckpointReader::open(ref.path, env);
    if (!r.ok()) return false;
    links.push_back(std::move(*r));
  }
  if (!is_sparse_base(*links.front()) || links.back()->id_hex() != base.id) return false;
  for (const auto& r : links) {
    for (int t = 0; t < emb.num_tables(); ++t) {
      if (linked[static_cast<size_t>(t)]) continue;
      const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
      const ckpt::EntryInfo* e = r->find(kDeltaPrefix + to.name);
      if (e == nullptr) return false;
      for (int64_t k = 0; k * kDeltaIdsPerBlob < e->total_rows; ++k) {
        const std::string blob = delta_rows_blob(to.name, k);
        auto bytes = r->read_blob(blob);
        if (!bytes.ok()) return false;
        auto rows = decode_delta_rows(*bytes, std::min(kDeltaIdsPerBlob, e->total_rows - k * kDeltaIdsPerBlob), to.num_rows, blob);
        if (!rows.ok()) return false;
        emb.mark_changed(t, *rows);
      }
    }
  }
  return true;
}

// A sparse base is smaller than a full checkpoint (its rows plus up to 3 bytes of row number each).
bool sparse_base_pays(const EmbeddingCollection& emb, const std::vector<bool>& linked) {
  double sparse = 0, full = 0;
  for (int t = 0; t < emb.num_tables(); ++t) {
    if (linked[static_cast<size_t>(t)]) continue;
    const double stride = static_cast<double>(emb.layout(t).stride_bytes);
    sparse += static_cast<double>(emb.num_changed_rows(t)) * (stride + 3);
    full += static_cast<double>(emb.options().tables[static_cast<size_t>(t)].num_rows) * stride;
  }
  return sparse < full;
}

}  // namespace

}  // namespace table_ckpt

Result<TablesSaveInfo> EmbeddingCollection::save(const std::string& out_dir, int64_t step, std::span<const CheckpointBlob> blobs,
                                                 const TablesSaveOptions& options) {
  using namespace table_ckpt;  // NOLINT: this file's own helpers
  TablesSaveInfo info;
  EmbeddingCollection& emb = *this;
  const IncrementalOptions& inc = options.incremental;
  if (inc.enabled && (inc.full_every < 1 || !(inc.max_chain_fraction > 0.0 && inc.max_chain_fraction <= 1.0)))
    return invalid_argument("incremental checkpoints: full_every must be >= 1 and max_chain_fraction in (0, 1]");
  std::vector<bool> linked(static_cast<size_t>(emb.num_tables()), false);
  for (int t = 0; t < emb.num_tables(); ++t) linked[static_cast<size_t>(t)] = inc.link_store_rows && emb.can_link_rows(t, out_dir);
  ckpt::WriterOptions wo;
  wo.env = options.env;
  wo.block_bytes = options.block_bytes;
  wo.keep_last = options.keep_last;
  wo.parent_step = delta_parent(out_dir, step, emb, inc, options.env, linked);
  const bool sparse_base = wo.parent_step < 0 && inc.enabled && emb.tracks_changes() &&
                           widen_to_initial(out_dir, emb, options.env, linked) && sparse_base_pays(emb, linked);
  LEANEMB_ASSIGN_OR_RETURN(auto w, ckpt::CheckpointWriter::create(out_dir, step, wo));
  for (const CheckpointBlob& b : blobs) LEANEMB_RETURN_IF_ERROR(w->add_blob(b.name, b.bytes));
  if (wo.parent_step >= 0 || sparse_base) {
    LEANEMB_RETURN_IF_ERROR(write_delta(*w, emb, options.chunk_rows, options.progress, sparse_base, linked));
  } else {
    LEANEMB_RETURN_IF_ERROR(write_plain(*w, emb, options.chunk_rows, options.progress, linked));
  }
  for (int t = 0; t < emb.num_tables(); ++t) {
    if (!linked[static_cast<size_t>(t)]) continue;
    LEANEMB_ASSIGN_OR_RETURN(const int64_t rows, write_linked_table(*w, emb, t, emb.options().seed));
    info.rows_linked += rows;
    ++info.linked_tables;
  }
  LEANEMB_RETURN_IF_ERROR(add_column_state_blobs(*w, emb));  // whole in every link
  LEANEMB_ASSIGN_OR_RETURN(ckpt::CommitInfo ci, w->commit());
  info.path = ci.path;
  info.warnings = ci.warnings;
  info.set_aside = ci.set_aside;
  info.parent_step = wo.parent_step;
  info.sparse_base = sparse_base;
  info.entry_bytes = ci.entry_bytes;
  for (int t = 0; t < emb.num_tables(); ++t) {
    if (linked[static_cast<size_t>(t)]) continue;
    info.rows_written += wo.parent_step >= 0 || sparse_base ? emb.num_changed_rows(t) : emb.options().tables[static_cast<size_t>(t)].num_rows;
  }
  if (emb.tracks_changes()) {
    // The new checkpoint is the base of the changes from now on (a failure to read its id back
    // only costs the next checkpoint its increment: the base then matches no checkpoint).
    auto r = ckpt::CheckpointReader::open(ci.path, options.env);
    emb.reset_changes({step, r.ok() ? (*r)->id_hex() : std::string()});
  }
  return info;
}

}  // namespace leanemb
