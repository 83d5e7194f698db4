// The residency layer (table/residency.h): choosing a residency by name, and the mirrored
// residency, the newcomer exercise of docs/architecture.md (a residency added as one new file).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/backend.h"
#include "table/residency.h"
#include "table/table_testing.h"

namespace leanemb {
namespace {

using namespace table_testing;  // NOLINT: test helpers

// A mirrored table trains exactly as a resident one: every step's rows and state are
// byte-identical, and every read checks the mirror.
TEST(MirroredResidencyTest, TrainsBitIdenticallyToResidentRows) {
  for (OptimizerKind kind : {OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    const CollectionOptions plain = standard_options(kind, DType::kBF16);
    CollectionOptions mirrored = plain;
    for (TableOptions& t : mirrored.tables) t.residency = "mirrored";
    auto a = must_create(plain), b = must_create(mirrored);
    ASSERT_TRUE(a && b);
    for (int s = 0; s < 4; ++s) {
      const OwnedBatch batch = random_batch(plain, 6, 100 + s);
      const std::vector<float> g = random_floats(pooled_size(*a, batch), s);
      train_step(*a, batch, g);
      train_step(*b, batch, g);
      ASSERT_TRUE(same_bytes(snapshot(*a), snapshot(*b))) << "step " << s;
    }
    // Restores go to both copies: a written range reads back unchanged.
    std::vector<uint8_t> raw(3 * b->layout(1).stride_bytes, 0x5a);
    ASSERT_TRUE(b->write_raw_rows(1, 2, 3, raw).ok());
    std::vector<uint8_t> back(raw.size());
    ASSERT_TRUE(b->read_raw_rows(1, 2, 3, back).ok());
    EXPECT_EQ(back, raw);
  }
}

// A write to the rows that does not come through the residency (what a faulty kernel would do)
// is caught at the next read, naming the row.
TEST(MirroredResidencyTest, AWriteOutsideTheInterfaceIsDataLossNamingTheRow) {
  const CollectionOptions o = standard_options();
  table_internal::ResidencyContext c;
  c.options = o.tables[0];
  c.options.residency = "mirrored";
  c.seed = o.seed;
  auto layout = make_row_layout(c.options.dim, c.options.dtype, c.options.optimizer);
  ASSERT_TRUE(layout.ok());
  c.layout = layout.value();
  c.alloc = default_host_allocator();
  c.backend = &kernels::cpu_backend();
  auto r = table_internal::make_residency(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  table_internal::Residency& rows = *r.value();
  EXPECT_EQ(rows.name(), "mirrored");
  std::vector<uint8_t> all(static_cast<size_t>(c.options.num_rows) * c.layout.stride_bytes);
  ASSERT_TRUE(rows.read_rows(0, c.options.num_rows, all.data(), Tier::kHost).ok());
  rows.view().base[7 * c.layout.stride_bytes + 1] ^= 0x10;  // row 7, behind the residency's back
  const Status s = rows.read_rows(0, c.options.num_rows, all.data(), Tier::kHost);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "row 7")) << s.message();
  EXPECT_TRUE(rows.read_rows(0, 7, all.data(), Tier::kHost).ok());  // the rows before it are fine
}

// TableOptions::residency names a residency; unknown names and names that do not apply to the
// table's options are refused with the table named.
TEST(ResidencyChoiceTest, NamesAreCheckedAgainstTheRegistryAndTheOptions) {
  struct Case {
    const char* residency;
    const char* message;
  };
  for (const Case& k : {Case{"nvme_magic", "unknown residency 'nvme_magic' (expected one of cached, split, mirrored, resident)"},
                        Case{"cached", "residency 'cached' does not apply"},
                        Case{"split", "residency 'split' does not apply"}}) {
    SCOPED_TRACE(k.residency);
    CollectionOptions o = standard_options();
    o.tables[1].residency = k.residency;
    auto r = EmbeddingCollection::create(o, static_cast<Allocator*>(nullptr));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(r.status().message(), "table 't1'")) << r.status().message();
    EXPECT_TRUE(contains(r.status().message(), k.message)) << r.status().message();
  }
  CollectionOptions o = standard_options();
  o.tables[0].residency = "resident";
  EXPECT_TRUE(EmbeddingCollection::create(o, static_cast<Allocator*>(nullptr)).ok());
  // Cache options with another residency named would be dropped: refused instead.
  o.tables[0].cache.fraction = 0.5;
  auto r = EmbeddingCollection::create(o, static_cast<Allocator*>(nullptr));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(r.status().message(), "residency 'resident' with cache options")) << r.status().message();
  o.tables[0].residency = "cached";
  EXPECT_TRUE(EmbeddingCollection::create(o, static_cast<Allocator*>(nullptr)).ok());
}

}  // namespace
}  // namespace leanemb
