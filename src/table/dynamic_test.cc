// Dynamic tables in an EmbeddingCollection (TableDynamicOptions, docs/tiered.md): raw ids mapped
// to rows by an IdMap, admission by min_count, eviction, max age, caches and checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "leanemb/memory_system.h"
#include "table/collection_impl.h"
#include "table/table_testing.h"

namespace leanemb {
namespace {

using table_testing::contains;
using table_testing::must_create;
using table_testing::random_floats;
using table_testing::same_bytes;
using table_testing::snapshot;
using testing_util::OwnedBatch;

// A raw id that looks like a hashed categorical value: any int64, negatives included.
int64_t raw(int64_t i) {
  uint64_t z = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  return static_cast<int64_t>(z ^ (z >> 31));
}

TableOptions dyn_table(int64_t capacity, int64_t dim, OptimizerKind kind = OptimizerKind::kAdagrad) {
  TableOptions t = table_testing::table("d", capacity, dim, kind);
  t.dynamic.enabled = true;
  return t;
}

// Table 0 (dynamic, `capacity` rows, dim 6) serves f0 (sum), f1 (mean, weighted) and f2 (none);
// table 1 (an ordinary 20 x 4 table) serves f3 (sum).
CollectionOptions dyn_options(int64_t capacity, uint32_t min_count = 1, const std::string& eviction = "age",
                              int64_t max_age = 0, OptimizerKind kind = OptimizerKind::kAdagrad) {
  CollectionOptions o;
  o.tables = {dyn_table(capacity, 6, kind), table_testing::table("n", 20, 4, kind)};
  o.tables[0].dynamic.min_count = min_count;
  o.tables[0].dynamic.eviction = parse_eviction_policy(eviction).value();
  o.tables[0].dynamic.max_age_steps = max_age;
  o.tables[0].dynamic.bloom_counters = 4096;
  o.features = {{"f0", 0, PoolingMode::kSum}, {"f1", 0, PoolingMode::kMean}, {"f2", 0, PoolingMode::kNone},
                {"f3", 1, PoolingMode::kSum}};
  o.seed = 11;
  o.num_threads = 2;
  return o;
}

// Random batch for dyn_options: dynamic features draw raw(0 .. pool-1), bags of 0..max_len ids.
OwnedBatch dyn_batch(int64_t B, int64_t pool, int max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  OwnedBatch b;
  b.B = B;
  for (int f = 0; f < 4; ++f) {
    std::vector<int64_t> ids, offs{0};
    std::vector<float> w;
    for (int64_t bag = 0; bag < B; ++bag) {
      for (int64_t n = static_cast<int64_t>(rng() % (max_len + 1)); n > 0; --n) {
        ids.push_back(f == 3 ? static_cast<int64_t>(rng() % 20) : raw(static_cast<int64_t>(rng() % pool)));
        if (f == 1) w.push_back(0.25f + 0.25f * static_cast<float>(rng() % 6));
      }
      offs.push_back(static_cast<int64_t>(ids.size()));
    }
    b.ids.push_back(ids);
    b.offsets.push_back(offs);
    b.weights.push_back(w);
  }
  return b;
}

// A batch with only the given ids: f0's bags, f1's bags and f2's bags ({} = empty), f3 empty.
OwnedBatch explicit_batch(const std::vector<std::vector<int64_t>>& f0, const std::vector<std::vector<int64_t>>& f1,
                          const std::vector<std::vector<int64_t>>& f2) {
  OwnedBatch b;
  b.B = static_cast<int64_t>(f0.size());
  for (const auto* bags : {&f0, &f1, &f2}) {
    std::vector<int64_t> ids, offs{0};
    for (const auto& bag : *bags) {
      ids.insert(ids.end(), bag.begin(), bag.end());
      offs.push_back(static_cast<int64_t>(ids.size()));
    }
    b.ids.push_back(ids);
    b.offsets.push_back(offs);
    b.weights.emplace_back();
  }
  b.ids.emplace_back();
  b.offsets.emplace_back(static_cast<size_t>(b.B + 1), 0);
  b.weights.emplace_back();
  return b;
}

struct Outputs {
  std::vector<float> pooled, seq;
};

// forward, then backward_update with gradients drawn from `seed`; returns the forward outputs.
Outputs train(EmbeddingCollection& c, const OwnedBatch& b, uint64_t seed, bool update = true) {
  Outputs o;
  o.pooled.resize(static_cast<size_t>(b.B * c.pooled_dim()));
  o.seq.resize(b.ids[2].size() * 6);
  std::span<float> seq_span(o.seq);
  const Status st = c.forward(b.view(), o.pooled, std::span<const std::span<float>>(&seq_span, 1));
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!update) return o;
  const std::vector<float> g = random_floats(o.pooled.size(), seed), gs = random_floats(o.seq.size(), seed + 1);
  std::span<const float> gs_span(gs);
  auto r = c.backward_update(b.view(), g, std::span<const std::span<const float>>(&gs_span, 1));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return o;
}

// The initial fat row of raw id `id` in table 0 of c, and its weights as floats (fp32 tables).
std::vector<uint8_t> init_bytes(const EmbeddingCollection& c, int64_t id) {
  std::vector<uint8_t> fat(c.layout(0).stride_bytes);
  std::vector<float> tmp(static_cast<size_t>(c.layout(0).dim));
  init_row(c.options().tables[0], c.layout(0), c.options().seed, 0, id, tmp.data(), fat.data());
  return fat;
}
std::vector<float> init_values(const EmbeddingCollection& c, int64_t id) {
  const std::vector<uint8_t> fat = init_bytes(c, id);
  std::vector<float> v(static_cast<size_t>(c.layout(0).dim));
  std::memcpy(v.data(), fat.data(), v.size() * 4);
  return v;
}
std::vector<float> row_values(const EmbeddingCollection& c, int64_t row) {
  std::vector<float> v(static_cast<size_t>(c.layout(0).dim));
  EXPECT_TRUE(c.read_rows(0, row, 1, v).ok());
  return v;
}
int64_t row_of(const EmbeddingCollection& c, int64_t id) { return c.dynamic_row(0, id).value(); }
DynamicTableStats stats_of(const EmbeddingCollection& c) { return c.dynamic_stats(0).value(); }
// f0's pooled vector of bag `bag`.
std::vector<float> f0_out(const EmbeddingCollection& c, const Outputs& o, int64_t bag) {
  const float* p = o.pooled.data() + bag * c.pooled_dim() + c.pooled_offset(0);
  return std::vector<float>(p, p + 6);
}

// With min_count 1 and room for every id, a dynamic table is a resident table whose rows are
// the ids in order of first sighting, initialized from the raw ids: same bits, every step.
TEST(DynamicTableTest, MatchesResidentTableWithTheSameMapping) {
  const CollectionOptions dopt = dyn_options(64);
  CollectionOptions ropt = dopt;
  ropt.tables[0].dynamic.enabled = false;
  auto dyn = must_create(dopt);
  auto ref = must_create(ropt);
  std::vector<OwnedBatch> batches;
  for (int s = 0; s < 5; ++s) batches.push_back(dyn_batch(6, 40, 5, 100 + s));
  std::map<int64_t, int64_t> row;  // raw id -> row, in order of first sighting (f0, f1, f2)
  for (const OwnedBatch& b : batches)
    for (int f = 0; f < 3; ++f)
      for (int64_t id : b.ids[f]) row.emplace(id, static_cast<int64_t>(row.size()));
  for (const auto& [id, r] : row) ASSERT_TRUE(ref->write_raw_rows(0, r, 1, init_bytes(*ref, id)).ok());
  int64_t seen = 0;
  std::map<int64_t, bool> live;
  for (int s = 0; s < 5; ++s) {
    OwnedBatch rb = batches[s];
    for (int f = 0; f < 3; ++f)
      for (int64_t& id : rb.ids[f]) {
        live[id] = true;
        id = row.at(id);
      }
    seen = static_cast<int64_t>(live.size());
    const Outputs od = train(*dyn, batches[s], 7 + s), orf = train(*ref, rb, 7 + s);
    ASSERT_EQ(0, std::memcmp(od.pooled.data(), orf.pooled.data(), od.pooled.size() * 4)) << "step " << s;
    ASSERT_EQ(0, std::memcmp(od.seq.data(), orf.seq.data(), od.seq.size() * 4)) << "step " << s;
    auto sd = snapshot(*dyn), sr = snapshot(*ref);
    const size_t live_bytes = static_cast<size_t>(seen) * dyn->layout(0).stride_bytes;
    sd[0].resize(live_bytes);
    sr[0].resize(live_bytes);
    ASSERT_TRUE(same_bytes(sd, sr)) << "step " << s;
  }
  for (const auto& [id, r] : row) EXPECT_EQ(r, row_of(*dyn, id));
  const DynamicTableStats st = stats_of(*dyn);
  EXPECT_EQ(seen, st.admitted);
  EXPECT_EQ(seen, st.live_rows);
  EXPECT_EQ(0, st.rejected_min_count + st.rejected_capacity + st.evicted + st.expired);
}

// An id starts with the same bytes wherever it lands, and not with the row's own initializer.
TEST(DynamicTableTest, NewRowsAreInitializedFromTheRawId) {
  auto a = must_create(dyn_options(8)), b = must_create(dyn_options(8));
  const int64_t x = raw(1), y = raw(2);
  train(*a, explicit_batch({{x}}, {{}}, {{}}), 1, false);
  train(*b, explicit_batch({{y, x}}, {{}}, {{}}), 1, false);
  ASSERT_EQ(0, row_of(*a, x));
  ASSERT_EQ(1, row_of(*b, x));
  EXPECT_EQ(init_values(*a, x), row_values(*a, 0));
  EXPECT_EQ(init_values(*a, x), row_values(*b, 1));
  EXPECT_NE(init_values(*a, x), init_values(*a, y));
  std::vector<uint8_t> by_row(a->layout(0).stride_bytes);
  std::vector<float> tmp(6);
  init_row(a->options().tables[0], a->layout(0), a->options().seed, 0, 0, tmp.data(), by_row.data());
  EXPECT_NE(by_row, init_bytes(*a, x));
  // Rows never assigned read zeros.
  EXPECT_EQ(std::vector<float>(6, 0.0f), row_values(*a, 5));
}

// min_count 3: the first two sightings read zeros and train nothing; the third gets a row.
TEST(DynamicTableTest, IdsBelowMinCountReadZerosAndAreNotUpdated) {
  auto c = must_create(dyn_options(8, 3));
  const int64_t x = raw(5);
  const auto before = snapshot(*c);
  const Outputs o1 = train(*c, explicit_batch({{x}}, {{}}, {{}}), 1);
  EXPECT_EQ(std::vector<float>(6, 0.0f), f0_out(*c, o1, 0));
  EXPECT_EQ(1, stats_of(*c).rejected_min_count);
  const Outputs o2 = train(*c, explicit_batch({{}}, {{}}, {{x}}), 2);
  EXPECT_EQ(std::vector<float>(6, 0.0f), o2.seq) << "a rejected sequence position reads zeros";
  EXPECT_EQ(-1, row_of(*c, x));
  EXPECT_EQ(2, stats_of(*c).rejected_min_count);
  EXPECT_TRUE(same_bytes(before, snapshot(*c))) << "nothing was updated";
  const Outputs o = train(*c, explicit_batch({{x}}, {{}}, {{}}), 3);
  ASSERT_EQ(0, row_of(*c, x));
  EXPECT_EQ(init_values(*c, x), f0_out(*c, o, 0));
  EXPECT_NE(init_values(*c, x), row_values(*c, 0)) << "the admitted row was trained";
  const DynamicTableStats st = stats_of(*c);
  EXPECT_EQ(1, st.admitted);
  EXPECT_EQ(2, st.rejected_min_count);
  EXPECT_EQ(1, st.live_rows);
}

// An id admitted in the middle of a batch: its earlier occurrences read zeros in the forward and
// get no gradient in the update (SGD: exactly one contribution).
TEST(DynamicTableTest, MidBatchAdmissionTrainsOnlyTheAdmittedOccurrences) {
  auto c = must_create(dyn_options(8, 3, "age", 0, OptimizerKind::kSgd));
  const int64_t x = raw(6);
  const OwnedBatch b = explicit_batch({{x, x, x}}, {{}}, {{}});
  const Outputs o = train(*c, b, 0, false);
  const std::vector<float> x0 = init_values(*c, x);
  EXPECT_EQ(x0, f0_out(*c, o, 0)) << "one copy of the row";
  std::vector<float> g(o.pooled.size(), 0.0f);
  for (int j = 0; j < 6; ++j) g[j] = 1.0f;
  std::span<const float> no_seq;
  ASSERT_TRUE(c->backward_update(b.view(), g, std::span<const std::span<const float>>(&no_seq, 1)).ok());
  const std::vector<float> x1 = row_values(*c, row_of(*c, x));
  for (int j = 0; j < 6; ++j) EXPECT_FLOAT_EQ(x0[j] - 0.1f, x1[j]) << j;
}

// kMean divides by the bag's full length: a rejected id counts as a zero vector.
TEST(DynamicTableTest, MeanPoolingCountsRejectedIdsAsZeros) {
  auto c = must_create(dyn_options(8, 3, "age", 0, OptimizerKind::kSgd));
  const int64_t p = raw(1), q = raw(2);
  train(*c, explicit_batch({{p, p, p}}, {{}}, {{}}), 1, false);  // p admitted on its 3rd sighting
  const OwnedBatch b = explicit_batch({{}}, {{p, q}}, {{q, p}});
  const int64_t rp = row_of(*c, p);
  const std::vector<float> xp = row_values(*c, rp);
  const Outputs o = train(*c, b, 2, false);
  const float* mean = o.pooled.data() + c->pooled_offset(1);
  for (int j = 0; j < 6; ++j) EXPECT_EQ(0.5f * xp[j], mean[j]) << j;
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(0.0f, o.seq[j]) << "q reads zeros";
    EXPECT_EQ(xp[j], o.seq[6 + j]) << "p reads its row at its own position";
  }
  // Update: f1 gradient 1 on p (scaled by 1/2), f2 gradient 0 at q and 2 at p.
  std::vector<float> g(o.pooled.size(), 0.0f), gs(12, 0.0f);
  for (int j = 0; j < 6; ++j) g[c->pooled_offset(1) + j] = 1.0f;
  for (int j = 0; j < 6; ++j) gs[6 + j] = 2.0f;
  std::span<const float> gs_span(gs);
  ASSERT_TRUE(c->backward_update(b.view(), g, std::span<const std::span<const float>>(&gs_span, 1)).ok());
  const std::vector<float> xp1 = row_values(*c, rp);
  for (int j = 0; j < 6; ++j) EXPECT_NEAR(xp[j] - 0.1f * 2.5f, xp1[j], 1e-6f) << j;
  EXPECT_EQ(-1, row_of(*c, q));
}

// Capacity eviction through the collection, for both policies; a re-admitted id starts again
// from its initializer (counted as readmitted).
void check_capacity_eviction(const std::string& policy) {
  SCOPED_TRACE(policy);
  auto c = must_create(dyn_options(4, 1, policy));
  const int64_t A = raw(1), B = raw(2), C = raw(3), D = raw(4), E = raw(5);
  train(*c, explicit_batch({{A, B, C, D}}, {{}}, {{}}), 1);
  // age: D is now the least recently used; lfu: D has the fewest uses (1; A 3, B and C 2).
  train(*c, explicit_batch({{A, A, B, C}}, {{}}, {{}}), 2);
  const int64_t d_row = row_of(*c, D);
  train(*c, explicit_batch({{E}}, {{}}, {{}}), 3);
  EXPECT_EQ(-1, row_of(*c, D));
  EXPECT_EQ(d_row, row_of(*c, E));
  EXPECT_EQ(1, stats_of(*c).evicted);
  // D comes back: it evicts A (age: oldest use) or E (lfu: one use, while B and C have 2).
  const int64_t victim = policy == "age" ? A : E;
  const int64_t v_row = row_of(*c, victim);
  const Outputs o = train(*c, explicit_batch({{D}}, {{}}, {{}}), 4);
  EXPECT_EQ(-1, row_of(*c, victim));
  EXPECT_EQ(v_row, row_of(*c, D));
  EXPECT_EQ(init_values(*c, D), f0_out(*c, o, 0)) << "re-initialized, not D's trained values";
  const DynamicTableStats st = stats_of(*c);
  EXPECT_EQ(2, st.evicted);
  EXPECT_EQ(6, st.admitted);
  EXPECT_EQ(1, st.readmitted);
  EXPECT_EQ(4, st.live_rows);
}

TEST(DynamicTableTest, EvictsByAgeWhenFullAndReinitializesReadmittedIds) { check_capacity_eviction("age"); }
TEST(DynamicTableTest, EvictsByLfuWhenFullAndReinitializesReadmittedIds) { check_capacity_eviction("lfu"); }

// When every row is used by the batch itself, the ids that find none read zeros.
TEST(DynamicTableTest, IdsBeyondCapacityInOneBatchAreRejected) {
  auto c = must_create(dyn_options(2));
  const Outputs o = train(*c, explicit_batch({{raw(1)}, {raw(2)}, {raw(3)}}, {{}, {}, {}}, {{}, {}, {}}), 1);
  EXPECT_EQ(std::vector<float>(6, 0.0f), f0_out(*c, o, 2));
  EXPECT_EQ(1, stats_of(*c).rejected_capacity);
  EXPECT_EQ(-1, row_of(*c, raw(3)));
}

// max_age_steps 2: a row unused for more than 2 steps is freed after the update of step 4.
TEST(DynamicTableTest, MaxAgeFreesRowsUnusedForTooLong) {
  auto c = must_create(dyn_options(8, 1, "age", 2));
  const int64_t A = raw(1), B = raw(2);
  train(*c, explicit_batch({{A, B}}, {{}}, {{}}), 1);
  for (int s = 2; s <= 3; ++s) train(*c, explicit_batch({{B}}, {{}}, {{}}), s);
  EXPECT_NE(-1, row_of(*c, A)) << "last used at step 1, 2 steps ago";
  train(*c, explicit_batch({{B}}, {{}}, {{}}), 4);
  EXPECT_EQ(-1, row_of(*c, A));
  DynamicTableStats st = stats_of(*c);
  EXPECT_EQ(1, st.expired);
  EXPECT_EQ(1, st.live_rows);
  const Outputs o = train(*c, explicit_batch({{A}}, {{}}, {{}}), 5);
  EXPECT_EQ(init_values(*c, A), f0_out(*c, o, 0));
  st = stats_of(*c);
  EXPECT_EQ(1, st.readmitted);
  EXPECT_EQ(0, st.evicted);
}

// A dynamic table with a small cache over a host store (and prefetch) gives the same bits as
// one without a cache: ids map to rows first, rows to slots after.
TEST(DynamicTableTest, CachedDynamicTableMatchesResidentOne) {
  CollectionOptions o = dyn_options(30, 2, "lfu", 3);
  auto plain = must_create(o);
  o.tables[0].cache.capacity_rows = 20;
  auto cached = must_create(o);
  // At most 2 bags x 3 ids x 3 features = 18 rows per step: they fit in the 20 slots.
  OwnedBatch next = dyn_batch(2, 60, 3, 500);
  for (int s = 0; s < 16; ++s) {
    const OwnedBatch b = next;
    next = dyn_batch(2, 60, 3, 501 + s);
    const Outputs op = train(*plain, b, 30 + s), oc = train(*cached, b, 30 + s);
    ASSERT_TRUE(cached->prefetch(next.view()).ok());
    // Bitwise (memcmp needs non-null pointers, so empty outputs are compared by size alone).
    ASSERT_EQ(op.pooled.size(), oc.pooled.size());
    ASSERT_TRUE(op.pooled.empty() || std::memcmp(op.pooled.data(), oc.pooled.data(), op.pooled.size() * 4) == 0) << "step " << s;
    ASSERT_EQ(op.seq.size(), oc.seq.size());
    ASSERT_TRUE(op.seq.empty() || std::memcmp(op.seq.data(), oc.seq.data(), op.seq.size() * 4) == 0) << "step " << s;
    ASSERT_TRUE(same_bytes(snapshot(*plain), snapshot(*cached))) << "step " << s;
  }
  const DynamicTableStats a = stats_of(*plain), b = stats_of(*cached);
  EXPECT_GT(a.evicted, 0);
  EXPECT_GT(a.expired, 0);
  EXPECT_GT(a.rejected_min_count, 0);
  EXPECT_EQ(a.admitted, b.admitted);
  EXPECT_EQ(a.evicted, b.evicted);
  EXPECT_EQ(a.expired, b.expired);
  EXPECT_GT(cached->cache_stats(0).value().evictions, 0u);
}

// A restored collection (rows, step, dynamic state) continues exactly like the original.
TEST(DynamicTableTest, SavedDynamicStateRestoresTraining) {
  const CollectionOptions o = dyn_options(16, 2, "lfu");
  auto a = must_create(o);
  for (int s = 0; s < 4; ++s) train(*a, dyn_batch(4, 30, 4, 700 + s), 40 + s);
  auto state = a->save_dynamic_state(0);
  ASSERT_TRUE(state.ok());
  auto b = must_create(o);
  const auto rows = snapshot(*a);
  for (int t = 0; t < 2; ++t) ASSERT_TRUE(b->write_raw_rows(t, 0, o.tables[t].num_rows, rows[t]).ok());
  b->set_step(a->step());
  ASSERT_TRUE(b->load_dynamic_state(0, state.value()).ok());
  for (int s = 4; s < 8; ++s) {
    const OwnedBatch batch = dyn_batch(4, 30, 4, 700 + s);
    const Outputs oa = train(*a, batch, 40 + s), ob = train(*b, batch, 40 + s);
    ASSERT_EQ(0, std::memcmp(oa.pooled.data(), ob.pooled.data(), oa.pooled.size() * 4)) << "step " << s;
    ASSERT_TRUE(same_bytes(snapshot(*a), snapshot(*b))) << "step " << s;
  }
  EXPECT_EQ(a->save_dynamic_state(0).value(), b->save_dynamic_state(0).value());
  EXPECT_GT(stats_of(*a).evicted, 0);
}

// Corrupt bytes, a map of another capacity or a table that is not dynamic: an error, and the
// map is unchanged.
TEST(DynamicTableTest, LoadDynamicStateRejectsBadInput) {
  auto c = must_create(dyn_options(16));
  train(*c, dyn_batch(4, 30, 4, 1), 1);
  std::vector<uint8_t> state = c->save_dynamic_state(0).value();
  auto other = must_create(dyn_options(8));
  EXPECT_EQ(StatusCode::kInvalidArgument, other->load_dynamic_state(0, state).code());
  EXPECT_EQ(StatusCode::kFailedPrecondition, c->load_dynamic_state(1, state).code());
  EXPECT_EQ(StatusCode::kOutOfRange, c->load_dynamic_state(7, state).code());
  std::vector<uint8_t> bad = state;
  bad[bad.size() / 2] ^= 0x40;
  const Status st = c->load_dynamic_state(0, bad);
  EXPECT_EQ(StatusCode::kDataLoss, st.code());
  EXPECT_TRUE(contains(st.message(), "table 'd'")) << st.message();
  EXPECT_EQ(state, c->save_dynamic_state(0).value());
}

// Bad dynamic options fail creation with a message naming the table; raw ids are never
// bounds-checked.
TEST(DynamicTableTest, RejectsBadOptionsAndAcceptsAnyRawId) {
  auto create_error = [](const CollectionOptions& o) { return EmbeddingCollection::create(o).status(); };
  CollectionOptions o = dyn_options(8);
  o.tables[0].dynamic.eviction = static_cast<EvictionPolicy>(7);
  Status st = create_error(o);
  EXPECT_EQ(StatusCode::kInvalidArgument, st.code());
  EXPECT_TRUE(contains(st.message(), "eviction") && contains(st.message(), "table 'd'")) << st.message();
  EXPECT_TRUE(contains(parse_eviction_policy("fifo").status().message(), "'fifo' (expected age or lfu)"));
  o = dyn_options(8);
  o.tables[0].frozen = true;
  EXPECT_TRUE(contains(create_error(o).message(), "frozen")) << create_error(o).message();
  o = dyn_options(8, 0);
  EXPECT_EQ(StatusCode::kInvalidArgument, create_error(o).code());
  o = dyn_options(8, 256);
  EXPECT_EQ(StatusCode::kInvalidArgument, create_error(o).code());
  o = dyn_options(8);
  o.tables[0].dynamic.bloom_hashes = 0;
  o.tables[0].dynamic.min_count = 2;
  EXPECT_EQ(StatusCode::kInvalidArgument, create_error(o).code());

  auto c = must_create(dyn_options(8));
  EXPECT_EQ(StatusCode::kFailedPrecondition, c->dynamic_stats(1).status().code());
  EXPECT_EQ(StatusCode::kOutOfRange, c->dynamic_stats(2).status().code());
  const OwnedBatch b = explicit_batch({{INT64_MIN, -1, INT64_MAX}}, {{1000}}, {{8}});
  EXPECT_TRUE(c->validate(b.view()).ok());
  train(*c, b, 1);
  EXPECT_EQ(5, stats_of(*c).live_rows);
}

// The IdMap's bytes show in the collection's allocator as row_cache, and in dynamic_stats.
TEST(DynamicTableTest, IdMapMemoryIsAccountedAsRowCache) {
  TrackingAllocator with, without;
  auto c = must_create(dyn_options(1000, 2), &with);
  CollectionOptions o = dyn_options(1000, 2);
  o.tables[0].dynamic.enabled = false;
  auto r = must_create(o, &without);
  const size_t held = stats_of(*c).held_bytes;
  EXPECT_GT(held, 1000u * 48);
  EXPECT_EQ(held, c->memory_stats()[Category::kRowCache].current_bytes);
  EXPECT_EQ(0u, r->memory_stats()[Category::kRowCache].current_bytes);
}

// Optimizer state offloaded to the host (a split table): new rows are written through the split
// buffers and training gives the bits of a plain dynamic table; the IdMap lives in the host tier.
TEST(DynamicTableTest, SplitPlacementMatchesPlainAndKeepsTheIdMapOnTheHost) {
  MemorySystemOptions mo;
  mo.placement[Category::kOptimizerState] = Tier::kHost;
  auto mem = MemorySystem::create(mo);
  ASSERT_TRUE(mem.ok()) << mem.status().to_string();
  const CollectionOptions o = dyn_options(24, 2, "age", 3);
  auto r = EmbeddingCollection::create(o, mem.value().get());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto split = std::move(r).value();
  auto plain = must_create(o);
  for (int s = 0; s < 8; ++s) {
    const OwnedBatch b = dyn_batch(3, 40, 4, 900 + s);
    const Outputs op = train(*plain, b, 60 + s), os = train(*split, b, 60 + s);
    ASSERT_EQ(0, std::memcmp(op.pooled.data(), os.pooled.data(), op.pooled.size() * 4)) << "step " << s;
    ASSERT_TRUE(same_bytes(snapshot(*plain), snapshot(*split))) << "step " << s;
  }
  EXPECT_GT(stats_of(*split).admitted, 0);
  EXPECT_EQ(stats_of(*split).held_bytes,
            mem.value()->host()->memory_stats()[Category::kRowCache].current_bytes + 64 * 1);  // one age bucket
}

// ---- evaluation forwards (ForwardMode::kEval) ----------------------------------------------

// Outputs of a forward of b in `mode` (no update).
Outputs forward_in(EmbeddingCollection& c, const OwnedBatch& b, ForwardMode mode) {
  Outputs o;
  o.pooled.resize(static_cast<size_t>(b.B * c.pooled_dim()));
  o.seq.resize(b.ids[2].size() * 6);
  std::span<float> seq_span(o.seq);
  const Status st = c.forward(b.view(), o.pooled, std::span<const std::span<float>>(&seq_span, 1), mode);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return o;
}

// Everything an evaluation must leave alone: rows, the IdMap's whole state (counts, ages, the
// admission filter), its counters, where each id maps, the step.
struct DynamicState {
  std::vector<std::vector<uint8_t>> rows;
  std::vector<uint8_t> id_map;
  DynamicTableStats stats;
  std::vector<int64_t> rows_of;
  int64_t step = 0;
};
DynamicState dynamic_state(const EmbeddingCollection& c, const std::vector<int64_t>& ids) {
  DynamicState s{snapshot(c), c.save_dynamic_state(0).value(), stats_of(c), {}, c.step()};
  for (int64_t id : ids) s.rows_of.push_back(row_of(c, id));
  return s;
}
void expect_same_state(const DynamicState& a, const DynamicState& b) {
  EXPECT_TRUE(same_bytes(a.rows, b.rows));
  EXPECT_TRUE(a.id_map == b.id_map) << "the IdMap changed";
  EXPECT_EQ(a.stats.admitted, b.stats.admitted);
  EXPECT_EQ(a.stats.rejected_min_count, b.stats.rejected_min_count);
  EXPECT_EQ(a.stats.rejected_capacity, b.stats.rejected_capacity);
  EXPECT_EQ(a.stats.evicted, b.stats.evicted);
  EXPECT_EQ(a.stats.expired, b.stats.expired);
  EXPECT_EQ(a.stats.live_rows, b.stats.live_rows);
  EXPECT_EQ(a.rows_of, b.rows_of);
  EXPECT_EQ(a.step, b.step);
}

// A full table (min_count 2, lfu; 8 rows, 40 ids and max age 3, or 30 rows in a 20-row cache
// and 60 ids): evaluation forwards over batches of mostly unseen ids change nothing; known ids
// read their rows and unknown ones zeros: the outputs equal a training forward's on a resident
// copy of the rows where every unknown id reads a zero row (kMean divides by the full bag
// length).
void check_eval_changes_nothing(bool cached) {
  SCOPED_TRACE(cached ? "cached" : "plain");
  CollectionOptions o = dyn_options(cached ? 30 : 8, 2, "lfu", cached ? 0 : 3, OptimizerKind::kSgd);
  if (cached) o.tables[0].cache.capacity_rows = 20;
  auto c = must_create(o);
  for (int s = 0; s < 24; ++s) train(*c, dyn_batch(2, cached ? 60 : 40, 3, 300 + s), 20 + s);
  ASSERT_GT(stats_of(*c).evicted, 0) << "the table must be full";
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 1200; ++i) ids.push_back(raw(i));
  const DynamicState before = dynamic_state(*c, ids);
  // The reference: table 0 resident with one more row, all zeros, for the unknown ids.
  CollectionOptions ro = o;
  ro.tables[0].dynamic.enabled = false;
  ro.tables[0].cache = {};
  ro.tables[0].num_rows = o.tables[0].num_rows + 1;
  auto ref = must_create(ro);
  for (int t = 0; t < 2; ++t) ASSERT_TRUE(ref->write_raw_rows(t, 0, o.tables[t].num_rows, before.rows[t]).ok());
  ASSERT_TRUE(ref->write_raw_rows(0, o.tables[0].num_rows, 1, std::vector<uint8_t>(ref->layout(0).stride_bytes, 0)).ok());
  int64_t unknown = 0;
  for (int s = 0; s < 6; ++s) {
    const OwnedBatch b = dyn_batch(4, 1200, 4, 800 + s);  // ids 0..1199: most never seen
    const Outputs got = forward_in(*c, b, ForwardMode::kEval);
    OwnedBatch rb = b;
    for (int f = 0; f < 3; ++f)
      for (int64_t& id : rb.ids[f]) {
        const int64_t r = row_of(*c, id);
        unknown += r < 0 ? 1 : 0;
        id = r < 0 ? o.tables[0].num_rows : r;
      }
    const Outputs want = forward_in(*ref, rb, ForwardMode::kTrain);
    ASSERT_EQ(want.pooled.size(), got.pooled.size());
    for (size_t i = 0; i < want.pooled.size(); ++i) ASSERT_NEAR(want.pooled[i], got.pooled[i], 1e-6f) << "step " << s << " at " << i;
    EXPECT_EQ(want.seq, got.seq) << "step " << s;
  }
  EXPECT_GT(unknown, 50);
  expect_same_state(before, dynamic_state(*c, ids));
  // On a batch of known ids an evaluation forward reads what a training forward reads.
  OwnedBatch known = explicit_batch({{}}, {{}}, {{}});
  for (int64_t i = 0; i < 1200 && known.ids[0].size() < 5; ++i)
    if (row_of(*c, raw(i)) >= 0) known.ids[0].push_back(raw(i)), known.ids[2].push_back(raw(i));
  known.offsets[0] = {0, 5};
  known.offsets[2] = {0, 5};
  const Outputs e = forward_in(*c, known, ForwardMode::kEval), t = forward_in(*c, known, ForwardMode::kTrain);
  EXPECT_EQ(t.pooled, e.pooled);
  EXPECT_EQ(t.seq, e.seq);
}

TEST(DynamicEvalTest, EvaluationForwardsOfAFullTableChangeNothing) { check_eval_changes_nothing(false); }
TEST(DynamicEvalTest, EvaluationForwardsOfACachedFullTableChangeNothing) { check_eval_changes_nothing(true); }

// A training forward of an unseen id admits it; an evaluation forward reads zeros and leaves
// it unseen (min_count 1: the first sighting would give it a row).
TEST(DynamicEvalTest, AnUnseenIdReadsZerosAndGetsNoRow) {
  auto c = must_create(dyn_options(8));
  const int64_t x = raw(9);
  const OwnedBatch b = explicit_batch({{x}}, {{x, x}}, {{x}});
  const Outputs e = forward_in(*c, b, ForwardMode::kEval);
  EXPECT_EQ(std::vector<float>(e.pooled.size(), 0.0f), e.pooled);
  EXPECT_EQ(std::vector<float>(6, 0.0f), e.seq);
  EXPECT_EQ(-1, row_of(*c, x));
  EXPECT_EQ(0, stats_of(*c).admitted);
  EXPECT_EQ(std::vector<float>(6, 0.0f), row_values(*c, 0)) << "no row initialized";
  const Outputs t = forward_in(*c, b, ForwardMode::kTrain);
  EXPECT_EQ(0, row_of(*c, x));
  EXPECT_EQ(init_values(*c, x), f0_out(*c, t, 0));
}

// backward_update after an evaluation forward is refused (nothing changes); a training forward
// in between makes it legal again. Tables without dynamic ids follow the same rule.
TEST(DynamicEvalTest, UpdateAfterAnEvaluationForwardIsRefused) {
  for (bool dynamic : {true, false}) {
    SCOPED_TRACE(dynamic ? "dynamic" : "hashed");
    CollectionOptions o = dyn_options(16);
    o.tables[0].dynamic.enabled = dynamic;
    auto c = must_create(o);
    const OwnedBatch b = explicit_batch({{3, 4}}, {{5}}, {{6}});
    train(*c, b, 1);
    const auto rows = snapshot(*c);
    const Outputs e = forward_in(*c, b, ForwardMode::kEval);
    const std::vector<float> g = random_floats(e.pooled.size(), 2), gs = random_floats(e.seq.size(), 3);
    std::span<const float> gs_span(gs);
    auto r = c->backward_update(b.view(), g, std::span<const std::span<const float>>(&gs_span, 1));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(StatusCode::kFailedPrecondition, r.status().code());
    EXPECT_TRUE(contains(r.status().message(), "kEval")) << r.status().message();
    EXPECT_TRUE(same_bytes(rows, snapshot(*c)));
    EXPECT_EQ(1, c->step());
    forward_in(*c, b, ForwardMode::kTrain);
    EXPECT_TRUE(c->backward_update(b.view(), g, std::span<const std::span<const float>>(&gs_span, 1)).ok());
    EXPECT_EQ(2, c->step());
  }
}

}  // namespace
}  // namespace leanemb
