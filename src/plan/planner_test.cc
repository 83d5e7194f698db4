// Planner: presets, choices that fit, the no-fit message.
#include "plan/planner.h"

#include <gtest/gtest.h>

#include "plan/plan_testing.h"

#include "plan/report.h"

namespace leanemb::plan {
namespace {

using testing_util::seed_workload;

// The seed's workload does not fit a 910A naively, and the chosen plan does.
TEST(PlannerTest, SeedWorkloadFitsAscend910aOnlyWithAPlan) {
  auto preset = find_preset("ascend-910a");
  ASSERT_TRUE(preset.ok());
  PlannerOptions o;
  o.preset = preset.value();
  auto r = make_plan(seed_workload(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r.value().fits);
  EXPECT_GT(r.value().naive.device().peak_bytes, r.value().usable_device_bytes);
  EXPECT_LE(r.value().chosen.prediction.device().peak_bytes, r.value().usable_device_bytes);
  // Accuracy-safe by default: a full-rank optimizer with fp32 state.
  EXPECT_EQ(r.value().chosen.workload.row_optimizer.kind, OptimizerKind::kAdam);
  EXPECT_EQ(r.value().chosen.workload.row_optimizer.state_dtype, StateDType::kF32);
}

// Nothing fits: the report says so and names the smallest budget that would.
TEST(PlannerTest, NoFitNamesTheSmallestBudget) {
  auto preset = find_preset("cpu:64MiB");
  ASSERT_TRUE(preset.ok());
  PlannerOptions o;
  o.preset = preset.value();
  o.allow_host = false;
  auto r = make_plan(seed_workload(), o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().fits);
  EXPECT_GT(r.value().smallest_device_bytes, size_t{64} << 20);
  const std::string text = plan_report_text(seed_workload(), o, r.value(), ReportContext{"seed", 2048, 1000});
  EXPECT_NE(text.find("NOTHING FITS"), std::string::npos) << text;
  EXPECT_NE(text.find("smallest device budget"), std::string::npos) << text;
  // The named budget is enough: planning with it fits.
  o.device_budget_bytes = r.value().smallest_device_bytes;
  auto again = make_plan(seed_workload(), o);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value().fits);
}

// Unknown presets and bad cpu sizes are clear errors.
TEST(PlannerTest, BadPresetsAreErrors) {
  EXPECT_FALSE(find_preset("tpu-v9").ok());
  EXPECT_FALSE(find_preset("cpu:lots").ok());
  EXPECT_TRUE(find_preset("cpu:8GiB").ok());
  EXPECT_EQ(find_preset("ascend-910a").value().device_bytes, size_t{32} << 30);
}

}  // namespace
}  // namespace leanemb::plan
