// The planner's disk over the run (plan/disk_model.cc, docs/plan.md "The disk over the run")
// against a real run whose log store compacts: a small CTR run over a log-layout file store with
// linked checkpoints, measured at each checkpoint's commit (the stores' files and the segment
// files the checkpoints link, each inode once, in blocks as du counts them) against the plan of
// a run that ends there. bench/disk_model_compaction.sh does the same on larger runs.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ctr/ctr_config.h"
#include "ctr/ctr_plan.h"
#include "ctr/ctr_task.h"
#include "plan/memory_model.h"
#include "tiered/row_store.h"
#include "train/run_options.h"

namespace leanemb::ctr {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const std::string d = ::testing::TempDir() + "leanemb_disk_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Bytes on disk (st_blocks x 512) of the segment files (*.seg) under `dirs`, each inode once.
double segment_bytes_on_disk(const std::vector<std::string>& dirs) {
  std::map<ino_t, double> inodes;
  for (const std::string& d : dirs)
    for (const auto& e : fs::recursive_directory_iterator(d)) {
      struct stat st {};
      if (e.is_regular_file() && e.path().extension() == ".seg" && ::lstat(e.path().c_str(), &st) == 0)
        inodes[st.st_ino] = static_cast<double>(st.st_blocks) * 512.0;
    }
  double sum = 0;
  for (const auto& [ino, b] : inodes) sum += b;
  return sum;
}

// One table of 20,000 rows of 8 fp32 values with row-wise Adagrad (40-byte rows) behind a cache
// of 400 rows over a log store: 1 MiB segments of 26,112 records, so at most (40,000 / 26,112
// rounded up) + 4 = 6 segments, 4 of them begun by appends. About 125 of the 128 ids a step
// miss, 5 steps append some 25 kB, and a checkpoint every 5 steps seals the segment being
// appended: from the fifth checkpoint on the log compacts, and what it frees the kept checkpoints
// (one incremental chain of 8: all of them) still link. Before the model counted the sealed
// segments it predicted no compaction here (the records fill 3% of the bound: 197 kB of 6 MiB).
TEST(CtrDiskTest, ACompactingLogStaysWithinThePlannedDiskAtEveryCheckpoint) {
  const std::string data = scratch("data"), store = scratch("store"), out = scratch("run");
  const int64_t steps = 40, every = 5;
  const std::vector<std::string> sets = {
      "data.dir=\"" + data + "\"", "data.gen.train_rows=5120", "data.gen.eval_rows=256", "data.gen.vocab=20000",
      "data.gen.zipf=0.3", "data.num_sparse=1", "model.table_rows=20000", "model.embedding_dim=8",
      "model.bottom_mlp=[16, 8]", "model.top_mlp=[16]", "embedding.optimizer=\"rowwise_adagrad\"",
      "embedding.cache_fraction=0.02", "embedding.cache_min_rows=0", "embedding.cache_prefetch=false",
      "embedding.store=\"file\"", "embedding.store_layout=\"log\"", "embedding.store_dir=\"" + store + "\"",
      "train.link_store_rows=true", "train.incremental_checkpoints=true", "train.full_checkpoint_every=8",
      "train.keep_checkpoints=2", "train.checkpoint_every=" + std::to_string(every), "train.batch_size=128",
      "train.threads=2", "train.eval_every=0", "train.log_every=1000"};
  auto config = parse_ctr_config(default_config_text(), "test", sets);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  // Measured right after each commit: one chain of 8, so no checkpoint is removed yet and the
  // disk holds what it held at the commit.
  std::map<int64_t, double> measured;
  train::RunOptions ro;
  ro.out_dir = out;
  ro.steps = steps;
  ro.quiet = true;
  ro.after_step = [&](int64_t step) {
    if (step % every == 0) measured[step] = segment_bytes_on_disk({store, out + "/checkpoints"});
  };
  auto r = run_ctr_training(ro, config.value());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(measured.size(), 8u);
  auto workload = ctr_workload(config.value());
  ASSERT_TRUE(workload.ok()) << workload.status().to_string();
  plan::Workload w = workload.value();
  w.file_block_bytes = tiered::file_store_block_bytes(store);
  for (const auto& [step, bytes] : measured) {
    w.run_steps = step;  // a run that ends at this commit: its peak is at it or before
    auto p = plan::predict_memory(w);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_TRUE(plan::predict_run_disk(w, &p.value()).ok());
    const plan::RunDiskPrediction& d = p.value().run_disk;
    ASSERT_TRUE(d.known);
    EXPECT_GT(bytes, 0) << step;
    EXPECT_LE(bytes, d.store_bytes + d.pinned_bytes) << "step " << step << ": store " << d.store_bytes << ", pinned "
                                                     << d.pinned_bytes;
  }
  // The log did compact (the test is about a compacting log): the segment files on disk at the
  // last commit exceed the store's own.
  EXPECT_GT(measured.rbegin()->second, segment_bytes_on_disk({store}));
  fs::remove_all(data);
  fs::remove_all(store);
  fs::remove_all(out);
}

}  // namespace
}  // namespace leanemb::ctr
