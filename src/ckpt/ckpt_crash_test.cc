// Crash and corruption tests of checkpoints through FaultInjectionEnv (docs reliability
// catalog): ckpt_killpoints, ckpt_drop_unsynced, ckpt_ioerror_sweep, ckpt_corruption_detect.
// Each reports on failure the operation at which the fault was injected.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ckpt/ckpt_testing.h"
#include "ckpt/fault_injection_env.h"
#include "ckpt/format.h"

namespace leanemb::ckpt {
namespace {

using testing_util::check_content;
using testing_util::Content;
using testing_util::make_content;
using testing_util::write_content;

const std::string kOut = "/out";

// Small blocks so that a checkpoint is many appends; keep_last 1 puts the deletion of the old
// checkpoint inside the protocol.
WriterOptions small_options(Env* env, int keep_last = 1) {
  WriterOptions o;
  o.env = env;
  o.block_bytes = 256;
  o.keep_last = keep_last;
  return o;
}

FindOptions quiet_find(Env* env) {
  FindOptions f;
  f.env = env;
  f.warn_to_stderr = false;
  return f;
}

// Checkpoint 1 and 2 contents with their digests, and the number of Env calls writing 2 takes.
struct TwoCheckpoints {
  Content c1 = make_content(1, 11), c2 = make_content(2, 22);
  std::string d1, d2;
  uint64_t ops_of_second = 0;
  TwoCheckpoints() {
    FaultInjectionEnv env;
    EXPECT_TRUE(write_content(kOut, c1, small_options(&env, 2)).ok());
    d1 = digest(kOut + "/checkpoints/" + step_dir_name(1), &env).value();
    const uint64_t before = env.num_mutating_ops();
    EXPECT_TRUE(write_content(kOut, c2, small_options(&env, 2)).ok());
    ops_of_second = env.num_mutating_ops() - before;
    d2 = digest(kOut + "/checkpoints/" + step_dir_name(2), &env).value();
  }
  const Content& content(int64_t step) const { return step == 1 ? c1 : c2; }
  const std::string& digest_of(int64_t step) const { return step == 1 ? d1 : d2; }
};

// The newest complete checkpoint is step 1 or 2 and holds exactly what was written for it.
void expect_intact_latest(FaultInjectionEnv& env, const TwoCheckpoints& t, bool must_be_second, const std::string& where) {
  auto latest = find_latest_complete(kOut, quiet_find(&env));
  ASSERT_TRUE(latest.ok()) << where << ": " << latest.status().to_string();
  const int64_t step = latest->ref.step;
  ASSERT_TRUE(step == 1 || step == 2) << where << ": step " << step;
  if (must_be_second) {
    EXPECT_EQ(step, 2) << where << ": a committed checkpoint was lost";
  }
  EXPECT_TRUE(verify(latest->ref.path, &env).ok()) << where;
  EXPECT_EQ(digest(latest->ref.path, &env).value(), t.digest_of(step)) << where;
  const Status s = check_content(latest->ref.path, &env, t.content(step));
  EXPECT_TRUE(s.ok()) << where << ": " << s.to_string();
}

// After recovery, writing step 2 again succeeds and leaves only it (no .tmp, no half directory).
void expect_recovers(FaultInjectionEnv& env, const TwoCheckpoints& t, const std::string& where) {
  ASSERT_TRUE(write_content(kOut, t.c2, small_options(&env)).ok()) << where;
  EXPECT_EQ(env.list_dir(kOut + "/checkpoints").value(), std::vector<std::string>{step_dir_name(2)}) << where;
  EXPECT_EQ(digest(kOut + "/checkpoints/" + step_dir_name(2), &env).value(), t.d2) << where;
}

// A crash at every Env call of writing and committing checkpoint 2 (each write, fsync, rename,
// directory fsync and deletion) leaves checkpoint 1 or 2 intact, 2 once commit returned OK;
// under both crash models (unsynced directory entries dropped or kept).
TEST(ckpt_killpoints, EveryCrashPointLeavesTheOldOrTheNewCheckpointIntact) {
  const TwoCheckpoints t;
  ASSERT_GT(t.ops_of_second, 50u);
  for (bool keep_entries : {false, true}) {
    for (uint64_t n = 0; n <= t.ops_of_second; ++n) {
      FaultInjectionEnv env;
      ASSERT_TRUE(write_content(kOut, t.c1, small_options(&env)).ok());
      const uint64_t at = env.num_mutating_ops() + n;
      env.set_fault(at, FaultKind::kCrash);
      const bool committed = write_content(kOut, t.c2, small_options(&env)).ok();
      const std::string where = "crash at op " + std::to_string(n) + " (" + env.op_description(at) + ")" +
                                (keep_entries ? ", unsynced entries kept" : "");
      EXPECT_TRUE(committed || n < t.ops_of_second) << where;
      env.simulate_crash({keep_entries});
      expect_intact_latest(env, t, committed, where);
      expect_recovers(env, t, where);
    }
  }
}

// One failed Env call anywhere (once, or from then on) leaves the previous checkpoint loadable;
// after the fault clears, writing the checkpoint again succeeds.
TEST(ckpt_ioerror_sweep, OneFailedCallAnywhereLeavesTheOldCheckpointAndRetrySucceeds) {
  const TwoCheckpoints t;
  for (FaultKind kind : {FaultKind::kFailOnce, FaultKind::kFailFromNow}) {
    for (uint64_t n = 0; n < t.ops_of_second; ++n) {
      FaultInjectionEnv env;
      ASSERT_TRUE(write_content(kOut, t.c1, small_options(&env)).ok());
      const uint64_t at = env.num_mutating_ops() + n;
      env.set_fault(at, kind);
      const bool committed = write_content(kOut, t.c2, small_options(&env)).ok();
      const std::string where = std::string(kind == FaultKind::kFailOnce ? "failure" : "failures from") + " op " +
                                std::to_string(n) + " (" + env.op_description(at) + ")";
      env.clear_fault();
      expect_intact_latest(env, t, committed, where);
      expect_recovers(env, t, where);
    }
  }
}

// A writer whose syncs do nothing (a lying disk) commits "successfully", but a crash loses the
// new checkpoint entirely and find_latest_complete returns the old, durable one.
TEST(ckpt_drop_unsynced, UnsyncedCheckpointIsNotFoundCompleteAfterACrash) {
  const TwoCheckpoints t;
  for (bool keep_entries : {false, true}) {
    FaultInjectionEnv env;
    ASSERT_TRUE(write_content(kOut, t.c1, small_options(&env, 2)).ok());
    env.set_ignore_syncs(true);
    ASSERT_TRUE(write_content(kOut, t.c2, small_options(&env, 2)).ok());
    env.simulate_crash({keep_entries});
    env.set_ignore_syncs(false);
    auto latest = find_latest_complete(kOut, quiet_find(&env));
    ASSERT_TRUE(latest.ok()) << latest.status().to_string();
    EXPECT_EQ(latest->ref.step, 1);
    EXPECT_EQ(digest(latest->ref.path, &env).value(), t.d1);
    // With the directory entries kept, step 2 exists but its files are empty: it is skipped.
    EXPECT_EQ(latest->skipped.size(), keep_entries ? 1u : 0u);
  }
}

// A crash in the middle of writing (before commit) leaves only a .tmp, which is never taken.
TEST(ckpt_drop_unsynced, CrashBeforeCommitLeavesOnlyATmpDirectory) {
  const TwoCheckpoints t;
  FaultInjectionEnv env;
  ASSERT_TRUE(write_content(kOut, t.c1, small_options(&env)).ok());
  auto w = CheckpointWriter::create(kOut, 2, small_options(&env));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->add_blob("dense/w", t.c2.blobs.at("dense/w")).ok());
  env.simulate_crash({true});
  auto latest = find_latest_complete(kOut, quiet_find(&env));
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->ref.step, 1);
  EXPECT_EQ(list_checkpoints(kOut, &env).value().size(), 1u);
}

// ---- ckpt_corruption_detect ---------------------------------------------------------------------

// Steps 1 and 2 committed in a fresh env (both kept).
struct CorruptionFixture {
  TwoCheckpoints t;
  FaultInjectionEnv env;
  std::string dir2 = kOut + "/checkpoints/" + step_dir_name(2);
  CorruptionFixture() {
    EXPECT_TRUE(write_content(kOut, t.c1, small_options(&env, 2)).ok());
    EXPECT_TRUE(write_content(kOut, t.c2, small_options(&env, 2)).ok());
  }
  // verify(step 2) fails with DataLoss naming `file`, and the finder falls back to step 1.
  void expect_detected(const std::string& file, const std::string& also, const std::string& where) {
    auto v = verify(dir2, &env);
    ASSERT_FALSE(v.ok()) << where;
    EXPECT_EQ(v.status().code(), StatusCode::kDataLoss) << where;
    EXPECT_NE(v.status().message().find(file), std::string::npos) << where << ": " << v.status().message();
    EXPECT_NE(v.status().message().find(also), std::string::npos) << where << ": " << v.status().message();
    auto latest = find_latest_complete(kOut, quiet_find(&env));
    ASSERT_TRUE(latest.ok()) << where;
    EXPECT_EQ(latest->ref.step, 1) << where;
    EXPECT_EQ(latest->skipped.size(), 1u) << where;
  }
};

// A flipped byte anywhere in the data file is found; the error names the file, the block and
// the entry stored there.
TEST(ckpt_corruption_detect, FlippedDataByteIsNamedByFileBlockAndEntry) {
  CorruptionFixture f;
  const std::string path = f.dir2 + "/" + kDataFileName;
  const uint64_t size = f.env.file_size(path).value();
  for (uint64_t off = 0; off < size; off += (off < 600 ? 1 : 97)) {
    ASSERT_TRUE(f.env.flip_byte(path, off).ok());
    const std::string block = "block " + std::to_string(off / (256 + kChecksumBytes));
    f.expect_detected(kDataFileName, block, "byte " + std::to_string(off));
    auto v = verify(f.dir2, &f.env);
    EXPECT_TRUE(v.status().message().find("blob '") != std::string::npos ||
                v.status().message().find("table '") != std::string::npos) << v.status().message();
    ASSERT_TRUE(f.env.flip_byte(path, off).ok());  // restore
  }
  EXPECT_TRUE(verify(f.dir2, &f.env).ok());
}

// A flipped byte anywhere in the manifest is found, naming the manifest.
TEST(ckpt_corruption_detect, FlippedManifestByteIsDetected) {
  CorruptionFixture f;
  const std::string path = f.dir2 + "/" + kManifestName;
  const uint64_t size = f.env.file_size(path).value();
  for (uint64_t off = 0; off < size; ++off) {
    ASSERT_TRUE(f.env.flip_byte(path, off).ok());
    f.expect_detected(kManifestName, "manifest", "byte " + std::to_string(off));
    ASSERT_TRUE(f.env.flip_byte(path, off).ok());
  }
}

// Truncating or extending either file, or deleting the data file, is found before any read.
TEST(ckpt_corruption_detect, TruncatedExtendedOrMissingFilesAreDetected) {
  for (const std::string& name : {std::string(kDataFileName), std::string(kManifestName)}) {
    for (int damage = 0; damage < 4; ++damage) {
      CorruptionFixture f;
      const std::string path = f.dir2 + "/" + name;
      const uint64_t size = f.env.file_size(path).value();
      Status s;
      if (damage == 0) s = f.env.truncate_file(path, size - 1);
      if (damage == 1) s = f.env.truncate_file(path, size / 2);
      if (damage == 2) s = f.env.append_garbage(path, 3);
      if (damage == 3) s = name == kManifestName ? f.env.truncate_file(path, 0) : f.env.remove_file(path);
      ASSERT_TRUE(s.ok()) << s.to_string();
      f.expect_detected(name, "", name + " damage " + std::to_string(damage));
    }
  }
}

// Two whole blocks swapped inside the data file still fail: checksums are seeded by position.
TEST(ckpt_corruption_detect, SwappedBlocksAreDetected) {
  CorruptionFixture f;
  const std::string path = f.dir2 + "/" + kDataFileName;
  std::vector<uint8_t> bytes = f.env.read_file(path).value();
  const size_t block = 256 + kChecksumBytes;
  std::swap_ranges(bytes.begin() + block, bytes.begin() + 2 * block, bytes.begin() + 3 * block);
  auto file = f.env.new_writable_file(path);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->append(bytes).ok());
  ASSERT_TRUE((*file)->sync().ok());
  f.expect_detected(kDataFileName, "block 1", "swapped blocks 1 and 3");
}

}  // namespace
}  // namespace leanemb::ckpt
