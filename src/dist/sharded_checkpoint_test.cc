// Sharded checkpoints over local-thread worlds: save at P, load at P' (2 -> 1, 1 -> 2, 2 -> 4,
// 4 -> 2) with every row's weights and optimizer state intact, digests equal to one process
// whatever the shard count, training that continues bit for bit after a reload, incomplete
// checkpoints skipped, a rank that fails to write its shard, pruning, mismatched tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include "leanemb/env.h"
#include "ckpt/fault_injection_env.h"
#include "dist/dist_testing.h"
#include "dist/sharded_checkpoint.h"
#include "table/owned_batch_testing.h"

namespace leanemb::dist {
namespace {

namespace fs = std::filesystem;
using test_util::expect_all_ok;
using test_util::mismatch;
using test_util::run_world;
using test_util::TempDir;
using testing_util::OwnedBatch;

constexpr int64_t kGlobalBags = 12;

// Two tables (dims 8 and 5), three features (sum, mean, weighted sum), fp32 rows.
CollectionOptions global_options(OptimizerKind kind, int64_t dim_a = 8) {
  CollectionOptions o;
  OptimizerOptions opt;
  opt.kind = kind;
  opt.learning_rate = 0.05f;
  opt.eps = 1e-6f;
  o.tables = {TableOptions{"a", 37, dim_a, DType::kF32, opt, {}, false, {}, {}, {}, {}},
              TableOptions{"b", 11, 5, DType::kF32, opt, {}, false, {}, {}, {}, {}}};
  o.features = {FeatureOptions{"a_sum", 0, PoolingMode::kSum}, FeatureOptions{"a_mean", 0, PoolingMode::kMean},
                FeatureOptions{"b_weighted", 1, PoolingMode::kSum}};
  o.seed = 11;
  o.num_threads = 1;
  return o;
}

// Step s's global batch: bags of 0-4 ids skewed to low ids; weights on feature 2.
OwnedBatch global_batch(int step, const CollectionOptions& o) {
  std::mt19937_64 rng(300 + static_cast<uint64_t>(step));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  OwnedBatch b;
  b.B = kGlobalBags;
  for (size_t f = 0; f < o.features.size(); ++f) {
    const int64_t rows = o.tables[static_cast<size_t>(o.features[f].table)].num_rows;
    std::vector<int64_t> ids, offsets = {0};
    std::vector<float> w;
    for (int64_t bag = 0; bag < b.B; ++bag) {
      const int len = static_cast<int>(rng() % 5);
      for (int i = 0; i < len; ++i) {
        ids.push_back(static_cast<int64_t>(std::pow(u(rng), 2.0) * static_cast<double>(rows)));
        if (f == 2) w.push_back(static_cast<float>(u(rng) * 2.0 - 0.5));
      }
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    b.ids.push_back(ids);
    b.offsets.push_back(offsets);
    b.weights.push_back(w);
  }
  return b;
}


// Step s's pooled-output gradients.
std::vector<float> step_grads(int step, int64_t n) { return test_util::normal_grads(900 + static_cast<uint64_t>(step), n); }

// One process trained on steps [0, steps).
std::unique_ptr<EmbeddingCollection> train_reference(const CollectionOptions& o, int steps) {
  auto coll = std::move(EmbeddingCollection::create(o)).value();
  for (int s = 0; s < steps; ++s) {
    const OwnedBatch g = global_batch(s, o);
    std::vector<float> pooled(static_cast<size_t>(kGlobalBags * coll->pooled_dim()));
    EXPECT_TRUE(coll->forward(g.view(), pooled).ok());
    EXPECT_TRUE(coll->backward_update(g.view(), step_grads(s, kGlobalBags * coll->pooled_dim())).ok());
  }
  return coll;
}

// Trains steps [s0, s1) of the global batches on rank comm.rank()'s even slice.
Status train_sharded(ShardedEmbeddingCollection& sc, const CollectionOptions& o, int s0, int s1) {
  const int p = sc.communicator()->size(), r = sc.communicator()->rank();
  const int64_t b0 = kGlobalBags * r / p, b1 = kGlobalBags * (r + 1) / p, ldo = sc.pooled_dim();
  for (int s = s0; s < s1; ++s) {
    const OwnedBatch mine = global_batch(s, o).slice(b0, b1);
    std::vector<float> pooled(static_cast<size_t>((b1 - b0) * ldo));
    LEANEMB_RETURN_IF_ERROR(sc.forward(mine.view(), pooled));
    const std::vector<float> grads = step_grads(s, kGlobalBags * ldo);
    LEANEMB_RETURN_IF_ERROR(
        sc.backward_update(mine.view(), std::span<const float>(grads).subspan(static_cast<size_t>(b0 * ldo), pooled.size()))
            .status());
  }
  return Status();
}

// This rank's rows (weights and state bytes) equal the reference's rows of the same global ids.
Status check_rows(const ShardedEmbeddingCollection& sc, const EmbeddingCollection& ref) {
  const int r = sc.communicator()->rank();
  for (int t = 0; t < ref.num_tables(); ++t) {
    const size_t stride = ref.layout(t).stride_bytes;
    std::vector<uint8_t> got(stride), want(stride);
    for (int64_t l = 0; l < sc.plan().local_num_rows(t, r); ++l) {
      const int64_t g = sc.plan().global_row(t, r, l);
      LEANEMB_RETURN_IF_ERROR(sc.local().read_raw_rows(t, l, 1, got));
      LEANEMB_RETURN_IF_ERROR(ref.read_raw_rows(t, g, 1, want));
      if (got != want) return mismatch("table " + std::to_string(t) + " global row " + std::to_string(g) + " differs");
    }
  }
  if (sc.step() != ref.step()) return mismatch("step " + std::to_string(sc.step()) + " vs " + std::to_string(ref.step()));
  return Status();
}

ShardedCollectionOptions sharded(const CollectionOptions& o, ShardingKind kind) {
  ShardedCollectionOptions so;
  so.collection = o;
  so.sharding = kind;
  return so;
}

// Trains P ranks for `steps` steps and saves checkpoint `steps` (plus a blob on rank 0).
// Returns the digest every rank computed live.
std::string train_and_save(int p, const ShardedCollectionOptions& so, int steps, const std::string& out,
                           const ShardedSaveOptions& opts = {}) {
  std::vector<std::string> digests(static_cast<size_t>(p));
  expect_all_ok(run_world(p, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    LEANEMB_RETURN_IF_ERROR(train_sharded(*sc, so.collection, 0, steps));
    LEANEMB_ASSIGN_OR_RETURN(digests[static_cast<size_t>(comm.rank())], sharded_collection_digest(*sc));
    const std::vector<uint8_t> dense = {1, 2, 3};
    const ShardedBlob blobs[] = {{"dense/param/w", dense}};
    return save_sharded_checkpoint(out, steps, *sc, blobs, opts).status();
  }));
  for (const auto& d : digests) EXPECT_EQ(d, digests[0]);
  return digests[0];
}

ckpt::FindOptions quiet() {
  ckpt::FindOptions f;
  f.warn_to_stderr = false;
  return f;
}

// Saved at P and loaded at P' (2->1, 1->2, 2->4, 4->2, 4->1, across sharding kinds), every
// global row's weights and optimizer state are the saved bytes, the digests (live, on disk,
// after the load) equal one process's, and two more steps equal an uninterrupted single run.
TEST(ShardedCheckpointTest, ReshardedLoadKeepsEveryRowAndTrainingContinuesBitForBit) {
  struct Case { int p, q; ShardingKind save, load; };
  const Case cases[] = {{2, 1, ShardingKind::kRowModulo, ShardingKind::kRowModulo},
                        {1, 2, ShardingKind::kRowModulo, ShardingKind::kRowRange},
                        {2, 4, ShardingKind::kRowRange, ShardingKind::kRowModulo},
                        {4, 2, ShardingKind::kRowModulo, ShardingKind::kTableWise},
                        {4, 1, ShardingKind::kTableWise, ShardingKind::kRowRange}};  // ranks 2, 3: empty shards
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kRowwiseAdagrad, OptimizerKind::kAdam,
                             OptimizerKind::kSm3}) {  // SM3: its column state is a blob of the global checkpoint
    const CollectionOptions o = global_options(kind);
    const auto ref2 = train_reference(o, 2), ref4 = train_reference(o, 4);
    const std::string want2 = collection_digest(*ref2).value(), want4 = collection_digest(*ref4).value();
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(optimizer_name(kind)) + " " + std::to_string(c.p) + " -> " + std::to_string(c.q));
      TempDir dir;
      EXPECT_EQ(train_and_save(c.p, sharded(o, c.save), 2, dir.path), want2);
      auto latest = find_latest_complete_sharded(dir.path, quiet());
      ASSERT_TRUE(latest.ok()) << latest.status().to_string();
      EXPECT_EQ(latest->ref.step, 2);
      EXPECT_EQ(sharded_checkpoint_digest(latest->ref.path).value(), want2);
      expect_all_ok(run_world(c.q, [&](Communicator& comm) -> Status {
        LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o, c.load), &comm));
        LEANEMB_ASSIGN_OR_RETURN(ShardedLoadInfo info, load_sharded_checkpoint(latest->ref.path, *sc));
        if (info.saved_world_size != c.p || info.step != 2) return mismatch("load info");
        LEANEMB_RETURN_IF_ERROR(check_rows(*sc, *ref2));
        LEANEMB_ASSIGN_OR_RETURN(std::string d, sharded_collection_digest(*sc));
        if (d != want2) return mismatch("digest after load");
        LEANEMB_RETURN_IF_ERROR(train_sharded(*sc, o, 2, 4));
        LEANEMB_RETURN_IF_ERROR(check_rows(*sc, *ref4));
        LEANEMB_ASSIGN_OR_RETURN(d, sharded_collection_digest(*sc));
        return d == want4 ? Status() : mismatch("digest after resumed training");
      }));
    }
  }
}

// The digest depends on the rows and their global ids, not on P or the sharding kind; one
// changed byte changes it.
TEST(ShardedCheckpointTest, DigestIsIndependentOfShardCountAndSeesOneChangedByte) {
  const CollectionOptions o = global_options(OptimizerKind::kRowwiseAdagrad);
  const auto ref = train_reference(o, 1);
  const std::string want = collection_digest(*ref).value();
  for (int p : {1, 2, 4}) {
    for (ShardingKind k : {ShardingKind::kRowModulo, ShardingKind::kRowRange, ShardingKind::kTableWise}) {
      expect_all_ok(run_world(p, [&](Communicator& comm) -> Status {
        LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o, k), &comm));
        LEANEMB_RETURN_IF_ERROR(train_sharded(*sc, o, 0, 1));
        LEANEMB_ASSIGN_OR_RETURN(std::string d, sharded_collection_digest(*sc));
        if (d != want) return mismatch("digest at P=" + std::to_string(p));
        if (sc->plan().owner(1, 7) == comm.rank()) {  // one byte of global row 7 of table b
          const int64_t l = sc->plan().local_row(1, 7);
          std::vector<uint8_t> row(sc->local().layout(1).stride_bytes);
          LEANEMB_RETURN_IF_ERROR(sc->local().read_raw_rows(1, l, 1, row));
          row[1] ^= 1;
          LEANEMB_RETURN_IF_ERROR(sc->local().write_raw_rows(1, l, 1, row));
        }
        LEANEMB_ASSIGN_OR_RETURN(d, sharded_collection_digest(*sc));
        return d != want ? Status() : mismatch("digest unchanged after a byte flip");
      }));
    }
  }
}

void flip_byte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(at);
  f.write(&c, 1);
}

// A global checkpoint with a shard deleted, or with a corrupted shard, is not complete: the
// finder skips it (naming the shard) and the previous complete one loads.
TEST(ShardedCheckpointTest, CheckpointWithAMissingOrCorruptShardIsSkipped) {
  const CollectionOptions o = global_options(OptimizerKind::kAdam);
  const auto ref1 = train_reference(o, 1);
  for (const char* damage : {"delete", "corrupt_rows", "replace_manifest"}) {
    SCOPED_TRACE(damage);
    TempDir dir;
    train_and_save(2, sharded(o, ShardingKind::kRowModulo), 1, dir.path);
    train_and_save(2, sharded(o, ShardingKind::kRowModulo), 2, dir.path);
    const fs::path shard = fs::path(dir.path) / "shards/step-0000000002/rank-1-of-2/checkpoints/step-0000000002";
    ASSERT_TRUE(fs::exists(shard / "MANIFEST"));
    if (std::string(damage) == "delete") {
      fs::remove_all(shard);
    } else if (std::string(damage) == "corrupt_rows") {
      flip_byte((shard / "data-00000.dat").string(), 40);
    } else {  // a valid checkpoint, but not the one the global manifest recorded
      fs::copy_file(fs::path(dir.path) / "shards/step-0000000001/rank-1-of-2/checkpoints/step-0000000001/MANIFEST",
                    shard / "MANIFEST", fs::copy_options::overwrite_existing);
    }
    auto latest = find_latest_complete_sharded(dir.path, quiet());
    ASSERT_TRUE(latest.ok()) << latest.status().to_string();
    EXPECT_EQ(latest->ref.step, 1);
    ASSERT_EQ(latest->skipped.size(), 1u);
    EXPECT_NE(latest->skipped[0].find("shard 1"), std::string::npos) << latest->skipped[0];
    EXPECT_FALSE(verify_sharded_checkpoint((fs::path(dir.path) / "checkpoints/step-0000000002").string()).ok());
    expect_all_ok(run_world(1, [&](Communicator& comm) -> Status {
      LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o, ShardingKind::kRowModulo), &comm));
      LEANEMB_RETURN_IF_ERROR(load_sharded_checkpoint(latest->ref.path, *sc).status());
      return check_rows(*sc, *ref1);
    }));
  }
}

// verify_tables_checkpoint (what `leanemb ckpt verify` and leanemb.checkpoint_verify run)
// checks every shard: a deleted shard, a corrupt shard block, and a shard data file swapped in
// from another step's shard (same name and size, valid blocks of its own: only the checkpoint
// id in its checksums tells) all fail it, while the global directory alone still verifies
// (all `ckpt verify` looked at before).
TEST(ShardedCheckpointTest, VerifyChecksEveryShardAndItsDataFiles) {
  const CollectionOptions o = global_options(OptimizerKind::kAdagrad);
  for (const char* damage : {"none", "delete", "corrupt_rows", "swap_data"}) {
    SCOPED_TRACE(damage);
    TempDir dir;
    train_and_save(2, sharded(o, ShardingKind::kRowModulo), 1, dir.path);
    train_and_save(2, sharded(o, ShardingKind::kRowModulo), 2, dir.path);
    const fs::path shard = fs::path(dir.path) / "shards/step-0000000002/rank-1-of-2/checkpoints/step-0000000002";
    const fs::path old = fs::path(dir.path) / "shards/step-0000000001/rank-1-of-2/checkpoints/step-0000000001";
    if (std::string(damage) == "delete") fs::remove_all(shard);
    if (std::string(damage) == "corrupt_rows") flip_byte((shard / "data-00000.dat").string(), 40);
    if (std::string(damage) == "swap_data") {
      ASSERT_EQ(fs::file_size(old / "data-00000.dat"), fs::file_size(shard / "data-00000.dat"));
      fs::copy_file(old / "data-00000.dat", shard / "data-00000.dat", fs::copy_options::overwrite_existing);
    }
    const std::string global = (fs::path(dir.path) / "checkpoints/step-0000000002").string();
    EXPECT_TRUE(ckpt::verify(global).ok());  // the global directory alone
    auto v = verify_tables_checkpoint(global);
    if (std::string(damage) == "none") {
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      EXPECT_EQ(v->num_shards, 2u);
      EXPECT_EQ(v->num_files, 3u);  // the global data file and one per shard
      continue;
    }
    ASSERT_FALSE(v.ok());
    EXPECT_NE(v.status().message().find("shard 1"), std::string::npos) << v.status().to_string();
  }
}

// The real file system, except that creating files fails (a full or broken disk on one rank).
class FailingEnv final : public ckpt::Env {
 public:
  Result<std::unique_ptr<ckpt::WritableFile>> new_writable_file(const std::string& path) override {
    return io_error("injected: cannot create '" + path + "'");
  }
  Result<std::unique_ptr<ckpt::RandomAccessFile>> new_random_access_file(const std::string& path) override {
    return base()->new_random_access_file(path);
  }
  Result<std::vector<uint8_t>> read_file(const std::string& path) override { return base()->read_file(path); }
  Result<uint64_t> file_size(const std::string& path) override { return base()->file_size(path); }
  bool file_exists(const std::string& path) override { return base()->file_exists(path); }
  Result<std::vector<std::string>> list_dir(const std::string& path) override { return base()->list_dir(path); }
  Status create_dir(const std::string& path) override { return base()->create_dir(path); }
  Status remove_file(const std::string& path) override { return base()->remove_file(path); }
  Status remove_all(const std::string& path) override { return base()->remove_all(path); }
  Status rename(const std::string& from, const std::string& to) override { return base()->rename(from, to); }
  Status sync_dir(const std::string& path) override { return base()->sync_dir(path); }

 private:
  static ckpt::Env* base() { return ckpt::posix_env(); }
};

// A rank that cannot write its shard makes the save fail on every rank, naming that rank; no
// global checkpoint appears, and the next successful save removes the orphaned shards.
TEST(ShardedCheckpointTest, ARankFailingToWriteItsShardFailsTheSaveEverywhere) {
  const CollectionOptions o = global_options(OptimizerKind::kSgd);
  TempDir dir;
  FailingEnv failing;
  std::vector<std::string> errors(2);
  const auto st = run_world(2, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o, ShardingKind::kRowModulo), &comm));
    ShardedSaveOptions opts;
    opts.env = comm.rank() == 1 ? &failing : nullptr;
    auto saved = save_sharded_checkpoint(dir.path, 5, *sc, {}, opts);
    errors[static_cast<size_t>(comm.rank())] = saved.ok() ? "" : saved.status().to_string();
    // The communicator is still usable: a good save follows.
    return save_sharded_checkpoint(dir.path, 6, *sc).status();
  });
  expect_all_ok(st);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank(s) 1 failed to write their shard"), std::string::npos) << errors[static_cast<size_t>(r)];
  }
  EXPECT_NE(errors[1].find("injected"), std::string::npos) << errors[1];
  EXPECT_FALSE(fs::exists(fs::path(dir.path) / "checkpoints/step-0000000005"));
  EXPECT_FALSE(fs::exists(fs::path(dir.path) / "shards/step-0000000005"));  // rank 0's orphan, pruned by step 6
  EXPECT_TRUE(verify_sharded_checkpoint((fs::path(dir.path) / "checkpoints/step-0000000006").string()).ok());
}

// Trains 2 ranks, saves step 1, trains, saves step 2 through `env`; with fault_at, the env
// "crashes" at that many mutating calls into the second save. Returns the calls of the second
// save.
uint64_t save_twice(ckpt::FaultInjectionEnv& env, const CollectionOptions& o, int64_t fault_at) {
  uint64_t ops = 0;
  expect_all_ok(run_world(2, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o, ShardingKind::kRowModulo), &comm));
    ShardedSaveOptions opts;
    opts.env = &env;
    opts.keep_last = 1;
    LEANEMB_RETURN_IF_ERROR(train_sharded(*sc, o, 0, 1));
    LEANEMB_RETURN_IF_ERROR(save_sharded_checkpoint("/out", 1, *sc, {}, opts).status());
    LEANEMB_RETURN_IF_ERROR(train_sharded(*sc, o, 1, 2));
    LEANEMB_RETURN_IF_ERROR(comm.barrier());
    const uint64_t before = env.num_mutating_ops();
    if (comm.rank() == 0 && fault_at >= 0) env.set_fault(before + static_cast<uint64_t>(fault_at), ckpt::FaultKind::kCrash);
    LEANEMB_RETURN_IF_ERROR(comm.barrier());
    const bool saved = save_sharded_checkpoint("/out", 2, *sc, {}, opts).ok();
    if (fault_at < 0 && !saved) return mismatch("save without a fault failed");
    LEANEMB_RETURN_IF_ERROR(comm.barrier());
    if (comm.rank() == 0) ops = env.num_mutating_ops() - before;
    return Status();
  }));
  return ops;
}

// A crash at every mutating file-system call of a sharded save, under both crash models,
// leaves the old or the new checkpoint as the newest complete one, with its exact rows.
TEST(ShardedCheckpointTest, ACrashAnywhereInASaveLeavesTheOldOrTheNewCheckpoint) {
  const CollectionOptions o = global_options(OptimizerKind::kRowwiseAdagrad);
  const std::string d1 = collection_digest(*train_reference(o, 1)).value();
  const std::string d2 = collection_digest(*train_reference(o, 2)).value();
  uint64_t ops = 0;
  {
    ckpt::FaultInjectionEnv env;
    ops = save_twice(env, o, -1);
    ASSERT_GT(ops, 10u);
  }
  int saw_old = 0, saw_new = 0;
  for (bool keep_entries : {false, true}) {
    for (uint64_t n = 0; n <= ops; ++n) {
      SCOPED_TRACE("crash at call " + std::to_string(n) + (keep_entries ? " (entries kept)" : ""));
      ckpt::FaultInjectionEnv env;
      save_twice(env, o, static_cast<int64_t>(n));
      env.simulate_crash({keep_entries});
      ckpt::FindOptions f = quiet();
      f.env = &env;
      auto latest = find_latest_complete_sharded("/out", f);
      ASSERT_TRUE(latest.ok()) << latest.status().to_string();
      const std::string d = sharded_checkpoint_digest(latest->ref.path, &env).value();
      EXPECT_EQ(d, latest->ref.step == 1 ? d1 : d2);
      (latest->ref.step == 1 ? saw_old : saw_new) += 1;
    }
  }
  EXPECT_GT(saw_old, 0);
  EXPECT_GT(saw_new, 0);
}

// Saves report their progress (leanemb train's line on a terminal): after every chunk, the rows
// written so far, rising to the rows to write, plain and sharded.
TEST(ShardedCheckpointTest, SavesReportTheirRowsAfterEveryChunk) {
  const CollectionOptions o = global_options(OptimizerKind::kAdagrad);
  int64_t rows = 0;
  for (const TableOptions& t : o.tables) rows += t.num_rows;
  auto check = [](const std::vector<std::pair<int64_t, int64_t>>& calls, int64_t total, int64_t chunk) {
    ASSERT_FALSE(calls.empty());
    int64_t last = 0;
    for (const auto& [done, of] : calls) {
      EXPECT_EQ(of, total);
      EXPECT_GT(done, last);
      EXPECT_LE(done - last, chunk);
      last = done;
    }
    EXPECT_EQ(last, total);
  };
  {
    TempDir dir;
    auto coll = train_reference(o, 1);
    std::vector<std::pair<int64_t, int64_t>> calls;
    TablesSaveOptions so;
    so.chunk_rows = 5;
    so.progress = [&](int64_t done, int64_t total) { calls.emplace_back(done, total); };
    ASSERT_TRUE(coll->save(dir.path, 1, {}, so).ok());
    check(calls, rows, 5);
  }
  TempDir dir;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> calls(2);
  std::vector<int64_t> local(2, 0);
  expect_all_ok(run_world(2, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o, ShardingKind::kRowModulo), &comm));
    const size_t r = static_cast<size_t>(comm.rank());
    for (int t = 0; t < sc->num_tables(); ++t) local[r] += sc->local_num_rows(t);
    ShardedSaveOptions so;
    so.chunk_rows = 7;
    so.progress = [&calls, r](int64_t done, int64_t total) { calls[r].emplace_back(done, total); };
    return save_sharded_checkpoint(dir.path, 1, *sc, {}, so).status();
  }));
  for (size_t r = 0; r < 2; ++r) check(calls[r], local[r], 7);
  EXPECT_EQ(local[0] + local[1], rows);
}

// SM3's column accumulators (state outside the fat rows) go through a plain checkpoint: the
// loaded collection has them bit for bit, and two more steps equal an uninterrupted run.
TEST(ShardedCheckpointTest, PlainCheckpointRestoresSm3ColumnState) {
  const CollectionOptions o = global_options(OptimizerKind::kSm3);
  auto saved = train_reference(o, 2);
  auto want = train_reference(o, 4);
  TempDir dir;
  auto info = saved->save(dir.path, 2, {}, {});
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  auto coll = std::move(EmbeddingCollection::create(o)).value();
  TablesLoadOptions lo;
  lo.collection_step = 2;
  ASSERT_TRUE(coll->load(info->path, lo).ok());
  for (int t = 0; t < static_cast<int>(o.tables.size()); ++t) {
    const auto got = coll->column_state(t), ref = saved->column_state(t);
    ASSERT_EQ(got.size(), static_cast<size_t>(o.tables[static_cast<size_t>(t)].dim));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin())) << "table " << t;
    EXPECT_TRUE(std::any_of(got.begin(), got.end(), [](float x) { return x > 0.0f; })) << "table " << t;
  }
  for (int s = 2; s < 4; ++s) {
    const OwnedBatch g = global_batch(s, o);
    std::vector<float> pooled(static_cast<size_t>(kGlobalBags * coll->pooled_dim()));
    ASSERT_TRUE(coll->forward(g.view(), pooled).ok());
    ASSERT_TRUE(coll->backward_update(g.view(), step_grads(s, kGlobalBags * coll->pooled_dim())).ok());
  }
  EXPECT_EQ(collection_digest(*coll).value(), collection_digest(*want).value());
  for (int t = 0; t < static_cast<int>(o.tables.size()); ++t) {
    const auto got = coll->column_state(t), ref = want->column_state(t);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin())) << "table " << t;
  }
}

// keep_last applies to global checkpoints and their shards together, also across world sizes;
// a step saved again at another P keeps only the new rank directories.
TEST(ShardedCheckpointTest, KeepLastRemovesGlobalCheckpointsAndTheirShardsTogether) {
  const CollectionOptions o = global_options(OptimizerKind::kSgd);
  TempDir dir;
  ShardedSaveOptions opts;
  opts.keep_last = 2;
  train_and_save(2, sharded(o, ShardingKind::kRowModulo), 1, dir.path, opts);
  train_and_save(4, sharded(o, ShardingKind::kRowModulo), 2, dir.path, opts);
  train_and_save(1, sharded(o, ShardingKind::kRowModulo), 3, dir.path, opts);
  std::vector<std::string> global, shards;
  for (const auto& e : fs::directory_iterator(fs::path(dir.path) / "checkpoints")) global.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(fs::path(dir.path) / "shards")) shards.push_back(e.path().filename().string());
  std::sort(global.begin(), global.end());
  std::sort(shards.begin(), shards.end());
  const std::vector<std::string> want = {"step-0000000002", "step-0000000003"};
  EXPECT_EQ(global, want);
  EXPECT_EQ(shards, want);
  for (const auto& s : want) EXPECT_TRUE(verify_sharded_checkpoint((fs::path(dir.path) / "checkpoints" / s).string()).ok());
  // Step 3 again at P = 2: the P = 1 shard of step 3 goes.
  train_and_save(2, sharded(o, ShardingKind::kRowModulo), 3, dir.path, opts);
  std::vector<std::string> ranks;
  for (const auto& e : fs::directory_iterator(fs::path(dir.path) / "shards/step-0000000003")) ranks.push_back(e.path().filename().string());
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<std::string>{"rank-0-of-2", "rank-1-of-2"}));
  EXPECT_TRUE(verify_sharded_checkpoint((fs::path(dir.path) / "checkpoints/step-0000000003").string()).ok());
}

// Loading into tables of another shape or optimizer is refused on every rank, naming the
// difference, and leaves the rows alone.
TEST(ShardedCheckpointTest, LoadRefusesTablesThatDiffer) {
  TempDir dir;
  train_and_save(2, sharded(global_options(OptimizerKind::kSgd), ShardingKind::kRowModulo), 1, dir.path);
  const std::string ckpt = (fs::path(dir.path) / "checkpoints/step-0000000001").string();
  struct Case { CollectionOptions o; const char* want; };
  const Case cases[] = {{global_options(OptimizerKind::kSgd, 4), "dim 8 in the checkpoint, 4 in the collection"},
                        {global_options(OptimizerKind::kAdam), "optimizer sgd in the checkpoint, adam in the collection"}};
  for (const Case& c : cases) {
    std::vector<std::string> errors(2);
    run_world(2, [&](Communicator& comm) -> Status {
      LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(c.o, ShardingKind::kRowModulo), &comm));
      auto loaded = load_sharded_checkpoint(ckpt, *sc);
      errors[static_cast<size_t>(comm.rank())] = loaded.ok() ? "" : loaded.status().to_string();
      return sc->step() == 0 ? Status() : mismatch("step changed");
    });
    for (const auto& e : errors) {
      EXPECT_NE(e.find("InvalidArgument"), std::string::npos) << e;
      EXPECT_NE(e.find(c.want), std::string::npos) << e;
    }
  }
}

}  // namespace
}  // namespace leanemb::dist
