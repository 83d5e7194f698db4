// The training digest: a plain trainer-style checkpoint written by one process and a sharded
// checkpoint of the same state written by two ranks have the same digest; one changed dense
// byte, row byte or step changes it; a missing blob is DataLoss naming it.
#include "leanemb/training_digest.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <utility>

#include "leanemb/json.h"
#include "dist/dist_testing.h"
#include "dist/sharded_checkpoint.h"
#include "table/owned_batch_testing.h"

namespace leanemb::dist {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_util::expect_all_ok;
using test_util::run_world;
using test_util::TempDir;
using testing_util::OwnedBatch;

constexpr int64_t kBags = 12;
constexpr int kSteps = 2;

// Two fp32 RowwiseAdagrad tables, named so that bytewise name order ("C10" < "C2") is not the
// collection order: the plain digest must follow the order the tables were written in.
CollectionOptions options() {
  CollectionOptions o;
  OptimizerOptions opt;
  opt.kind = OptimizerKind::kRowwiseAdagrad;
  opt.learning_rate = 0.05f;
  opt.eps = 1e-6f;
  o.tables = {TableOptions{"C2", 300, 8, DType::kF32, opt, {}, false, {}, {}, {}, {}},
              TableOptions{"C10", 150, 5, DType::kF32, opt, {}, false, {}, {}, {}, {}}};
  o.features = {FeatureOptions{"f0", 0, PoolingMode::kSum}, FeatureOptions{"f1", 1, PoolingMode::kMean}};
  o.seed = 5;
  o.num_threads = 1;
  return o;
}

// Step s's global batch: bags of 0-4 ids, bags [b0, b1) of it.
OwnedBatch batch(int step, const CollectionOptions& o, int64_t b0, int64_t b1) {
  std::mt19937_64 rng(700 + static_cast<uint64_t>(step));
  OwnedBatch b;
  b.B = b1 - b0;
  for (const FeatureOptions& f : o.features) {
    const int64_t rows = o.tables[static_cast<size_t>(f.table)].num_rows;
    std::vector<int64_t> ids, offsets = {0};
    for (int64_t bag = 0; bag < kBags; ++bag) {
      const int len = static_cast<int>(rng() % 5);
      for (int i = 0; i < len; ++i) {
        const auto id = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        if (bag >= b0 && bag < b1) ids.push_back(id);
      }
      if (bag >= b0 && bag < b1) offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    b.ids.push_back(ids);
    b.offsets.push_back(offsets);
    b.weights.emplace_back();
  }
  return b;
}

// Step s's pooled-output gradients.
std::vector<float> grads(int step, int64_t n) { return test_util::normal_grads(900 + static_cast<uint64_t>(step), n); }

// Trains the bags [b0, b1) of steps [0, kSteps) (one process: all bags).
template <typename Coll>
Status train(Coll& c, int64_t b0, int64_t b1) {
  const int64_t ldo = c.pooled_dim();
  for (int s = 0; s < kSteps; ++s) {
    const OwnedBatch mine = batch(s, options(), b0, b1);
    std::vector<float> pooled(static_cast<size_t>((b1 - b0) * ldo));
    LEANEMB_RETURN_IF_ERROR(c.forward(mine.view(), pooled));
    const std::vector<float> g = grads(s, kBags * ldo);
    LEANEMB_RETURN_IF_ERROR(
        c.backward_update(mine.view(), std::span<const float>(g).subspan(static_cast<size_t>(b0 * ldo), pooled.size())).status());
  }
  return Status();
}

// What a trainer checkpoint holds besides the rows.
struct TrainerBlobs {
  int64_t step = kSteps, samples = kSteps * kBags, skipped = 0, collection_step = kSteps;
  std::vector<uint8_t> reader = {7, 0, 0, 0, 42}, scaler = {0, 0, 128, 71};
  std::vector<uint8_t> dense_w = std::vector<uint8_t>(64, 3), dense_opt = std::vector<uint8_t>(64, 9);
  std::string omit;  // a blob left out
  std::vector<std::string> tables = {"C2", "C10"};  // train/state's table order (collection order)

  std::vector<std::pair<std::string, std::vector<uint8_t>>> list() const {
    const std::string st = dump_json(json{{"step", step}, {"samples", samples}, {"skipped_steps", skipped},
                                          {"collection_step", collection_step}, {"format", "leanemb-train-1"},
                                          {"tables", tables}});
    std::vector<std::pair<std::string, std::vector<uint8_t>>> all = {
        {"train/state", {st.begin(), st.end()}}, {"train/reader", reader}, {"amp/loss_scaler", scaler},
        {"dense/param/w", dense_w}, {"dense/opt/w", dense_opt}};
    std::erase_if(all, [&](const auto& b) { return b.first == omit; });
    return all;
  }
};

// A plain checkpoint as train/loop.cc's write_checkpoint lays it out; returns its directory.
std::string write_plain(const std::string& out, const EmbeddingCollection& coll, const TrainerBlobs& tb) {
  auto w = std::move(ckpt::CheckpointWriter::create(out, tb.step)).value();
  for (const auto& [name, bytes] : tb.list()) EXPECT_TRUE(w->add_blob(name, bytes).ok());
  std::vector<uint8_t> rows;
  for (int t = 0; t < coll.num_tables(); ++t) {
    const RowLayout& l = coll.layout(t);
    const TableOptions& to = coll.options().tables[static_cast<size_t>(t)];
    const std::string meta = dump_json(json{{"dim", l.dim}, {"dtype", std::string(dtype_name(l.weight_dtype))},
                                            {"optimizer", std::string(optimizer_name(l.optimizer.kind))},
                                            {"state_dtype", std::string(dtype_name(l.optimizer.state_dtype))},
                                            {"stride_bytes", l.stride_bytes}});
    const std::string name = "emb/" + to.name;
    EXPECT_TRUE(w->add_table(name, l.stride_bytes, to.num_rows, std::vector<uint8_t>(meta.begin(), meta.end())).ok());
    rows.resize(static_cast<size_t>(to.num_rows) * l.stride_bytes);
    EXPECT_TRUE(coll.read_raw_rows(t, 0, to.num_rows, rows).ok());
    EXPECT_TRUE(w->append_rows(name, 0, rows).ok());
  }
  auto info = w->commit();
  EXPECT_TRUE(info.ok()) << info.status().to_string();
  return info.ok() ? info->path : std::string();
}

// Two ranks train the same bags (each its half) and save a sharded checkpoint with `tb`.
std::string write_sharded(const std::string& out, ShardingKind kind, const TrainerBlobs& tb) {
  ShardedCollectionOptions so;
  so.collection = options();
  so.sharding = kind;
  std::string dir;
  expect_all_ok(run_world(2, [&](Communicator& comm) -> Status {
    LEANEMB_ASSIGN_OR_RETURN(auto sc, ShardedEmbeddingCollection::create(so, &comm));
    const int r = comm.rank();
    LEANEMB_RETURN_IF_ERROR(train(*sc, kBags * r / 2, kBags * (r + 1) / 2));
    const auto list = tb.list();
    std::vector<ShardedBlob> blobs;
    for (const auto& [name, bytes] : list) blobs.push_back({name, bytes});
    LEANEMB_ASSIGN_OR_RETURN(ShardedSaveInfo info, save_sharded_checkpoint(out, tb.step, *sc, blobs));
    if (r == 0) dir = info.global_dir;
    return Status();
  }));
  return dir;
}

std::unique_ptr<EmbeddingCollection> trained_reference() {
  auto coll = std::move(EmbeddingCollection::create(options())).value();
  EXPECT_TRUE(train(*coll, 0, kBags).ok());
  return coll;
}

std::string digest_of(const std::string& dir) {
  auto d = training_digest(dir);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d.ok() ? *d : std::string("error: ") + d.status().to_string();
}

// One process's plain checkpoint and two ranks' sharded ones (row-modulo and table-wise) of the
// same training have one training digest; its embedding part is the collection's digest.
TEST(TrainingDigestTest, PlainAndShardedCheckpointsOfTheSameStateAgree) {
  const auto ref = trained_reference();
  ASSERT_EQ(ref->step(), kSteps);
  TempDir dir;
  const std::string plain = digest_of(write_plain(dir.sub("plain"), *ref, TrainerBlobs{}));
  EXPECT_EQ(plain.size(), 32u);
  EXPECT_NE(plain, collection_digest(*ref).value());  // covers more than the rows
  const std::string modulo = write_sharded(dir.sub("modulo"), ShardingKind::kRowModulo, TrainerBlobs{});
  EXPECT_EQ(digest_of(modulo), plain);
  EXPECT_EQ(digest_of(write_sharded(dir.sub("tablewise"), ShardingKind::kTableWise, TrainerBlobs{})), plain);
  // The sharded embedding part is the one-process collection's digest (so the plain part,
  // equal above, is too).
  EXPECT_EQ(sharded_checkpoint_digest(modulo).value(), collection_digest(*ref).value());
}

// One byte of a dense blob, one byte of one row, or train/state's step changes the digest.
TEST(TrainingDigestTest, OneChangedDenseByteRowByteOrStepChangesIt) {
  const auto ref = trained_reference();
  TempDir dir;
  const std::string base = digest_of(write_plain(dir.sub("base"), *ref, TrainerBlobs{}));
  TrainerBlobs dense;
  dense.dense_opt[17] ^= 1;
  EXPECT_NE(digest_of(write_plain(dir.sub("dense"), *ref, dense)), base);
  TrainerBlobs step;
  step.step += 1;
  EXPECT_NE(digest_of(write_plain(dir.sub("step"), *ref, step)), base);
  std::vector<uint8_t> row(ref->layout(1).stride_bytes);
  ASSERT_TRUE(ref->read_raw_rows(1, 123, 1, row).ok());
  row[row.size() - 1] ^= 0x10;  // the optimizer state of row 123 of the second table
  ASSERT_TRUE(ref->write_raw_rows(1, 123, 1, row).ok());
  EXPECT_NE(digest_of(write_plain(dir.sub("row"), *ref, TrainerBlobs{})), base);
}

// Each blob the digest covers is required: without it, DataLoss naming the blob.
TEST(TrainingDigestTest, MissingBlobIsDataLossNamingIt) {
  const auto ref = trained_reference();
  TempDir dir;
  const std::pair<const char*, const char*> cases[] = {
      {"train/state", "no_state"}, {"train/reader", "no_reader"}, {"amp/loss_scaler", "no_scaler"}};
  for (const auto& [name, sub] : cases) {
    TrainerBlobs tb;
    tb.omit = name;
    auto d = training_digest(write_plain(dir.sub(sub), *ref, tb));
    ASSERT_FALSE(d.ok()) << name;
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss) << d.status().to_string();
    EXPECT_NE(d.status().message().find(std::string("'") + name + "'"), std::string::npos) << d.status().to_string();
  }
}

// The plain digest takes the tables in train/state's "tables" order: the other order gives
// another digest (no longer the sharded one), and a checkpoint without "tables" is DataLoss.
TEST(TrainingDigestTest, PlainTableOrderComesFromTrainState) {
  const auto ref = trained_reference();
  TempDir dir;
  const std::string base = digest_of(write_plain(dir.sub("base"), *ref, TrainerBlobs{}));
  TrainerBlobs swapped;
  swapped.tables = {"C10", "C2"};
  EXPECT_NE(digest_of(write_plain(dir.sub("swapped"), *ref, swapped)), base);
  TrainerBlobs none;
  none.tables.clear();
  auto d = training_digest(write_plain(dir.sub("none"), *ref, none));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find("\"tables\""), std::string::npos) << d.status().to_string();
  TrainerBlobs unknown;
  unknown.tables = {"C2", "C3"};
  EXPECT_EQ(training_digest(write_plain(dir.sub("unknown"), *ref, unknown)).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace leanemb::dist
