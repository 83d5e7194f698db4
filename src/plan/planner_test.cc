// Planner: presets, choices that fit, the no-fit message.
#include "plan/planner.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "plan/plan_testing.h"

#include "plan/report.h"
#include "tiered/sizes.h"

namespace leanemb::plan {
namespace {

using testing_util::log_store_workload;
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
  EXPECT_EQ(r.value().chosen.workload.row_optimizer.state_dtype, DType::kF32);
  // Issue 39: its micro-batches sum their output gradients by row, so the plan's gradients are
  // one micro-batch's output gradient plus the row sums, below the whole output's 16 GiB.
  EXPECT_GT(r.value().chosen.workload.micro_batches, 1);
  EXPECT_LT(r.value().chosen.prediction.device().peak[static_cast<size_t>(Category::kGradients)], size_t{16} << 30);
}

// Issue 39: with the device cut to 20 GiB the seed example still fits, with more micro-batches
// (before, the whole batch's output gradient, 16 GiB, left no room for the rest).
TEST(PlannerTest, SeedWorkloadFitsTwentyGiBWithMoreMicroBatches) {
  auto preset = find_preset("ascend-910a");
  ASSERT_TRUE(preset.ok());
  PlannerOptions o;
  o.preset = preset.value();
  o.device_budget_bytes = size_t{20} << 30;
  auto r = make_plan(seed_workload(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r.value().fits);
  EXPECT_LE(r.value().chosen.prediction.device().peak_bytes, size_t{20} << 30);
  EXPECT_GE(r.value().chosen.workload.micro_batches, 4);
}

// Issue 39, the seed's example as `leanemb plan` chooses it on a 910A with the default budget:
// q8 rows (proven on both tasks since 2026-12-07; they move fewer bytes than bf16 rows), Adam with
// fp32 state, and the bf16 output (bf16 activations:
// proven for CTR, and for text since the 2026-12-07 measurement of the text model's bf16 output,
// bench/results/parity_bf16out.json; an embedding-only workload needs both tasks). The fastest
// fitting plan is the fp32 output at 2 micro-batches (57.70 ms): there each micro-batch reads and
// writes the sums of its own distinct rows. A bf16 output sums by row through chunks of bags
// whatever the micro-batch count, so its micro-batches cost only their 20 us each: at 8
// micro-batches it is +0.78% (within the 1% equal-speed tolerance) at 8.28 GiB, the lowest peak
// of the plans within it, and is chosen; the "lower peak" line names 32 micro-batches (6.78 GiB,
// +1.61%). The output shows its bytes per parameter (naive 12, plan 9.01: rows and state, the
// output not counted) and names the evidence of both lean choices.
TEST(PlannerTest, SeedPlanShowsBytesPerParameterAndItsEvidence) {
  PlannerOptions o;
  o.preset = find_preset("ascend-910a").value();
  auto r = make_plan(seed_workload(), o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r.value().fits);
  const Candidate& c = r.value().chosen;
  EXPECT_EQ(c.workload.row_dtype, DType::kQ8);
  EXPECT_EQ(c.workload.micro_batches, 8);
  EXPECT_EQ(c.workload.precision, DType::kBF16);
  EXPECT_GT(c.prediction.device().budget_bytes, size_t{8} << 30);
  EXPECT_LT(c.prediction.device().budget_bytes, size_t{9} << 30);
  EXPECT_GT(c.step_seconds, r.value().fastest_step_seconds);
  EXPECT_LE(c.step_seconds, r.value().fastest_step_seconds * 1.01);
  // The fastest plan, left for the lower peak: the fp32 output at 2 micro-batches.
  Workload fastest = c.workload;
  fastest.precision = DType::kF32;
  fastest.micro_batches = 2;
  const Prediction f = predict_memory(fastest, Estimate::kWorstCase).value();
  EXPECT_GT(f.device().budget_bytes, size_t{22} << 30);
  EXPECT_LT(f.device().budget_bytes, size_t{23} << 30);
  const ReportContext ctx{"seed", 2048, 1000, 0, ""};
  const std::string text = plan_report_text(seed_workload(), o, r.value(), ctx);
  EXPECT_NE(text.find("  naive: 12.00 (fp32 rows 4.00 + adam state fp32 8.00)"), std::string::npos) << text;
  EXPECT_NE(text.find("  plan:  9.01 (q8 rows 1.01 + adam state fp32 8.00); at parity"), std::string::npos) << text;
  EXPECT_NE(text.find("chosen, proven: q8 rows (int8 + row scale, stochastic rounding): CTR proven (AUC: lowest -0.00027 "
                      "+-0.00086 on debfiles"),
            std::string::npos) << text;
  // The AMP output is chosen on its evidence, which the output names: proven on both tasks. fp8
  // rows lose on elfsyms and gcloud: searched out, and named.
  EXPECT_EQ(r.value().unproven_excluded, std::vector<LeanOption>{LeanOption::kFp8Rows});
  EXPECT_NE(text.find("not proven, not searched: fp8 rows"), std::string::npos) << text;
  EXPECT_TRUE(r.value().unproven_chosen.empty());
  EXPECT_NE(text.find("chosen, proven: bf16 activations (fp32 master weights): CTR proven (AUC: lowest -0.00072"),
            std::string::npos) << text;
  EXPECT_NE(text.find("text proven (P@1: lowest -0.00027 +-0.00084 on debian >= -0.003; highest +0.00130 +-0.00119 on gcloud"),
            std::string::npos) << text;
  EXPECT_NE(text.find("| amp_level | bf16 activations, fp32 master weights (torch.autocast(dtype=torch.bfloat16)) |"),
            std::string::npos) << text;
  EXPECT_NE(text.find("equal speed: the fastest fitting plan estimates 57.70 ms"), std::string::npos) << text;
  // The cheapest lower peak is named, with the budget that chooses it: 32 micro-batches, beyond
  // the tolerance.
  EXPECT_NE(text.find("lower peak: q8 rows (stochastic rounding), adam state fp32; weights on device, optimizer state on "
                      "device; 32 micro-batches; 1 shard; device peak 7.28 GB (6.78 GiB)"),
            std::string::npos) << text;
  const auto j = plan_report_json(seed_workload(), o, r.value(), ctx);
  EXPECT_DOUBLE_EQ(j["bytes_per_parameter"]["plan"]["total"].get<double>(), 4612.0 / 512);  // (512 + 4) + 512 x 8
  EXPECT_DOUBLE_EQ(j["bytes_per_parameter"]["naive"]["total"].get<double>(), 12.0);
  EXPECT_TRUE(j["bytes_per_parameter"]["at_parity"].get<bool>());
  EXPECT_EQ(j["accuracy"]["chosen"][0]["ctr"]["lowest_difference"]["dataset"], "debfiles");
  // --keep-precision: the fp32 output, the fastest plan as before the text measurement.
  o.keep_precision = true;
  auto kept = make_plan(seed_workload(), o);
  ASSERT_TRUE(kept.ok() && kept->fits);
  EXPECT_EQ(kept->chosen.workload.precision, DType::kF32);
  EXPECT_EQ(kept->chosen.workload.micro_batches, 2);
}

// Issue 39, AMP: the seed's example with the user's bf16 output (`leanemb plan --precision bf16`,
// as torch.autocast): the output and its gradient are bf16, which halves both, and summing by row
// through chunks of bags prices each chunk's row sums whatever the micro-batch count, so the
// micro-batches cost only their 20 us each and the equal-speed tie-break takes the lowest peak
// within 1%: well under 20 GiB. Bytes per parameter are unchanged (rows and state); bf16
// activations are proven on both tasks, so the plan is "at parity"; the deployment table says
// what the plan does.
TEST(PlannerTest, SeedPlanWithABf16OutputFitsTwentyGiB) {
  PlannerOptions o;
  o.preset = find_preset("ascend-910a").value();
  Workload w = seed_workload();
  w.precision = DType::kBF16;
  auto r = make_plan(w, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r.value().fits);
  const Candidate& c = r.value().chosen;
  EXPECT_EQ(c.workload.precision, DType::kBF16);
  EXPECT_EQ(c.workload.row_dtype, DType::kQ8);
  EXPECT_LE(c.prediction.device().budget_bytes, size_t{20} << 30);
  EXPECT_TRUE(r.value().unproven_chosen.empty());
  // At 2 micro-batches: the fp32 plan's 22.90 GiB less half its output (4 GiB) and half its
  // output gradient (4 GiB).
  Workload w2 = c.workload;
  w2.micro_batches = 2;
  const Prediction two = predict_memory(w2, Estimate::kWorstCase).value();
  EXPECT_GT(two.device().budget_bytes, size_t{14} << 30);
  EXPECT_LT(two.device().budget_bytes, size_t{15} << 30);
  const ReportContext ctx{"seed", 2048, 1000, 0, ""};
  const std::string text = plan_report_text(w, o, r.value(), ctx);
  // The user's AMP is proven (CTR and text): at parity.
  EXPECT_NE(text.find("  plan:  9.01 (q8 rows 1.01 + adam state fp32 8.00); at parity"), std::string::npos) << text;
  EXPECT_EQ(text.find("NOT PROVEN"), std::string::npos) << text;
  EXPECT_NE(text.find("| amp_level | bf16 activations, fp32 master weights (torch.autocast(dtype=torch.bfloat16)) | embedding "
                      "output and its gradient bf16 (round to nearest even); row sums and the update fp32 |"),
            std::string::npos) << text;
  // Not asked for, the planner searches it and chooses it too (proven; the equal-speed tie-break).
  auto searched = make_plan(seed_workload(), o);
  ASSERT_TRUE(searched.ok() && searched->fits);
  EXPECT_EQ(searched->chosen.workload.precision, DType::kBF16);
}

// The tie-break itself (issue 39): estimates within speed_tolerance of the fastest fitting plan
// are equally fast and the lowest device peak of them wins; beyond it, speed wins. The seed's
// shape over a vocabulary of 20,000 rows: every micro-batch touches nearly all of them, so an
// extra micro-batch costs its 20 us and one more pass over 20,000 rows' sums, a small part of the
// step, while its peak falls with each.
TEST(PlannerTest, EqualSpeedPlansGoToTheLowerDevicePeak) {
  PlannerOptions o;
  o.preset = find_preset("ascend-910a").value();
  Workload w = seed_workload();
  w.tables[0].num_rows = 20000;
  auto pick = [&](double tol) {
    o.speed_tolerance = tol;
    auto r = make_plan(w, o);
    EXPECT_TRUE(r.ok() && r->fits);
    return r.value();
  };
  // 0: the fastest.
  const PlanResult fastest = pick(0);
  EXPECT_DOUBLE_EQ(fastest.fastest_step_seconds, fastest.chosen.step_seconds);
  // The default, 1%: more micro-batches, a lower peak, at most 1% slower.
  const PlanResult def = pick(kEqualSpeedTolerance);
  EXPECT_GT(def.chosen.workload.micro_batches, fastest.chosen.workload.micro_batches);
  EXPECT_LT(def.chosen.prediction.device().budget_bytes, fastest.chosen.prediction.device().budget_bytes);
  EXPECT_DOUBLE_EQ(def.fastest_step_seconds, fastest.chosen.step_seconds);
  EXPECT_LE(def.chosen.step_seconds, def.fastest_step_seconds * (1 + kEqualSpeedTolerance));
  EXPECT_GT(def.chosen.step_seconds, def.fastest_step_seconds);
  // A narrower tolerance stops at fewer micro-batches (or the same), never more.
  const PlanResult narrow = pick(kEqualSpeedTolerance / 10);
  EXPECT_LE(narrow.chosen.workload.micro_batches, def.chosen.workload.micro_batches);
  EXPECT_LE(narrow.chosen.step_seconds, narrow.fastest_step_seconds * (1 + kEqualSpeedTolerance / 10));
  // Every fitting plan with a lower peak is beyond the tolerance: a budget just below the chosen
  // peak gets a plan more than 1% slower than the fastest.
  o.device_budget_bytes = def.chosen.prediction.device().budget_bytes - 1 + o.preset.runtime_reserved_bytes;
  const PlanResult below = pick(kEqualSpeedTolerance);
  EXPECT_GT(below.chosen.step_seconds, def.fastest_step_seconds * (1 + kEqualSpeedTolerance));
  // Fewer unproven options still come first: allowing the row-wise optimizer (a loss beyond the
  // goal; smaller state, a lower peak and fewer bytes) does not make the tie-break choose it.
  o.device_budget_bytes = 0;
  o.allow = {LeanOption::kRowwiseOptimizer};
  const PlanResult allowed = pick(kEqualSpeedTolerance);
  EXPECT_EQ(allowed.chosen.workload.row_optimizer.kind, OptimizerKind::kAdam);
  EXPECT_TRUE(allowed.unproven_chosen.empty());
  EXPECT_EQ(allowed.chosen.workload.micro_batches, def.chosen.workload.micro_batches);
}

// Bytes per parameter from the fat-row layout: bf16 rows + rowwise_adagrad at dim 128 is 2.06
// (256 + 4 bytes, padded to 264: docs/accuracy.md); SM3 adds its table's column accumulators;
// 8-bit Adam state its block scales; a table split across tiers pads weights and state apart.
TEST(PlannerTest, BytesPerParameterFollowTheRowLayout) {
  Workload w = seed_workload();
  w.tables[0].dim = 128;
  w.row_dtype = DType::kBF16;
  w.row_optimizer.kind = OptimizerKind::kRowwiseAdagrad;
  auto b = bytes_per_parameter(w);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_DOUBLE_EQ(b->total, 264.0 / 128);
  EXPECT_DOUBLE_EQ(b->tables[0].row_bytes, 2.0);
  EXPECT_DOUBLE_EQ(b->tables[0].state_bytes, 4.0 / 128);
  EXPECT_DOUBLE_EQ(b->tables[0].padding_bytes, 4.0 / 128);
  w.row_optimizer.kind = OptimizerKind::kSm3;
  b = bytes_per_parameter(w);
  ASSERT_TRUE(b.ok());
  EXPECT_GT(b->tables[0].table_state_bytes, 0);
  EXPECT_NEAR(b->total, 264.0 / 128 + 2.0 * 128 * 4 / (1e6 * 128), 1e-12);
  w.row_optimizer.kind = OptimizerKind::kAdam;
  w.row_optimizer.state_dtype = DType::kInt8Blockwise;
  b = bytes_per_parameter(w);
  ASSERT_TRUE(b.ok());
  EXPECT_GT(b->tables[0].state_bytes, 2.0);  // m and v, one byte each, plus block scales
  EXPECT_LT(b->tables[0].state_bytes, 2.2);
  w.row_optimizer.state_dtype = DType::kF32;
  w.placement[Category::kOptimizerState] = Tier::kHost;  // split: each part padded to 8 bytes
  b = bytes_per_parameter(w);
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(b->total, (256.0 + 1024.0) / 128);
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
  const std::string text = plan_report_text(seed_workload(), o, r.value(), ReportContext{"seed", 2048, 1000, 0, ""});
  EXPECT_NE(text.find("NOTHING FITS"), std::string::npos) << text;
  EXPECT_NE(text.find("smallest device budget"), std::string::npos) << text;
  // The named budget is enough: planning with it fits.
  o.device_budget_bytes = r.value().smallest_device_bytes;
  auto again = make_plan(seed_workload(), o);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value().fits);
}

// Checkpoint bytes: a full checkpoint is every fat row; an incremental one the distinct rows the
// interval's ids reach (expected_unique_rows), each with a varint row number, never more rows
// than the table. Tracking changed rows costs one bit per row of host weights.
TEST(PlannerTest, CheckpointBytesAndTheChangedRowsBitmap) {
  Workload w = seed_workload();
  w.tables[0].zipf = 1.05;  // a known skew: fewer rows change in a shorter interval
  auto cb = checkpoint_bytes(w, 100);
  ASSERT_TRUE(cb.ok());
  uint64_t full = 0;
  double inc = 0;
  for (const TableSpec& t : w.tables) {
    const RowLayout l = make_row_layout(t.dim, w.row_dtype, w.row_optimizer).value();
    full += static_cast<uint64_t>(t.num_rows) * l.stride_bytes;
    const double ids = 100.0 * static_cast<double>(w.batch_size) * t.mean_ids_per_sample;
    const double changed = t.vocab > 0 || t.zipf > 0 ? expected_unique_rows(static_cast<int64_t>(ids), t.vocab > 0 ? t.vocab : t.num_rows, t.zipf, t.num_rows)
                                                     : static_cast<double>(t.num_rows);
    EXPECT_LE(changed, static_cast<double>(t.num_rows));
    const double id_bytes = std::max(1.0, std::ceil(std::log2(static_cast<double>(t.num_rows) / changed + 1.0) / 7.0));
    inc += changed * (static_cast<double>(l.stride_bytes) + id_bytes);
  }
  EXPECT_EQ(cb->full, full);
  EXPECT_NEAR(cb->incremental, inc, 1e-6 * inc);
  EXPECT_LT(checkpoint_bytes(w, 1).value().incremental, checkpoint_bytes(w, 1000).value().incremental);
  const size_t before = predict_memory(w, Estimate::kExpected).value().host().peak_bytes;
  w.track_changed_rows = true;
  size_t bits = 0;
  for (const TableSpec& t : w.tables) bits += std::max<size_t>((static_cast<size_t>(t.num_rows) + 63) / 64, 1) * 8;
  EXPECT_EQ(predict_memory(w, Estimate::kExpected).value().host().peak_bytes, before + bits);
}

// A run of known steps over file-store tables: the rows it touches are those of its steps' ids
// (expected_unique_rows of steps x ids), at most the table's; its files then hold them (a log:
// within its bound for that many live rows, under the table's largest file), and its largest
// sparse base is those rows (plus row numbers): more than one interval's increment, less than a
// full checkpoint; unknown steps leave the worst case.
TEST(PlannerTest, TheRunsTouchedRowsSizeItsFilesAndSparseBase) {
  Workload w = log_store_workload(100000000, 0.01);  // 1e8 rows: a step touches a fraction of them
  const Prediction unknown = predict_memory(w, Estimate::kExpected).value();
  EXPECT_LT(unknown.run_rows_touched, 0);
  EXPECT_EQ(unknown.disk_bytes_run, unknown.disk_bytes);
  EXPECT_LT(unknown.sparse_base_bytes, 0);
  w.run_steps = 200;
  const Prediction p = predict_memory(w, Estimate::kExpected).value();
  ASSERT_GT(p.run_rows_touched, 0);
  double touched = 0, ids_all = 0;
  for (const TableSpec& t : w.tables) {
    if (t.num_rows < w.cache_min_rows) continue;  // resident: no store
    const double ids = 200.0 * static_cast<double>(w.batch_size) * t.mean_ids_per_sample;
    ids_all += ids;
    touched += expected_unique_rows(static_cast<int64_t>(ids), t.vocab > 0 ? t.vocab : t.num_rows, t.zipf, t.num_rows);
  }
  EXPECT_NEAR(p.run_rows_touched, touched, 1e-6 * touched);
  EXPECT_LE(p.run_rows_touched, ids_all);
  EXPECT_GT(p.disk_bytes_run, 0u);
  EXPECT_LT(p.disk_bytes_run, p.disk_bytes);
  const CheckpointBytes cb = checkpoint_bytes(w, 50).value();
  EXPECT_NEAR(p.sparse_base_bytes, cb.sparse_base, 1e-6 * cb.sparse_base);
  EXPECT_GT(cb.sparse_base, cb.incremental);
  EXPECT_LT(cb.sparse_base, static_cast<double>(cb.full));
}

// The checkpoints a run writes and keeps (CheckpointSchedule): every `every` steps and at the end;
// at the commit of checkpoint k the keep newest before it stay with the chains they extend.
TEST(RunDiskTest, CheckpointStepsAndTheOldestKept) {
  CheckpointSchedule c{2600, 800, 2, true, 8};  // examples/ctr_beyond_ram.toml as benchmarked
  ASSERT_EQ(checkpoint_count(c), 4);
  for (int64_t k = 1; k <= 4; ++k) EXPECT_EQ(checkpoint_step(c, k), (std::vector<int64_t>{800, 1600, 2400, 2600})[static_cast<size_t>(k - 1)]);
  // One chain (full_every 8): its root, checkpoint 1, stays while any of its links is kept.
  for (int64_t k = 1; k <= 4; ++k) EXPECT_EQ(oldest_kept_checkpoint(c, k), 1) << k;
  c.incremental = false;  // every checkpoint full: the keep newest before k, k - 2
  EXPECT_EQ(oldest_kept_checkpoint(c, 4), 2);
  EXPECT_EQ(oldest_kept_checkpoint(c, 2), 1);
  c = {100, 10, 1, true, 2};  // chains 1-2, 3-4, ...: at k = 3 checkpoint 2 (root 1) is kept, at 4 checkpoint 3
  EXPECT_EQ(oldest_kept_checkpoint(c, 3), 1);
  EXPECT_EQ(oldest_kept_checkpoint(c, 4), 3);
  c.keep = 0;  // all kept
  EXPECT_EQ(oldest_kept_checkpoint(c, 9), 1);
  EXPECT_EQ(checkpoint_count({30, 0, 3, false, 8}), 1);  // only at the end
  EXPECT_EQ(checkpoint_step({30, 0, 3, false, 8}, 1), 30);
  EXPECT_EQ(checkpoint_count({30, -1, 3, false, 8}), 0);  // none
  EXPECT_EQ(checkpoint_count({int64_t{1} << 40, 1, 0, true, 8}), int64_t{1} << 40);  // counted, not listed
}

// log_run_disk on numbers small enough to follow by hand: records of 500 bytes, segments of 100
// records (50,000 bytes), so a log of L live rows holds at most ceil(2 L / 100) + 4 segments;
// linked.
LogTableRun hand_log(double misses, double rehits, std::function<double(int64_t)> rows_written) {
  LogTableRun t;
  t.record_bytes = 500;
  t.group_bytes = 500;  // one record a block: a flush leaves nothing unused
  t.segment_records = 100;
  t.segment_bytes = 50000;
  t.misses_per_step = misses;
  t.rehits_per_checkpoint = rehits;
  t.rows_written = std::move(rows_written);
  t.linked = true;
  return t;
}

TEST(RunDiskTest, ALogThatNeverCompactsHoldsEveryRecordAndThePlaces) {
  LogTableRun t = hand_log(10, 5, [](int64_t step) { return 8.0 * static_cast<double>(step); });
  // 100 steps, a full checkpoint every 40 (steps 40, 80, 100), keep 1: at the commit of k the one
  // before stays. The peak is the largest sum over the commits.
  // Records W = max(rows, 10 x step) + (k - 1) x 5; files min(W x 500, bound). Appends may begin
  // bound - 2 segments (2 are compaction's), and each checkpoint seals one part written: the
  // segments begun, counted whole, are at most W x 500 + k x 50,000:
  //   k 1, step 40:  rows 320, W = 400,       files 200,000 (bound (640 + 99) / 100 + 4 = 11
  //                  segments), begun 250,000 < 9 x 50,000
  //   k 2, step 80:  rows 640, W = 800 + 5,   files 402,500 (bound 17), begun 502,500 < 750,000
  //   k 3, step 100: rows 800, W = 1000 + 10, files 505,000 (bound 20), begun 655,000 < 900,000
  // No compaction: files(k) = files(k-1) + new records x 500, so nothing is freed, nothing pinned.
  // Places, 7 bytes a row in each kept checkpoint: k 3 keeps 2 and 3: 7 x (640 + 800) = 10,080.
  const RunDiskPrediction d = log_run_disk({t}, CheckpointSchedule{100, 40, 1, false, 8});
  EXPECT_TRUE(d.known);
  EXPECT_TRUE(d.linked);
  EXPECT_EQ(d.peak_step, 100);
  EXPECT_EQ(d.kept_checkpoints, 2);
  EXPECT_DOUBLE_EQ(d.rows_written, 800);
  EXPECT_DOUBLE_EQ(d.records, 1010);
  EXPECT_DOUBLE_EQ(d.store_bytes, 505000);
  EXPECT_DOUBLE_EQ(d.pinned_bytes, 0);
  EXPECT_DOUBLE_EQ(d.checkpoint_bytes, 10080);
  EXPECT_DOUBLE_EQ(d.peak_bytes, 515080);
  // Records packed 4 to a 2,000-byte block: each checkpoint's flush writes its last block whole,
  // up to 1,500 bytes of it unused: 3 x 1,500 more at k 3 (the segments begun stay under the bound).
  t.group_bytes = 2000;
  const RunDiskPrediction blocks = log_run_disk({t}, CheckpointSchedule{100, 40, 1, false, 8});
  EXPECT_DOUBLE_EQ(blocks.store_bytes, 509500);
  EXPECT_DOUBLE_EQ(blocks.pinned_bytes, 0);
  EXPECT_DOUBLE_EQ(blocks.peak_bytes, 519580);
  t.group_bytes = 500;
  // Not linked: the same files, no places (the copies are predict_run_disk's part).
  t.linked = false;
  const RunDiskPrediction copied = log_run_disk({t}, CheckpointSchedule{100, 40, 1, false, 8});
  EXPECT_FALSE(copied.linked);
  EXPECT_DOUBLE_EQ(copied.peak_bytes, 505000);
  // No checkpoint: the files at the end, W = max(800, 1000).
  const RunDiskPrediction none = log_run_disk({t}, CheckpointSchedule{100, -1, 1, false, 8});
  EXPECT_EQ(none.kept_checkpoints, 0);
  EXPECT_DOUBLE_EQ(none.store_bytes, 500000);
}

// Checkpoints more often than a segment fills: each one seals the segment being appended (the
// next write begins a new one), so the log runs out of segments to begin, and compacts, long
// before its records fill its bound; what it then frees, the kept checkpoints link. (Found by
// bench/disk_model_compaction.sh: a checkpoint every 5 steps measured 7.31 MB at step 50 where
// the model without the sealed segments predicted 4.18 MB.)
TEST(RunDiskTest, CheckpointsSealSegmentsSoTheLogCompactsBeforeItsRecordsFillIt) {
  // 200 rows written in the first step, 30 records a step, a full checkpoint every 2 steps (60
  // records, under a segment of 100) over 16 steps, keep 1: at the commit of k, k - 1 stays.
  const LogTableRun t = hand_log(30, 0, [](int64_t step) { return std::min(200.0, 200.0 * static_cast<double>(step)); });
  // Bound for 200 live rows: (400 + 99) / 100 + 4 = 8 segments (400,000 bytes of files); appends
  // begin at most 8 - 2 = 6 (300,000 bytes counted whole).
  // W = max(200, 30 x step): k 1-3: 200; k 4: 240, k 5: 300, k 6: 360, k 7: 420, k 8: 480.
  // Files W x 500 (under 400,000: the records alone never reach the bound): k 6 180,000, k 7
  // 210,000, k 8 240,000. Segments begun, W x 500 + k x 50,000, at most 300,000: k 3 250,000,
  // from k 4 on 300,000 (by the log's rules: 8 sealed heads of 60 records each need 8 segments).
  // At k 8 (c0 = 7): begun since 60 x 500 + 1 x 50,000 = 80,000; excess 300,000 + 80,000 -
  // 300,000 = 80,000 (the segments freed less the moved records, in whole segments); freed at
  // most 2 x 80,000, and in bytes at most the files then + the bytes appended + the moved (at
  // most the excess) - the files now: 210,000 + 30,000 + 80,000 - 240,000 = 80,000, within
  // checkpoint 7's files (210,000): pinned 80,000.
  // Places 7 x (200 + 200) = 2,800. Peak: 240,000 + 80,000 + 2,800 = 322,800 (k 7, c0 = 6:
  // 210,000 + (180,000 + 30,000 + 80,000 - 210,000) + 2,800 = 292,800 is less).
  const RunDiskPrediction d = log_run_disk({t}, CheckpointSchedule{16, 2, 1, false, 8});
  EXPECT_EQ(d.peak_step, 16);
  EXPECT_EQ(d.kept_checkpoints, 2);
  EXPECT_DOUBLE_EQ(d.records, 480);
  EXPECT_DOUBLE_EQ(d.store_bytes, 240000);
  EXPECT_DOUBLE_EQ(d.pinned_bytes, 80000);
  EXPECT_DOUBLE_EQ(d.checkpoint_bytes, 2800);
  EXPECT_DOUBLE_EQ(d.peak_bytes, 322800);
}

// A checkpoint writes the cached rows dirty then, those updated since the one before: with one
// id a step and a checkpoint every step, at most one row each, whatever the cache holds (here
// every row the ids reach: no miss, and before this bound every cached row counted again).
TEST(RunDiskTest, ACheckpointRewritesAtMostTheRowsOfItsInterval) {
  Workload w = log_store_workload(1000000, 0.5);
  w.tables[0].vocab = 1000;  // 1,000 ranks: all cached (500,000 slots)
  w.tables[0].max_ids_per_sample = w.tables[0].mean_ids_per_sample = 1;
  w.batch_size = 1;
  w.cache_min_rows = 0;
  w.link_store_rows = true;
  w.run_steps = 10;
  w.checkpoint_every = 1;
  w.keep_checkpoints = 0;  // all kept: the peak is the last commit, k = 10
  Prediction p = predict_memory(w, Estimate::kExpected).value();
  ASSERT_TRUE(predict_run_disk(w, &p).ok());
  ASSERT_TRUE(p.run_disk.known);
  EXPECT_EQ(p.run_disk.peak_step, 10);
  // W = the rows written + (k - 1) x the rows one step dirties: one id, one row (1e6 x (1 -
  // exp(-1e-6)) = 0.9999995 in the balls-into-bins count of the rows the ids hash to).
  EXPECT_NEAR(p.run_disk.records - p.run_disk.rows_written, 9.0, 1e-4);
}

TEST(RunDiskTest, ACompactingLogPinsWhatItFreedUpToTheKeptCheckpointsFiles) {
  // 100 rows written again and again, 50 a step.
  const LogTableRun t = hand_log(50, 0, [](int64_t step) { return std::min(100.0, 100.0 * static_cast<double>(step)); });
  // 30 steps, a checkpoint every 10, keep 2, one incremental chain: all three stay.
  // The bound for 100 live rows: (200 + 99) / 100 + 4 = 6 segments = 300,000 bytes; appends
  // begin at most 4 (200,000 bytes counted whole).
  //   k 1, step 10: W = 500,  files min(250,000, 300,000) = 250,000, begun 200,000 (compacting)
  //   k 2, step 20: W = 1000, files 300,000, begun 200,000
  //   k 3, step 30: W = 1500, files 300,000, begun 200,000
  // Freed since checkpoint 1 at k 3: excess 200,000 + 1000 x 500 + 2 x 50,000 - 200,000 = 600,000;
  // at most 2 x 600,000 and 250,000 + 500,000 + 600,000 - 300,000 = 1,050,000, but the older kept
  // checkpoints link at most their files then: 250,000 + 300,000 = 550,000 pinned.
  // Places: 7 x 3 x 100 = 2,100. Peak at k 3: 300,000 + 550,000 + 2,100 = 852,100.
  const RunDiskPrediction d = log_run_disk({t}, CheckpointSchedule{30, 10, 2, true, 8});
  EXPECT_EQ(d.peak_step, 30);
  EXPECT_EQ(d.kept_checkpoints, 3);
  EXPECT_DOUBLE_EQ(d.store_bytes, 300000);
  EXPECT_DOUBLE_EQ(d.pinned_bytes, 550000);
  EXPECT_DOUBLE_EQ(d.checkpoint_bytes, 2100);
  EXPECT_DOUBLE_EQ(d.peak_bytes, 852100);
  // Full checkpoints keeping 1: at k 3 checkpoint 2 stays: excess 200,000 + 250,000 + 50,000 -
  // 200,000 = 300,000, min(600,000, 300,000 + 250,000 + 300,000 - 300,000, checkpoint 2's files
  // 300,000) = 300,000 pinned, places 7 x 200: 601,400.
  const RunDiskPrediction full = log_run_disk({t}, CheckpointSchedule{30, 10, 1, false, 8});
  EXPECT_EQ(full.kept_checkpoints, 2);
  EXPECT_DOUBLE_EQ(full.pinned_bytes, 300000);
  EXPECT_DOUBLE_EQ(full.peak_bytes, 601400);
}

// predict_run_disk on a workload of log-store tables: the stores' files over the run within the
// log's bound for the rows touched (disk_bytes_run), the places of each kept checkpoint instead of
// a sparse base when the rows are linked, the sparse base when they are not, nothing known when
// the run's length is not.
TEST(RunDiskTest, LinkedRowsNeedTheStoresAndThePlacesNotASparseBase) {
  Workload w = log_store_workload(1000000, 0.02);
  for (TableSpec& t : w.tables) t.vocab = 10000000;
  w.link_store_rows = true;
  w.checkpoint_every = 50;
  w.keep_checkpoints = 2;
  Prediction p = predict_memory(w, Estimate::kExpected).value();
  ASSERT_TRUE(predict_run_disk(w, &p).ok());
  EXPECT_FALSE(p.run_disk.known);  // the run's steps unknown
  w.run_steps = 200;
  p = predict_memory(w, Estimate::kExpected).value();
  ASSERT_TRUE(predict_run_disk(w, &p).ok());
  const RunDiskPrediction& d = p.run_disk;
  ASSERT_TRUE(d.known);
  EXPECT_TRUE(d.linked);
  EXPECT_EQ(d.peak_step, 200);
  EXPECT_EQ(d.kept_checkpoints, 4);  // one chain: 50, 100, 150, 200
  EXPECT_NEAR(d.rows_written, p.run_rows_touched, 1e-9 * p.run_rows_touched);
  EXPECT_GE(d.records, d.rows_written);
  EXPECT_GT(d.store_bytes, 0);
  EXPECT_LE(d.store_bytes, static_cast<double>(p.disk_bytes_run));  // within the log's bound
  EXPECT_GT(d.checkpoint_bytes, 7.0 * d.rows_written);   // four checkpoints' places
  EXPECT_LT(d.checkpoint_bytes, 4 * 7.0 * d.rows_written);
  EXPECT_DOUBLE_EQ(d.peak_bytes, d.store_bytes + d.pinned_bytes + d.checkpoint_bytes);
  w.link_store_rows = false;  // copies: the largest sparse base, nothing pinned
  Prediction c = predict_memory(w, Estimate::kExpected).value();
  ASSERT_TRUE(predict_run_disk(w, &c).ok());
  EXPECT_FALSE(c.run_disk.linked);
  EXPECT_DOUBLE_EQ(c.run_disk.store_bytes, d.store_bytes);
  EXPECT_DOUBLE_EQ(c.run_disk.pinned_bytes, 0);
  EXPECT_NEAR(c.run_disk.checkpoint_bytes, c.sparse_base_bytes, 1e-6 * c.sparse_base_bytes);
  EXPECT_NEAR(d.copy_checkpoint_bytes, c.sparse_base_bytes, 1e-6 * c.sparse_base_bytes);
  EXPECT_LT(d.checkpoint_bytes, c.sparse_base_bytes / 4);  // places, not rows
}

// With the disk's random-read rate (plan --disk-iops / --probe-disk), a file-store workload's
// report gives the least time its store reads take per step: the predicted reads over the rate.
TEST(PlannerTest, DiskReadRateGivesTheStepsLeastDiskTime) {
  Workload w = seed_workload();
  w.tables[0].zipf = 1.05;
  w.cache_fraction = 0.05;
  w.file_store = true;
  auto preset = find_preset("h200-141");
  ASSERT_TRUE(preset.ok());
  PlannerOptions o;
  o.preset = preset.value();
  auto r = make_plan(w, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto as_is = predict_memory(w, Estimate::kExpected);
  ASSERT_TRUE(as_is.ok());
  const double reads = as_is.value().store_rows_read_per_step;
  ASSERT_GT(reads, 0);
  ReportContext ctx{"seed", 2048, 1000, 0, ""};
  EXPECT_EQ(plan_report_text(w, o, r.value(), ctx).find("the reads alone"), std::string::npos);  // rate unknown
  ctx.disk_read_iops = 20000;
  ctx.disk_read_iops_source = "--disk-iops";
  const std::string text = plan_report_text(w, o, r.value(), ctx);
  char want[96];
  std::snprintf(want, sizeof want, "the reads alone take at least %.1f ms per step at 20000 random reads/s (--disk-iops)",
                reads / 20000 * 1e3);
  EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  const auto j = plan_report_json(w, o, r.value(), ctx);
  EXPECT_NEAR(j["as_configured"]["disk_read_ms_per_step_min"].get<double>(), reads / 20000 * 1e3, 1e-9);
  EXPECT_EQ(j["disk"]["read_iops"].get<double>(), 20000);
}

// A file store's layout changes what the plan holds for it: in place a presence bitmap (host
// weights) and a table file of the rows; a log its index (every page made, the store's
// log_store_index_bytes) and a file of at most log_store_max_file_bytes.
TEST(PlannerTest, LogLayoutPredictsItsIndexAndItsFileBound) {
  Workload w = seed_workload();
  w.cache_fraction = 0.05;
  w.file_store = true;
  w.file_store_layout = FileStoreLayout::kInPlace;
  const int64_t rows = w.tables[0].num_rows;
  const size_t stride = make_row_layout(w.tables[0].dim, w.row_dtype, w.row_optimizer).value().stride_bytes;
  auto in_place = predict_memory(w, Estimate::kExpected);
  ASSERT_TRUE(in_place.ok()) << in_place.status().to_string();
  EXPECT_EQ(in_place.value().host().peak[static_cast<int>(Category::kWeights)], tiered::presence_bitmap_bytes(rows));
  w.file_store_layout = FileStoreLayout::kLog;
  auto log = predict_memory(w, Estimate::kExpected);
  ASSERT_TRUE(log.ok()) << log.status().to_string();
  EXPECT_EQ(log.value().host().peak[static_cast<int>(Category::kWeights)],
            tiered::log_store_index_bytes(rows, stride, w.file_block_bytes));
  EXPECT_EQ(log.value().disk_bytes, tiered::log_store_max_file_bytes(rows, stride, w.file_block_bytes));
  EXPECT_GT(log.value().disk_bytes, 2 * in_place.value().disk_bytes);  // the bound: 2x the rows + 4 segments
  EXPECT_LT(log.value().store_requests_per_step, in_place.value().store_requests_per_step / 2);
}

// The value of attribute `name` in the tag holding `marker` ("" when there is none).
std::string attr_near(const std::string& html, const std::string& marker, const std::string& name) {
  const size_t at = html.find(marker);
  if (at == std::string::npos) return "";
  const size_t begin = html.rfind('<', at), end = html.find('>', at);
  const std::string tag = html.substr(begin, end - begin);
  const size_t a = tag.find(" " + name + "=\"");
  if (a == std::string::npos) return "";
  const size_t v = a + name.size() + 3;
  return tag.substr(v, tag.find('"', v) - v);
}

// plan --html: the seed's table as stacked bars whose segments hold the predicted bytes of
// each category, naive beside the plan, the usable memory as a limit; and a page when nothing fits.
TEST(PlannerTest, HtmlPageDrawsTheNaiveBreakdownBesideThePlan) {
  PlannerOptions o;
  o.preset = find_preset("ascend-910a").value();
  auto r = make_plan(seed_workload(), o);
  ASSERT_TRUE(r.ok());
  const std::string html = plan_report_html(seed_workload(), o, r.value(), ReportContext{"seed", 2048, 1000, 0, ""});
  EXPECT_EQ(html.find("<script"), std::string::npos);
  for (int c = 0; c < kNumCategories; ++c) {
    const std::string cat(category_name(static_cast<Category>(c)));
    for (auto [bar, tier] : {std::pair<const char*, const TierPrediction*>{"naive (device)", &r.value().naive.device()},
                             {"plan (device)", &r.value().chosen.prediction.device()},
                             {"plan (host)", &r.value().chosen.prediction.host()}}) {
      const size_t bytes = tier->peak[static_cast<size_t>(c)];
      const std::string v = attr_near(html, "data-bar=\"" + std::string(bar) + "\" data-category=\"" + cat + "\"", "data-value");
      EXPECT_EQ(v, bytes ? std::to_string(bytes) : std::string()) << bar << " " << cat;
    }
  }
  EXPECT_EQ(attr_near(html, "class=\"limit\"", "data-value"), std::to_string(r.value().usable_device_bytes));
  EXPECT_EQ(attr_near(html, "id=\"verdict\"", "data-fits"), "true");
  EXPECT_NE(html.find("DOES NOT FIT"), std::string::npos);  // the naive baseline, on a 910A
  o.preset = find_preset("cpu:64MiB").value();
  o.allow_host = false;
  auto none = make_plan(seed_workload(), o);
  ASSERT_TRUE(none.ok());
  const std::string page = plan_report_html(seed_workload(), o, none.value(), ReportContext{"seed", 2048, 1000, 0, ""});
  EXPECT_EQ(attr_near(page, "id=\"verdict\"", "data-fits"), "false");
  EXPECT_NE(page.find("NOTHING FITS"), std::string::npos);
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
