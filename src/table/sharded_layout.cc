// The sharded checkpoint's layout as a reader needs it (table/sharded_layout.h): the
// "sharded/layout" blob, the saving run's plan, opening a global checkpoint and its shards. The
// blob formats are described at the top of src/dist/sharded_checkpoint.cc.
#include "table/sharded_layout.h"

#include <xxhash.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "core/bytes.h"
#include "table/delta_rows.h"

namespace leanemb::table_ckpt {

using dist::ShardPlan;
using dist::ShardPlanOptions;

namespace {

uint64_t xxh64(std::span<const uint8_t> b) { return XXH3_64bits(b.data(), b.size()); }

uint8_t kind_code(ShardingKind k) {
  return k == ShardingKind::kTableWise ? 0 : k == ShardingKind::kRowModulo ? 1 : 2;
}

}  // namespace

std::vector<uint8_t> encode_layout(const Layout& l) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.raw(kLayoutMagic);
  w.put<uint32_t>(static_cast<uint32_t>(l.world_size));
  w.put<int64_t>(l.step);
  w.put<int64_t>(l.collection_step);
  w.put<uint32_t>(static_cast<uint32_t>(l.tables.size()));
  for (const TableLayout& t : l.tables) {
    w.str32(t.name);
    w.put<int64_t>(t.num_rows);
    w.put<int64_t>(t.dim);
    w.str32(t.dtype);
    w.str32(t.optimizer);
    w.str32(t.state_dtype);
    w.put<uint64_t>(t.stride_bytes);
    w.put<uint8_t>(kind_code(t.kind));
    w.put<int32_t>(t.owner);
  }
  w.put<uint32_t>(static_cast<uint32_t>(l.shards.size()));
  for (const ShardRecord& s : l.shards) {
    w.str32(s.rel_dir);
    w.put<uint64_t>(s.manifest_bytes);
    w.put<uint64_t>(s.manifest_hash);
  }
  return out;
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
    if (!r.str32(&t.name, kMaxRecordString) || !r.get(&t.num_rows) || !r.get(&t.dim) || !r.str32(&t.dtype, kMaxRecordString) || !r.str32(&t.optimizer, kMaxRecordString) ||
        !r.str32(&t.state_dtype, kMaxRecordString) || !r.get(&t.stride_bytes) || !r.get(&kind) || !r.get(&t.owner))
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
    if (!r.str32(&s.rel_dir, kMaxRecordString) || !r.get(&s.manifest_bytes) || !r.get(&s.manifest_hash)) return bad("truncated shard list");
    if (s.rel_dir.empty() || s.rel_dir.front() == '/' || s.rel_dir.find("..") != std::string::npos)
      return bad("shard directory '" + s.rel_dir + "' is not a plain relative path");
    l.shards.push_back(std::move(s));
  }
  if (!r.done()) return bad("trailing bytes");
  return l;
}

namespace {

// The saving run's plan: explicit owners, so that table assignment does not matter.
Result<ShardPlan> plan_of(const Layout& l) {
  ShardPlanOptions po;
  po.world_size = l.world_size;
  for (const TableLayout& t : l.tables) po.tables.push_back({t.num_rows, t.dim, t.kind, t.owner});
  return ShardPlan::create(po);
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

// A shard checkpoint's info blob and tables against the layout: shard r at `step`; a full one
// holds "rows/<name>" of every local row, a link of a chain (it has a parent) "delta/<name>" of
// at most that many rows (the rows changed since its parent, delta_rows.h). Errors: `bad`'s.
Status check_shard(const ckpt::CheckpointReader& reader, const Layout& l, const ShardPlan& plan, int r, int64_t step,
                   const std::function<Status(const std::string&)>& bad) {
  if (reader.step() != step) return bad("step " + std::to_string(reader.step()) + ", expected " + std::to_string(step));
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> info, reader.read_blob(kShardInfoBlob));
  ByteReader ir(info);
  std::string magic;
  uint32_t rank = 0, p = 0;
  int64_t info_step = 0;
  if (!ir.raw(sizeof(kShardMagic) - 1, &magic) || magic != kShardMagic || !ir.get(&rank) || !ir.get(&p) || !ir.get(&info_step) ||
      !ir.done())
    return bad("bad blob '" + std::string(kShardInfoBlob) + "'");
  if (static_cast<int>(rank) != r || static_cast<int>(p) != l.world_size || info_step != step)
    return bad("holds rank " + std::to_string(rank) + " of " + std::to_string(p) + " at step " + std::to_string(info_step));
  const bool link = reader.parent().has_value();
  for (size_t t = 0; t < l.tables.size(); ++t) {
    const ckpt::EntryInfo* e = reader.find((link ? kDeltaPrefix : kRowsPrefix) + l.tables[t].name);
    const int64_t want = plan.local_num_rows(static_cast<int>(t), r);
    if (e == nullptr || e->kind != ckpt::EntryKind::kTable || e->row_bytes != l.tables[t].stride_bytes ||
        (link ? e->total_rows > want : e->total_rows != want))
      return bad(std::string(link ? "delta " : "") + "table '" + l.tables[t].name + "' missing or not " + (link ? "at most " : "") +
                 std::to_string(want) + " rows of " + std::to_string(l.tables[t].stride_bytes) + " bytes");
  }
  return Status();
}

// open_shard's checks (not every error names the shard yet).
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
#ifndef LEANEMB_FUZZING  // the fuzz build reads on behind a shard MANIFEST that differs (fuzz/)
  if (m->size() != rec.manifest_bytes || xxh64(*m) != rec.manifest_hash)
    return bad("MANIFEST differs from the one the global checkpoint recorded");
#else
  (void)rec;
#endif
  LEANEMB_ASSIGN_OR_RETURN(auto reader, ckpt::CheckpointReader::open(dir, env));
  LEANEMB_RETURN_IF_ERROR(check_shard(*reader, l, plan, r, l.step, bad));
  return reader;
}

}  // namespace

TableLayout table_layout(const EmbeddingCollection& local, const ShardPlan& plan, int t) {
  const RowLayout& rl = local.layout(t);
  TableLayout tl;
  tl.name = local.options().tables[static_cast<size_t>(t)].name;
  tl.num_rows = plan.num_rows(t);
  tl.dim = rl.dim;
  tl.dtype = std::string(dtype_name(rl.weight_dtype));
  tl.optimizer = std::string(optimizer_name(rl.optimizer.kind));
  tl.state_dtype = std::string(dtype_name(rl.optimizer.state_dtype));
  tl.stride_bytes = rl.stride_bytes;
  tl.kind = plan.kind(t);
  tl.owner = plan.kind(t) == ShardingKind::kTableWise ? plan.table_owner(t) : -1;
  return tl;
}

Result<std::unique_ptr<ckpt::CheckpointReader>> open_shard(const std::string& out_dir, const Layout& l, const ShardPlan& plan,
                                                           int r, ckpt::Env* env) {
  auto reader = open_shard_impl(out_dir, l, plan, r, env);
  const std::string prefix = "shard " + std::to_string(r);
  if (!reader.ok() && reader.status().message().rfind(prefix, 0) != 0)
    return Status(reader.status().code(), prefix + ": " + reader.status().message());
  return reader;
}

Result<std::vector<std::unique_ptr<ckpt::CheckpointReader>>> open_shard_chain(const std::string& out_dir, const Layout& l,
                                                                            const ShardPlan& plan, int r, ckpt::Env* env) {
  std::vector<std::unique_ptr<ckpt::CheckpointReader>> chain;
  LEANEMB_ASSIGN_OR_RETURN(auto newest, open_shard(out_dir, l, plan, r, env));
  if (newest->parent().has_value()) {
    // Each parent exists, is complete and has the id its child recorded (checkpoint_chain).
    auto refs = ckpt::checkpoint_chain(newest->dir(), env);
    if (!refs.ok()) return Status(refs.status().code(), "shard " + std::to_string(r) + ": " + refs.status().message());
    for (size_t k = 0; k + 1 < refs->size(); ++k) {
      const std::string& dir = (*refs)[k].path;
      auto bad = [&](const std::string& what) { return data_loss("shard " + std::to_string(r) + " '" + dir + "': " + what); };
      auto link = ckpt::CheckpointReader::open(dir, env);
      if (!link.ok()) return Status(link.status().code(), "shard " + std::to_string(r) + ": " + link.status().message());
      LEANEMB_RETURN_IF_ERROR(check_shard(**link, l, plan, r, (*refs)[k].step, bad));
      chain.push_back(std::move(*link));
    }
  }
  chain.push_back(std::move(newest));
  return chain;
}

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

Result<ShardPlan> one_rank_plan(const EmbeddingCollection& local) {
  ShardPlanOptions po;
  for (const TableOptions& t : local.options().tables)
    po.tables.push_back({t.num_rows, std::max<int64_t>(t.dim, 1), t.dynamic.enabled ? ShardingKind::kRowRange : ShardingKind::kRowModulo, -1});
  return ShardPlan::create(po);
}

bool is_sharded(const ckpt::CheckpointReader& r) { return r.find(kLayoutBlob) != nullptr; }

}  // namespace leanemb::table_ckpt
