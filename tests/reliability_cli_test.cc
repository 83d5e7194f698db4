// Issue 37 through the CLI, for the reliability catalog: writers_own_their_dirs (`export
// --serving` onto a training run's directory), outputs_never_alias_inputs (an output that is an
// input, by name, symbolic link or hard link), no_silent_write_errors (metrics.jsonl on a full
// disk), and the rough edges of `--resume` past `--steps` and `keep_checkpoints = 0`. Each test
// says what happened before; each checks the exit code, the message and what is left on disk.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/cli_testing.h"

namespace leanemb::testing_cli {
namespace {

namespace fs = std::filesystem;

// The scratch directories of this process, removed when the tests end (data, runs).
std::vector<std::string>& scratch_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}
class RemoveScratch : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    for (const std::string& d : scratch_dirs()) fs::remove_all(d, ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveScratch = ::testing::AddGlobalTestEnvironment(new RemoveScratch);

std::string scratch(const std::string& name) {
  const std::string d = ::testing::TempDir() + "leanemb_rel_cli_" + std::to_string(getpid()) + "_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  scratch_dirs().push_back(d);
  return d;
}

// The synthetic data of the tiny runs (generated once per test binary).
const std::string& data_dir() {
  static const std::string d = scratch("data");
  return d;
}

// A tiny CTR run (the train_cli_test model): 4 sparse features, 2048 rows, batch 128 (16 steps
// per epoch), a checkpoint every 2 steps, the newest 2 kept.
std::string tiny(const std::string& extra = "") {
  return "train --quiet --set 'data.dir=\"" + data_dir() + "\"' --set data.gen.train_rows=2048 --set data.gen.eval_rows=256 "
         "--set data.gen.vocab=50 --set data.num_sparse=4 --set model.table_rows=64 --set model.embedding_dim=8 "
         "--set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' --set train.batch_size=128 --set train.threads=2 "
         "--set train.log_every=2 --set train.checkpoint_every=2 --set train.keep_checkpoints=2 " + extra;
}

// The step-<N> directory names under <out>/checkpoints.
std::set<std::string> checkpoints_in(const std::string& out) {
  std::set<std::string> names;
  if (fs::exists(out + "/checkpoints"))
    for (const auto& e : fs::directory_iterator(out + "/checkpoints")) names.insert(e.path().filename().string());
  return names;
}

// Holds <dir>/LOCK as a running `leanemb train` does (flock), naming a made-up holder.
class HeldLock {
 public:
  explicit HeldLock(const std::string& dir) {
    fs::create_directories(dir);
    fd_ = ::open((dir + "/LOCK").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    const std::string who = "pid 4242 on host testhost since 2026-01-01 00:00:00\n";
    EXPECT_EQ(::write(fd_, who.data(), who.size()), static_cast<ssize_t>(who.size()));
    EXPECT_EQ(::flock(fd_, LOCK_EX | LOCK_NB), 0);
  }
  ~HeldLock() { ::close(fd_); }

 private:
  int fd_ = -1;
};

// ---- writers_own_their_dirs -------------------------------------------------------------------

// Before: `export --serving --out RUN` on a training run's directory exited 0 and its commit
// deleted every training checkpoint (step-M with M >= N, then all but the newest), the run's
// lock ignored. Now such an --out is refused (exit 2) naming what is there, nothing changes;
// --overwrite moves the run aside first; a locked --out is refused (exit 1) naming the holder;
// --out holding the exported checkpoint itself is refused even with --overwrite.
TEST(writers_own_their_dirs, ServingExportOntoATrainingRunIsRefusedAndOverwriteMovesItAside) {
  const std::string d = scratch("export");
  ASSERT_EQ(run_cli(tiny("--steps 4 --out '" + d + "/a'")).exit_code, 0);
  ASSERT_EQ(run_cli(tiny("--steps 6 --out '" + d + "/b'")).exit_code, 0);  // another run: step-4, step-6
  const std::set<std::string> theirs = checkpoints_in(d + "/b");
  ASSERT_EQ(theirs.size(), 2u);

  const RunResult refused = run_cli("export --run '" + d + "/a' --out '" + d + "/b' --serving");
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("export --serving: output directory '" + d + "/b' holds 2 checkpoint directories (steps 4 to 6)"),
            std::string::npos) << refused.err;
  EXPECT_EQ(checkpoints_in(d + "/b"), theirs);
  EXPECT_TRUE(fs::exists(d + "/b/metrics.jsonl"));

  const RunResult moved = run_cli("export --run '" + d + "/a' --out '" + d + "/b' --serving --overwrite");
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  std::string replaced;
  for (const auto& e : fs::directory_iterator(d + "/b"))
    if (e.path().filename().string().rfind("replaced-", 0) == 0) replaced = e.path().string();
  ASSERT_FALSE(replaced.empty()) << "no replaced-<time>/ directory";
  EXPECT_EQ(checkpoints_in(replaced), theirs);
  EXPECT_TRUE(fs::exists(replaced + "/metrics.jsonl"));
  EXPECT_EQ(checkpoints_in(d + "/b"), std::set<std::string>{"step-0000000004"});

  for (const std::string& self_out : {d + "/a", d + "/a/", d + "/b/../a"}) {
    const RunResult self = run_cli("export --run '" + d + "/a' --out '" + self_out + "' --serving --overwrite");
    EXPECT_EQ(self.exit_code, 2) << self.err;
    EXPECT_NE(self.err.find("holds the checkpoint being exported"), std::string::npos) << self.err;
    EXPECT_EQ(checkpoints_in(d + "/a").size(), 2u) << self_out;
  }

  HeldLock lock(d + "/c");
  const RunResult locked = run_cli("export --run '" + d + "/a' --out '" + d + "/c' --serving");
  EXPECT_EQ(locked.exit_code, 1) << locked.err;
  EXPECT_NE(locked.err.find("output directory '" + d + "/c' is in use by another leanemb run (pid 4242 on host testhost"),
            std::string::npos) << locked.err;
  EXPECT_FALSE(fs::exists(d + "/c/checkpoints"));
}

// ---- outputs_never_alias_inputs ---------------------------------------------------------------

// Before: `predict --output F` with F its own --data file truncated F before reading it (exit 0,
// the data gone); convert compared the strings only. Now every writer refuses (exit 2, naming
// both) an output that is an input by path, symbolic link or hard link, before writing a byte.
TEST(outputs_never_alias_inputs, OutputThatIsAnInputIsRefusedBeforeAnythingIsWritten) {
  const std::string d = scratch("alias");
  ASSERT_EQ(run_cli(tiny("--steps 2 --out '" + d + "/run'")).exit_code, 0);
  const std::string data = d + "/eval.tsv";
  fs::copy_file(data_dir() + "/eval.tsv", data);
  fs::create_symlink(data, d + "/soft.tsv");
  fs::create_hard_link(data, d + "/hard.tsv");
  const std::string before = slurp(data);
  ASSERT_FALSE(before.empty());
  for (const std::string& out : {data, d + "/soft.tsv", d + "/hard.tsv", d + "/./eval.tsv"}) {
    SCOPED_TRACE(out);
    const RunResult p = run_cli("predict --run '" + d + "/run' --data '" + data + "' --output '" + out + "'");
    EXPECT_EQ(p.exit_code, 2) << p.err;
    EXPECT_NE(p.err.find("--output '" + out + "' is --data '" + data + "'"), std::string::npos) << p.err;
    const RunResult t = run_cli("test --run '" + d + "/run' --data '" + data + "' --json '" + out + "'");
    EXPECT_EQ(t.exit_code, 2) << t.err;
    const RunResult c = run_cli("convert --in '" + data + "' --out '" + out + "' --num-sparse 4 --quiet");
    EXPECT_EQ(c.exit_code, 2) << c.err;
    EXPECT_EQ(slurp(data), before) << "the input was written";
  }
  // train --json-summary naming its own training file (it would be overwritten at the end).
  const std::string train_file = data_dir() + "/train.tsv";
  const std::string train_before = slurp(train_file);
  const RunResult s = run_cli(tiny("--steps 2 --out '" + d + "/run2' --json-summary '" + train_file + "'"));
  EXPECT_EQ(s.exit_code, 2) << s.err;
  EXPECT_NE(s.err.find("--json-summary '" + train_file + "' is data.train"), std::string::npos) << s.err;
  EXPECT_EQ(slurp(train_file), train_before);
  // report --output naming the run's metrics.jsonl.
  const std::string metrics_before = slurp(d + "/run/metrics.jsonl");
  const RunResult r = run_cli("report '" + d + "/run' --output '" + d + "/run/metrics.jsonl'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(slurp(d + "/run/metrics.jsonl"), metrics_before);
  // plan --write-config naming its own --config.
  const RunResult cfg = run_cli("train --print-default-config");
  ASSERT_EQ(cfg.exit_code, 0);
  std::ofstream(d + "/cfg.toml") << cfg.out;
  const RunResult plan = run_cli("plan --config '" + d + "/cfg.toml' --write-config '" + d + "/cfg.toml'");
  EXPECT_EQ(plan.exit_code, 2) << plan.err;
  EXPECT_NE(plan.err.find("--write-config '" + d + "/cfg.toml' is --config"), std::string::npos) << plan.err;
  EXPECT_EQ(slurp(d + "/cfg.toml"), cfg.out);
  // A different output still works.
  EXPECT_EQ(run_cli("predict --run '" + d + "/run' --data '" + data + "' --output '" + d + "/p.txt' --quiet").exit_code, 0);
}

// ---- no_silent_write_errors -------------------------------------------------------------------

// Before: with checkpoints off and a full disk, metrics.jsonl was cut mid-line and the run exited
// 0. Now the failed write is a warning at once, the summary says "metrics_lost" and the run
// exits 4; `leanemb report` reads the cut last line with a warning instead of failing. (A
// file-size limit stands in for the full disk: EFBIG and ENOSPC take the same path.)
TEST(no_silent_write_errors, MetricsWriteFailureExitsFourAndReportReadsTheCutLine) {
  const std::string d = scratch("full");
  ASSERT_EQ(run_cli(tiny("--steps 1 --out '" + d + "/warm'")).exit_code, 0);  // the data exists
  const RunResult r = run_cli(tiny("--steps 16 --set train.log_every=1 --set train.checkpoint_every=-1 --out '" + d + "/run'"),
                              "trap '' XFSZ; ulimit -f 4; ");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("metrics.jsonl: writing a line at step"), std::string::npos) << r.err;
  const std::string metrics = slurp(d + "/run/metrics.jsonl");
  ASSERT_FALSE(metrics.empty());
  EXPECT_LE(metrics.size(), 4u * 512u);
  const RunResult rep = run_cli("report '" + d + "/run' --output '" + d + "/report.html'");
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  if (metrics.back() != '\n') {
    EXPECT_NE(rep.err.find("is cut short"), std::string::npos) << rep.err;
  }
  // --resume drops the cut line before appending (no line follows a cut one).
  const RunResult resumed = run_cli(tiny("--steps 2 --resume --out '" + d + "/run'"));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
}

// ---- resume and keep_checkpoints --------------------------------------------------------------

// Before: `--resume --steps 10` on a step-20 checkpoint printed "steps 21-20 in this run" and
// exited 0. Now fewer steps than the checkpoint's are refused (exit 2) with the reason; as many
// exits 0 saying nothing was left to train.
TEST(exit_code_table, ResumeWithFewerStepsThanTheCheckpointSaysNothingIsLeft) {
  const std::string d = scratch("resume_past");
  ASSERT_EQ(run_cli(tiny("--steps 4 --out '" + d + "'")).exit_code, 0);
  const RunResult fewer = run_cli(tiny("--steps 2 --resume --out '" + d + "'"));
  EXPECT_EQ(fewer.exit_code, 2) << fewer.err;
  EXPECT_NE(fewer.err.find("is at step 4, --steps 2 leaves nothing to train"), std::string::npos) << fewer.err;
  EXPECT_EQ(fewer.out.find("steps 5-"), std::string::npos) << fewer.out;
  const RunResult same = run_cli(tiny("--steps 4 --resume --out '" + d + "'"));
  EXPECT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NE(same.out.find("resumed at step 4: nothing left to train"), std::string::npos) << same.out;
  EXPECT_EQ(same.out.find("steps 5-4"), std::string::npos) << same.out;
}

// keep_checkpoints = 0 keeps every checkpoint (documented in docs/train.md); 2 keeps the newest 2.
TEST(keep_checkpoints, ZeroKeepsEveryCheckpoint) {
  const std::string d = scratch("keep");
  ASSERT_EQ(run_cli(tiny("--steps 8 --set train.keep_checkpoints=0 --out '" + d + "/all'")).exit_code, 0);
  EXPECT_EQ(checkpoints_in(d + "/all"),
            (std::set<std::string>{"step-0000000002", "step-0000000004", "step-0000000006", "step-0000000008"}));
  ASSERT_EQ(run_cli(tiny("--steps 8 --out '" + d + "/two'")).exit_code, 0);
  EXPECT_EQ(checkpoints_in(d + "/two"), (std::set<std::string>{"step-0000000006", "step-0000000008"}));
}

// ---- row caches -------------------------------------------------------------------------------

// Before: embedding.cache_fraction = 0.1 with every table below embedding.cache_min_rows (the
// default 1,000,000) cached nothing without a word ("row_cache": null). Now a warning says so;
// with caches made, the run names the tables that got one.
TEST(row_cache_notes, CacheAskedForButNoneMadeIsAWarning) {
  const std::string d = scratch("cache");
  const RunResult none = run_cli(tiny("--steps 2 --set embedding.cache_fraction=0.1 --out '" + d + "/none'"));
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.err.find("warning: embedding.cache_fraction = 0.1 asks for row caches, but no table got one: every table is "
                          "below embedding.cache_min_rows = 1000000 rows (the largest, C1, has 64)"),
            std::string::npos) << none.err;
  std::string loud = tiny("--steps 2 --set embedding.cache_fraction=0.9 --set embedding.cache_min_rows=0 --out '" + d + "/some'");
  loud.replace(loud.find("--quiet "), 8, "");
  const RunResult some = run_cli(loud);
  EXPECT_EQ(some.exit_code, 0) << some.err;
  EXPECT_NE(some.err.find("row caches (embedding.cache_fraction = 0.9): C1 ("), std::string::npos) << some.err;
  EXPECT_NE(some.err.find("of 64 rows), C4 ("), std::string::npos) << some.err;
  EXPECT_EQ(some.err.find("no table got one"), std::string::npos) << some.err;
}

}  // namespace
}  // namespace leanemb::testing_cli
