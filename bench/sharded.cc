// The sharded workload: what row-wise sharding costs and saves, per rank (issue 7's figures that
// do not need the trainer). P ranks run as P threads of this process (dist::LocalWorld: the same
// collectives and byte counts as P MPI processes); each rank trains its slice of every global
// batch on a ShardedEmbeddingCollection.
//   per-rank embedding bytes   weights + optimizer state of the rank's local collection
//   bytes sent per rank / step forward (ids, rows) + backward (gradients, ids, scales, flags)
//   step time                  of the threads in one process, for orientation only: P ranks
//                              share this machine's cores (MPI figures come from the trainer)
// Correctness gate: every configuration's tables after the run are checked against one plain
// EmbeddingCollection trained on the concatenated batches (fp32 payloads: bit-identical;
// 16-bit payloads: reported as the largest weight difference).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <thread>

#include "bench_internal.h"
#include "dist/local_comm.h"
#include "dist/sharded_collection.h"
#include "zipf.h"

namespace leanemb::bench::internal {

namespace {

struct ShardedRun {
  int ranks = 1;
  DType payload = DType::kF32;
  size_t max_rank_embedding_bytes = 0;   // over ranks: weights + optimizer state (current)
  double bytes_sent_per_step = 0;        // max over ranks of the mean per measured step
  double step_ms = 0;                    // median over measured steps (rank 0's clock)
  double max_abs_weight_diff = 0;        // vs the single-process reference
};

CollectionOptions bench_collection(const BenchOptions& o, int64_t rows, int64_t dim, int tables) {
  CollectionOptions co;
  for (int t = 0; t < tables; ++t) {
    TableOptions to;
    char name[24];  // snprintf: GCC 12 warns falsely (-Wrestrict) on "t" + std::to_string(t)
    std::snprintf(name, sizeof name, "t%d", t);
    to.name = name;
    to.num_rows = rows;
    to.dim = dim;
    to.dtype = DType::kF32;
    to.optimizer.kind = o.optimizer.value_or(OptimizerKind::kRowwiseAdagrad);
    to.optimizer.learning_rate = 0.05f;
    to.optimizer.eps = default_eps(to.optimizer.kind);
    co.tables.push_back(to);
    std::snprintf(name, sizeof name, "f%d", t);
    co.features.push_back(FeatureOptions{name, t, o.pooling.value_or(PoolingMode::kSum)});
  }
  co.seed = o.seed;
  co.num_threads = 1;
  return co;
}

// Rank r's slice [r * B / P, (r + 1) * B / P) of feature f's global batch.
void slice(const IdBatch& g, int64_t b0, int64_t b1, std::vector<int64_t>* ids, std::vector<int64_t>* offs) {
  ids->assign(g.ids.begin() + g.offsets[static_cast<size_t>(b0)], g.ids.begin() + g.offsets[static_cast<size_t>(b1)]);
  offs->clear();
  for (int64_t b = b0; b <= b1; ++b) offs->push_back(g.offsets[static_cast<size_t>(b)] - g.offsets[static_cast<size_t>(b0)]);
}

float grad_value(int64_t step, int64_t bag, int64_t col) {
  return static_cast<float>(((step * 131 + bag * 31 + col * 7) % 17) - 8) / 64.0f;
}

Result<ShardedRun> run_one(const CollectionOptions& co, const std::vector<std::vector<IdBatch>>& stream,
                           int ranks, DType payload, int warmup, int iters,
                           const std::vector<float>& reference) {
  const int64_t B = static_cast<int64_t>(stream[0][0].offsets.size()) - 1;
  LEANEMB_ASSIGN_OR_RETURN(std::shared_ptr<dist::LocalWorld> world, dist::LocalWorld::create(ranks, dist::CommOptions{600000}));
  ShardedRun run;
  run.ranks = ranks;
  run.payload = payload;
  std::vector<Status> status(static_cast<size_t>(ranks));
  std::vector<size_t> emb_bytes(static_cast<size_t>(ranks));
  std::vector<double> sent(static_cast<size_t>(ranks));
  std::vector<double> step_ms;
  std::vector<std::vector<float>> rows_out(static_cast<size_t>(ranks));
  auto rank_main = [&](int r) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm, world->communicator(r));
    TrackingAllocator alloc;
    dist::ShardedCollectionOptions so;
    so.collection = co;
    so.forward_payload = payload;
    so.backward_payload = payload;
    LEANEMB_ASSIGN_OR_RETURN(auto sc, dist::ShardedEmbeddingCollection::create(so, comm.get(), &alloc));
    const MemoryStats ms = alloc.memory_stats();
    emb_bytes[static_cast<size_t>(r)] = ms[Category::kWeights].current_bytes + ms[Category::kOptimizerState].current_bytes;
    const int64_t b0 = B * r / ranks, b1 = B * (r + 1) / ranks;
    const size_t T = co.tables.size();
    std::vector<std::vector<int64_t>> ids(T), offs(T);
    std::vector<float> pooled(static_cast<size_t>((b1 - b0) * sc->pooled_dim())), grad(pooled.size());
    double bytes = 0;
    for (int step = 0; step < warmup + iters; ++step) {
      const auto& g = stream[static_cast<size_t>(step) % stream.size()];
      SparseBatch sb;
      sb.batch_size = b1 - b0;
      for (size_t t = 0; t < T; ++t) {
        slice(g[t], b0, b1, &ids[t], &offs[t]);
        sb.features.push_back(FeatureInput{ids[t], offs[t], {}});
      }
      const auto t0 = std::chrono::steady_clock::now();
      LEANEMB_RETURN_IF_ERROR(sc->forward(sb, pooled));
      for (int64_t b = 0; b < b1 - b0; ++b)
        for (int64_t c = 0; c < sc->pooled_dim(); ++c)
          grad[static_cast<size_t>(b * sc->pooled_dim() + c)] = grad_value(step, b0 + b, c);
      LEANEMB_RETURN_IF_ERROR(sc->backward_update(sb, grad).status());
      const double ms_step = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (step >= warmup) {
        bytes += static_cast<double>(sc->last_step_stats().forward_bytes_sent + sc->last_step_stats().backward_bytes_sent);
        if (r == 0) step_ms.push_back(ms_step);
      }
    }
    sent[static_cast<size_t>(r)] = bytes / iters;
    // This rank's rows, placed at their global row numbers (for the gate).
    std::vector<float>& out = rows_out[static_cast<size_t>(r)];
    out.assign(reference.size(), NAN);
    const int64_t D = co.tables[0].dim, E = co.tables[0].num_rows;
    for (size_t t = 0; t < T; ++t) {
      const int64_t n = sc->plan().local_num_rows(static_cast<int>(t), r);
      std::vector<float> local(static_cast<size_t>(std::max<int64_t>(n, 1) * D));
      if (n > 0) LEANEMB_RETURN_IF_ERROR(sc->local().read_rows(static_cast<int>(t), 0, n, local));
      for (int64_t l = 0; l < n; ++l) {
        const int64_t gr = sc->plan().global_row(static_cast<int>(t), r, l);
        std::copy_n(local.begin() + l * D, D, out.begin() + static_cast<std::ptrdiff_t>((static_cast<int64_t>(t) * E + gr) * D));
      }
    }
    return Status();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { status[static_cast<size_t>(r)] = rank_main(r); });
  for (auto& t : threads) t.join();
  for (const Status& s : status) LEANEMB_RETURN_IF_ERROR(s);
  run.max_rank_embedding_bytes = *std::max_element(emb_bytes.begin(), emb_bytes.end());
  run.bytes_sent_per_step = *std::max_element(sent.begin(), sent.end());
  std::sort(step_ms.begin(), step_ms.end());
  run.step_ms = step_ms.empty() ? 0 : step_ms[step_ms.size() / 2];
  for (size_t i = 0; i < reference.size(); ++i) {
    float v = NAN;
    for (const auto& ro : rows_out)
      if (!std::isnan(ro[i])) v = ro[i];
    if (std::isnan(v)) return internal_error("sharded bench: a row is owned by no rank");
    run.max_abs_weight_diff = std::max(run.max_abs_weight_diff, static_cast<double>(std::fabs(v - reference[i])));
  }
  return run;
}

}  // namespace

Status run_sharded(const BenchOptions& o, const Progress& progress, json* doc) {
  const int64_t rows = o.rows.value_or(200000), dim = o.dim.value_or(64), B = o.batch.value_or(2048);
  const int tables = o.tables.value_or(8);
  const int64_t L = o.bag_size.value_or(20);
  const int warmup = o.warmup.value_or(3), iters = o.iters.value_or(20);
  const CollectionOptions co = bench_collection(o, rows, dim, tables);
  // The global batches: 4 distinct ones, cycled.
  std::vector<std::vector<IdBatch>> stream(4);
  for (int t = 0; t < tables; ++t) {
    IdStreamOptions io{rows, B, L, o.alpha.value_or(1.05), o.seed * 1000 + static_cast<uint64_t>(t)};
    LEANEMB_ASSIGN_OR_RETURN(std::vector<IdBatch> s, generate_id_stream(io, 4));
    for (size_t i = 0; i < 4; ++i) stream[i].push_back(std::move(s[i]));
  }
  // Reference: one plain collection trained on the global batches (the gate).
  progress("sharded: reference, %d tables x %lld rows x %lld, B %lld, L %lld", tables, static_cast<long long>(rows),
           static_cast<long long>(dim), static_cast<long long>(B), static_cast<long long>(L));
  std::vector<float> reference(static_cast<size_t>(tables * rows * dim));
  {
    LEANEMB_ASSIGN_OR_RETURN(auto ref, EmbeddingCollection::create(co));
    std::vector<float> pooled(static_cast<size_t>(B * ref->pooled_dim())), grad(pooled.size());
    for (int step = 0; step < warmup + iters; ++step) {
      const auto& g = stream[static_cast<size_t>(step) % stream.size()];
      SparseBatch sb;
      sb.batch_size = B;
      for (const IdBatch& f : g) sb.features.push_back(FeatureInput{f.ids, f.offsets, {}});
      LEANEMB_RETURN_IF_ERROR(ref->forward(sb, pooled));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < ref->pooled_dim(); ++c) grad[static_cast<size_t>(b * ref->pooled_dim() + c)] = grad_value(step, b, c);
      LEANEMB_RETURN_IF_ERROR(ref->backward_update(sb, grad).status());
    }
    for (int t = 0; t < tables; ++t)
      LEANEMB_RETURN_IF_ERROR(ref->read_rows(t, 0, rows, std::span<float>(reference).subspan(static_cast<size_t>(t * rows * dim), static_cast<size_t>(rows * dim))));
  }
  json runs = json::array();
  std::vector<ShardedRun> all;
  for (int P : {1, 2}) {
    for (DType pd : {DType::kF32, DType::kBF16}) {
      if (P == 1 && pd != DType::kF32) continue;  // nothing crosses ranks
      progress("sharded: P=%d, payload %s", P, std::string(dtype_name(pd)).c_str());
      LEANEMB_ASSIGN_OR_RETURN(ShardedRun r, run_one(co, stream, P, pd, warmup, iters, reference));
      if (pd == DType::kF32 && r.max_abs_weight_diff != 0.0)
        return internal_error("sharded bench: P=" + std::to_string(P) + " fp32 payload differs from one process (max " +
                              std::to_string(r.max_abs_weight_diff) + ")");
      all.push_back(r);
      runs.push_back({{"ranks", P}, {"payload", std::string(dtype_name(pd))},
                      {"max_rank_embedding_bytes", r.max_rank_embedding_bytes},
                      {"bytes_sent_per_rank_per_step", r.bytes_sent_per_step}, {"step_ms_threads", r.step_ms},
                      {"max_abs_weight_diff_vs_single_process", r.max_abs_weight_diff}});
      std::printf("P=%d payload %-5s per-rank embedding %-11s sent/rank/step %-11s step %.1f ms (threads)  max |dw| vs 1 process %.3g\n",
                  P, std::string(dtype_name(pd)).c_str(), format_bytes(r.max_rank_embedding_bytes).c_str(),
                  format_bytes(static_cast<size_t>(r.bytes_sent_per_step)).c_str(), r.step_ms, r.max_abs_weight_diff);
    }
  }
  (*doc)["shape"] = {{"tables", tables}, {"rows", rows}, {"dim", dim}, {"batch", B}, {"bag_size", L},
                     {"alpha", o.alpha.value_or(1.05)}, {"optimizer", std::string(optimizer_name(co.tables[0].optimizer.kind))}};
  (*doc)["runs"] = runs;
  (*doc)["note"] = "P ranks are P threads of one process over dist::LocalWorld (the collectives and byte counts of P MPI "
                   "processes); step times are for orientation only";
  const double mem_ratio = static_cast<double>(all[1].max_rank_embedding_bytes) / static_cast<double>(all[0].max_rank_embedding_bytes);
  const double bytes_ratio = all[2].bytes_sent_per_step / all[1].bytes_sent_per_step;
  (*doc)["per_rank_embedding_bytes_p2_over_p1"] = mem_ratio;
  (*doc)["bytes_sent_bf16_over_fp32_p2"] = bytes_ratio;
  std::printf("per-rank embedding bytes P=2 / P=1: %.3f; bytes sent bf16 / fp32 payload (P=2): %.3f\n", mem_ratio, bytes_ratio);
  return Status();
}

}  // namespace leanemb::bench::internal
