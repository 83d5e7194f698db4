// One contender's engine and its correctness gate, and the small statistics and process helpers
// the workloads share. Invariant: the gate never runs on an engine that is being timed at the
// same moment, and a reference copy exists only while its gate runs.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "bench_internal.h"

namespace leanemb::bench::internal {

namespace {

// Percentiles by linear interpolation between closest ranks (numpy's default).
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = percentile(v, 0.5);
  s.p10 = percentile(v, 0.1);
  s.p90 = percentile(v, 0.9);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

size_t proc_status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t klen = std::strlen(key);
  while (std::getline(f, line)) {
    if (line.compare(0, klen, key) == 0 && line.size() > klen && line[klen] == ':')
      return static_cast<size_t>(std::strtoull(line.c_str() + klen + 1, nullptr, 10)) * 1024;
  }
  return 0;
}

double median_of(std::vector<double> v) { return summarize(std::move(v)).median; }

size_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("MemAvailable:", 0) == 0) return static_cast<size_t>(std::strtoull(line.c_str() + 13, nullptr, 10)) * 1024;
  return 0;
}

json memory_json(const MemoryStats& m) {
  json cats = json::object();
  for (int c = 0; c < kNumCategories; ++c) {
    const CategoryStats& cs = m.by_category[static_cast<size_t>(c)];
    if (cs.peak_bytes == 0) continue;
    cats[std::string(category_name(static_cast<Category>(c)))] = {{"current_bytes", cs.current_bytes},
                                                                   {"peak_bytes", cs.peak_bytes}};
  }
  return {{"tier", std::string(tier_name(m.tier))},
          {"current_bytes", m.current_bytes},
          {"peak_bytes", m.peak_bytes},
          {"categories", cats}};
}

// ---- shapes, contenders, streams ---------------------------------------------------------------




Result<Stream> make_stream(const Shape& s, uint64_t seed) {
  Stream st;
  st.batches.assign(kStreamBatches, std::vector<IdBatch>(static_cast<size_t>(s.tables)));
  for (int t = 0; t < s.tables; ++t) {
    IdStreamOptions o{s.rows, s.batch, s.bag, s.alpha, derive_seed(seed, static_cast<uint64_t>(t))};
    LEANEMB_ASSIGN_OR_RETURN(std::vector<IdBatch> b, generate_id_stream(o, kStreamBatches));
    for (int i = 0; i < kStreamBatches; ++i) st.batches[static_cast<size_t>(i)][static_cast<size_t>(t)] = std::move(b[static_cast<size_t>(i)]);
  }
  st.lookups_per_batch = s.tables * s.batch * s.bag;
  // Gradient of the pooled output: uniform in [-0.01, 0.01), from its own seed.
  st.grad.resize(static_cast<size_t>(s.batch * s.tables * s.dim));
  uint64_t z = derive_seed(seed, 0x67726164ull);
  for (float& g : st.grad) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    g = (static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * 0.01f;
  }
  return st;
}

SparseBatch view_batch(const std::vector<IdBatch>& b, int64_t batch_size) {
  SparseBatch sb;
  sb.batch_size = batch_size;
  for (const IdBatch& f : b) sb.features.push_back(FeatureInput{f.ids, f.offsets, {}});
  return sb;
}


CollectionOptions collection_options(const Shape& s, const Contender& c, int64_t rows, uint64_t seed, int threads,
                                     bool reference) {
  CollectionOptions o;
  for (int t = 0; t < s.tables; ++t) {
    TableOptions to;
    to.name = std::string("t").append(std::to_string(t));  // (not "t" + ...: GCC 12 -Wrestrict false positive)
    to.num_rows = rows;
    to.dim = s.dim;
    to.dtype = c.dtype;
    to.optimizer = c.optimizer;
    to.frozen = c.frozen;
    o.tables.push_back(to);
    o.features.push_back(FeatureOptions{std::string("f").append(std::to_string(t)), t, s.pooling});
  }
  o.seed = seed;
  o.num_threads = threads;
  o.use_reference_kernels = reference;
  return o;
}

Result<Engine> build_engine(const Shape& s, const Contender& c, int64_t rows, uint64_t seed, int threads, bool reference,
                            const MemorySystemOptions& memory) {
  Engine e;
  LEANEMB_ASSIGN_OR_RETURN(e.mem, MemorySystem::create(memory));
  auto coll = EmbeddingCollection::create(collection_options(s, c, rows, seed, threads, reference), e.mem.get());
  if (!coll.ok()) return coll.status();
  e.coll = std::move(coll).value();
  return e;
}

Result<Engine> build_one_table_engine(TableOptions t, const MemorySystemOptions& memory, uint64_t seed, int threads) {
  Engine e;
  LEANEMB_ASSIGN_OR_RETURN(e.mem, MemorySystem::create(memory));
  CollectionOptions co;
  t.name = "t0";
  co.tables.push_back(std::move(t));
  co.features.push_back({"f0", 0, PoolingMode::kSum});
  co.seed = seed;
  co.num_threads = threads;
  LEANEMB_ASSIGN_OR_RETURN(e.coll, EmbeddingCollection::create(co, e.mem.get()));
  return e;
}

// ---- correctness gate --------------------------------------------------------------------------


double weight_tolerance(DType t) {
  switch (t) {
    case DType::kF32: return 1e-5;
    case DType::kF16: return 2e-3;   // one SR flip of an fp16 element
    case DType::kBF16: return 1e-2;  // one SR flip of a bf16 element
    case DType::kInt8Rowwise: return 1e-5;  // lookup only: dequantization is exact arithmetic
    default: break;  // not a row dtype
  }
  return 1e-5;
}

double state_tolerance(DType t) {
  switch (t) {
    case DType::kF32: return 1e-5;
    case DType::kBF16: return 1e-2;
    case DType::kInt8Blockwise: return 5e-2;  // one code step of the 8-bit map
    case DType::kInt4Blockwise: return 1e-5;  // every build stores the reference's codes (quant4.h)
    default: break;  // not an optimizer state dtype
  }
  return 1e-5;
}


// Runs two steps of the same batches through `fast` and `ref` and compares forward outputs,
// updated rows and optimizer state. The batches must already fit both collections.
Status compare_engines(const Shape& s, const Contender& c, EmbeddingCollection& fast, EmbeddingCollection& ref,
                       const std::vector<std::vector<IdBatch>>& batches, const std::vector<float>& grad,
                       GateResult* g) {
  const size_t out_size = static_cast<size_t>(s.batch * fast.pooled_dim());
  std::vector<float> out_f(out_size), out_r(out_size);
  auto forward_both = [&](const std::vector<IdBatch>& b) -> Status {
    const SparseBatch sb = view_batch(b, s.batch);
    LEANEMB_RETURN_IF_ERROR(fast.forward(sb, out_f));
    LEANEMB_RETURN_IF_ERROR(ref.forward(sb, out_r));
    g->forward.add(out_f.data(), out_r.data(), out_size);
    return Status();
  };
  LEANEMB_RETURN_IF_ERROR(forward_both(batches[0]));
  if (c.frozen) return Status();
  for (int step = 0; step < 2; ++step) {
    const SparseBatch sb = view_batch(batches[static_cast<size_t>(step)], s.batch);
    LEANEMB_ASSIGN_OR_RETURN(UpdateReport rf, fast.backward_update(sb, grad));
    LEANEMB_ASSIGN_OR_RETURN(UpdateReport rr, ref.backward_update(sb, grad));
    if (rf.unique_rows != rr.unique_rows || rf.skipped_nonfinite != rr.skipped_nonfinite) {
      g->pass = false;
      g->detail += "step " + std::to_string(step) + ": fast updated " + std::to_string(rf.unique_rows) +
                   " unique rows, reference " + std::to_string(rr.unique_rows) + "; ";
    }
  }
  LEANEMB_RETURN_IF_ERROR(forward_both(batches[0]));
  // Every row either step touched, per table, compared whole (weights and state).
  for (int t = 0; t < s.tables; ++t) {
    std::set<int64_t> rows;
    for (int step = 0; step < 2; ++step)
      for (int64_t id : batches[static_cast<size_t>(step)][static_cast<size_t>(t)].ids) rows.insert(id);
    const int64_t d = s.dim, sf = fast.state_floats_per_row(t);
    std::vector<float> wf(static_cast<size_t>(d)), wr(static_cast<size_t>(d));
    std::vector<float> sff(static_cast<size_t>(sf)), sfr(static_cast<size_t>(sf));
    for (int64_t r : rows) {
      LEANEMB_RETURN_IF_ERROR(fast.read_rows(t, r, 1, wf));
      LEANEMB_RETURN_IF_ERROR(ref.read_rows(t, r, 1, wr));
      g->weights.add(wf.data(), wr.data(), wf.size());
      if (sf > 0) {
        LEANEMB_RETURN_IF_ERROR(fast.read_state(t, r, 1, sff));
        LEANEMB_RETURN_IF_ERROR(ref.read_state(t, r, 1, sfr));
        g->state.add(sff.data(), sfr.data(), sff.size());
      }
    }
    // State kept outside the rows (SM3's column accumulators).
    const std::span<const float> cf = std::as_const(fast).column_state(t), cr = std::as_const(ref).column_state(t);
    if (!cf.empty()) g->state.add(cf.data(), cr.data(), cf.size());
  }
  return Status();
}

// The gate of one contender. `fast` is the engine that will be timed. Small tables get a full
// reference copy; tables of kFullGateMaxBytes or more are checked on reduced tables of
// kReducedGateRows rows fed the same batches with ids taken mod the reduced row count: the
// same kernels, dtype and optimizer, on a table that fits twice.
Result<GateResult> run_gate(const Shape& s, const Contender& c, Engine& fast, const Stream& st, uint64_t seed,
                            int threads) {
  GateResult g;
  const size_t table_bytes =
      static_cast<size_t>(s.tables) * static_cast<size_t>(s.rows) * fast.coll->layout(0).stride_bytes;
  if (table_bytes < kFullGateMaxBytes) {
    g.method = "reference collection (use_reference_kernels) with the same options, batches 0 and 1";
    LEANEMB_ASSIGN_OR_RETURN(Engine ref, build_engine(s, c, s.rows, seed, threads, true));
    LEANEMB_RETURN_IF_ERROR(compare_engines(s, c, *fast.coll, *ref.coll, st.batches, st.grad, &g));
  } else {
    const int64_t rows = std::min(s.rows, kReducedGateRows);
    g.method = "tables too large for a reference copy: fast vs reference collections of " + std::to_string(rows) +
               " rows, batches 0 and 1 with ids mod " + std::to_string(rows);
    std::vector<std::vector<IdBatch>> reduced(2, std::vector<IdBatch>(static_cast<size_t>(s.tables)));
    for (size_t i = 0; i < 2; ++i)
      for (size_t t = 0; t < static_cast<size_t>(s.tables); ++t) {
        reduced[i][t] = st.batches[i][t];
        for (int64_t& id : reduced[i][t].ids) id %= rows;
      }
    LEANEMB_ASSIGN_OR_RETURN(Engine small_fast, build_engine(s, c, rows, seed, threads, false));
    LEANEMB_ASSIGN_OR_RETURN(Engine small_ref, build_engine(s, c, rows, seed, threads, true));
    LEANEMB_RETURN_IF_ERROR(compare_engines(s, c, *small_fast.coll, *small_ref.coll, reduced, st.grad, &g));
  }
  const double wtol = weight_tolerance(c.dtype), stol = state_tolerance(c.optimizer.state_dtype);
  auto check = [&](const Diff& d, double tol, const char* what) {
    if (d.rel() > tol || std::isnan(d.rel())) {
      g.pass = false;
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s differ: max|fast-ref| = %.3g, max|ref| = %.3g (rel %.3g > tol %.3g); ", what,
                    d.max_abs, d.max_ref, d.rel(), tol);
      g.detail += buf;
    }
  };
  check(g.forward, wtol, "forward outputs");
  check(g.weights, wtol, "updated weights");
  check(g.state, stol, "optimizer state");
  return g;
}

}  // namespace leanemb::bench::internal

// The machine figures workloads.h declares (next to the /proc readers above).
namespace leanemb::bench {

size_t process_max_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;  // Linux reports kilobytes
}

size_t l3_cache_bytes() {
  std::FILE* f = std::fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  if (f == nullptr) return 0;
  unsigned long long v = 0;
  char unit = 0;
  const int n = std::fscanf(f, "%llu%c", &v, &unit);
  std::fclose(f);
  if (n < 1) return 0;
  const size_t mult = unit == 'K' ? size_t{1} << 10 : unit == 'M' ? size_t{1} << 20 : unit == 'G' ? size_t{1} << 30 : 1;
  return static_cast<size_t>(v) * mult;
}

}  // namespace leanemb::bench
