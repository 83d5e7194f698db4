// IdMap: admission, Bloom filter accuracy, eviction victims, re-admission, capacity overflow,
// max age, determinism, checkpoints, and a randomized comparison with a std::map model.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "tiered/id_map.h"

namespace leanemb::tiered {
namespace {

IdMap make_map(int64_t capacity, uint32_t min_count = 1, EvictionPolicy ev = EvictionPolicy::kAge, int64_t max_age = 0) {
  IdMapOptions o;
  o.capacity_rows = capacity;
  o.min_count = min_count;
  o.eviction = ev;
  o.max_age_steps = max_age;
  o.bloom_counters = 1 << 16;
  auto m = IdMap::create(o, nullptr);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(m).value();
}

// Maps one call and returns the rows.
std::vector<int64_t> map_ids(IdMap& m, std::vector<int64_t> ids, int64_t step, MapReport* rep = nullptr) {
  std::vector<int64_t> rows(ids.size());
  EXPECT_TRUE(m.map(ids, step, rows, rep).ok());
  return rows;
}

// An id gets a row on exactly its min_count-th sighting (and the caller learns it must init it).
TEST(IdMapTest, AdmitsOnTheMinCountthSighting) {
  IdMap m = make_map(10, 3);
  MapReport rep;
  EXPECT_EQ(map_ids(m, {42}, 0, &rep), std::vector<int64_t>{-1});
  EXPECT_EQ(map_ids(m, {42}, 1, &rep), std::vector<int64_t>{-1});
  EXPECT_EQ(rep.rejected_min_count, 1);
  EXPECT_EQ(map_ids(m, {42, 42}, 2, &rep), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(rep.assigned, (std::vector<RowAssignment>{{0, 42}}));
  EXPECT_EQ(m.counters().admitted, 1);
  EXPECT_EQ(m.counters().rejected_min_count, 2);
  EXPECT_EQ(m.counters().live_rows, 1);
}

// min_count 1 admits on first touch; repeats in one call share the row.
TEST(IdMapTest, MinCountOneAdmitsOnFirstTouch) {
  IdMap m = make_map(10, 1);
  MapReport rep;
  EXPECT_EQ(map_ids(m, {7, 9, 7}, 0, &rep), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(rep.assigned, (std::vector<RowAssignment>{{0, 7}, {1, 9}}));
  EXPECT_EQ(m.find(9), 1);
  EXPECT_EQ(m.find(8), -1);
}

// After n distinct ids, the fraction of fresh ids the filter thinks it has seen stays within
// the analytic Bloom bound (1 - e^{-kn/m})^k (plus 4 sigma), for both counter widths.
TEST(IdMapTest, BloomFalsePositiveRateWithinAnalyticBound) {
  for (uint32_t bits : {4u, 8u}) {
    IdMapOptions o;
    o.capacity_rows = 100;
    o.min_count = 2;
    o.bloom_counters = 1 << 16;
    o.bloom_hashes = 4;
    o.bloom_counter_bits = bits;
    auto m = IdMap::create(o, nullptr);
    ASSERT_TRUE(m.ok());
    const int n = 8000, q = 20000;
    std::vector<int64_t> ids(n), rows(n);
    for (int i = 0; i < n; ++i) ids[i] = int64_t{1000003} * i + 17;
    ASSERT_TRUE(m->map(ids, 0, rows, nullptr).ok());
    int fp = 0;
    for (int i = 0; i < q; ++i) fp += m->sightings(-int64_t{7919} * i - 1) >= 1;
    const double p = std::pow(1 - std::exp(-4.0 * n / 65536.0), 4);
    const double rate = static_cast<double>(fp) / q;
    EXPECT_LE(rate, p + 4 * std::sqrt(p * (1 - p) / q)) << bits << "-bit";
    EXPECT_GE(rate, p / 2) << bits << "-bit";  // the filter really is that full
    for (int i = 0; i < 100; ++i) EXPECT_GE(m->sightings(ids[i]), 1u);  // no false negatives
  }
}

// Age: the row unused for the longest time goes; the report names its old id.
TEST(IdMapTest, EvictsOldestRowByAge) {
  IdMap m = make_map(3);
  MapReport rep;
  map_ids(m, {1, 2, 3}, 1);
  map_ids(m, {1}, 2);
  map_ids(m, {2}, 3);
  EXPECT_EQ(map_ids(m, {4}, 4, &rep), std::vector<int64_t>{2});
  EXPECT_EQ(rep.evicted, (std::vector<RowAssignment>{{2, 3}}));
  EXPECT_EQ(rep.assigned, (std::vector<RowAssignment>{{2, 4}}));
  EXPECT_EQ(map_ids(m, {5}, 5, &rep), std::vector<int64_t>{0});  // id 1 (step 2) is now oldest
  EXPECT_EQ(rep.evicted, (std::vector<RowAssignment>{{0, 1}}));
  EXPECT_EQ(m.counters().evicted, 2);
}

// LFU: fewest uses goes; equal uses: the older last use goes.
TEST(IdMapTest, EvictsLeastFrequentRowByLfu) {
  IdMap m = make_map(3, 1, EvictionPolicy::kLfu);
  MapReport rep;
  map_ids(m, {1, 1, 1, 2, 2, 3}, 1);  // uses: 1:3, 2:2, 3:1
  map_ids(m, {3, 3, 3}, 2);           // 3:4
  map_ids(m, {4}, 3, &rep);           // 2 has the fewest uses
  EXPECT_EQ(rep.evicted, (std::vector<RowAssignment>{{1, 2}}));
  map_ids(m, {5}, 4, &rep);  // 4 (1 use) goes before 1 (3 uses) although 1 is older
  EXPECT_EQ(rep.evicted, (std::vector<RowAssignment>{{1, 4}}));
  IdMap t = make_map(2, 1, EvictionPolicy::kLfu);
  map_ids(t, {10}, 1);
  map_ids(t, {20}, 2);
  map_ids(t, {30}, 3, &rep);  // tie on one use each: the older (10) goes
  EXPECT_EQ(rep.evicted, (std::vector<RowAssignment>{{0, 10}}));
}

// An evicted id that returns gets a row again, is reported for initialization and counted.
TEST(IdMapTest, ReadmissionAfterEvictionIsReportedAndCounted) {
  IdMap m = make_map(1);
  MapReport rep;
  map_ids(m, {1}, 0);
  map_ids(m, {2}, 1);
  EXPECT_EQ(map_ids(m, {1}, 2, &rep), std::vector<int64_t>{0});
  EXPECT_EQ(rep.assigned, (std::vector<RowAssignment>{{0, 1}}));
  EXPECT_EQ(rep.evicted, (std::vector<RowAssignment>{{0, 2}}));
  EXPECT_EQ(rep.readmitted, 1);
  EXPECT_EQ(m.counters().readmitted, 1);
  EXPECT_EQ(m.counters().admitted, 3);
}

// More distinct ids in one call than rows: the first ones (in order) get rows, no row used by
// the call is evicted, the rest are rejected and counted.
TEST(IdMapTest, CapacityOverflowWithinOneCallRejectsTheRest) {
  IdMap m = make_map(3);
  MapReport rep;
  map_ids(m, {9}, 0);
  EXPECT_EQ(map_ids(m, {1, 2, 3, 4, 1}, 1, &rep), (std::vector<int64_t>{1, 2, 0, -1, 1}));
  EXPECT_EQ(rep.evicted, (std::vector<RowAssignment>{{0, 9}}));  // 9 was not used by the call
  EXPECT_EQ(rep.rejected_capacity, 1);
  EXPECT_EQ(m.counters().rejected_capacity, 1);
  EXPECT_EQ(m.counters().live_rows, 3);
}

// end_step frees rows unused for more than max_age steps; freed rows are reused.
TEST(IdMapTest, MaxAgeFreesStaleRowsAtEndOfStep) {
  IdMap m = make_map(4, 1, EvictionPolicy::kAge, 2);
  MapReport rep;
  map_ids(m, {1, 2}, 0);
  map_ids(m, {1}, 1);
  ASSERT_TRUE(m.end_step(3, &rep).ok());
  EXPECT_EQ(rep.evicted, (std::vector<RowAssignment>{{1, 2}}));
  EXPECT_EQ(rep.expired, 1);
  EXPECT_EQ(m.counters().live_rows, 1);
  EXPECT_EQ(map_ids(m, {7}, 4), std::vector<int64_t>{1});
}

// Bad arguments are InvalidArgument and change nothing.
TEST(IdMapTest, RejectsBadArgumentsAndOptions) {
  IdMap m = make_map(4);
  std::vector<int64_t> ids = {1, 2}, rows(1);
  EXPECT_EQ(m.map(ids, 5, rows, nullptr).code(), StatusCode::kInvalidArgument);
  rows.resize(2);
  ASSERT_TRUE(m.map(ids, 5, rows, nullptr).ok());
  EXPECT_EQ(m.map(ids, 4, rows, nullptr).code(), StatusCode::kInvalidArgument);
  IdMapOptions o;
  o.capacity_rows = 10;
  o.min_count = 16;  // over a 4-bit counter
  EXPECT_EQ(IdMap::create(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  o.capacity_rows = 0;
  EXPECT_EQ(IdMap::create(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*parse_eviction_policy("lfu"), EvictionPolicy::kLfu);
  EXPECT_FALSE(parse_eviction_policy("lru").ok());
}

// The arrays are accounted in row_cache on the given allocator and reported by held_bytes.
TEST(IdMapTest, HeldBytesMatchAllocatorAccounting) {
  TrackingAllocator alloc;
  IdMapOptions o;
  o.capacity_rows = 1000;
  o.min_count = 2;
  o.bloom_counters = 4096;
  auto m = IdMap::create(o, &alloc);
  ASSERT_TRUE(m.ok());
  const size_t arrays = alloc.memory_stats()[Category::kRowCache].current_bytes;
  EXPECT_EQ(arrays, 1000u * 48 + 2048u * 16 + 1000u * 8 + 2048 + 16000 / 8);
  EXPECT_EQ(m->held_bytes(), arrays);  // no bucket yet
}

// ---- stream helpers for the last tests -------------------------------------------------------
struct Call {
  std::vector<int64_t> ids;
  int64_t step;
  bool end_step;
};

std::vector<Call> random_stream(uint64_t seed, int num_calls, int64_t universe) {
  std::mt19937_64 rng(seed);
  std::vector<Call> calls;
  int64_t step = 0;
  for (int c = 0; c < num_calls; ++c) {
    Call call;
    call.step = step;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      // Skewed: small ids are hot.
      const double u = std::uniform_real_distribution<double>(0, 1)(rng);
      call.ids.push_back(static_cast<int64_t>(std::pow(u, 3) * universe) * 7919 - 5000);
    }
    call.end_step = rng() % 3 == 0;
    if (call.end_step) ++step;
    calls.push_back(std::move(call));
  }
  return calls;
}

// The same semantics written plainly: exact counts, linear victim scan.
class ReferenceMap {
 public:
  explicit ReferenceMap(const IdMapOptions& o) : o_(o) {}

  void map(const std::vector<int64_t>& ids, int64_t step, std::vector<int64_t>* out, MapReport* rep) {
    rep->clear();
    const uint64_t call_start = seq_ + 1;
    const uint32_t max = o_.bloom_counter_bits == 4 ? 15 : 255;
    for (int64_t id : ids) {
      if (auto it = row_of_.find(id); it != row_of_.end()) {
        Meta& m = live_[it->second];
        ++m.freq;
        m.last = step;
        m.seq = ++seq_;
        out->push_back(it->second);
        continue;
      }
      if (o_.min_count > 1) {
        uint32_t& c = counts_[id];
        c = std::min(c + 1, max);
        if (c < o_.min_count) {
          ++rep->rejected_min_count;
          out->push_back(-1);
          continue;
        }
      }
      int64_t row = -1;
      if (!free_.empty()) {
        row = free_.back();
        free_.pop_back();
      } else if (next_unused_ < o_.capacity_rows) {
        row = next_unused_++;
      } else {
        for (const auto& [r, m] : live_) {
          if (m.seq < call_start && (row < 0 || key(m) < key(live_[row]))) row = r;
        }
        if (row < 0) {
          ++rep->rejected_capacity;
          out->push_back(-1);
          continue;
        }
        rep->evicted.push_back({row, live_[row].id});
        drop(row);
      }
      live_[row] = {id, step, 1, ++seq_};
      row_of_[id] = row;
      rep->assigned.push_back({row, id});
      ++rep->admitted;
      rep->readmitted += ever_evicted_.count(id);
      out->push_back(row);
    }
  }

  void end_step(int64_t step, MapReport* rep) {
    rep->clear();
    if (o_.max_age_steps <= 0) return;
    std::vector<std::pair<std::pair<uint64_t, uint64_t>, int64_t>> old;
    for (const auto& [r, m] : live_) {
      if (step - m.last > o_.max_age_steps) old.push_back({key(m), r});
    }
    std::sort(old.begin(), old.end());
    for (const auto& [k, r] : old) {
      rep->evicted.push_back({r, live_[r].id});
      drop(r);
      free_.push_back(r);
    }
    rep->expired = static_cast<int64_t>(old.size());
  }

 private:
  struct Meta {
    int64_t id, last;
    uint64_t freq, seq;
  };
  std::pair<uint64_t, uint64_t> key(const Meta& m) const {
    return {o_.eviction == EvictionPolicy::kLfu ? m.freq : 0, m.seq};
  }
  void drop(int64_t row) {
    ever_evicted_.insert(live_[row].id);
    row_of_.erase(live_[row].id);
    live_.erase(row);
  }
  IdMapOptions o_;
  std::map<int64_t, int64_t> row_of_;
  std::map<int64_t, Meta> live_;
  std::map<int64_t, uint32_t> counts_;
  std::set<int64_t> ever_evicted_;
  std::vector<int64_t> free_;
  int64_t next_unused_ = 0;
  uint64_t seq_ = 0;
};

void expect_same_report(const MapReport& a, const MapReport& b) {
  EXPECT_EQ(a.assigned, b.assigned);
  EXPECT_EQ(a.evicted, b.evicted);
  EXPECT_EQ(a.admitted, b.admitted);
  EXPECT_EQ(a.readmitted, b.readmitted);
  EXPECT_EQ(a.rejected_min_count, b.rejected_min_count);
  EXPECT_EQ(a.rejected_capacity, b.rejected_capacity);
  EXPECT_EQ(a.expired, b.expired);
}

// Seeded streams over both policies, with and without admission and max age: the IdMap and the
// reference agree on every row and every report (filters large enough to have no collisions).
TEST(IdMapTest, RandomStreamsMatchReferenceModel) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    IdMapOptions o;
    o.capacity_rows = 5 + static_cast<int64_t>(seed * 3);
    o.min_count = seed % 2 ? 1 : 3;
    o.eviction = seed % 4 < 2 ? EvictionPolicy::kAge : EvictionPolicy::kLfu;
    o.max_age_steps = seed % 3 == 0 ? 4 : 0;
    o.bloom_counters = 1 << 22;
    o.bloom_hashes = 6;
    o.readmit_filter_bits = 1 << 22;
    o.seed = seed;
    auto m = IdMap::create(o, nullptr);
    ASSERT_TRUE(m.ok());
    ReferenceMap ref(o);
    for (const Call& c : random_stream(seed, 600, 60)) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " step " + std::to_string(c.step));
      std::vector<int64_t> got(c.ids.size()), want;
      MapReport rg, rw;
      ASSERT_TRUE(m->map(c.ids, c.step, got, &rg).ok());
      ref.map(c.ids, c.step, &want, &rw);
      ASSERT_EQ(got, want);
      expect_same_report(rg, rw);
      if (c.end_step) {
        ASSERT_TRUE(m->end_step(c.step + 1, &rg).ok());
        ref.end_step(c.step + 1, &rw);
        expect_same_report(rg, rw);
      }
    }
    EXPECT_GT(m->counters().evicted + m->counters().expired, 0);
  }
}

// Two maps fed the same stream agree; so does a map restored from a checkpoint mid-stream.
TEST(IdMapTest, DeterministicAndCheckpointRoundTripContinuesIdentically) {
  for (EvictionPolicy ev : {EvictionPolicy::kAge, EvictionPolicy::kLfu}) {
    IdMap a = make_map(20, 2, ev, 5), b = make_map(20, 2, ev, 5);
    const auto calls = random_stream(99, 400, 80);
    std::vector<uint8_t> saved;
    std::vector<int64_t> ra, rb;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (i == 200) {
        saved = b.serialize();
        auto restored = IdMap::deserialize(saved, nullptr);
        ASSERT_TRUE(restored.ok()) << restored.status().to_string();
        b = std::move(restored).value();
        EXPECT_EQ(b.serialize(), saved);
      }
      ra = map_ids(a, calls[i].ids, calls[i].step);
      rb = map_ids(b, calls[i].ids, calls[i].step);
      ASSERT_EQ(ra, rb) << "call " << i;
      if (calls[i].end_step) {
        ASSERT_TRUE(a.end_step(calls[i].step + 1, nullptr).ok());
        ASSERT_TRUE(b.end_step(calls[i].step + 1, nullptr).ok());
      }
    }
    EXPECT_EQ(a.serialize(), b.serialize());
    EXPECT_EQ(a.counters().admitted, b.counters().admitted);
  }
}

// Every flipped byte, truncation and extension of a checkpoint is DataLoss, never a crash.
TEST(IdMapTest, CorruptCheckpointIsDataLoss) {
  IdMap m = make_map(8, 2, EvictionPolicy::kLfu, 3);
  for (const Call& c : random_stream(5, 100, 30)) map_ids(m, c.ids, c.step);
  const std::vector<uint8_t> good = m.serialize();
  for (size_t i = 0; i < good.size(); i += 1 + good.size() / 500) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0x40;
    EXPECT_EQ(IdMap::deserialize(bad, nullptr).status().code(), StatusCode::kDataLoss) << "byte " << i;
  }
  for (size_t n : {size_t{0}, size_t{10}, good.size() / 2, good.size() - 1}) {
    EXPECT_EQ(IdMap::deserialize(std::span(good).first(n), nullptr).status().code(), StatusCode::kDataLoss);
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_EQ(IdMap::deserialize(longer, nullptr).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace leanemb::tiered
