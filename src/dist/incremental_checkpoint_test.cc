// Incremental checkpoints (IncrementalOptions, docs/formats/checkpoint.md "Chains"): a chain of
// changed-row checkpoints restores exactly the rows of the collection that wrote it (resident
// and cached over a file store), writes only the changed rows, starts a new base when told,
// is incomplete without every link (a missing, replaced or corrupt parent makes --resume fall
// back), keeps the links a kept checkpoint needs, and survives a crash anywhere in a save.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "ckpt/fault_injection_env.h"
#include "ckpt/format.h"
#include "table/delta_rows.h"
#include "dist/dist_testing.h"
#include "dist/sharded_checkpoint.h"
#include "table/owned_batch_testing.h"

namespace leanemb::dist {
namespace {

namespace fs = std::filesystem;
using test_util::TempDir;
using testing_util::OwnedBatch;
using table_ckpt::decode_delta_rows;
using table_ckpt::encode_delta_rows;

constexpr int64_t kBags = 8;

// Table a (1000 rows) and b (dist_testing.h); `file_dir` non-empty: table a is cached (64 slots)
// over a file store there.
CollectionOptions options(const std::string& file_dir = "") { return test_util::two_table_options(1000, 5, file_dir, 64); }

void train(EmbeddingCollection& c, const CollectionOptions& o, int s0, int s1) {
  test_util::train_random_bags(c, o, s0, s1, kBags, 77, 500);
}

TablesSaveOptions incremental(int full_every = 8, double fraction = 0.5, ckpt::Env* env = nullptr) {
  TablesSaveOptions so;
  so.env = env;
  so.keep_last = 0;
  so.incremental.enabled = true;
  so.incremental.full_every = full_every;
  so.incremental.max_chain_fraction = fraction;
  so.chunk_rows = 100;  // several chunks per table
  return so;
}

std::string step_dir(const std::string& out, int64_t step) {
  return ckpt::join_path(ckpt::checkpoints_dir(out), ckpt::step_dir_name(step));
}

// The digest of `dir` (its chain) loaded into a fresh collection of options `o` at collection step `step`.
std::string loaded_digest(const std::string& dir, int64_t step, const CollectionOptions& o, ckpt::Env* env = nullptr) {
  auto c = std::move(EmbeddingCollection::create(o)).value();
  TablesLoadOptions lo;
  lo.env = env;
  lo.collection_step = step;
  auto st = c->load(dir, lo);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return collection_digest(*c).value();
}

class IncrementalCheckpointTest : public testing::TestWithParam<bool> {};  // param: table a cached over a file

// Full at step 2, changed rows at 4 and 6: the chain of step 6 loads the writer's rows exactly
// (the same digest as a full save of the same state), and each increment holds just its
// changed rows: at most 1.2 x (changed rows x row bytes), their row numbers included.
TEST_P(IncrementalCheckpointTest, AChainRestoresExactlyTheRowsAFullCheckpointWould) {
  TempDir dir, store, store2;
  const CollectionOptions o = options(GetParam() ? store.path : "");
  auto c = std::move(EmbeddingCollection::create(o)).value();
  ASSERT_TRUE(c->track_changes().ok());
  const std::string out = dir.path + "/run";
  int64_t parents[3] = {};
  for (int k = 0; k < 3; ++k) {
    train(*c, o, 2 * k, 2 * k + 2);
    int64_t changed = 0, row_bytes = 0;
    for (int t = 0; t < c->num_tables(); ++t) {
      changed += c->num_changed_rows(t);
      row_bytes += c->num_changed_rows(t) * static_cast<int64_t>(c->layout(t).stride_bytes);
    }
    auto info = c->save(out, 2 * k + 2, {}, incremental());
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    parents[k] = info->parent_step;
    if (k > 0) {
      EXPECT_GT(changed, 0);
      EXPECT_LT(changed, 200);
      EXPECT_EQ(info->rows_written, changed);
      EXPECT_LE(static_cast<double>(info->entry_bytes), 1.2 * static_cast<double>(row_bytes));
      EXPECT_GT(info->entry_bytes, static_cast<uint64_t>(row_bytes));
    }
    for (int t = 0; t < c->num_tables(); ++t) EXPECT_EQ(c->num_changed_rows(t), 0) << "reset after the commit";
  }
  EXPECT_EQ(parents[0], -1);
  EXPECT_EQ(parents[1], 2);
  EXPECT_EQ(parents[2], 4);
  const std::string want = collection_digest(*c).value();
  EXPECT_EQ(loaded_digest(step_dir(out, 6), 6, options(GetParam() ? store2.path : "")), want);
  // The same state saved in full loads to the same digest.
  TablesSaveOptions full;
  ASSERT_TRUE(c->save(dir.path + "/full", 6, {}, full).ok());
  EXPECT_EQ(loaded_digest(step_dir(dir.path + "/full", 6), 6, options(GetParam() ? store2.path : "")), want);
  auto rep = verify_tables_checkpoint(step_dir(out, 6));
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->num_links, 3u);
  EXPECT_EQ(rep->base_step, 2);
  // Training continues from the loaded chain bit for bit.
  auto d = std::move(EmbeddingCollection::create(options(GetParam() ? store2.path : ""))).value();
  TablesLoadOptions lo;
  lo.collection_step = c->step();
  ASSERT_TRUE(d->load(step_dir(out, 6), lo).ok());
  train(*c, o, 6, 8);
  train(*d, o, 6, 8);
  EXPECT_EQ(collection_digest(*d).value(), collection_digest(*c).value());
}

INSTANTIATE_TEST_SUITE_P(Residency, IncrementalCheckpointTest, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& i) { return i.param ? "cached_file" : "resident"; });

// A collection that tracks its changes from create writes its first checkpoint as a sparse base:
// only the rows changed since the initial rows (plus their row numbers), which loads to the same
// rows as a full checkpoint, into a fresh collection or one whose rows changed since (they are
// reset to their initial bytes first), and refuses a collection of other initial rows. A new
// base over a sparse chain is sparse again and holds every row the chain held.
TEST_P(IncrementalCheckpointTest, ASparseBaseHoldsOnlyTheChangedRowsAndLoadsLikeAFullOne) {
  TempDir dir, store, store2, store3;
  const CollectionOptions o = options(GetParam() ? store.path : "");
  auto c = std::move(EmbeddingCollection::create(o)).value();
  ASSERT_TRUE(c->track_changes().ok());
  EXPECT_TRUE(c->change_base().initial);
  train(*c, o, 0, 2);
  int64_t changed = 0, row_bytes = 0, all_bytes = 0;
  for (int t = 0; t < c->num_tables(); ++t) {
    EXPECT_FALSE(c->has_initial_rows(t));
    changed += c->num_changed_rows(t);
    row_bytes += c->num_changed_rows(t) * static_cast<int64_t>(c->layout(t).stride_bytes);
    all_bytes += o.tables[static_cast<size_t>(t)].num_rows * static_cast<int64_t>(c->layout(t).stride_bytes);
  }
  const std::string out = dir.path + "/run";
  auto info = c->save(out, 2, {}, incremental(2));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_TRUE(info->sparse_base);
  EXPECT_EQ(info->parent_step, -1);
  EXPECT_EQ(info->rows_written, changed);
  EXPECT_LE(static_cast<double>(info->entry_bytes), 1.2 * static_cast<double>(row_bytes));
  EXPECT_LT(info->entry_bytes * 5, static_cast<uint64_t>(all_bytes)) << "a few dozen of 1300 rows";
  auto rep = verify_tables_checkpoint(step_dir(out, 2));
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_TRUE(rep->sparse_base);
  const std::string want2 = collection_digest(*c).value();
  EXPECT_EQ(loaded_digest(step_dir(out, 2), 2, options(GetParam() ? store2.path : "")), want2);
  // Into a collection whose rows changed since create (other steps): reset, then loaded.
  {
    const CollectionOptions o3 = options(GetParam() ? store3.path : "");
    auto d = std::move(EmbeddingCollection::create(o3)).value();
    train(*d, o3, 10, 13);
    EXPECT_FALSE(d->has_initial_rows(0));
    TablesLoadOptions lo;
    lo.collection_step = 2;
    auto st = d->load(step_dir(out, 2), lo);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_EQ(collection_digest(*d).value(), want2);
  }
  // Other initial rows (another seed): refused, naming them.
  {
    CollectionOptions other = options();
    other.seed = 6;
    auto d = std::move(EmbeddingCollection::create(other)).value();
    auto st = d->load(step_dir(out, 2), {});
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.status().message().find("other initial rows"), std::string::npos) << st.status().to_string();
  }
  // full_every = 2: step 4 extends step 2, step 6 is a new sparse base holding the rows of both
  // and its own changes.
  train(*c, o, 2, 4);
  info = c->save(out, 4, {}, incremental(2));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->parent_step, 2);
  EXPECT_FALSE(info->sparse_base);
  train(*c, o, 4, 6);
  info = c->save(out, 6, {}, incremental(2));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->parent_step, -1);
  EXPECT_TRUE(info->sparse_base);
  EXPECT_GT(info->rows_written, changed);
  fs::remove_all(step_dir(out, 2));
  fs::remove_all(step_dir(out, 4));
  EXPECT_EQ(loaded_digest(step_dir(out, 6), 6, options(GetParam() ? store2.path : "")), collection_digest(*c).value());
  // A collection that changed before tracking began writes full checkpoints.
  auto late = std::move(EmbeddingCollection::create(options())).value();
  train(*late, o, 0, 1);
  ASSERT_TRUE(late->track_changes().ok());
  EXPECT_FALSE(late->change_base().initial);
  info = late->save(dir.path + "/late", 1, {}, incremental());
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->sparse_base);
  EXPECT_EQ(info->rows_written, 1300);
}

// full_every = 2: every second checkpoint is a new base; a tiny max_chain_fraction: all full;
// a collection that does not track changes, or whose base is another run's: full.
TEST(IncrementalCheckpointPolicyTest, NewBasesEveryFullEveryOrPastTheFraction) {
  TempDir dir;
  const CollectionOptions o = options();
  auto c = std::move(EmbeddingCollection::create(o)).value();
  auto parent_of = [&](const std::string& out, int64_t step, const TablesSaveOptions& so) {
    auto info = c->save(out, step, {}, so);
    EXPECT_TRUE(info.ok()) << info.status().to_string();
    return info.ok() ? info->parent_step : -2;
  };
  EXPECT_EQ(parent_of(dir.path + "/untracked", 1, incremental()), -1);
  EXPECT_EQ(parent_of(dir.path + "/untracked", 2, incremental()), -1) << "no tracking: always full";
  ASSERT_TRUE(c->track_changes().ok());
  const std::string a = dir.path + "/a";
  std::vector<int64_t> got;
  for (int s = 1; s <= 5; ++s) {
    train(*c, o, s, s + 1);
    got.push_back(parent_of(a, s, incremental(2)));
  }
  EXPECT_EQ(got, (std::vector<int64_t>{-1, 1, -1, 3, -1}));
  const std::string b = dir.path + "/b";
  for (int s = 1; s <= 3; ++s) {
    train(*c, o, s, s + 1);
    EXPECT_EQ(parent_of(b, s, incremental(8, 1e-6)), -1) << "past the fraction at step " << s;
  }
  // The change base is b's step 3: a checkpoint of another out_dir that has a step 3 of its own
  // (another id) is full.
  train(*c, o, 6, 7);
  EXPECT_EQ(parent_of(a, 7, incremental()), -1);
}

// A chain is complete only with every link: a missing, replaced or corrupt parent makes the
// newest checkpoint incomplete, and find_latest_tables_checkpoint falls back to the newest
// complete chain.
TEST(IncrementalCheckpointPolicyTest, AnIncompleteChainIsSkipped) {
  TempDir dir;
  const CollectionOptions o = options();
  auto write_chain = [&](const std::string& out) {
    auto c = std::move(EmbeddingCollection::create(o)).value();
    EXPECT_TRUE(c->track_changes().ok());
    for (int s = 2; s <= 6; s += 2) {
      train(*c, o, s - 2, s);
      EXPECT_TRUE(c->save(out, s, {}, incremental()).ok());
    }
  };
  ckpt::FindOptions quiet;
  quiet.warn_to_stderr = false;
  const std::string missing = dir.path + "/missing", replaced = dir.path + "/replaced", rotten = dir.path + "/rotten";
  for (const std::string& out : {missing, replaced, rotten}) write_chain(out);
  fs::remove_all(step_dir(missing, 4));
  auto l1 = find_latest_tables_checkpoint(missing, quiet);
  ASSERT_TRUE(l1.ok());
  EXPECT_EQ(l1->ref.step, 2);
  EXPECT_EQ(ckpt::checkpoint_chain(step_dir(missing, 6)).status().code(), StatusCode::kNotFound);
  // Step 4 replaced by another run's full checkpoint of step 4: step 6's recorded id differs.
  {
    auto other = std::move(EmbeddingCollection::create(o)).value();
    const std::string tmp = dir.path + "/other";
    ASSERT_TRUE(other->save(tmp, 4, {}, {}).ok());
    fs::remove_all(step_dir(replaced, 4));
    fs::rename(step_dir(tmp, 4), step_dir(replaced, 4));
  }
  auto chain = ckpt::checkpoint_chain(step_dir(replaced, 6));
  EXPECT_EQ(chain.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(chain.status().message().find("replaced by another checkpoint"), std::string::npos) << chain.status().to_string();
  auto l2 = find_latest_tables_checkpoint(replaced, quiet);
  ASSERT_TRUE(l2.ok());
  EXPECT_EQ(l2->ref.step, 4);
  // A flipped byte in step 4's data: steps 6 and 4 are skipped.
  {
    const std::string data = step_dir(rotten, 4) + "/data-00000.dat";
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('\x5a');
  }
  auto l3 = find_latest_tables_checkpoint(rotten, quiet);
  ASSERT_TRUE(l3.ok());
  EXPECT_EQ(l3->ref.step, 2);
  EXPECT_FALSE(verify_tables_checkpoint(step_dir(rotten, 6)).ok());
}

// keep_last = 1 keeps the links the newest checkpoint needs, and removes them once a new base
// no longer needs them.
TEST(IncrementalCheckpointPolicyTest, KeepLastKeepsTheChainOfAKeptCheckpoint) {
  TempDir dir;
  const CollectionOptions o = options();
  auto c = std::move(EmbeddingCollection::create(o)).value();
  ASSERT_TRUE(c->track_changes().ok());
  const std::string out = dir.path + "/run";
  TablesSaveOptions so = incremental(3);
  so.keep_last = 1;
  auto steps = [&] {
    std::vector<int64_t> s;
    const std::vector<ckpt::CheckpointRef> refs = ckpt::list_checkpoints(out).value();
    for (const auto& r : refs) s.push_back(r.step);
    return s;
  };
  for (int s = 1; s <= 3; ++s) {
    train(*c, o, s, s + 1);
    ASSERT_TRUE(c->save(out, s, {}, so).ok());
  }
  EXPECT_EQ(steps(), (std::vector<int64_t>{1, 2, 3}));
  train(*c, o, 4, 5);
  auto info = c->save(out, 4, {}, so);  // the chain's 4th link: a new base
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->parent_step, -1);
  EXPECT_EQ(steps(), (std::vector<int64_t>{4}));
}

// A crash at any file-system call of an incremental save leaves the old chain (step 2's rows)
// or the new one (step 4's), never a checkpoint that loads other rows.
TEST(IncrementalCheckpointPolicyTest, ACrashAnywhereInAnIncrementalSaveLeavesTheOldOrTheNewChain) {
  const CollectionOptions o = options();
  std::string d2, d4;
  auto run = [&](ckpt::FaultInjectionEnv& env, int64_t fault_at) -> uint64_t {
    auto c = std::move(EmbeddingCollection::create(o)).value();
    EXPECT_TRUE(c->track_changes().ok());
    train(*c, o, 0, 2);
    EXPECT_TRUE(c->save("/out", 2, {}, incremental(8, 0.5, &env)).ok());
    d2 = collection_digest(*c).value();
    train(*c, o, 2, 4);
    d4 = collection_digest(*c).value();
    const uint64_t before = env.num_mutating_ops();
    if (fault_at >= 0) env.set_fault(before + static_cast<uint64_t>(fault_at), ckpt::FaultKind::kCrash);
    auto info = c->save("/out", 4, {}, incremental(8, 0.5, &env));
    if (fault_at < 0) {
      EXPECT_TRUE(info.ok());
      EXPECT_EQ(info->parent_step, 2);
    }
    return env.num_mutating_ops() - before;
  };
  uint64_t ops = 0;
  {
    ckpt::FaultInjectionEnv env;
    ops = run(env, -1);
    ASSERT_GT(ops, 5u);
  }
  int saw_old = 0, saw_new = 0;
  for (bool keep_entries : {false, true}) {
    for (uint64_t n = 0; n <= ops; ++n) {
      SCOPED_TRACE("crash at call " + std::to_string(n));
      ckpt::FaultInjectionEnv env;
      run(env, static_cast<int64_t>(n));
      env.simulate_crash({keep_entries});
      ckpt::FindOptions f;
      f.env = &env;
      f.warn_to_stderr = false;
      auto latest = find_latest_tables_checkpoint("/out", f);
      ASSERT_TRUE(latest.ok()) << latest.status().to_string();
      EXPECT_EQ(loaded_digest(latest->ref.path, latest->ref.step, o, &env), latest->ref.step == 2 ? d2 : d4);
      (latest->ref.step == 2 ? saw_old : saw_new) += 1;
    }
  }
  EXPECT_GT(saw_old, 0);
  EXPECT_GT(saw_new, 0);
}

// Row numbers as varint gaps: a round trip over gaps of 0, 1, 127, 128 and 2^40, 1-2 bytes per
// close row; a wrong count, a row past the table, a cut or trailing byte are DataLoss.
TEST(DeltaRowsTest, VarintGapsRoundTripAndMalformedBlobsAreDataLoss) {
  const std::vector<int64_t> rows = {0, 1, 2, 130, 259, 260, int64_t{1} << 40, (int64_t{1} << 40) + 1};
  const std::vector<uint8_t> b = encode_delta_rows(rows);
  EXPECT_EQ(b.size(), 8u + 1 + 1 + 1 + 1 + 2 + 1 + 6 + 1);
  auto back = decode_delta_rows(b, 8, int64_t{1} << 41, "t");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back.value(), rows);
  EXPECT_EQ(decode_delta_rows(b, 7, int64_t{1} << 41, "t").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(decode_delta_rows(b, 8, int64_t{1} << 40, "t").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(decode_delta_rows(std::span<const uint8_t>(b.data(), b.size() - 1), 8, int64_t{1} << 41, "t").status().code(),
            StatusCode::kDataLoss);
  std::vector<uint8_t> longer = b;
  longer.push_back(0);
  EXPECT_EQ(decode_delta_rows(longer, 8, int64_t{1} << 41, "t").status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace leanemb::dist
