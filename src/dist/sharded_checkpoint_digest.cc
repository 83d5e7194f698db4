// The shard-count-independent embedding digest (digest_internal.h): its pieces, and the digests
// of a local collection, of a sharded one (collective) and of a sharded checkpoint on disk.
#include <xxhash.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/xxh128_stream.h"
#include "dist/digest_internal.h"
#include "dist/sharded_checkpoint.h"
#include "dist/sharded_checkpoint_internal.h"
#include "table/delta_rows.h"

namespace leanemb::dist {

using sharded_ckpt_internal::ByteWriter;
using sharded_ckpt_internal::kDigestMagic;
using sharded_ckpt_internal::kRowsPrefix;
using sharded_ckpt_internal::open_global;
using sharded_ckpt_internal::open_shard_chain;
using table_ckpt::for_each_delta_row;
using sharded_ckpt_internal::OpenedGlobal;
using sharded_ckpt_internal::ShardView;
using sharded_ckpt_internal::table_layout;

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
  std::vector<uint8_t> buf;
  ByteWriter w(&buf);
  w.raw(kDigestMagic);
  w.put<uint64_t>(static_cast<uint64_t>(step));
  w.put<uint64_t>(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    const TableLayout& tl = tables[t];
    w.str32(tl.name);
    w.put<uint64_t>(static_cast<uint64_t>(tl.num_rows));
    w.put<uint64_t>(static_cast<uint64_t>(tl.dim));
    w.str32(tl.dtype);
    w.str32(tl.optimizer);
    w.str32(tl.state_dtype);
    w.put<uint64_t>(tl.stride_bytes);
    w.put<uint64_t>(sums[t].lo);
    w.put<uint64_t>(sums[t].hi);
  }
  return ckpt::xxh128_hex(XXH3_128bits(w.bytes().data(), w.bytes().size()));
}

}  // namespace digest_internal

using digest_internal::add_rows;
using digest_internal::finish_digest;
using digest_internal::RowSum;
using digest_internal::table_seed;
using digest_internal::TableLayout;

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
    tl.state_dtype = std::string(dtype_name(rl.optimizer.state_dtype));
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

Result<std::string> tables_digest(EmbeddingTables& tables) {
  const EmbeddingTables::LocalShard part = tables.local_shard();
  if (part.plan != nullptr) return sharded_collection_digest(tables);
  return collection_digest(*part.local);
}

namespace {

// Adds table t of shard s's chain (oldest first) to `sum`: each local row once, with its newest
// bytes (the links newest first, then the base's rows no link holds), so that a chain sums like
// the same state saved in full.
Status add_shard_table(const OpenedGlobal& g, const std::vector<std::unique_ptr<ckpt::CheckpointReader>>& chain, int s, int ti,
                       RowSum* sum) {
  constexpr int64_t kChunk = 4096;
  const TableLayout& tl = g.layout.tables[static_cast<size_t>(ti)];
  const uint64_t seed = table_seed(tl.name);
  const int64_t n = g.plan.local_num_rows(ti, s);
  std::vector<bool> seen(chain.size() > 1 ? static_cast<size_t>(n) : 0, false);
  for (size_t k = chain.size(); k-- > 1;) {
    LEANEMB_RETURN_IF_ERROR(for_each_delta_row(*chain[k], tl.name, n, kChunk, [&](int64_t row, std::span<const uint8_t> fat) {
      if (seen[static_cast<size_t>(row)]) return Status();
      seen[static_cast<size_t>(row)] = true;
      add_rows(sum, seed, fat, tl.stride_bytes, 1, [&](int64_t) { return g.plan.global_row(ti, s, row); });
      return Status();
    }));
  }
  std::vector<uint8_t> rows;
  for (int64_t l0 = 0; l0 < n; l0 += kChunk) {
    const int64_t c = std::min(kChunk, n - l0);
    rows.resize(static_cast<size_t>(c) * tl.stride_bytes);
    LEANEMB_RETURN_IF_ERROR(chain.front()->read_rows(kRowsPrefix + tl.name, l0, c, rows));
    for (int64_t i = 0; i < c; ++i) {
      if (!seen.empty() && seen[static_cast<size_t>(l0 + i)]) continue;
      add_rows(sum, seed, std::span<const uint8_t>(rows).subspan(static_cast<size_t>(i) * tl.stride_bytes), tl.stride_bytes, 1,
               [&](int64_t) { return g.plan.global_row(ti, s, l0 + i); });
    }
  }
  return Status();
}

}  // namespace

Result<std::string> sharded_checkpoint_digest(const std::string& global_dir, ckpt::Env* env) {
  LEANEMB_ASSIGN_OR_RETURN(OpenedGlobal g, open_global(global_dir, env));
  std::vector<RowSum> sums(g.layout.tables.size());
  for (int s = 0; s < g.layout.world_size; ++s) {
    LEANEMB_ASSIGN_OR_RETURN(auto chain, open_shard_chain(g.out_dir, g.layout, g.plan, s, env));
    for (size_t t = 0; t < g.layout.tables.size(); ++t)
      LEANEMB_RETURN_IF_ERROR(add_shard_table(g, chain, s, static_cast<int>(t), &sums[t]));
  }
  return finish_digest(g.layout.collection_step, g.layout.tables, sums);
}

}  // namespace leanemb::dist
