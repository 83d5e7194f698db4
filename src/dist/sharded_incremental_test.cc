// Incremental checkpoints of sharded collections (ShardedSaveOptions::incremental, docs/dist.md
// "Sharded checkpoints", docs/formats/checkpoint.md "Sharded chains"), two ranks as threads of a
// LocalWorld: each rank's shard chain restores exactly the rows a full checkpoint of the same
// state does (at P = 2, and at P = 1 by a one-process collection), a link writes about its
// changed rows' bytes, the digests equal the full checkpoint's, a corrupt or missing link makes
// the checkpoint incomplete (the newest complete one is taken), keep_last keeps every shard
// checkpoint a kept checkpoint needs, the ranks agree on base or link, a crash anywhere in a
// linked save leaves the previous checkpoint, and shards of full checkpoints (one directory per
// step, as before chains) stay readable beside chains.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>

#include "ckpt/fault_injection_env.h"
#include "ckpt/format.h"
#include "dist/dist_testing.h"
#include "dist/sharded_checkpoint.h"

namespace leanemb::dist {
namespace {

namespace fs = std::filesystem;
using test_util::expect_all_ok;
using test_util::mismatch;
using test_util::run_world;
using test_util::TempDir;

constexpr int kP = 2;
constexpr int64_t kBags = 8;  // global bags per step (kBags / kP per rank)

// Table a (1000 rows of 8 bf16) and b (300 rows of 4 fp32), Adagrad (dist_testing.h); a
// non-empty `store_dir`: table a cached in 64 slots over a log-layout file store there (each
// rank's store gets its own file, and half the slots).
CollectionOptions options(const std::string& store_dir = "", int64_t a_rows = 1000, int64_t cache_rows = 64) {
  return test_util::two_table_options(a_rows, 5, store_dir, cache_rows);
}

ShardedCollectionOptions sharded(const CollectionOptions& o) {
  ShardedCollectionOptions so;
  so.collection = o;
  so.sharding = ShardingKind::kRowModulo;
  return so;
}

// Steps [s0, s1) of the global random_bags batches of `bags` bags (1-3 ids per bag and feature),
// this rank's slice.
Status train(ShardedEmbeddingCollection& sc, const CollectionOptions& o, int s0, int s1, int64_t bags = kBags) {
  const int p = sc.communicator()->size(), r = sc.communicator()->rank();
  const int64_t b0 = bags * r / p, b1 = bags * (r + 1) / p, ldo = sc.pooled_dim();
  for (int s = s0; s < s1; ++s) {
    const testing_util::OwnedBatch mine = test_util::random_bags(s, o, bags, 77).slice(b0, b1);
    const std::vector<float> grads = test_util::normal_grads(500 + static_cast<uint64_t>(s), bags * ldo);
    std::vector<float> pooled(static_cast<size_t>((b1 - b0) * ldo));
    LEANEMB_RETURN_IF_ERROR(sc.forward(mine.view(), pooled));
    LEANEMB_RETURN_IF_ERROR(
        sc.backward_update(mine.view(), std::span<const float>(grads).subspan(static_cast<size_t>(b0 * ldo), pooled.size())).status());
  }
  return Status();
}

TablesSaveOptions incremental(int full_every = 8, double fraction = 0.5, int keep_last = 0, ckpt::Env* env = nullptr) {
  TablesSaveOptions so;
  so.env = env;
  so.keep_last = keep_last;
  so.incremental.enabled = true;
  so.incremental.full_every = full_every;
  so.incremental.max_chain_fraction = fraction;
  so.chunk_rows = 100;  // several chunks per table
  return so;
}

std::string step_dir(const std::string& out, int64_t step) { return ckpt::join_path(ckpt::checkpoints_dir(out), ckpt::step_dir_name(step)); }

// Rank r's shard checkpoint `step` of a chained out_dir.
fs::path shard_dir(const std::string& out, int r, int64_t step) {
  return fs::path(out) / ("shards/rank-" + std::to_string(r) + "-of-2") / "checkpoints" / ckpt::step_dir_name(step);
}

uint64_t dir_bytes(const fs::path& d) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(d))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

// The steps of rank r's shard checkpoints in a chained out_dir.
std::vector<int64_t> shard_steps(const std::string& out, int r) {
  std::vector<int64_t> steps;
  for (const auto& e : fs::directory_iterator(fs::path(out) / ("shards/rank-" + std::to_string(r) + "-of-2") / "checkpoints"))
    if (auto s = ckpt::parse_step_dir_name(e.path().filename().string())) steps.push_back(*s);
  std::sort(steps.begin(), steps.end());
  return steps;
}

// This rank's changed rows and their fat-row bytes, summed over the ranks.
Result<std::pair<int64_t, int64_t>> changed(ShardedEmbeddingCollection& sc) {
  std::vector<int64_t> v(2, 0);
  for (int t = 0; t < sc.num_tables(); ++t) {
    v[0] += sc.local().num_changed_rows(t);
    v[1] += sc.local().num_changed_rows(t) * static_cast<int64_t>(sc.local().layout(t).stride_bytes);
  }
  LEANEMB_RETURN_IF_ERROR(sc.communicator()->all_reduce(std::span<int64_t>(v), ReduceOp::kSum));
  return std::make_pair(v[0], v[1]);
}

ckpt::FindOptions quiet(bool verify_blocks = true, ckpt::Env* env = nullptr) {
  ckpt::FindOptions f;
  f.warn_to_stderr = false;
  f.verify_blocks = verify_blocks;
  f.env = env;
  return f;
}

// The digest of `dir` loaded into a one-process collection of options `o` (P = 2 -> 1).
std::string one_process_digest(const std::string& dir, const CollectionOptions& o) {
  auto c = std::move(EmbeddingCollection::create(o)).value();
  auto st = c->load(dir, {});
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return collection_digest(*c).value();
}

class ShardedIncrementalTest : public testing::TestWithParam<bool> {};  // param: table a cached over a file

// Table a of 20000 rows (cached: 512 slots a rank, so rows are evicted to the store between
// checkpoints), 64 bags a step (a few hundred rows changed between checkpoints, so that
// the rows outweigh a checkpoint's fixed bytes). Full at step 2, links at 4 and 6: each link
// writes at most 1.2 x its changed rows' bytes plus a full shard's metadata; the chain of
// step 6 has the digest of the live rows and of a full save of the same state; it loads at P = 2
// (training then continues exactly as the writer) and into one process (P = 2 -> 1) to that
// digest; verify counts its links.
TEST_P(ShardedIncrementalTest, AChainRestoresExactlyTheRowsAFullCheckpointWould) {
  TempDir dir, store, store2, store3;
  constexpr int64_t kRowsA = 20000, kManyBags = 64, kSlots = 1024;  // 512 slots a rank: rows of a few steps
  const CollectionOptions o = options(GetParam() ? store.path : "", kRowsA, kSlots);
  const std::string out = dir.sub("run"), full = dir.sub("full");
  std::vector<std::string> live(kP), reloaded(kP), trained(kP), trained_reloaded(kP);
  std::mutex mu;
  std::vector<int64_t> parents;
  expect_all_ok(run_world(kP, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o), &comm));
    LEANEMB_RETURN_IF_ERROR(sc->local().track_changes());
    uint64_t full_meta = 0;  // the full shard's bytes beyond its rows (MANIFEST, info, block headers)
    for (int k = 0; k < 3; ++k) {
      LEANEMB_RETURN_IF_ERROR(train(*sc, o, 2 * k, 2 * k + 2, kManyBags));
      LEANEMB_ASSIGN_OR_RETURN(const auto ch, changed(*sc));
      int64_t local_bytes = 0, all_bytes = 0;
      for (int t = 0; t < sc->num_tables(); ++t) {
        const auto stride = static_cast<int64_t>(sc->local().layout(t).stride_bytes);
        local_bytes += sc->local().num_changed_rows(t) * stride;
        all_bytes += sc->plan().local_num_rows(t, comm.rank()) * stride;
      }
      LEANEMB_ASSIGN_OR_RETURN(TablesSaveInfo info, sc->save(out, 2 * k + 2, {}, incremental()));
      if (comm.rank() == 0) {
        std::lock_guard<std::mutex> l(mu);
        parents.push_back(info.parent_step);
      }
      const uint64_t bytes = dir_bytes(shard_dir(out, comm.rank(), 2 * k + 2));
      if (k == 0) {
        full_meta = bytes - static_cast<uint64_t>(all_bytes);
        continue;
      }
      if (ch.first < 200 || ch.first > kRowsA / 10) return mismatch("changed rows " + std::to_string(ch.first));
      if (info.rows_written != ch.first || info.entry_bytes != static_cast<uint64_t>(ch.second))
        return mismatch("rows_written " + std::to_string(info.rows_written) + " of " + std::to_string(ch.first) + " changed");
      if (static_cast<double>(bytes) > 1.2 * static_cast<double>(local_bytes) + static_cast<double>(full_meta))
        return mismatch("link of " + std::to_string(local_bytes) + " row bytes wrote " + std::to_string(bytes) + " bytes (a full shard's metadata: " +
                        std::to_string(full_meta) + ")");
      for (int t = 0; t < sc->num_tables(); ++t)
        if (sc->local().num_changed_rows(t) != 0) return mismatch("changes not reset after the commit");
    }
    LEANEMB_ASSIGN_OR_RETURN(live[static_cast<size_t>(comm.rank())], sharded_collection_digest(*sc));
    TablesSaveOptions plain;  // the same state in full
    LEANEMB_RETURN_IF_ERROR(sc->save(full, 6, {}, plain).status());
    // Loaded at P = 2 into a fresh collection; two more steps on both.
    CollectionOptions o2 = options(GetParam() ? store2.path : "", kRowsA, kSlots);
    LEANEMB_ASSIGN_OR_RETURN(auto d, ShardedEmbeddingCollection::create(sharded(o2), &comm));
    LEANEMB_RETURN_IF_ERROR(d->load(step_dir(out, 6), {}).status());
    LEANEMB_ASSIGN_OR_RETURN(reloaded[static_cast<size_t>(comm.rank())], sharded_collection_digest(*d));
    LEANEMB_RETURN_IF_ERROR(train(*sc, o, 6, 8, kManyBags));
    LEANEMB_RETURN_IF_ERROR(train(*d, o2, 6, 8, kManyBags));
    LEANEMB_ASSIGN_OR_RETURN(trained[static_cast<size_t>(comm.rank())], sharded_collection_digest(*sc));
    LEANEMB_ASSIGN_OR_RETURN(trained_reloaded[static_cast<size_t>(comm.rank())], sharded_collection_digest(*d));
    return Status();
  }));
  EXPECT_EQ(parents, (std::vector<int64_t>{-1, 2, 4}));
  const std::string want = live[0];
  EXPECT_EQ(live[1], want);
  EXPECT_EQ(sharded_checkpoint_digest(step_dir(out, 6)).value(), want);
  EXPECT_EQ(sharded_checkpoint_digest(step_dir(full, 6)).value(), want);
  EXPECT_EQ(reloaded[0], want);
  EXPECT_EQ(one_process_digest(step_dir(out, 6), options(GetParam() ? store3.path : "", kRowsA, kSlots)), want);
  EXPECT_EQ(trained_reloaded[0], trained[0]);
  EXPECT_NE(trained[0], want);
  auto rep = verify_tables_checkpoint(step_dir(out, 6));
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->num_links, 3u);
  EXPECT_EQ(rep->base_step, 2);
  EXPECT_EQ(rep->num_shards, 2u);
  auto latest = find_latest_tables_checkpoint(out, quiet());
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  EXPECT_EQ(latest->ref.step, 6);
}

INSTANTIATE_TEST_SUITE_P(Residency, ShardedIncrementalTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& i) { return i.param ? "cached_file" : "resident"; });

// Saves steps 1..n (one training step each) with `so` at P = 2; returns the live digests.
std::vector<std::string> save_steps(const std::string& out, int n, const TablesSaveOptions& so, std::vector<int64_t>* parents = nullptr,
                                    const std::function<Status(int, int64_t)>& after = nullptr) {
  std::vector<std::string> digests(static_cast<size_t>(n + 1));
  const CollectionOptions o = options();
  expect_all_ok(run_world(kP, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o), &comm));
    LEANEMB_RETURN_IF_ERROR(sc->local().track_changes());
    for (int s = 1; s <= n; ++s) {
      LEANEMB_RETURN_IF_ERROR(train(*sc, o, s - 1, s));
      LEANEMB_ASSIGN_OR_RETURN(const std::string d, sharded_collection_digest(*sc));
      LEANEMB_ASSIGN_OR_RETURN(TablesSaveInfo info, sc->save(out, s, {}, so));
      if (comm.rank() == 0) {
        digests[static_cast<size_t>(s)] = d;
        if (parents) parents->push_back(info.parent_step);
      }
      if (after) LEANEMB_RETURN_IF_ERROR(after(comm.rank(), s));
    }
    return Status();
  }));
  return digests;
}

void flip_byte(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".dat") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(e.file_size() / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(e.file_size() / 2));
    f.write(&c, 1);
    return;
  }
  FAIL() << "no data file in " << dir;
}

// A corrupt link (a flipped byte in rank 1's link of step 2) makes steps 2 and 3 incomplete:
// verify names the shard, and the newest complete checkpoint is step 1. A missing link (rank 0's
// step 2, gone) is seen without reading the blocks too.
TEST(ShardedIncrementalFaults, ACorruptOrMissingLinkFallsBackToTheNewestCompleteCheckpoint) {
  for (bool remove : {false, true}) {
    SCOPED_TRACE(remove ? "missing link" : "corrupt link");
    TempDir dir;
    const std::string out = dir.sub("run");
    std::vector<int64_t> parents;
    const auto digests = save_steps(out, 3, incremental(), &parents);
    ASSERT_EQ(parents, (std::vector<int64_t>{-1, 1, 2}));
    ASSERT_TRUE(find_latest_tables_checkpoint(out, quiet()).ok());
    if (remove) {
      fs::remove_all(shard_dir(out, 0, 2));
    } else {
      flip_byte(shard_dir(out, 1, 2));
    }
    for (int64_t s : {2, 3}) {
      auto v = verify_tables_checkpoint(step_dir(out, s));
      EXPECT_FALSE(v.ok()) << "step " << s;
      EXPECT_NE(v.status().message().find(remove ? "shard 0" : "shard 1"), std::string::npos) << v.status().to_string();
    }
    for (bool blocks : {true, false}) {
      if (!remove && !blocks) continue;  // a flipped byte is found by reading the blocks
      auto latest = find_latest_tables_checkpoint(out, quiet(blocks));
      ASSERT_TRUE(latest.ok()) << latest.status().to_string();
      EXPECT_EQ(latest->ref.step, 1);
      EXPECT_EQ(latest->skipped.size(), 2u);
    }
    EXPECT_EQ(sharded_checkpoint_digest(step_dir(out, 1)).value(), digests[1]);
    EXPECT_FALSE(sharded_checkpoint_digest(step_dir(out, 3)).ok());
    auto c = std::move(EmbeddingCollection::create(options())).value();
    EXPECT_FALSE(c->load(step_dir(out, 3), {}).ok());
  }
}

// keep_last = 2 with a new base every third checkpoint: a kept link keeps its parents and base
// in every rank's shard directory; once no kept checkpoint needs a chain, its shard checkpoints go.
TEST(ShardedIncrementalFaults, KeepLastKeepsEveryShardCheckpointAKeptOneNeeds) {
  TempDir dir;
  const std::string out = dir.sub("run");
  std::vector<int64_t> parents;
  std::vector<std::vector<int64_t>> seen;  // rank 0's shard steps after each save
  std::mutex mu;
  const auto digests = save_steps(out, 5, incremental(3, 0.5, 2), &parents, [&](int rank, int64_t) {
    if (rank == 0) {
      std::lock_guard<std::mutex> l(mu);
      seen.push_back(shard_steps(out, 0));
    }
    return Status();
  });
  EXPECT_EQ(parents, (std::vector<int64_t>{-1, 1, 2, -1, 4}));
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[2], (std::vector<int64_t>{1, 2, 3}));     // globals 2, 3: the chain from 1
  EXPECT_EQ(seen[3], (std::vector<int64_t>{1, 2, 3, 4}));  // globals 3, 4
  EXPECT_EQ(seen[4], (std::vector<int64_t>{4, 5}));        // globals 4, 5
  EXPECT_EQ(shard_steps(out, 1), seen[4]);
  for (int64_t s : {4, 5}) {
    EXPECT_TRUE(verify_tables_checkpoint(step_dir(out, s)).ok()) << s;
    EXPECT_EQ(sharded_checkpoint_digest(step_dir(out, s)).value(), digests[static_cast<size_t>(s)]);
  }
  EXPECT_FALSE(fs::exists(step_dir(out, 3)));
}

// The ranks agree on base or link: a rank whose chain cannot grow (its change base is not a
// shard checkpoint of its directory) makes every rank write a full shard.
TEST(ShardedIncrementalFaults, OneRankWithoutAChainMakesEveryShardFull) {
  TempDir dir;
  const std::string out = dir.sub("run");
  std::vector<int64_t> parents;
  const auto digests = save_steps(out, 3, incremental(), &parents);
  ASSERT_EQ(parents, (std::vector<int64_t>{-1, 1, 2}));
  // The same run, but rank 1 forgets its base after step 1.
  TempDir dir2;
  const std::string out2 = dir2.sub("run");
  std::vector<int64_t> parents2;
  const CollectionOptions o = options();
  expect_all_ok(run_world(kP, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o), &comm));
    LEANEMB_RETURN_IF_ERROR(sc->local().track_changes());
    for (int s = 1; s <= 3; ++s) {
      LEANEMB_RETURN_IF_ERROR(train(*sc, o, s - 1, s));
      if (s == 2 && comm.rank() == 1) sc->local().reset_changes({});
      LEANEMB_ASSIGN_OR_RETURN(TablesSaveInfo info, sc->save(out2, s, {}, incremental()));
      if (comm.rank() == 0) parents2.push_back(info.parent_step);
    }
    return Status();
  }));
  EXPECT_EQ(parents2, (std::vector<int64_t>{-1, -1, 2}));
  EXPECT_EQ(sharded_checkpoint_digest(step_dir(out2, 3)).value(), digests[3]);
  const std::pair<int64_t, size_t> cases[] = {{2, 1}, {3, 2}};
  for (const auto& [s, links] : cases) {
    auto rep = verify_tables_checkpoint(step_dir(out2, s));
    ASSERT_TRUE(rep.ok()) << rep.status().to_string();
    EXPECT_EQ(rep->num_links, links) << "step " << s;
  }
}

// Shards of full checkpoints (shards/step-<N>/rank-<r>-of-<P>, as every checkpoint before shard
// chains) stay readable beside chains: a run saves step 1 in full, then steps 2 and 3
// incrementally (a new base in the rank directories, then a link); every checkpoint loads to
// its digest and the old-layout one is kept while it is kept.
TEST(ShardedIncrementalFaults, OldLayoutShardsStayReadableBesideChains) {
  TempDir dir;
  const std::string out = dir.sub("run");
  std::vector<std::string> digests(4);
  std::vector<int64_t> parents;
  const CollectionOptions o = options();
  expect_all_ok(run_world(kP, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o), &comm));
    LEANEMB_RETURN_IF_ERROR(sc->local().track_changes());
    for (int s = 1; s <= 3; ++s) {
      LEANEMB_RETURN_IF_ERROR(train(*sc, o, s - 1, s));
      LEANEMB_ASSIGN_OR_RETURN(const std::string d, sharded_collection_digest(*sc));
      TablesSaveOptions so = s == 1 ? TablesSaveOptions{} : incremental();
      so.keep_last = 0;
      LEANEMB_ASSIGN_OR_RETURN(TablesSaveInfo info, sc->save(out, s, {}, so));
      if (comm.rank() == 0) {
        digests[static_cast<size_t>(s)] = d;
        parents.push_back(info.parent_step);
      }
    }
    return Status();
  }));
  EXPECT_EQ(parents, (std::vector<int64_t>{-1, -1, 2}));
  EXPECT_TRUE(fs::exists(fs::path(out) / "shards/step-0000000001/rank-1-of-2/checkpoints/step-0000000001/MANIFEST"));
  EXPECT_TRUE(fs::exists(shard_dir(out, 1, 3)));
  for (int64_t s : {1, 2, 3}) {
    EXPECT_TRUE(verify_tables_checkpoint(step_dir(out, s)).ok()) << s;
    EXPECT_EQ(sharded_checkpoint_digest(step_dir(out, s)).value(), digests[static_cast<size_t>(s)]) << s;
    EXPECT_EQ(one_process_digest(step_dir(out, s), o), digests[static_cast<size_t>(s)]) << s;
  }
}

// A one-process collection that loads a sharded chain (P = 2 -> 1, `--resume` at one process)
// and saves incrementally into the same out_dir writes a full plain checkpoint: a plain link
// cannot extend a sharded checkpoint (it would not load). It then extends its own chain.
TEST(ShardedIncrementalFaults, AOneProcessCollectionLoadingAShardedChainSavesInFull) {
  TempDir dir;
  const std::string out = dir.sub("run");
  const auto digests = save_steps(out, 2, incremental());
  const CollectionOptions o = options();
  auto c = std::move(EmbeddingCollection::create(o)).value();
  ASSERT_TRUE(c->track_changes().ok());
  ASSERT_TRUE(c->load(step_dir(out, 2), {}).ok());
  EXPECT_EQ(collection_digest(*c).value(), digests[2]);
  test_util::train_random_bags(*c, o, 2, 3, kBags, 77, 500);
  for (int64_t s : {3, 4}) {
    auto info = c->save(out, s, {}, incremental());
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    EXPECT_EQ(info->parent_step, s == 3 ? -1 : 3) << "step " << s;
    auto d = std::move(EmbeddingCollection::create(o)).value();
    TablesLoadOptions lo;
    lo.collection_step = c->step();
    auto loaded = d->load(step_dir(out, s), lo);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(collection_digest(*d).value(), collection_digest(*c).value()) << "step " << s;
  }
}

// Trains 2 ranks, saves step 1 (a full base), trains, saves step 2 (a link) through `env`; with
// fault_at, the env "crashes" at that many mutating calls into the second save. Returns the
// calls of the second save; `parent`: its parent step (no fault).
uint64_t save_twice(ckpt::FaultInjectionEnv& env, int64_t fault_at, int64_t* parent = nullptr,
                    std::vector<std::string>* digests = nullptr) {
  uint64_t ops = 0;
  const CollectionOptions o = options();
  expect_all_ok(run_world(kP, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(sharded(o), &comm));
    LEANEMB_RETURN_IF_ERROR(sc->local().track_changes());
    const TablesSaveOptions so = incremental(8, 0.5, 1, &env);
    LEANEMB_RETURN_IF_ERROR(train(*sc, o, 0, 1));
    LEANEMB_ASSIGN_OR_RETURN(const std::string d1, sharded_collection_digest(*sc));
    LEANEMB_RETURN_IF_ERROR(sc->save("/out", 1, {}, so).status());
    LEANEMB_RETURN_IF_ERROR(train(*sc, o, 1, 2));
    LEANEMB_ASSIGN_OR_RETURN(const std::string d2, sharded_collection_digest(*sc));
    LEANEMB_RETURN_IF_ERROR(comm.barrier());
    const uint64_t before = env.num_mutating_ops();
    if (comm.rank() == 0 && fault_at >= 0) env.set_fault(before + static_cast<uint64_t>(fault_at), ckpt::FaultKind::kCrash);
    LEANEMB_RETURN_IF_ERROR(comm.barrier());
    auto saved = sc->save("/out", 2, {}, so);
    if (fault_at < 0 && !saved.ok()) return mismatch("save without a fault failed: " + saved.status().to_string());
    LEANEMB_RETURN_IF_ERROR(comm.barrier());
    if (comm.rank() == 0) {
      ops = env.num_mutating_ops() - before;
      if (parent) *parent = saved.ok() ? saved->parent_step : -2;
      if (digests) *digests = {d1, d2};
    }
    return Status();
  }));
  return ops;
}

// A crash at every mutating file-system call of a sharded link's save, under both crash models,
// leaves the previous checkpoint (the full base) or the new link as the newest complete one,
// with its exact rows.
TEST(ShardedIncrementalFaults, ACrashAnywhereInALinkedSaveLeavesTheOldOrTheNewCheckpoint) {
  uint64_t ops = 0;
  int64_t parent = -3;
  std::vector<std::string> digests;
  {
    ckpt::FaultInjectionEnv env;
    ops = save_twice(env, -1, &parent, &digests);
    ASSERT_GT(ops, 10u);
  }
  ASSERT_EQ(parent, 1) << "step 2 is a link over step 1";
  ASSERT_EQ(digests.size(), 2u);
  int saw_old = 0, saw_new = 0;
  for (bool keep_entries : {false, true}) {
    for (uint64_t n = 0; n <= ops; ++n) {
      SCOPED_TRACE("crash at call " + std::to_string(n) + (keep_entries ? " (entries kept)" : ""));
      ckpt::FaultInjectionEnv env;
      save_twice(env, static_cast<int64_t>(n));
      env.simulate_crash({keep_entries});
      auto latest = find_latest_complete_sharded("/out", quiet(true, &env));
      ASSERT_TRUE(latest.ok()) << latest.status().to_string();
      const std::string d = sharded_checkpoint_digest(latest->ref.path, &env).value();
      EXPECT_EQ(d, latest->ref.step == 1 ? digests[0] : digests[1]);
      (latest->ref.step == 1 ? saw_old : saw_new) += 1;
    }
  }
  EXPECT_GT(saw_old, 0);
  EXPECT_GT(saw_new, 0);
}

}  // namespace
}  // namespace leanemb::dist
