// Linked rows in checkpoints (IncrementalOptions::link_store_rows, docs/formats/checkpoint.md
// "Linked rows"): a table cached over a log-layout file store is kept by hard links of its
// store's files. A checkpoint then restores exactly the writer's rows (into a new cached table
// by linking the files back, or into a resident table by copying), in full and incremental
// chains, after the writer's store is gone; it copies no row of the table; a missing or changed
// linked file makes the checkpoint incomplete (open) or fail verification.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "ckpt/format.h"
#include "dist/dist_testing.h"
#include "table/linked_tables.h"
#include "dist/sharded_checkpoint.h"
#include "table/owned_batch_testing.h"

namespace leanemb::dist {
namespace {

namespace fs = std::filesystem;
using test_util::TempDir;
using testing_util::OwnedBatch;
using table_ckpt::has_linked_table;
using table_ckpt::set_places_per_blob_for_testing;

constexpr int64_t kBags = 16;

// Every test writes its places in blobs of 50, so that a table's places span many blobs.
class SmallPlaceBlobs : public testing::Environment {
 public:
  void SetUp() override { set_places_per_blob_for_testing(50); }
  void TearDown() override { set_places_per_blob_for_testing(0); }
};
const testing::Environment* const kSmallBlobs = testing::AddGlobalTestEnvironment(new SmallPlaceBlobs);

// Table a (2000 rows) cached in 48 slots over a log store in `store_dir`, table b resident
// (dist_testing.h); empty store_dir: both resident.
CollectionOptions options(const std::string& store_dir) { return test_util::two_table_options(2000, 9, store_dir, 48); }

void train(EmbeddingCollection& c, const CollectionOptions& o, int s0, int s1) {
  test_util::train_random_bags(c, o, s0, s1, kBags, 31, 900);
}

TablesSaveOptions linking(bool incremental) {
  TablesSaveOptions so;
  so.keep_last = 0;
  so.incremental.enabled = incremental;
  so.incremental.link_store_rows = true;
  so.chunk_rows = 100;
  return so;
}

std::string step_dir(const std::string& out, int64_t step) {
  return ckpt::join_path(ckpt::checkpoints_dir(out), ckpt::step_dir_name(step));
}

// The digest of checkpoint `dir` loaded into a fresh collection of options `o`, and whether table
// a took the linked files as they are.
std::string loaded_digest(const std::string& dir, const CollectionOptions& o, int64_t step) {
  auto c = std::move(EmbeddingCollection::create(o)).value();
  TablesLoadOptions lo;
  lo.collection_step = step;
  auto st = c->load(dir, lo);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return collection_digest(*c).value();
}

size_t files_in(const std::string& dir) {
  size_t n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

class LinkedCheckpointTest : public testing::TestWithParam<bool> {};  // param: incremental

// Checkpoints at steps 3, 6 and 9 with evictions in between: each restores exactly the writer's
// rows at its step (new cached table: by links; resident table: by copies), after the writer's
// store is gone too, and table a's rows are never copied into a checkpoint's data file.
TEST_P(LinkedCheckpointTest, LinksRestoreExactlyTheWritersRowsAfterItsStoreIsGone) {
  TempDir dir, store, store2, store3;
  const CollectionOptions o = options(store.path);
  const std::string out = dir.path + "/run";
  std::vector<std::string> digests;
  {
    auto c = std::move(EmbeddingCollection::create(o)).value();
    if (GetParam()) {
      ASSERT_TRUE(c->track_changes().ok());
    }
    for (int k = 1; k <= 3; ++k) {
      train(*c, o, 3 * (k - 1), 3 * k);
      auto info = c->save(out, 3 * k, {}, linking(GetParam()));
      ASSERT_TRUE(info.ok()) << info.status().to_string();
      EXPECT_EQ(info->linked_tables, 1);
      EXPECT_GT(info->rows_linked, 0);
      c->set_step(3 * k);
      digests.push_back(collection_digest(*c).value());
      auto r = ckpt::CheckpointReader::open(info->path);
      ASSERT_TRUE(r.ok());
      EXPECT_TRUE(has_linked_table(**r, "a"));
      EXPECT_EQ((*r)->find("emb/a"), nullptr);
      EXPECT_EQ((*r)->find("delta/a"), nullptr);
      EXPECT_FALSE((*r)->linked_files().empty());
      ASSERT_TRUE((*r)->verify().ok());
    }
    EXPECT_GT(c->cache_stats(0).value().writebacks, 0u);  // rows went through the store between checkpoints
  }
  EXPECT_EQ(files_in(store.path + "/a.rows.log"), 0u);  // the writer's store is gone; its links are not
  for (int k = 1; k <= 3; ++k) {
    EXPECT_EQ(loaded_digest(step_dir(out, 3 * k), options(store2.path), 3 * k), digests[static_cast<size_t>(k - 1)]) << "step " << 3 * k;
    EXPECT_EQ(loaded_digest(step_dir(out, 3 * k), options(""), 3 * k), digests[static_cast<size_t>(k - 1)]) << "resident, step " << 3 * k;
    fs::remove_all(store2.path + "/a.rows.log");
  }
  // The adopting table goes on training from the links exactly as the writer would have.
  auto c = std::move(EmbeddingCollection::create(options(store3.path))).value();
  TablesLoadOptions lo;
  lo.collection_step = 6;
  ASSERT_TRUE(c->load(step_dir(out, 6), lo).ok());
  EXPECT_GT(files_in(store3.path + "/a.rows.log"), 0u);  // the checkpoint's files, linked in
  EXPECT_EQ(c->cache_stats(0).value().placed_rows, 0u);  // no row copied
  train(*c, o, 6, 9);
  c->set_step(9);
  EXPECT_EQ(collection_digest(*c).value(), digests[2]);
}

INSTANTIATE_TEST_SUITE_P(Modes, LinkedCheckpointTest, testing::Bool(),
                         [](const auto& info) { return std::string(info.param ? "incremental" : "full"); });

// A linked file that is gone or of another size makes the checkpoint incomplete: open fails
// (DataLoss naming it) and --resume falls back to the previous checkpoint; a file of the right
// size with other bytes fails verify.
TEST(LinkedCheckpointFaults, AMissingOrChangedLinkedFileIsNamedAndTheRunFallsBack) {
  TempDir dir, store;
  const CollectionOptions o = options(store.path);
  const std::string out = dir.path + "/run";
  auto c = std::move(EmbeddingCollection::create(o)).value();
  train(*c, o, 0, 3);
  ASSERT_TRUE(c->save(out, 3, {}, linking(false)).ok());
  train(*c, o, 3, 6);
  ASSERT_TRUE(c->save(out, 6, {}, linking(false)).ok());
  auto r6 = ckpt::CheckpointReader::open(step_dir(out, 6));
  ASSERT_TRUE(r6.ok());
  const ckpt::LinkedFile f = (*r6)->linked_files().back();
  const std::string path = step_dir(out, 6) + "/" + f.path;
  r6->reset();

  // Other bytes, same size: open succeeds (sizes only), verify names the file.
  {
    std::fstream s(path, std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(0);
    const char x = 0x5a;
    s.write(&x, 1);
  }
  auto opened = ckpt::CheckpointReader::open(step_dir(out, 6));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const auto v = (*opened)->verify();
  EXPECT_EQ(v.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(v.status().message().find(f.path), std::string::npos) << v.status().message();
  opened->reset();

  // Gone: open fails naming it, and the newest complete checkpoint is step 3's.
  fs::remove(path);
  auto gone = ckpt::CheckpointReader::open(step_dir(out, 6));
  EXPECT_EQ(gone.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(gone.status().message().find(f.path), std::string::npos) << gone.status().message();
  auto latest = find_latest_tables_checkpoint(out);
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  EXPECT_EQ(latest->ref.step, 3);
}

// keep_last removes old checkpoints with their links; the kept ones still load, and the store's
// own files are untouched by it.
TEST(LinkedCheckpointFaults, KeepLastRemovesOldLinksOnly) {
  TempDir dir, store, store2;
  const CollectionOptions o = options(store.path);
  const std::string out = dir.path + "/run";
  auto c = std::move(EmbeddingCollection::create(o)).value();
  TablesSaveOptions so = linking(true);
  so.keep_last = 2;
  std::string last;
  for (int k = 1; k <= 4; ++k) {
    train(*c, o, 3 * (k - 1), 3 * k);
    ASSERT_TRUE(c->save(out, 3 * k, {}, so).ok());
  }
  c->set_step(12);
  last = collection_digest(*c).value();
  EXPECT_FALSE(fs::exists(step_dir(out, 3)));
  EXPECT_FALSE(fs::exists(step_dir(out, 6)));
  EXPECT_EQ(loaded_digest(step_dir(out, 12), options(store2.path), 12), last);
  EXPECT_GT(files_in(store.path + "/a.rows.log"), 0u);
}

}  // namespace
}  // namespace leanemb::dist
