// `leanemb train` as a user (and a scheduler) would run it, for the reliability catalog:
// run_dir_lock, no_overwrite_without_consent, graceful_stop, corrupt_checkpoints_kept,
// resume_config_diff, divergence_stop, exit_code_table and cli_bad_args. Each test reproduces a
// failure of issue 18 (the comment says what happened before) and checks the documented
// behaviour: the exit code, the message and what is left on disk.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_testing.h"

namespace leanemb::testing_cli {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const std::string d = ::testing::TempDir() + "leanemb_train_cli_" + std::to_string(getpid()) + "_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A tiny CTR run over synthetic data (generated once per test binary): 4 sparse features,
// 2048 rows, batch 128 (16 steps per epoch), a checkpoint every 2 steps.
const std::string& tiny_data() {
  static const std::string data = scratch("data");
  return data;
}
std::string tiny(const std::string& extra = "") {
  const std::string& data = tiny_data();
  return "train --quiet --set 'data.dir=\"" + data + "\"' --set data.gen.train_rows=2048 --set data.gen.eval_rows=256 "
         "--set data.gen.vocab=50 --set data.num_sparse=4 --set model.table_rows=64 --set model.embedding_dim=8 "
         "--set 'model.bottom_mlp=[16, 8]' --set 'model.top_mlp=[16]' --set train.batch_size=128 --set train.threads=2 "
         "--set train.log_every=2 --set train.checkpoint_every=2 --set train.keep_checkpoints=2 " + extra;
}

std::string step_dir(const std::string& out, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%010lld", static_cast<long long>(step));
  return out + "/checkpoints/" + name;
}

std::string training_digest(const std::string& dir) {
  const RunResult r = run_cli("ckpt digest --training '" + dir + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

std::string file_bytes(const std::string& path) { return slurp(path); }

int64_t count_lines(const std::string& path) {
  std::ifstream f(path);
  int64_t n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

// Before: a second fresh run deleted the first run's checkpoints at its first commit, exit 0,
// and metrics.jsonl mixed both runs. Now it is refused (exit 2) and nothing changes; --overwrite
// moves the old run aside and metrics.jsonl holds the new run only.
TEST(no_overwrite_without_consent, SecondFreshRunIsRefusedAndOverwriteMovesTheOldRunAside) {
  const std::string out = scratch("consent");
  ASSERT_EQ(run_cli(tiny("--steps 6 --out '" + out + "'")).exit_code, 0);
  const std::string manifest = file_bytes(step_dir(out, 6) + "/MANIFEST");
  const RunResult again = run_cli(tiny("--steps 2 --out '" + out + "'"));
  EXPECT_EQ(again.exit_code, 2);
  for (const char* part : {"holds an earlier run's 2 checkpoint directories (steps 4 to 6) and metrics.jsonl", "--resume", "--overwrite"})
    EXPECT_NE(again.err.find(part), std::string::npos) << part << " in: " << again.err;
  EXPECT_EQ(file_bytes(step_dir(out, 6) + "/MANIFEST"), manifest);
  const RunResult over = run_cli(tiny("--steps 2 --out '" + out + "' --overwrite"));
  EXPECT_EQ(over.exit_code, 0) << over.err;
  EXPECT_NE(over.err.find("moved " + out + "/checkpoints -> " + out + "/replaced-"), std::string::npos) << over.err;
  EXPECT_EQ(count_lines(out + "/metrics.jsonl"), 3);  // the new run alone: step 2 (log_every 2), its checkpoint, its final eval
  bool kept = false;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().rfind("replaced-", 0) == 0)
      kept = file_bytes(e.path().string() + "/checkpoints/step-0000000006/MANIFEST") == manifest;
  EXPECT_TRUE(kept) << "the old run's checkpoints must be kept under replaced-*/";
}

// Before: two runs on one --out raced (a misleading NotFound, or both "succeeded" with each
// other's checkpoints). Now the second is refused naming the directory and the holder; a
// kill -9 of the holder frees the lock at once.
TEST(run_dir_lock, SecondRunIsRefusedNamingTheHolderAndKill9FreesTheLock) {
  const std::string out = scratch("lock");
  Background first(tiny("--steps 1000000 --set train.checkpoint_every=0 --out '" + out + "'"));
  ASSERT_TRUE(wait_for([&] { return fs::exists(out + "/metrics.jsonl"); })) << first.err_so_far();
  const RunResult second = run_cli(tiny("--steps 2 --out '" + out + "' --resume"));
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("output directory '" + out + "' is in use by another leanemb run (pid " + std::to_string(first.pid()) + " on host "),
            std::string::npos) << second.err;
  first.signal(SIGKILL);
  EXPECT_EQ(first.wait().signal, SIGKILL);
  const RunResult third = run_cli(tiny("--steps 2 --out '" + out + "' --resume"));
  EXPECT_EQ(third.exit_code, 0) << third.err;
}

// Before: SIGTERM killed training at once, no message, no checkpoint. Now SIGTERM, SIGINT and
// SIGHUP each finish the step, write its checkpoint, say so and exit 5; for SIGTERM the resumed
// run reaches the training digest of an uninterrupted run.
TEST(graceful_stop, SignalStopsAfterAStepWithACheckpointAndTheResumeMatches) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const std::string name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP";
    SCOPED_TRACE(name);
    const std::string out = scratch("stop"), summary = out + ".json";
    Background run(tiny("--steps 1000000 --set train.checkpoint_every=0 --out '" + out + "' --json-summary '" + summary + "'"));
    ASSERT_TRUE(wait_for([&] { return count_lines(out + "/metrics.jsonl") >= 2; })) << run.err_so_far();
    run.signal(sig);
    const RunResult r = run.wait();
    ASSERT_EQ(r.exit_code, 5) << r.err;
    EXPECT_NE(r.err.find("leanemb: " + name + ": stopping after this step"), std::string::npos) << r.err;
    const size_t at = r.err.find("stopped by " + name + " after step ");
    ASSERT_NE(at, std::string::npos) << r.err;
    const int64_t step = std::stoll(r.err.substr(at + ("stopped by " + name + " after step ").size()));
    EXPECT_TRUE(fs::exists(step_dir(out, step) + "/MANIFEST")) << "no checkpoint of step " << step;
    EXPECT_NE(file_bytes(summary).find("\"outcome\": \"stopped\""), std::string::npos);
    if (sig != SIGTERM) continue;
    const std::string ref = scratch("stop_ref"), total = std::to_string(step + 5);
    ASSERT_EQ(run_cli(tiny("--steps " + total + " --out '" + out + "' --resume")).exit_code, 0);
    ASSERT_EQ(run_cli(tiny("--steps " + total + " --out '" + ref + "'")).exit_code, 0);
    EXPECT_EQ(training_digest(step_dir(out, step + 5)), training_digest(step_dir(ref, step + 5)));
  }
}

// A second signal while the first one's stop is pending aborts at once (killed by it).
TEST(graceful_stop, SecondSignalAbortsAtOnce) {
  const std::string out = scratch("abort");
  Background run(tiny("--steps 1000000 --set train.checkpoint_every=0 --out '" + out + "'"));
  ASSERT_TRUE(wait_for([&] { return count_lines(out + "/metrics.jsonl") >= 1; })) << run.err_so_far();
  run.signal(SIGTERM);
  run.signal(SIGHUP);  // a different signal: never merged with the pending first one
  const RunResult r = run.wait();
  // Pending signals are delivered lowest number first: either one may be the second.
  EXPECT_TRUE(r.signal == SIGHUP || r.signal == SIGTERM) << "exit " << r.exit_code << ": " << r.err;
  EXPECT_NE(r.err.find("second signal: aborting now"), std::string::npos) << r.err;
}

// Before: with every checkpoint corrupt, --resume started at step 0 (exit 0) and its commits
// deleted the corrupt checkpoints. Now it fails (exit 4) naming them and leaves them as they
// are; --start-fresh moves them into corrupt/ and trains from step 0.
TEST(corrupt_checkpoints_kept, ResumeWithEveryCheckpointCorruptFailsAndKeepsThem) {
  const std::string out = scratch("corrupt");
  ASSERT_EQ(run_cli(tiny("--steps 4 --out '" + out + "'")).exit_code, 0);
  for (int64_t s : {2, 4}) {
    std::fstream f(step_dir(out, s) + "/data-00000.dat", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  const std::string damaged = file_bytes(step_dir(out, 4) + "/data-00000.dat");
  const RunResult r = run_cli(tiny("--steps 6 --out '" + out + "' --resume"));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("none of the 2 checkpoint directories"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(step_dir(out, 2) + ": DataLoss"), std::string::npos) << r.err;
  EXPECT_EQ(file_bytes(step_dir(out, 4) + "/data-00000.dat"), damaged);
  const RunResult fresh = run_cli(tiny("--steps 6 --out '" + out + "' --resume --start-fresh"));
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(file_bytes(out + "/corrupt/step-0000000004/data-00000.dat"), damaged);
  EXPECT_TRUE(fs::exists(step_dir(out, 6) + "/MANIFEST"));
}

// Flips the byte at `offset` of `path`.
void flip(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  const int old = f.get();
  f.seekp(offset);
  f.put(static_cast<char>(old ^ 0x20));
}

// Before (issue 37): step 4's data file copied over step 6's (same name and size, blocks valid
// on their own) passed `ckpt verify` and `ckpt list`; `test --run` served step 4's rows under
// step 6's name and `--resume` exited 4 without falling back (--start-fresh did not help).
// Now the checkpoint id bound into every block checksum fails it: verify exits 4 naming the
// cause, list marks it bad, `test --run OUT` and `--resume` fall back to step 4 with a warning,
// the same way as for a corrupt block or manifest, and a checkpoint named directly is refused.
TEST(verify_means_resume_trusts, ADataFileOfAnotherStepIsCaughtAndEveryCorruptionFallsBackAlike) {
  const std::string out = scratch("swap"), eval = tiny_data() + "/eval.tsv";
  ASSERT_EQ(run_cli(tiny("--steps 6 --out '" + out + "'")).exit_code, 0);
  const std::string d4 = step_dir(out, 4) + "/data-00000.dat", d6 = step_dir(out, 6) + "/data-00000.dat";
  ASSERT_EQ(fs::file_size(d4), fs::file_size(d6));
  const RunResult want = run_cli("test --run '" + step_dir(out, 4) + "' --data '" + eval + "'");
  ASSERT_EQ(want.exit_code, 0) << want.err;
  const std::string good6 = file_bytes(d6), manifest6 = file_bytes(step_dir(out, 6) + "/MANIFEST");
  for (const char* damage : {"block", "manifest", "swap"}) {  // --resume below sees the swap
    SCOPED_TRACE(damage);
    {
      std::ofstream(d6, std::ios::binary | std::ios::trunc) << good6;
      std::ofstream(step_dir(out, 6) + "/MANIFEST", std::ios::binary | std::ios::trunc) << manifest6;
    }
    if (std::string(damage) == "swap") fs::copy_file(d4, d6, fs::copy_options::overwrite_existing);
    if (std::string(damage) == "block") flip(d6, 100);
    if (std::string(damage) == "manifest") flip(step_dir(out, 6) + "/MANIFEST", 50);
    const RunResult v = run_cli("ckpt verify '" + step_dir(out, 6) + "'");
    EXPECT_EQ(v.exit_code, 4) << v.out << v.err;
    if (std::string(damage) == "swap") {
      EXPECT_NE(v.err.find("another checkpoint"), std::string::npos) << v.err;
    }
    const RunResult l = run_cli("ckpt list '" + out + "'");
    EXPECT_NE(l.out.find(step_dir(out, 6) + "  bad: DataLoss"), std::string::npos) << l.out;
    EXPECT_NE(l.out.find(step_dir(out, 4) + "  step 4, "), std::string::npos) << l.out;
    const RunResult t = run_cli("test --run '" + out + "' --data '" + eval + "'");
    EXPECT_EQ(t.exit_code, 0) << t.err;
    EXPECT_EQ(t.out, want.out);
    EXPECT_NE(t.err.find("warning"), std::string::npos) << t.err;
    EXPECT_NE(t.err.find(step_dir(out, 6)), std::string::npos) << t.err;
    EXPECT_EQ(run_cli("test --run '" + step_dir(out, 6) + "' --data '" + eval + "'").exit_code, 4);
  }
  const std::string summary = out + ".json";
  const RunResult r = run_cli(tiny("--steps 8 --out '" + out + "' --resume --json-summary '" + summary + "'"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("checkpoint " + step_dir(out, 6) + " is not valid"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(file_bytes(summary))["resumed_from_step"], 4);
}

// Before: adam -> sgd on resume dropped the Adam state silently, sgd -> adam failed with "has no
// entry 'dense/opt/...'", a changed pooling went unnoticed. Now each changed key is named with
// its old and new value (exit 2); a changed step count is only a note.
TEST(resume_config_diff, ChangedKeysAreNamedWithOldAndNewValues) {
  const std::string out = scratch("diff");
  ASSERT_EQ(run_cli(tiny("--steps 2 --out '" + out + "'")).exit_code, 0);
  const RunResult r = run_cli(tiny("--steps 4 --out '" + out + "' --resume --set 'dense.optimizer=\"sgd\"' --set 'model.pooling=\"mean\"'"));
  EXPECT_EQ(r.exit_code, 2);
  for (const char* part : {"differs from the checkpoint's in 2 keys", "dense.optimizer: \"adam\" in the checkpoint, \"sgd\" now",
                           "model.pooling: \"sum\" in the checkpoint, \"mean\" now"})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << " in: " << r.err;
  const RunResult ok = run_cli(tiny("--steps 4 --out '" + out + "' --resume --set train.log_every=1"));
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("note: resuming with a changed train.log_every: 2 in the checkpoint, 1 now"), std::string::npos) << ok.err;
}

// Before: a huge learning rate skipped every step silently, then failed in the AUC with exit 2
// ("bad arguments") and no summary. Now: "diverged at step N", exit 1, the summary is written.
TEST(divergence_stop, HugeLearningRateStopsWithExitOneAndASummary) {
  const std::string out = scratch("diverge"), summary = out + ".json";
  const RunResult r = run_cli(tiny("--steps 200 --out '" + out + "' --json-summary '" + summary +
                                   "' --set 'embedding.optimizer=\"sgd\"' --set 'dense.optimizer=\"sgd\"' --set embedding.learning_rate=1e6 "
                                   "--set dense.learning_rate=1e6 --set train.max_consecutive_skipped=5"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("leanemb: error: diverged at step "), std::string::npos) << r.err;
  const std::string s = file_bytes(summary);
  EXPECT_NE(s.find("\"outcome\": \"diverged\""), std::string::npos) << s;
}

// Before (issue 37): dense.learning_rate = 1e6 alone skipped no step, ended "completed" with a
// loss of 2.85e35, AUC 0.5 and exit 0. Now the loss growing past train.max_loss_growth (1e6x
// the first step's) stops the run: "diverged at step N", exit 1, the summary written; with the
// check off (0) the run completes as before.
TEST(divergence_stop, ExplodingLossStopsWithExitOne) {
  const std::string out = scratch("explode"), summary = out + ".json";
  const RunResult r = run_cli(tiny("--steps 32 --out '" + out + "' --json-summary '" + summary + "' --set dense.learning_rate=1e6"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("leanemb: error: diverged at step "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("times its start"), std::string::npos) << r.err;
  const nlohmann::json s = nlohmann::json::parse(file_bytes(summary));
  EXPECT_EQ(s["outcome"], "diverged") << s.dump();
  EXPECT_LT(s["steps"].get<int64_t>(), 32);
  const std::string off = scratch("explode_off");
  const RunResult o = run_cli(tiny("--steps 32 --out '" + off + "' --set dense.learning_rate=1e6 --set train.max_loss_growth=0"));
  EXPECT_EQ(o.exit_code, 0) << o.err;
}

// The counters of dynamic tables reach a CTR run's metrics lines and summary as they reach a
// text run's (train/loop.cc): a table of 16 rows for 50 values admits and evicts.
TEST(dynamic_rows_counters, CtrSummaryAndMetricsCountAdmissionsAndEvictions) {
  const std::string out = scratch("dynamic"), summary = out + ".json";
  const RunResult r = run_cli(tiny("--steps 8 --out '" + out + "' --json-summary '" + summary +
                                   "' --set 'embedding.dynamic.tables=[\"C1\"]' --set embedding.dynamic.C1.capacity_rows=16"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = nlohmann::json::parse(file_bytes(summary));
  ASSERT_TRUE(s.contains("dynamic_rows")) << s.dump();
  const nlohmann::json& d = s["dynamic_rows"];
  EXPECT_EQ(d["live"].get<int64_t>(), 16) << d.dump();
  EXPECT_GT(d["evicted"].get<int64_t>(), 0) << d.dump();
  EXPECT_EQ(d["admitted"].get<int64_t>(), d["live"].get<int64_t>() + d["evicted"].get<int64_t>()) << d.dump();
  EXPECT_GT(d["idmap_bytes"].get<int64_t>(), 0) << d.dump();
  std::ifstream metrics(out + "/metrics.jsonl");
  int64_t with_counters = 0;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json m = nlohmann::json::parse(line);
    if (m.contains("step") && m.contains("loss")) {
      EXPECT_TRUE(m.contains("dynamic_rows")) << line;
      with_counters += m.contains("dynamic_rows");
    }
  }
  EXPECT_EQ(with_counters, 4);  // log_every = 2
  // A run without dynamic tables has no such field.
  const std::string out2 = scratch("static"), summary2 = out2 + ".json";
  ASSERT_EQ(run_cli(tiny("--steps 2 --out '" + out2 + "' --json-summary '" + summary2 + "'")).exit_code, 0);
  EXPECT_FALSE(nlohmann::json::parse(file_bytes(summary2)).contains("dynamic_rows"));
}

// Exit codes: the table is in --help, and every input is checked before training starts.
// Before: a directory as data file exited 1 and a missing file 2; an empty file was not named;
// a missing eval file and an unwritable --json-summary were found after the whole run;
// --steps 99999999999999999999999 saturated; `ckpt list` of a missing directory exited 0.
TEST(exit_code_table, HelpListsTheCodesAndEveryInputIsCheckedFirst) {
  for (const char* cmd : {"--help", "train --help", "plan --help", "ckpt --help"}) {
    const RunResult h = run_cli(cmd);
    EXPECT_EQ(h.exit_code, 0);
    for (const char* line : {"Exit codes (every command):", "  2  bad input:", "  3  a memory budget", "  4  I/O failure: disk full",
                             "  5  stopped by SIGTERM, SIGINT or SIGHUP"})
      EXPECT_NE(h.out.find(line), std::string::npos) << cmd << ": " << line;
  }
  const std::string dir = scratch("inputs");
  fs::create_directories(dir + "/adir");
  std::ofstream(dir + "/empty.tsv").close();
  const std::pair<std::string, std::string> bad[] = {
      {"--set 'data.train=\"" + dir + "/adir\"'", "data.train: '" + dir + "/adir' is a directory, not a data file"},
      {"--set 'data.train=\"" + dir + "/missing.tsv\"'", "data.train: no such file '" + dir + "/missing.tsv'"},
      {"--set 'data.train=\"" + dir + "/empty.tsv\"'", "data.train: data file '" + dir + "/empty.tsv' is empty"},
      {"--set 'data.eval=\"" + dir + "/missing.tsv\"'", "data.eval: no such file"},
      {"--json-summary /proc/no/such.json", "--json-summary '/proc/no/such.json' cannot be written"},
      {"--steps 99999999999999999999999", "--steps 99999999999999999999999 is out of range"},
      {"--set train.batch_size=true", "--set train.batch_size=true: expected an integer in [1, 16777216], got true (a boolean)"},
      {"--set data.gen.train_rows=4096", "data.gen.train_rows = 2048 in the data, 4096 in the config"}};
  for (const auto& [args, needle] : bad) {
    SCOPED_TRACE(args);
    const std::string out = dir + "/run";
    const bool steps = args.rfind("--steps", 0) == 0;
    const RunResult r = run_cli(tiny((steps ? "" : "--steps 4 ") + std::string("--out '") + out + "' " + args));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out + "/checkpoints")) << "trained before failing";
    fs::remove_all(out);
  }
  const RunResult list = run_cli("ckpt list '" + dir + "/nope'");
  EXPECT_EQ(list.exit_code, 2);
  const RunResult vocab = run_cli("plan --vocab 99999999999999999999 --dim 16 --batch 8");
  EXPECT_EQ(vocab.exit_code, 2);
  EXPECT_NE(vocab.err.find("--vocab"), std::string::npos) << vocab.err;
  const RunResult huge = run_cli("plan --vocab 281474976710656 --dim 65536 --batch 8");
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_NE(huge.err.find("exceeds 256 PiB: its byte counts would overflow"), std::string::npos) << huge.err;
}

// Before: a full disk exited 3 (the memory-budget code) and left the failed .tmp checkpoint on
// the disk. Now an I/O failure of a checkpoint exits 4 and removes its .tmp. (A file-size limit
// stands in for the full disk: ENOSPC and EFBIG take the same path.)
TEST(exit_code_table, CheckpointWriteFailureExitsFourAndLeavesNoTmp) {
  const std::string out = scratch("full");
  ASSERT_EQ(run_cli(tiny("--steps 1 --set train.checkpoint_every=0 --out '" + out + "/warm'")).exit_code, 0);  // the data exists
  const RunResult r = run_cli(tiny("--steps 4 --out '" + out + "/run'"), "trap '' XFSZ; ulimit -f 8; ");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("IoError"), std::string::npos) << r.err;
  bool tmp = false;
  if (fs::exists(out + "/run/checkpoints"))
    for (const auto& e : fs::directory_iterator(out + "/run/checkpoints")) tmp = tmp || e.path().extension() == ".tmp";
  EXPECT_FALSE(tmp) << "a failed checkpoint's .tmp was left behind";
}

}  // namespace
}  // namespace leanemb::testing_cli
