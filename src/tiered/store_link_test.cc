// RowStore::link_rows / adopt_links: a log store's rows kept by hard links of its sealed segment
// files (tiny segments, so that compaction frees and unlinks files while links hold them).
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tiered/cache_testing.h"
#include "tiered/file_store.h"
#include "tiered/log_segments.h"

namespace leanemb::tiered {
namespace {

namespace fs = std::filesystem;
constexpr size_t kRowBytes = 136;
constexpr int64_t kRows = 500;

std::unique_ptr<RowStore> open_log(const std::string& path, uint64_t seg_bytes = 4 * 4096) {
  RowStoreOptions o{StoreKind::kFile, kRows, kRowBytes, path, true, 8, IoEngineKind::kAuto};
  o.layout = FileStoreLayout::kLog;
  FileStoreHooks hooks;
  hooks.log_segment_bytes = seg_bytes;
  auto s = make_file_row_store(o, nullptr, hooks);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::vector<uint8_t> row_bytes(int64_t row, uint32_t tag) {
  std::vector<uint8_t> v(kRowBytes);
  for (size_t i = 0; i < kRowBytes; ++i) v[i] = static_cast<uint8_t>(i * 31 + static_cast<size_t>(row) * 7 + tag * 13);
  return v;
}

// Writes `rows` with bytes of `tag` and records them in `want` (row -> bytes, empty: absent).
void write(RowStore& s, const std::vector<int64_t>& rows, uint32_t tag, std::vector<std::vector<uint8_t>>& want) {
  std::vector<uint8_t> buf;
  for (int64_t r : rows) {
    const auto b = row_bytes(r, tag);
    buf.insert(buf.end(), b.begin(), b.end());
    want[static_cast<size_t>(r)] = b;
  }
  ASSERT_TRUE(s.write_rows(rows, buf.data()).ok());
}

void expect_rows(RowStore& s, const std::vector<std::vector<uint8_t>>& want) {
  std::vector<int64_t> all(kRows);
  for (int64_t r = 0; r < kRows; ++r) all[static_cast<size_t>(r)] = r;
  std::vector<uint8_t> out(all.size() * kRowBytes), present(all.size());
  ASSERT_TRUE(s.read_rows(all, out.data(), present.data()).ok());
  for (size_t r = 0; r < all.size(); ++r) {
    ASSERT_EQ(present[r], want[r].empty() ? 0 : 1) << "row " << r;
    if (present[r]) {
      ASSERT_EQ(0, std::memcmp(&out[r * kRowBytes], want[r].data(), kRowBytes)) << "row " << r;
    }
  }
}

size_t segment_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".seg" ? 1 : 0;
  return n;
}

struct Linked {
  LinkedRows rows;
  std::vector<RowPlace> places;
};

Linked link(RowStore& s, const std::string& dir) {
  fs::create_directories(dir);
  Linked l;
  auto r = s.link_rows(dir, [&](std::span<const RowPlace> c) {
    l.places.insert(l.places.end(), c.begin(), c.end());
    return Status();
  });
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (r.ok()) l.rows = *r;
  return l;
}

RowPlaceSource source_of(const std::vector<RowPlace>& places) {
  auto done = std::make_shared<bool>(false);
  return [&places, done]() -> Result<std::span<const RowPlace>> {
    if (*done) return std::span<const RowPlace>();
    *done = true;
    return std::span<const RowPlace>(places);
  };
}

class StoreLinkTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing_util::make_scratch_dir("leanemb-store-link-"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

// Links taken mid-run keep the rows of that moment: the store goes on overwriting (compaction
// frees and unlinks its files), closes (its names go), and a new store adopting the links reads
// every row as it was linked, hashes included; then it goes on writing and compacting.
TEST_F(StoreLinkTest, LinkedRowsOutliveTheStoreAndAdoptIntoANewOne) {
  std::vector<std::vector<uint8_t>> want(kRows);
  Linked l;
  {
    auto s = open_log(dir_ + "/a.rows");
    ASSERT_NE(s, nullptr);
    std::mt19937_64 rng(3);
    for (uint32_t round = 0; round < 40; ++round) {
      std::vector<int64_t> rows;
      std::vector<uint8_t> used(kRows, 0);
      for (int k = 0; k < 60; ++k) {
        const int64_t r = static_cast<int64_t>(rng() % 3 ? rng() % 80 : rng() % kRows);
        if (!used[static_cast<size_t>(r)]) {
          rows.push_back(r);
          used[static_cast<size_t>(r)] = 1;
        }
      }
      write(*s, rows, round, want);
    }
    l = link(*s, dir_ + "/ckpt");
    EXPECT_EQ(l.rows.rows, l.places.size());
    for (size_t i = 1; i < l.places.size(); ++i) ASSERT_LT(l.places[i - 1].row, l.places[i].row);
    for (const LinkedRowFile& f : l.rows.files) {
      auto h = file_xxh3(dir_ + "/ckpt/" + f.name);
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      EXPECT_EQ(*h, f.hash) << f.name;
      EXPECT_EQ(fs::file_size(dir_ + "/ckpt/" + f.name), f.bytes);
    }
    expect_rows(*s, want);  // linking changes no row
    // Overwrite every row many times: every linked file's records die and compaction frees them.
    std::vector<std::vector<uint8_t>> later(kRows);
    std::vector<int64_t> all(kRows);
    for (int64_t r = 0; r < kRows; ++r) all[static_cast<size_t>(r)] = r;
    for (uint32_t round = 0; round < 12; ++round) write(*s, all, 100 + round, later);
    expect_rows(*s, later);
    EXPECT_GT(s->stats().gc_passes, 0u);
    EXPECT_EQ(segment_files(log_store_dir(dir_ + "/a.rows")), s->stats().log_segments);
  }
  EXPECT_EQ(segment_files(log_store_dir(dir_ + "/a.rows")), 0u);  // the store's names went with it
  EXPECT_EQ(segment_files(dir_ + "/ckpt"), l.rows.files.size());  // the links did not

  auto b = open_log(dir_ + "/b.rows");
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->adopt_links(dir_ + "/ckpt", l.rows, source_of(l.places)).ok());
  expect_rows(*b, want);
  EXPECT_EQ(b->stats().log_live_rows, l.places.size());
  // The adopted store goes on: writes, compaction of adopted files, and the links stay intact.
  std::vector<int64_t> all(kRows);
  for (int64_t r = 0; r < kRows; ++r) all[static_cast<size_t>(r)] = r;
  for (uint32_t round = 0; round < 6; ++round) write(*b, std::vector<int64_t>(all.begin(), all.begin() + 300), 200 + round, want);
  expect_rows(*b, want);
  ASSERT_TRUE(b->flush().ok());
  for (const LinkedRowFile& f : l.rows.files) EXPECT_EQ(*file_xxh3(dir_ + "/ckpt/" + f.name), f.hash);
}

TEST_F(StoreLinkTest, AdoptRefusesAStoreWithRowsAnotherLayoutAndBadPlaces) {
  std::vector<std::vector<uint8_t>> want(kRows);
  auto a = open_log(dir_ + "/a.rows");
  ASSERT_NE(a, nullptr);
  write(*a, {1, 2, 3, 40, 41}, 1, want);
  const Linked l = link(*a, dir_ + "/ckpt");
  ASSERT_EQ(l.places.size(), 5u);

  auto b = open_log(dir_ + "/b.rows");
  write(*b, {7}, 1, want);
  EXPECT_EQ(b->adopt_links(dir_ + "/ckpt", l.rows, source_of(l.places)).code(), StatusCode::kFailedPrecondition);
  b.reset();

  auto c = open_log(dir_ + "/c.rows", 8 * 4096);  // other segments
  EXPECT_EQ(c->adopt_links(dir_ + "/ckpt", l.rows, source_of(l.places)).code(), StatusCode::kFailedPrecondition);
  c.reset();

  std::vector<RowPlace> twice = l.places;
  twice.push_back(l.places.front());
  auto d = open_log(dir_ + "/d.rows");
  EXPECT_EQ(d->adopt_links(dir_ + "/ckpt", l.rows, source_of(twice)).code(), StatusCode::kDataLoss);
  d.reset();

  std::vector<RowPlace> outside = l.places;
  outside.back().offset = l.rows.files[outside.back().file].bytes;  // past its file's end
  auto e = open_log(dir_ + "/e.rows");
  EXPECT_EQ(e->adopt_links(dir_ + "/ckpt", l.rows, source_of(outside)).code(), StatusCode::kDataLoss);
  e.reset();

  LinkedRows shorter = l.rows;
  shorter.files[0].bytes += 4096;  // the checkpoint says another size than the file has
  auto f = open_log(dir_ + "/f.rows");
  EXPECT_EQ(f->adopt_links(dir_ + "/ckpt", shorter, source_of(l.places)).code(), StatusCode::kDataLoss);
}

TEST_F(StoreLinkTest, OtherStoresHaveNothingToLink) {
  RowStoreOptions o{StoreKind::kHost, kRows, kRowBytes, "", true, 8, IoEngineKind::kAuto};
  auto s = make_row_store(o, nullptr);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->link_rows(dir_, [](std::span<const RowPlace>) { return Status(); }).status().code(),
            StatusCode::kUnimplemented);
  static const std::vector<RowPlace> kNone;
  EXPECT_EQ((*s)->adopt_links(dir_, LinkedRows{}, source_of(kNone)).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace leanemb::tiered
