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
#include "dist/sharded_checkpoint.h"

#include <xxhash.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>

#include "ckpt/env.h"
#include "ckpt/format.h"
#include "ckpt/xxh128_stream.h"
#include "dist/digest_internal.h"
#include "dist/local_comm.h"
#include "dist/sharded_collection.h"

namespace leanemb::dist {

namespace {

using digest_internal::RowSum;
using digest_internal::TableLayout;

constexpr char kLayoutBlob[] = "sharded/layout";
constexpr char kLayoutMagic[] = "leanemb-sharded-v1";
constexpr char kShardInfoBlob[] = "shard/info";
constexpr char kShardMagic[] = "leanemb-shard-v1";
constexpr char kRowsPrefix[] = "rows/";
constexpr char kDigestMagic[] = "leanemb-embedding-digest-v1";

ckpt::Env* env_or_posix(ckpt::Env* env) { return env != nullptr ? env : ckpt::posix_env(); }

// ---- byte encoding ------------------------------------------------------------------------

class ByteWriter {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void raw(std::string_view s) { out_.insert(out_.end(), s.begin(), s.end()); }
  void str(std::string_view s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    raw(s);
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// Reads untrusted bytes: every take fails instead of reading past the end.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> b) : b_(b) {}
  template <typename T>
  bool get(T* v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool raw(size_t n, std::string* s) {
    if (b_.size() - pos_ < n) return false;
    s->assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool str(std::string* s) {
    uint32_t n = 0;
    return get(&n) && n <= 4096 && raw(n, s);
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

// ---- the layout -----------------------------------------------------------------------------

struct ShardRecord {
  std::string rel_dir;
  uint64_t manifest_bytes = 0;
  uint64_t manifest_hash = 0;
};

struct Layout {
  int world_size = 0;
  int64_t step = 0;
  int64_t collection_step = 0;
  std::vector<TableLayout> tables;
  std::vector<ShardRecord> shards;
};

uint8_t kind_code(ShardingKind k) {
  return k == ShardingKind::kTableWise ? 0 : k == ShardingKind::kRowModulo ? 1 : 2;
}

std::vector<uint8_t> encode_layout(const Layout& l) {
  ByteWriter w;
  w.raw(kLayoutMagic);
  w.put<uint32_t>(static_cast<uint32_t>(l.world_size));
  w.put<int64_t>(l.step);
  w.put<int64_t>(l.collection_step);
  w.put<uint32_t>(static_cast<uint32_t>(l.tables.size()));
  for (const TableLayout& t : l.tables) {
    w.str(t.name);
    w.put<int64_t>(t.num_rows);
    w.put<int64_t>(t.dim);
    w.str(t.dtype);
    w.str(t.optimizer);
    w.str(t.state_dtype);
    w.put<uint64_t>(t.stride_bytes);
    w.put<uint8_t>(kind_code(t.kind));
    w.put<int32_t>(t.owner);
  }
  w.put<uint32_t>(static_cast<uint32_t>(l.shards.size()));
  for (const ShardRecord& s : l.shards) {
    w.str(s.rel_dir);
    w.put<uint64_t>(s.manifest_bytes);
    w.put<uint64_t>(s.manifest_hash);
  }
  return std::move(w.bytes());
}

Result<Layout> decode_layout(std::span<const uint8_t> bytes, const std::string& where) {
  auto bad = [&](const std::string& what) { return data_loss("sharded checkpoint '" + where + "': blob '" + kLayoutBlob + "': " + what); };
  ByteReader r(bytes);
  Layout l;
  std::string magic;
  uint32_t p = 0, nt = 0, ns = 0;
  if (!r.raw(sizeof(kLayoutMagic) - 1, &magic) || magic != kLayoutMagic) return bad("bad magic");
  if (!r.get(&p) || !r.get(&l.step) || !r.get(&l.collection_step) || !r.get(&nt)) return bad("truncated");
  if (p < 1 || p > (1u << 20)) return bad("world size " + std::to_string(p) + " out of range");
  if (nt > (1u << 20)) return bad("too many tables");
  l.world_size = static_cast<int>(p);
  for (uint32_t i = 0; i < nt; ++i) {
    TableLayout t;
    uint8_t kind = 0;
    if (!r.str(&t.name) || !r.get(&t.num_rows) || !r.get(&t.dim) || !r.str(&t.dtype) || !r.str(&t.optimizer) ||
        !r.str(&t.state_dtype) || !r.get(&t.stride_bytes) || !r.get(&kind) || !r.get(&t.owner))
      return bad("truncated table " + std::to_string(i));
    if (kind > 2 || t.num_rows < 1 || t.dim < 1 || t.stride_bytes < 1 || t.stride_bytes > (uint64_t{1} << 32))
      return bad("table '" + t.name + "' has an invalid shape or sharding");
    t.kind = kind == 0 ? ShardingKind::kTableWise : kind == 1 ? ShardingKind::kRowModulo : ShardingKind::kRowRange;
    if (t.kind == ShardingKind::kTableWise ? (t.owner < 0 || t.owner >= l.world_size) : t.owner != -1)
      return bad("table '" + t.name + "' has an invalid owner");
    l.tables.push_back(std::move(t));
  }
  if (!r.get(&ns) || ns != p) return bad("expected " + std::to_string(p) + " shards");
  for (uint32_t i = 0; i < ns; ++i) {
    ShardRecord s;
    if (!r.str(&s.rel_dir) || !r.get(&s.manifest_bytes) || !r.get(&s.manifest_hash)) return bad("truncated shard list");
    if (s.rel_dir.empty() || s.rel_dir.front() == '/' || s.rel_dir.find("..") != std::string::npos)
      return bad("shard directory '" + s.rel_dir + "' is not a plain relative path");
    l.shards.push_back(std::move(s));
  }
  if (!r.done()) return bad("trailing bytes");
  return l;
}

// The saving run's plan: explicit owners, so that table assignment does not matter.
Result<ShardPlan> plan_of(const Layout& l) {
  ShardPlanOptions po;
  po.world_size = l.world_size;
  for (const TableLayout& t : l.tables) po.tables.push_back({t.num_rows, t.dim, t.kind, t.owner});
  return ShardPlan::create(po);
}

TableLayout table_layout(const EmbeddingCollection& local, const ShardPlan& plan, int t) {
  const RowLayout& rl = local.layout(t);
  TableLayout tl;
  tl.name = local.options().tables[static_cast<size_t>(t)].name;
  tl.num_rows = plan.num_rows(t);
  tl.dim = rl.dim;
  tl.dtype = std::string(dtype_name(rl.weight_dtype));
  tl.optimizer = std::string(optimizer_name(rl.optimizer.kind));
  tl.state_dtype = std::string(state_dtype_name(rl.optimizer.state_dtype));
  tl.stride_bytes = rl.stride_bytes;
  tl.kind = plan.kind(t);
  tl.owner = plan.kind(t) == ShardingKind::kTableWise ? plan.table_owner(t) : -1;
  return tl;
}

std::string rank_dir_name(int rank, int p) { return "rank-" + std::to_string(rank) + "-of-" + std::to_string(p); }

std::string shard_rel_dir(int64_t step, int rank, int p) {
  return "shards/" + ckpt::step_dir_name(step) + "/" + rank_dir_name(rank, p);
}

// <out_dir> of global checkpoint <out_dir>/checkpoints/step-<N>.
std::string out_dir_of(const std::string& global_dir) {
  std::string d = global_dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return ckpt::parent_dir(ckpt::parent_dir(d));
}

std::string shard_ckpt_dir(const std::string& out_dir, const ShardRecord& s, int64_t step) {
  return ckpt::join_path(ckpt::join_path(ckpt::join_path(out_dir, s.rel_dir), "checkpoints"), ckpt::step_dir_name(step));
}

uint64_t xxh64(std::span<const uint8_t> b) { return XXH3_64bits(b.data(), b.size()); }

}  // namespace

// ---- digest (digest_internal.h) ----------------------------------------------------------------

namespace digest_internal {

uint64_t table_seed(std::string_view name) { return XXH3_64bits(name.data(), name.size()); }

void add_rows(RowSum* sum, uint64_t seed, std::span<const uint8_t> rows, size_t stride, int64_t count,
              const std::function<int64_t(int64_t)>& global_row) {
  for (int64_t i = 0; i < count; ++i) {
    const auto g = static_cast<uint64_t>(global_row(i));
    const uint64_t row_seed = XXH3_64bits_withSeed(&g, sizeof(g), seed);
    const XXH128_hash_t h = XXH3_128bits_withSeed(rows.data() + static_cast<size_t>(i) * stride, stride, row_seed);
    sum->lo += h.low64;
    sum->hi += h.high64;
  }
}

std::string finish_digest(int64_t step, const std::vector<TableLayout>& tables, const std::vector<RowSum>& sums) {
  ByteWriter w;
  w.raw(kDigestMagic);
  w.put<uint64_t>(static_cast<uint64_t>(step));
  w.put<uint64_t>(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    const TableLayout& tl = tables[t];
    w.str(tl.name);
    w.put<uint64_t>(static_cast<uint64_t>(tl.num_rows));
    w.put<uint64_t>(static_cast<uint64_t>(tl.dim));
    w.str(tl.dtype);
    w.str(tl.optimizer);
    w.str(tl.state_dtype);
    w.put<uint64_t>(tl.stride_bytes);
    w.put<uint64_t>(sums[t].lo);
    w.put<uint64_t>(sums[t].hi);
  }
  return ckpt::xxh128_hex(XXH3_128bits(w.bytes().data(), w.bytes().size()));
}

}  // namespace digest_internal

namespace {

using digest_internal::add_rows;
using digest_internal::finish_digest;
using digest_internal::table_seed;

// The rows of this process as the checkpoint code sees them, for any EmbeddingTables: a sharded
// collection's communicator, plan and local collection, or for a local collection a world of
// one rank and the plan of one rank (every row local, global row = local row).
class ShardView {
 public:
  static Result<ShardView> of(EmbeddingTables& tables) {
    ShardView v;
    if (auto* sh = dynamic_cast<ShardedEmbeddingCollection*>(&tables)) {
      v.comm_ = sh->communicator();
      v.plan_ = &sh->plan();
      v.local_ = &sh->local();
      return v;
    }
    auto* local = dynamic_cast<EmbeddingCollection*>(&tables);
    if (local == nullptr) return invalid_argument("dist: checkpoints need a local or sharded collection");
    LEANEMB_ASSIGN_OR_RETURN(v.world_, LocalWorld::create(1, CommOptions{}));
    LEANEMB_ASSIGN_OR_RETURN(v.own_comm_, v.world_->communicator(0));
    v.comm_ = v.own_comm_.get();
    ShardPlanOptions po;
    for (const TableOptions& t : local->options().tables)
      po.tables.push_back({t.num_rows, std::max<int64_t>(t.dim, 1), t.dynamic.enabled ? ShardingKind::kRowRange : ShardingKind::kRowModulo, -1});
    LEANEMB_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::create(po));
    v.own_plan_ = std::make_shared<ShardPlan>(std::move(plan));
    v.plan_ = v.own_plan_.get();
    v.local_ = local;
    return v;
  }
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

// A dynamic table's id partition `g` (global index) in a shard: blob "dyn/<table>/<g>" (the
// partition's IdMap state; its rows are rows of the shard's table like any other).
std::string dynamic_blob(const std::string& table, uint32_t g) { return "dyn/" + table + "/" + std::to_string(g); }

// ---- shards -------------------------------------------------------------------------------------

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
  ByteWriter info;
  info.raw(kShardMagic);
  info.put<uint32_t>(static_cast<uint32_t>(comm.rank()));
  info.put<uint32_t>(static_cast<uint32_t>(comm.size()));
  info.put<int64_t>(step);
  LEANEMB_RETURN_IF_ERROR(w->add_blob(kShardInfoBlob, info.bytes()));
  std::vector<uint8_t> rows;
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

// Opens shard r of a global checkpoint and checks it against the layout (not the blocks).
Result<std::unique_ptr<ckpt::CheckpointReader>> open_shard_impl(const std::string& out_dir, const Layout& l, const ShardPlan& plan,
                                                           int r, ckpt::Env* env) {
  env = env_or_posix(env);
  const std::string dir = shard_ckpt_dir(out_dir, l.shards[static_cast<size_t>(r)], l.step);
  auto bad = [&](const std::string& what) { return data_loss("shard " + std::to_string(r) + " '" + dir + "': " + what); };
  auto m = env->read_file(ckpt::join_path(dir, ckpt::kManifestName));
  if (!m.ok()) {
    if (m.status().code() == StatusCode::kNotFound) return not_found("shard " + std::to_string(r) + " '" + dir + "' is missing (no MANIFEST)");
    return m.status();
  }
  const ShardRecord& rec = l.shards[static_cast<size_t>(r)];
  if (m->size() != rec.manifest_bytes || xxh64(*m) != rec.manifest_hash)
    return bad("MANIFEST differs from the one the global checkpoint recorded");
  LEANEMB_ASSIGN_OR_RETURN(auto reader, ckpt::CheckpointReader::open(dir, env));
  if (reader->step() != l.step) return bad("step " + std::to_string(reader->step()) + ", expected " + std::to_string(l.step));
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> info, reader->read_blob(kShardInfoBlob));
  ByteReader ir(info);
  std::string magic;
  uint32_t rank = 0, p = 0;
  int64_t step = 0;
  if (!ir.raw(sizeof(kShardMagic) - 1, &magic) || magic != kShardMagic || !ir.get(&rank) || !ir.get(&p) || !ir.get(&step) ||
      !ir.done())
    return bad("bad blob '" + std::string(kShardInfoBlob) + "'");
  if (static_cast<int>(rank) != r || static_cast<int>(p) != l.world_size || step != l.step)
    return bad("holds rank " + std::to_string(rank) + " of " + std::to_string(p) + " at step " + std::to_string(step));
  for (size_t t = 0; t < l.tables.size(); ++t) {
    const ckpt::EntryInfo* e = reader->find(kRowsPrefix + l.tables[t].name);
    const int64_t want = plan.local_num_rows(static_cast<int>(t), r);
    if (e == nullptr || e->kind != ckpt::EntryKind::kTable || e->row_bytes != l.tables[t].stride_bytes || e->total_rows != want)
      return bad("table '" + l.tables[t].name + "' missing or not " + std::to_string(want) + " rows of " +
                 std::to_string(l.tables[t].stride_bytes) + " bytes");
  }
  return reader;
}

// open_shard_impl with every error naming the shard.
Result<std::unique_ptr<ckpt::CheckpointReader>> open_shard(const std::string& out_dir, const Layout& l, const ShardPlan& plan,
                                                           int r, ckpt::Env* env) {
  auto reader = open_shard_impl(out_dir, l, plan, r, env);
  const std::string prefix = "shard " + std::to_string(r);
  if (!reader.ok() && reader.status().message().rfind(prefix, 0) != 0)
    return Status(reader.status().code(), prefix + ": " + reader.status().message());
  return reader;
}

struct OpenedGlobal {
  std::unique_ptr<ckpt::CheckpointReader> reader;
  Layout layout;
  ShardPlan plan = std::move(ShardPlan::create({}).value());
  std::string out_dir;
};

Result<OpenedGlobal> open_global(const std::string& global_dir, ckpt::Env* env) {
  OpenedGlobal g;
  LEANEMB_ASSIGN_OR_RETURN(g.reader, ckpt::CheckpointReader::open(global_dir, env));
  if (g.reader->find(kLayoutBlob) == nullptr)
    return data_loss("'" + global_dir + "' is not a sharded checkpoint (no blob '" + kLayoutBlob + "')");
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> b, g.reader->read_blob(kLayoutBlob));
  LEANEMB_ASSIGN_OR_RETURN(g.layout, decode_layout(b, global_dir));
  if (g.layout.step != g.reader->step()) return data_loss("sharded checkpoint '" + global_dir + "': layout step differs from the manifest's");
  auto plan = plan_of(g.layout);
  if (!plan.ok()) return data_loss("sharded checkpoint '" + global_dir + "': " + plan.status().message());
  g.plan = std::move(plan).value();
  g.out_dir = out_dir_of(global_dir);
  return g;
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

// ---- save -------------------------------------------------------------------------------------

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

// ---- verify / find ----------------------------------------------------------------------------

Status verify_sharded_checkpoint(const std::string& global_dir, ckpt::Env* env, bool verify_blocks) {
  LEANEMB_ASSIGN_OR_RETURN(OpenedGlobal g, open_global(global_dir, env));
  if (verify_blocks) LEANEMB_RETURN_IF_ERROR(g.reader->verify().status());
  for (int r = 0; r < g.layout.world_size; ++r) {
    LEANEMB_ASSIGN_OR_RETURN(auto shard, open_shard(g.out_dir, g.layout, g.plan, r, env));
    if (!verify_blocks) continue;
    if (Status s = shard->verify().status(); !s.ok()) return Status(s.code(), "shard " + std::to_string(r) + ": " + s.message());
  }
  return Status();
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

// ---- load -------------------------------------------------------------------------------------

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

// InvalidArgument naming the first difference between the saved tables and the collection's.
Status check_tables(const Layout& saved, const EmbeddingCollection& local, const ShardPlan& plan, const std::string& where) {
  if (saved.tables.size() != static_cast<size_t>(local.num_tables()))
    return invalid_argument(where + ": it has " + std::to_string(saved.tables.size()) + " tables, the collection " +
                            std::to_string(local.num_tables()));
  for (int t = 0; t < local.num_tables(); ++t) {
    const TableLayout& a = saved.tables[static_cast<size_t>(t)];
    const TableLayout b = table_layout(local, plan, t);
    std::string diff;
    auto cmp = [&](const char* field, const std::string& x, const std::string& y) {
      if (diff.empty() && x != y) diff = std::string(field) + " " + x + " in the checkpoint, " + y + " in the collection";
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
  if (copied.ok()) coll.local().set_step(g.layout.collection_step);
  LEANEMB_RETURN_IF_ERROR(agree(comm, copied, what));
  return info;
}

// ---- digests ----------------------------------------------------------------------------------

Result<std::string> collection_digest(const EmbeddingCollection& coll) {
  std::vector<TableLayout> tables;
  std::vector<RowSum> sums(static_cast<size_t>(coll.num_tables()));
  std::vector<uint8_t> rows;
  constexpr int64_t kChunk = 4096;
  for (int t = 0; t < coll.num_tables(); ++t) {
    const RowLayout& rl = coll.layout(t);
    TableLayout tl;
    tl.name = coll.options().tables[static_cast<size_t>(t)].name;
    tl.num_rows = coll.options().tables[static_cast<size_t>(t)].num_rows;
    tl.dim = rl.dim;
    tl.dtype = std::string(dtype_name(rl.weight_dtype));
    tl.optimizer = std::string(optimizer_name(rl.optimizer.kind));
    tl.state_dtype = std::string(state_dtype_name(rl.optimizer.state_dtype));
    tl.stride_bytes = rl.stride_bytes;
    const uint64_t seed = table_seed(tl.name);
    for (int64_t r0 = 0; r0 < tl.num_rows; r0 += kChunk) {
      const int64_t c = std::min(kChunk, tl.num_rows - r0);
      rows.resize(static_cast<size_t>(c) * rl.stride_bytes);
      LEANEMB_RETURN_IF_ERROR(coll.read_raw_rows(t, r0, c, rows));
      add_rows(&sums[static_cast<size_t>(t)], seed, rows, rl.stride_bytes, c, [&](int64_t i) { return r0 + i; });
    }
    tables.push_back(std::move(tl));
  }
  return finish_digest(coll.step(), tables, sums);
}

Result<std::string> sharded_collection_digest(EmbeddingTables& collection) {
  LEANEMB_ASSIGN_OR_RETURN(const ShardView coll, ShardView::of(collection));
  Communicator& comm = coll.communicator();
  const EmbeddingCollection& local = coll.local();
  const ShardPlan& plan = coll.plan();
  const int rank = comm.rank();
  std::vector<TableLayout> tables;
  std::vector<RowSum> sums(static_cast<size_t>(local.num_tables()));
  std::vector<uint8_t> rows;
  constexpr int64_t kChunk = 4096;
  Status mine;
  for (int t = 0; t < local.num_tables() && mine.ok(); ++t) {
    tables.push_back(table_layout(local, plan, t));
    const size_t stride = tables.back().stride_bytes;
    const uint64_t seed = table_seed(tables.back().name);
    const int64_t n = plan.local_num_rows(t, rank);
    for (int64_t l0 = 0; l0 < n && mine.ok(); l0 += kChunk) {
      const int64_t c = std::min(kChunk, n - l0);
      rows.resize(static_cast<size_t>(c) * stride);
      mine = local.read_raw_rows(t, l0, c, rows);
      if (mine.ok()) add_rows(&sums[static_cast<size_t>(t)], seed, rows, stride, c, [&](int64_t i) { return plan.global_row(t, rank, l0 + i); });
    }
  }
  LEANEMB_RETURN_IF_ERROR(agree(comm, mine, "dist: sharded_collection_digest"));
  std::vector<int64_t> flat;
  for (const RowSum& s : sums) {
    flat.push_back(static_cast<int64_t>(s.lo));
    flat.push_back(static_cast<int64_t>(s.hi));
  }
  LEANEMB_RETURN_IF_ERROR(comm.all_reduce(std::span<int64_t>(flat), ReduceOp::kSum));  // wraps mod 2^64
  for (size_t t = 0; t < sums.size(); ++t) sums[t] = {static_cast<uint64_t>(flat[2 * t]), static_cast<uint64_t>(flat[2 * t + 1])};
  return finish_digest(coll.step(), tables, sums);
}

Result<std::string> sharded_checkpoint_digest(const std::string& global_dir, ckpt::Env* env) {
  LEANEMB_ASSIGN_OR_RETURN(OpenedGlobal g, open_global(global_dir, env));
  std::vector<RowSum> sums(g.layout.tables.size());
  std::vector<uint8_t> rows;
  constexpr int64_t kChunk = 4096;
  for (int s = 0; s < g.layout.world_size; ++s) {
    LEANEMB_ASSIGN_OR_RETURN(auto shard, open_shard(g.out_dir, g.layout, g.plan, s, env));
    for (size_t t = 0; t < g.layout.tables.size(); ++t) {
      const int ti = static_cast<int>(t);
      const TableLayout& tl = g.layout.tables[t];
      const uint64_t seed = table_seed(tl.name);
      const int64_t n = g.plan.local_num_rows(ti, s);
      for (int64_t l0 = 0; l0 < n; l0 += kChunk) {
        const int64_t c = std::min(kChunk, n - l0);
        rows.resize(static_cast<size_t>(c) * tl.stride_bytes);
        LEANEMB_RETURN_IF_ERROR(shard->read_rows(kRowsPrefix + tl.name, l0, c, rows));
        add_rows(&sums[t], seed, rows, tl.stride_bytes, c, [&](int64_t i) { return g.plan.global_row(ti, s, l0 + i); });
      }
    }
  }
  return finish_digest(g.layout.collection_step, g.layout.tables, sums);
}

}  // namespace leanemb::dist

// ---- any collection: one entry point for both formats ------------------------------------------

namespace leanemb::dist {

namespace {

constexpr char kPlainPrefix[] = "emb/";

std::vector<uint8_t> json_bytes(const nlohmann::json& j) {
  const std::string s = j.dump();
  return std::vector<uint8_t>(s.begin(), s.end());
}

Status write_plain(ckpt::CheckpointWriter& w, EmbeddingCollection& emb, int64_t chunk_rows) {
  std::vector<uint8_t> rows;
  for (int t = 0; t < emb.num_tables(); ++t) {
    const RowLayout& l = emb.layout(t);
    const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
    const nlohmann::json meta = {{"dim", l.dim}, {"dtype", std::string(dtype_name(l.weight_dtype))},
                                 {"optimizer", std::string(optimizer_name(l.optimizer.kind))},
                                 {"state_dtype", std::string(state_dtype_name(l.optimizer.state_dtype))},
                                 {"stride_bytes", l.stride_bytes}};
    const std::string name = kPlainPrefix + to.name;
    LEANEMB_RETURN_IF_ERROR(w.add_table(name, l.stride_bytes, to.num_rows, json_bytes(meta)));
    for (int64_t r0 = 0; r0 < to.num_rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, to.num_rows - r0);
      rows.resize(static_cast<size_t>(n) * l.stride_bytes);
      LEANEMB_RETURN_IF_ERROR(emb.read_raw_rows(t, r0, n, rows));
      LEANEMB_RETURN_IF_ERROR(w.append_rows(name, r0, rows));
    }
    if (!to.dynamic.enabled) continue;
    for (uint32_t g = 0; g < to.dynamic.partitions; ++g) {
      LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> state, emb.save_dynamic_partition(t, g));
      LEANEMB_RETURN_IF_ERROR(w.add_blob(dynamic_blob(to.name, g), state));
    }
  }
  return Status();
}

// The tables "emb/<name>" (and dynamic partitions) of a plain checkpoint into `tables`, local or
// sharded: rows go through the global-row writer (each rank keeps the rows it owns).
Status read_plain(const ckpt::CheckpointReader& r, EmbeddingTables& tables, const ShardView& view, int64_t chunk_rows) {
  std::vector<uint8_t> rows;
  for (int t = 0; t < tables.num_tables(); ++t) {
    const RowLayout& l = tables.layout(t);
    const TableOptions& to = tables.options().tables[static_cast<size_t>(t)];
    const std::string name = kPlainPrefix + to.name;
    const ckpt::EntryInfo* e = r.find(name);
    if (!e || e->row_bytes != l.stride_bytes || e->total_rows != to.num_rows)
      return invalid_argument("table " + to.name + " in the checkpoint does not match the config (rows, dim, dtype or optimizer changed?)");
    for (int64_t r0 = 0; r0 < to.num_rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, to.num_rows - r0);
      rows.resize(static_cast<size_t>(n) * l.stride_bytes);
      LEANEMB_RETURN_IF_ERROR(r.read_rows(name, r0, n, rows));
      LEANEMB_RETURN_IF_ERROR(tables.write_raw_rows(t, r0, n, rows));
    }
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

}  // namespace

Result<TablesSaveInfo> save_tables_checkpoint(const std::string& out_dir, int64_t step, EmbeddingTables& tables,
                                              std::span<const ShardedBlob> blobs, const TablesSaveOptions& options) {
  TablesSaveInfo info;
  if (tables.communicator() != nullptr) {
    ShardedSaveOptions so;
    so.env = options.env;
    so.block_bytes = options.block_bytes;
    so.keep_last = options.keep_last;
    so.chunk_rows = options.chunk_rows;
    LEANEMB_ASSIGN_OR_RETURN(ShardedSaveInfo s, save_sharded_checkpoint(out_dir, step, tables, blobs, so));
    info.path = s.global_dir;
    info.warnings = s.warnings;
    return info;
  }
  LEANEMB_ASSIGN_OR_RETURN(const ShardView view, ShardView::of(tables));
  ckpt::WriterOptions wo;
  wo.env = options.env;
  wo.block_bytes = options.block_bytes;
  wo.keep_last = options.keep_last;
  LEANEMB_ASSIGN_OR_RETURN(auto w, ckpt::CheckpointWriter::create(out_dir, step, wo));
  for (const ShardedBlob& b : blobs) LEANEMB_RETURN_IF_ERROR(w->add_blob(b.name, b.bytes));
  LEANEMB_RETURN_IF_ERROR(write_plain(*w, view.local(), options.chunk_rows));
  LEANEMB_ASSIGN_OR_RETURN(ckpt::CommitInfo ci, w->commit());
  info.path = ci.path;
  info.warnings = ci.warnings;
  info.set_aside = ci.set_aside;
  return info;
}

bool is_sharded_checkpoint(const ckpt::CheckpointReader& r) { return r.find(kLayoutBlob) != nullptr; }

Result<ckpt::LatestCheckpoint> find_latest_tables_checkpoint(const std::string& out_dir, const ckpt::FindOptions& options) {
  LEANEMB_ASSIGN_OR_RETURN(ckpt::LatestCheckpoint latest, ckpt::find_latest_complete(out_dir, options));
  auto r = ckpt::CheckpointReader::open(latest.ref.path, options.env);
  if (!r.ok() || !is_sharded_checkpoint(*r.value())) return latest;
  // A global manifest is complete only with every shard it names.
  return find_latest_complete_sharded(out_dir, options);
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
    return li.collection_step;
  }
  Status st = read_plain(*opened.value(), tables, view, options.chunk_rows);
  LEANEMB_RETURN_IF_ERROR(agree(comm, st, "loading tables from '" + dir + "'"));
  if (options.collection_step >= 0) tables.set_step(options.collection_step);
  return options.collection_step;
}

}  // namespace leanemb::dist
