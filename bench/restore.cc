// The `restore` workload: save a cached table to a checkpoint and restore it, with the table's
// rows in the host store and in the file store, the way `leanemb train` checkpoints and
// resumes (src/train/trainer.cc: read_raw_rows -> CheckpointWriter::append_rows, and
// CheckpointReader::read_rows -> write_raw_rows, in chunks of 65536 rows).
//
// A source table (host store) is filled with pseudo-random fat rows and saved once. Then, in
// --iters rounds alternating which store goes first, a fresh table of each store restores that
// checkpoint (timed: open, read, write_raw_rows; then the store's flush timed apart), a sample
// of its rows is compared bit for bit with the source (the gate), and it saves itself to a
// second checkpoint (timed). Reported: medians and the ratio file / host for restore and save,
// the stores' request counts, and the machine load.
#include <unistd.h>

#include <filesystem>
#include <random>

#include "bench_internal.h"
#include "leanemb/checkpoint.h"
#include "leanemb/json.h"
#include "leanemb/run_dir.h"

namespace leanemb::bench::internal {
namespace {

constexpr int64_t kChunkRows = 65536;  // as the trainer's kCkptChunkRows

struct RestoreShape {
  int64_t rows, dim;
  DType dtype;
  OptimizerOptions optimizer;
  double cache_fraction;
};

Result<Engine> make_table(const RestoreShape& s, const std::string& store, const std::string& path, uint64_t seed,
                          int threads) {
  TableOptions t;
  t.num_rows = s.rows;
  t.dim = s.dim;
  t.dtype = s.dtype;
  t.optimizer = s.optimizer;
  t.cache.fraction = s.cache_fraction;
  t.cache.store = parse_store_kind(store).value();  // "host" | "file" (this file's literals)
  t.cache.store_path = path;
  return build_one_table_engine(t, MemorySystemOptions{}, seed, threads);
}

// Pseudo-random bytes of rows [r0, r0 + n) (a function of the row, so the gate can recompute them).
void fill_rows(int64_t r0, int64_t n, size_t stride, uint64_t seed, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(r0 + i) * 0x9E3779B97F4A7C15ull));
    for (size_t b = 0; b < stride; b += 8) {
      const uint64_t v = rng();
      std::memcpy(out + static_cast<size_t>(i) * stride + b, &v, std::min<size_t>(8, stride - b));
    }
  }
}

// The trainer's save: every row through read_raw_rows into the checkpoint's table "emb/t0".
Result<std::string> save(const EmbeddingCollection& c, const std::string& dir, int64_t step) {
  const size_t stride = c.layout(0).stride_bytes;
  const int64_t rows = c.options().tables[0].num_rows;
  LEANEMB_ASSIGN_OR_RETURN(auto w, ckpt::CheckpointWriter::create(dir, step));
  LEANEMB_RETURN_IF_ERROR(w->add_table("emb/t0", stride, rows));
  std::vector<uint8_t> buf;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
    const int64_t n = std::min(kChunkRows, rows - r0);
    buf.resize(static_cast<size_t>(n) * stride);
    LEANEMB_RETURN_IF_ERROR(c.read_raw_rows(0, r0, n, buf));
    LEANEMB_RETURN_IF_ERROR(w->append_rows("emb/t0", r0, buf));
  }
  LEANEMB_ASSIGN_OR_RETURN(ckpt::CommitInfo info, w->commit());
  return info.path;
}

// The trainer's restore (load_plain_tables for one process).
Status restore(EmbeddingCollection& c, const std::string& ckpt_path) {
  const size_t stride = c.layout(0).stride_bytes;
  const int64_t rows = c.options().tables[0].num_rows;
  LEANEMB_ASSIGN_OR_RETURN(auto r, ckpt::CheckpointReader::open(ckpt_path));
  std::vector<uint8_t> buf;
  for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
    const int64_t n = std::min(kChunkRows, rows - r0);
    buf.resize(static_cast<size_t>(n) * stride);
    LEANEMB_RETURN_IF_ERROR(r->read_rows("emb/t0", r0, n, buf));
    LEANEMB_RETURN_IF_ERROR(c.write_raw_rows(0, r0, n, buf));
  }
  return Status();
}

// Bit-for-bit comparison of sampled rows (and the first and last) with the source bytes.
Result<bool> same_as_source(const EmbeddingCollection& c, uint64_t seed) {
  const size_t stride = c.layout(0).stride_bytes;
  const int64_t rows = c.options().tables[0].num_rows;
  std::mt19937_64 rng(seed + 1);
  std::vector<uint8_t> got(stride), want(stride);
  for (int i = 0; i < 20000; ++i) {
    const int64_t r = i == 0 ? 0 : i == 1 ? rows - 1 : static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
    LEANEMB_RETURN_IF_ERROR(c.read_raw_rows(0, r, 1, got));
    fill_rows(r, 1, stride, seed, want.data());
    if (got != want) return false;
  }
  return true;
}

struct Timings {
  std::vector<double> restore_s, flush_s, save_s;
  uint64_t store_write_ops = 0, store_read_ops = 0;
};

}  // namespace

Status run_restore(const BenchOptions& o, const Progress& progress, json* doc) {
  RestoreShape s;
  s.rows = o.rows.value_or(4150000);  // 166 MB of 40-byte rows
  s.dim = o.dim.value_or(16);
  s.dtype = o.dtype.value_or(DType::kBF16);
  s.optimizer.kind = o.optimizer.value_or(OptimizerKind::kRowwiseAdagrad);
  s.optimizer.state_dtype = o.state_dtype.value_or(DType::kF32);
  s.cache_fraction = o.cache_fraction;
  const int rounds = o.iters.value_or(3);
  namespace fs = std::filesystem;
  const fs::path dir = o.store_path.empty() ? fs::path("leanemb-restore-" + std::to_string(::getpid())) : fs::path(o.store_path);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kIoError, "restore: cannot create " + dir.string() + ": " + ec.message());
  // The directory's lock for the whole benchmark (writers_own_their_dirs): it writes table files
  // and checkpoints there, so a directory a run holds is refused, naming the holder.
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<train::DirLock> lock, train::DirLock::acquire(dir.string()));
  const uint64_t seed = o.seed;

  progress("restore: %lld rows x %lld %s, %s, cache %.0f%%; filling the source table", static_cast<long long>(s.rows),
           static_cast<long long>(s.dim), std::string(dtype_name(s.dtype)).c_str(),
           std::string(optimizer_name(s.optimizer.kind)).c_str(), 100 * s.cache_fraction);
  std::string source_ckpt;
  size_t stride = 0;
  {
    LEANEMB_ASSIGN_OR_RETURN(Engine src, make_table(s, "host", "", seed, o.threads));
    stride = src.coll->layout(0).stride_bytes;
    std::vector<uint8_t> buf;
    for (int64_t r0 = 0; r0 < s.rows; r0 += kChunkRows) {
      const int64_t n = std::min(kChunkRows, s.rows - r0);
      buf.resize(static_cast<size_t>(n) * stride);
      fill_rows(r0, n, stride, seed, buf.data());
      LEANEMB_RETURN_IF_ERROR(src.coll->write_raw_rows(0, r0, n, buf));
    }
    LEANEMB_ASSIGN_OR_RETURN(source_ckpt, save(*src.coll, (dir / "source").string(), 1));
  }
  const double table_mb = static_cast<double>(s.rows) * static_cast<double>(stride) / 1e6;
  (*doc)["shape"] = {{"rows", s.rows}, {"dim", s.dim}, {"dtype", std::string(dtype_name(s.dtype))},
                     {"optimizer", std::string(optimizer_name(s.optimizer.kind))}, {"stride_bytes", stride},
                     {"table_mb", table_mb}, {"cache_fraction", s.cache_fraction}, {"chunk_rows", kChunkRows}};
  const std::string kinds[2] = {"host", "file"};
  Timings t[2];
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const int which = (k + round) % 2;
      const std::string store_file = (dir / "table.rows").string();
      LEANEMB_ASSIGN_OR_RETURN(Engine e, make_table(s, kinds[which], which ? store_file : "", seed, o.threads));
      auto t0 = Clock::now();
      LEANEMB_RETURN_IF_ERROR(restore(*e.coll, source_ckpt));
      t[which].restore_s.push_back(ms_since(t0) / 1e3);
      t0 = Clock::now();
      LEANEMB_RETURN_IF_ERROR(e.coll->flush());
      t[which].flush_s.push_back(ms_since(t0) / 1e3);
      LEANEMB_ASSIGN_OR_RETURN(bool same, same_as_source(*e.coll, seed));
      if (!same) return internal_error("restore: the " + kinds[which] + " store's rows differ from the checkpoint's");
      t0 = Clock::now();
      LEANEMB_ASSIGN_OR_RETURN(std::string saved, save(*e.coll, (dir / ("saved-" + kinds[which])).string(), round + 2));
      t[which].save_s.push_back(ms_since(t0) / 1e3);
      LEANEMB_ASSIGN_OR_RETURN(RowCacheStats cs, e.coll->cache_stats(0));
      t[which].store_write_ops = cs.store_write_ops;
      t[which].store_read_ops = cs.store_read_ops;
      progress("round %d: %s store restored %.1f MB in %.2f s, saved in %.2f s", round + 1, kinds[which].c_str(),
               table_mb, t[which].restore_s.back(), t[which].save_s.back());
      e.reset();
      fs::remove(store_file, ec);
    }
  }
  json contenders = json::array();
  for (int k = 0; k < 2; ++k)
    contenders.push_back({{"store", kinds[k]},
                          {"restore_s", {{"median", median_of(t[k].restore_s)}, {"all", t[k].restore_s}}},
                          {"flush_s", median_of(t[k].flush_s)},
                          {"save_s", {{"median", median_of(t[k].save_s)}, {"all", t[k].save_s}}},
                          {"store_write_ops_per_restore_and_save", t[k].store_write_ops},
                          {"store_read_ops_per_restore_and_save", t[k].store_read_ops}});
  (*doc)["contenders"] = contenders;
  const double rh = median_of(t[0].restore_s), rf = median_of(t[1].restore_s);
  const double sh = median_of(t[0].save_s), sf = median_of(t[1].save_s);
  json summary{{"restore_s_host", rh}, {"restore_s_file", rf}, {"restore_ratio_file_over_host", rh > 0 ? rf / rh : 0.0},
               {"save_s_host", sh}, {"save_s_file", sf}, {"save_ratio_file_over_host", sh > 0 ? sf / sh : 0.0},
               {"gate", "pass"}, {"peak_rss_bytes", process_max_rss_bytes()}};
  (*doc)["summary"] = summary;
  std::printf("restore: %s\n", dump_json(summary).c_str());
  if (o.store_path.empty()) fs::remove_all(dir, ec);
  return Status();
}

}  // namespace leanemb::bench::internal
