// Tests of checkpoints without crashes: round trips of blobs and tables, the layout-independent
// digest, keep-last-K, listing with leftovers, bad arguments, the manifest decoder, the fault
// injection Env itself and the POSIX Env on real files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <random>
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
using testing_util::text_bytes;
using testing_util::write_content;
using testing_util::WritePlan;

const std::string kOut = "/out";

WriterOptions options_for(Env* env, uint32_t block_bytes = 100, int keep_last = 3) {
  WriterOptions o;
  o.env = env;
  o.block_bytes = block_bytes;
  o.keep_last = keep_last;
  return o;
}

std::string dir_of(int64_t step) { return kOut + "/checkpoints/" + step_dir_name(step); }

std::vector<int64_t> steps(Env* env) {
  std::vector<int64_t> s;
  const std::vector<CheckpointRef> refs = list_checkpoints(kOut, env).value();
  for (const CheckpointRef& r : refs) s.push_back(r.step);
  return s;
}

// ---- round trips and digest -----------------------------------------------------------------

// Blobs and tables written in shuffled chunks read back byte for byte, whole and in arbitrary
// row ranges that cross chunk and block boundaries (rows of 52 B in 100-byte blocks).
TEST(CheckpointRoundTripTest, ShuffledChunksReadBackExactlyInAnyRowRange) {
  FaultInjectionEnv env;
  const Content c = make_content(7, 3);
  ASSERT_TRUE(write_content(kOut, c, options_for(&env), {.chunk_rows = 13, .shuffle = true}).ok());
  EXPECT_TRUE(check_content(dir_of(7), &env, c).ok());
  auto r = CheckpointReader::open(dir_of(7), &env).value();
  const testing_util::TableData& a = c.tables.at("emb/a");
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) {
    const int64_t begin = static_cast<int64_t>(rng() % a.rows), count = static_cast<int64_t>(rng() % (a.rows - begin + 1));
    std::vector<uint8_t> got(count * a.row_bytes);
    ASSERT_TRUE(r->read_rows("emb/a", begin, count, got).ok());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), a.bytes.begin() + begin * a.row_bytes)) << begin << "+" << count;
  }
}

// A table several times larger than one (default, 1 MiB) block streams through in 64 KiB
// appends and reads back; consecutive appends are merged into one chunk.
TEST(CheckpointRoundTripTest, TableLargerThanABlockStreamsInAndMergesChunks) {
  FaultInjectionEnv env;
  Content c;
  c.step = 1;
  std::mt19937_64 rng(9);
  c.tables["big"] = {256, 12288, text_bytes("bf16"), testing_util::random_bytes(rng, 256 * 12288)};  // 3 MiB
  ASSERT_TRUE(write_content(kOut, c, options_for(&env, 1u << 20), {.chunk_rows = 256}).ok());
  EXPECT_TRUE(check_content(dir_of(1), &env, c).ok());
  auto r = CheckpointReader::open(dir_of(1), &env).value();
  EXPECT_EQ(r->find("big")->num_chunks, 1u);
  EXPECT_EQ(r->verify().value().num_blocks, 3u);  // 3 MiB of rows, nothing else
}

// The digest depends on content only: block size, chunk size, order of appends and blob/table
// interleaving do not change it.
TEST(CheckpointDigestTest, IsIndependentOfBlockSizeChunkingAndOrder) {
  const Content c = make_content(5, 42);
  std::string first;
  const std::pair<uint32_t, WritePlan> layouts[] = {
      {7, {.chunk_rows = 1}}, {1u << 20, {.chunk_rows = 1000}}, {64, {.chunk_rows = 13, .shuffle = true, .seed = 3}},
      {100, {.chunk_rows = 5, .shuffle = true, .seed = 4}}};
  for (const auto& [block, plan] : layouts) {
    FaultInjectionEnv env;
    ASSERT_TRUE(write_content(kOut, c, options_for(&env, block), plan).ok());
    const std::string d = digest(dir_of(5), &env).value();
    EXPECT_EQ(d.size(), 32u);
    if (first.empty()) first = d;
    EXPECT_EQ(d, first) << "block " << block << ", chunk " << plan.chunk_rows;
  }
}

// Any change of logical content changes the digest: one row byte, table meta, a blob, a name,
// the step.
TEST(CheckpointDigestTest, ChangesWithAnyContentChange) {
  const Content base = make_content(5, 42);
  std::vector<Content> variants(5, base);
  variants[0].tables["emb/a"].bytes[777] ^= 1;
  variants[1].tables["emb/b"].meta.push_back('x');
  variants[2].blobs["rng"][0] ^= 1;
  variants[3].blobs["rng2"] = variants[3].blobs["rng"];
  variants[3].blobs.erase("rng");
  variants[4].step = 6;
  std::vector<std::string> digests;
  for (const Content& c : std::vector<Content>{base, variants[0], variants[1], variants[2], variants[3], variants[4]}) {
    FaultInjectionEnv env;
    ASSERT_TRUE(write_content(kOut, c, options_for(&env)).ok());
    digests.push_back(digest(dir_of(c.step), &env).value());
  }
  for (size_t i = 1; i < digests.size(); ++i) EXPECT_NE(digests[i], digests[0]) << "variant " << i - 1;
}

// ---- directory management -------------------------------------------------------------------

// After each commit only the newest keep_last checkpoints remain; keep_last 0 keeps all.
TEST(CheckpointDirectoryTest, KeepsOnlyTheLastKCheckpoints) {
  FaultInjectionEnv env;
  for (int64_t s = 1; s <= 5; ++s) ASSERT_TRUE(write_content(kOut, make_content(s, s), options_for(&env, 100, 2)).ok());
  EXPECT_EQ(steps(&env), (std::vector<int64_t>{4, 5}));
  for (int64_t s = 6; s <= 8; ++s) ASSERT_TRUE(write_content(kOut, make_content(s, s), options_for(&env, 100, 0)).ok());
  EXPECT_EQ(steps(&env), (std::vector<int64_t>{4, 5, 6, 7, 8}));
}

// A checkpoint that extends another (WriterOptions::parent_step) records the parent's step and
// id, which its reader returns; its chain runs back to the full checkpoint; keep_last keeps the
// links a kept checkpoint needs. The reserved blob name and a parent that is not earlier or not
// there are refused.
TEST(CheckpointChainTest, ParentsAreRecordedChainedAndKept) {
  FaultInjectionEnv env;
  WriterOptions o = options_for(&env, 100, 1);
  ASSERT_TRUE(write_content(kOut, make_content(1, 1), o).ok());
  o.parent_step = 1;
  ASSERT_TRUE(write_content(kOut, make_content(2, 2), o).ok());
  o.parent_step = 2;
  ASSERT_TRUE(write_content(kOut, make_content(3, 3), o).ok());
  EXPECT_EQ(steps(&env), (std::vector<int64_t>{1, 2, 3})) << "keep_last 1 keeps step 3's chain";
  auto r3 = CheckpointReader::open(dir_of(3), &env);
  ASSERT_TRUE(r3.ok());
  ASSERT_TRUE((*r3)->parent().has_value());
  EXPECT_EQ((*r3)->parent()->step, 2);
  EXPECT_EQ((*r3)->parent()->id_hex, CheckpointReader::open(dir_of(2), &env).value()->id_hex());
  auto chain = checkpoint_chain(dir_of(3), &env, true);
  ASSERT_TRUE(chain.ok()) << chain.status().to_string();
  ASSERT_EQ(chain->size(), 3u);
  EXPECT_EQ((*chain)[0].step, 1);
  EXPECT_EQ((*chain)[2].step, 3);
  EXPECT_FALSE(CheckpointReader::open(dir_of(1), &env).value()->parent().has_value());
  o.parent_step = -1;
  ASSERT_TRUE(write_content(kOut, make_content(4, 4), o).ok());
  EXPECT_EQ(steps(&env), (std::vector<int64_t>{4})) << "a full checkpoint needs no older one";
  o.parent_step = 4;
  EXPECT_EQ(CheckpointWriter::create(kOut, 4, o).status().code(), StatusCode::kInvalidArgument);
  o.parent_step = 3;
  EXPECT_EQ(CheckpointWriter::create(kOut, 5, o).status().code(), StatusCode::kNotFound);
  o.parent_step = -1;
  auto w = CheckpointWriter::create(kOut, 5, o);
  ASSERT_TRUE(w.ok());
  const uint8_t b[1] = {1};
  EXPECT_EQ((*w)->add_blob(kParentBlob, b).code(), StatusCode::kInvalidArgument);
}

// Leftovers of crashed writers and removals (.tmp, .deleting) are never found as latest and are
// removed by the next commit; a step directory without a manifest is never found either, but a
// commit leaves it in place (corrupt_checkpoints_kept: only leanemb's own leftovers are
// deleted, and those are never named step-<N>) with a warning; unrelated files are left alone.
TEST(CheckpointDirectoryTest, ResumeIgnoresTmpAndIncompleteLeftoversAndCommitRemovesThem) {
  FaultInjectionEnv env;
  const Content c2 = make_content(2, 2);
  ASSERT_TRUE(write_content(kOut, c2, options_for(&env)).ok());
  const std::string root = kOut + "/checkpoints";
  for (const std::string& d : {root + "/" + step_dir_name(3) + ".tmp", root + "/" + step_dir_name(1) + ".deleting", dir_of(4)}) {
    ASSERT_TRUE(env.create_dir(d).ok());
    ASSERT_TRUE(env.new_writable_file(d + "/" + kDataFileName).ok());
  }
  ASSERT_TRUE(env.new_writable_file(root + "/notes.txt").ok());
  FindOptions f{.env = &env, .verify_blocks = true, .warn_to_stderr = false};
  auto latest = find_latest_complete(kOut, f);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->ref.step, 2);
  ASSERT_EQ(latest->skipped.size(), 1u);  // step 4
  EXPECT_NE(latest->skipped[0].find("no MANIFEST"), std::string::npos) << latest->skipped[0];
  auto info = write_content(kOut, make_content(5, 5), options_for(&env));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->removed.size(), 2u);  // the .tmp and the .deleting
  ASSERT_EQ(info->warnings.size(), 1u);
  EXPECT_NE(info->warnings[0].find("left '" + dir_of(4) + "' in place"), std::string::npos) << info->warnings[0];
  EXPECT_EQ(env.list_dir(root).value(), (std::vector<std::string>{"notes.txt", step_dir_name(2), step_dir_name(4), step_dir_name(5)}));
}

// A commit of step N over a step-N directory that is not a complete checkpoint moves it into
// <out>/corrupt/ instead of deleting it.
TEST(CheckpointDirectoryTest, CommitOverAnIncompleteDirectorySetsItAside) {
  FaultInjectionEnv env;
  ASSERT_TRUE(env.create_dir(kOut).ok());
  ASSERT_TRUE(env.create_dir(kOut + "/checkpoints").ok());
  ASSERT_TRUE(env.create_dir(dir_of(3)).ok());
  ASSERT_TRUE(env.new_writable_file(dir_of(3) + "/" + kDataFileName).ok());
  auto info = write_content(kOut, make_content(3, 3), options_for(&env));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  ASSERT_EQ(info->set_aside.size(), 1u);
  EXPECT_EQ(info->set_aside[0], dir_of(3) + " -> " + kOut + "/corrupt/" + step_dir_name(3));
  EXPECT_TRUE(env.file_exists(kOut + "/corrupt/" + step_dir_name(3) + "/" + kDataFileName));
  EXPECT_TRUE(verify(dir_of(3), &env).ok());
}

// Committing an older step (a resume from it) removes the newer checkpoints of the abandoned run.
TEST(CheckpointDirectoryTest, CommitOfAnOlderStepReplacesNewerCheckpoints) {
  FaultInjectionEnv env;
  for (int64_t s = 1; s <= 3; ++s) ASSERT_TRUE(write_content(kOut, make_content(s, s), options_for(&env)).ok());
  const Content again = make_content(2, 99);
  ASSERT_TRUE(write_content(kOut, again, options_for(&env)).ok());
  EXPECT_EQ(steps(&env), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(check_content(dir_of(2), &env, again).ok());
}

// No checkpoints directory, or only incomplete ones: NotFound (start fresh).
TEST(CheckpointDirectoryTest, FindLatestSaysNotFoundWhenNothingIsComplete) {
  FaultInjectionEnv env;
  EXPECT_EQ(find_latest_complete(kOut, {.env = &env}).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(env.create_dir(kOut).ok());
  ASSERT_TRUE(env.create_dir(kOut + "/checkpoints").ok());
  ASSERT_TRUE(env.create_dir(dir_of(9)).ok());
  auto latest = find_latest_complete(kOut, {.env = &env, .warn_to_stderr = false});
  EXPECT_EQ(latest.status().code(), StatusCode::kNotFound);
  EXPECT_NE(latest.status().message().find(step_dir_name(9)), std::string::npos);
}

// ---- checkpoint ids (format version 2) ----------------------------------------------------------

// Copies file `from` over `to` (same name in another checkpoint: what a bad restore or a
// mixed-up copy does).
void copy_over(Env* env, const std::string& from, const std::string& to) {
  const std::vector<uint8_t> bytes = env->read_file(from).value();
  auto f = env->new_writable_file(to).value();
  ASSERT_TRUE(f->append(bytes).ok());
  ASSERT_TRUE(f->sync().ok());
  ASSERT_TRUE(f->close().ok());
}

// Step 20's data file copied over step 30's (same name, same size, valid blocks of its own):
// version 1 cannot tell (verify says ok and step 30 would serve step 20's bytes); version 2
// binds the checkpoint id into every block checksum, so verify fails naming the cause and
// find_latest_complete (what --resume uses) falls back to step 20.
TEST(CheckpointIdTest, ADataFileOfAnotherCheckpointFailsVerifyAndIsSkipped) {
  for (uint32_t version : {1u, 2u}) {
    SCOPED_TRACE("format version " + std::to_string(version));
    FaultInjectionEnv env;
    WriterOptions o = options_for(&env);
    o.format_version = version;
    const Content c20 = make_content(20, 1), c30 = make_content(30, 2);
    ASSERT_TRUE(write_content(kOut, c20, o).ok());
    ASSERT_TRUE(write_content(kOut, c30, o).ok());
    copy_over(&env, dir_of(20) + "/" + kDataFileName, dir_of(30) + "/" + kDataFileName);
    auto v = verify(dir_of(30), &env);
    auto latest = find_latest_complete(kOut, {.env = &env, .warn_to_stderr = false});
    ASSERT_TRUE(latest.ok()) << latest.status().to_string();
    if (version == 1) {  // the failure the id fixes
      EXPECT_TRUE(v.ok());
      EXPECT_EQ(latest->ref.step, 30);
      continue;
    }
    EXPECT_EQ(v.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(v.status().message().find("a data file of another checkpoint"), std::string::npos) << v.status().to_string();
    EXPECT_EQ(latest->ref.step, 20);
    EXPECT_EQ(latest->skipped.size(), 1u);
    EXPECT_TRUE(check_content(dir_of(20), &env, c20).ok());
  }
}

// Version 1 checkpoints (no id) still read, verify and digest as before; the digest does not
// depend on the format; every version 2 checkpoint gets its own id.
TEST(CheckpointIdTest, VersionOneCheckpointsStillLoadAndIdsDiffer) {
  FaultInjectionEnv env;
  WriterOptions o = options_for(&env, 100, 0);
  o.format_version = 1;
  const Content c = make_content(5, 3);
  ASSERT_TRUE(write_content(kOut, c, o).ok());
  EXPECT_TRUE(check_content(dir_of(5), &env, c).ok());
  const VerifyReport v1 = verify(dir_of(5), &env).value();
  EXPECT_EQ(v1.format_version, 1u);
  EXPECT_EQ(v1.checkpoint_id, "none");
  const std::string d1 = digest(dir_of(5), &env).value();
  std::vector<std::string> ids;
  for (int64_t step : {6, 7}) {
    Content c2 = c;
    c2.step = step;
    ASSERT_TRUE(write_content(kOut, c2, options_for(&env, 100, 0)).ok());
    const VerifyReport v2 = verify(dir_of(step), &env).value();
    EXPECT_EQ(v2.format_version, 2u);
    EXPECT_EQ(v2.checkpoint_id.size(), 32u);
    ids.push_back(v2.checkpoint_id);
  }
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_NE(d1, digest(dir_of(6), &env).value());  // the step differs
  o.format_version = 3;
  EXPECT_EQ(CheckpointWriter::create(kOut, 8, o).status().code(), StatusCode::kInvalidArgument);
}

// ---- errors ---------------------------------------------------------------------------------

// The writer rejects bad names, duplicates, sizes and ranges with the right codes, and stays
// usable after each rejection.
TEST(CheckpointWriterTest, RejectsWrongNamesSizesAndRanges) {
  FaultInjectionEnv env;
  auto w = CheckpointWriter::create(kOut, 1, options_for(&env)).value();
  const std::vector<uint8_t> row(8, 1), rows3(24, 2);
  EXPECT_EQ(w->add_blob("", row).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->add_blob("a\nb", row).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(w->add_blob("b", row).ok());
  EXPECT_EQ(w->add_blob("b", row).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->add_table("b", 8, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->add_table("t", 0, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->add_table("t", 8, -1).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(w->add_table("t", 8, 4).ok());
  EXPECT_EQ(w->append_rows("nope", 0, row).code(), StatusCode::kNotFound);
  EXPECT_EQ(w->append_rows("b", 0, row).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->append_rows("t", 0, std::span<const uint8_t>(row).first(5)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w->append_rows("t", 2, rows3).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(w->append_rows("t", -1, row).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(w->append_rows("t", 1, rows3).ok());
  EXPECT_EQ(w->append_rows("t", 3, row).code(), StatusCode::kInvalidArgument);  // overlaps [1, 4)
  EXPECT_EQ(w->append_rows("t", 0, rows3).code(), StatusCode::kInvalidArgument);
  const Status gap = w->commit().status();
  EXPECT_EQ(gap.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(gap.message().find("rows [0, 1)"), std::string::npos) << gap.message();
  ASSERT_TRUE(w->append_rows("t", 0, row).ok());
  ASSERT_TRUE(w->commit().ok());
  EXPECT_EQ(w->add_blob("late", row).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(w->commit().status().code(), StatusCode::kFailedPrecondition);
}

// Options out of range are rejected before anything is written.
TEST(CheckpointWriterTest, RejectsBadOptions) {
  FaultInjectionEnv env;
  EXPECT_EQ(CheckpointWriter::create(kOut, -1, options_for(&env)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckpointWriter::create(kOut, 1, options_for(&env, 0)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckpointWriter::create(kOut, 1, options_for(&env, 100, -1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(env.num_mutating_ops(), 0u);
}

// After an I/O error the writer refuses every further call, naming the first error.
TEST(CheckpointWriterTest, FailsForGoodAfterAnIoError) {
  FaultInjectionEnv env;
  auto w = CheckpointWriter::create(kOut, 1, options_for(&env)).value();
  env.set_fault(env.num_mutating_ops(), FaultKind::kFailOnce);
  const std::vector<uint8_t> big(300, 7);  // three blocks: appends now
  EXPECT_EQ(w->add_blob("x", big).code(), StatusCode::kIoError);
  const Status later = w->add_blob("y", big);
  EXPECT_EQ(later.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(later.message().find("injected"), std::string::npos) << later.message();
  EXPECT_TRUE(w->abandon().ok());
  EXPECT_TRUE(steps(&env).empty());
  EXPECT_EQ(env.list_dir(kOut + "/checkpoints").value().size(), 0u);
}

// The reader names what is wrong: unknown entry, wrong kind, rows out of range, buffer size.
TEST(CheckpointReaderTest, RejectsWrongNamesKindsRangesAndBuffers) {
  FaultInjectionEnv env;
  ASSERT_TRUE(write_content(kOut, make_content(1, 1), options_for(&env)).ok());
  auto r = CheckpointReader::open(dir_of(1), &env).value();
  std::vector<uint8_t> buf(52 * 2);
  EXPECT_EQ(r->read_blob("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r->read_blob("emb/a").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->read_rows("config", 0, 2, buf).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->read_rows("emb/a", 299, 2, buf).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r->read_rows("emb/a", -1, 2, buf).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r->read_rows("emb/a", 0, 1, buf).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r->read_rows("emb/a", 298, 2, buf).ok());
  EXPECT_TRUE(r->read_rows("emb/none", 0, 0, {}).ok());
  EXPECT_EQ(CheckpointReader::open(kOut, &env).status().code(), StatusCode::kNotFound);
}

// ---- format ---------------------------------------------------------------------------------

// Every truncation of a valid manifest is rejected as DataLoss (never a crash or a bad read).
TEST(CheckpointFormatTest, DecoderRejectsEveryTruncatedManifest) {
  FaultInjectionEnv env;
  ASSERT_TRUE(write_content(kOut, make_content(1, 1), options_for(&env)).ok());
  const std::vector<uint8_t> m = env.read_file(dir_of(1) + "/" + kManifestName).value();
  ASSERT_TRUE(decode_manifest(m, "m").ok());
  for (size_t n = 0; n < m.size(); ++n)
    EXPECT_EQ(decode_manifest(std::span<const uint8_t>(m).first(n), "m").status().code(), StatusCode::kDataLoss) << n;
}

// Step directory names sort by step and parse back; .tmp and other names are not steps.
TEST(CheckpointFormatTest, StepDirectoryNamesRoundTrip) {
  EXPECT_EQ(step_dir_name(100), "step-0000000100");
  EXPECT_EQ(parse_step_dir_name(step_dir_name(12345678901)), 12345678901);
  EXPECT_EQ(parse_step_dir_name("step-7"), 7);
  for (const char* bad : {"step-", "step-1.tmp", "step--1", "step-99999999999999999999", "Step-1", "x"})
    EXPECT_FALSE(parse_step_dir_name(bad).has_value()) << bad;
  EXPECT_TRUE(is_tmp_dir_name(step_dir_name(3) + ".tmp"));
  EXPECT_FALSE(is_tmp_dir_name("notes.tmp"));
}

// ---- the Envs -------------------------------------------------------------------------------

// The in-memory model: synced bytes and synced directory entries survive a crash, nothing else.
TEST(FaultInjectionEnvTest, CrashKeepsOnlySyncedBytesAndSyncedEntries) {
  FaultInjectionEnv env;
  ASSERT_TRUE(env.create_dir("/d").ok());
  ASSERT_TRUE(env.sync_dir("/").ok());
  auto f = env.new_writable_file("/d/a").value();
  ASSERT_TRUE(f->append(text_bytes("abc")).ok());
  ASSERT_TRUE(f->sync().ok());
  ASSERT_TRUE(f->append(text_bytes("def")).ok());
  ASSERT_TRUE(env.sync_dir("/d").ok());
  ASSERT_TRUE(env.new_writable_file("/d/b").ok());  // entry never synced
  ASSERT_TRUE(env.rename("/d/a", "/d/c").ok());     // rename never synced
  env.simulate_crash();
  EXPECT_EQ(env.list_dir("/d").value(), std::vector<std::string>{"a"});
  EXPECT_EQ(env.read_file("/d/a").value(), text_bytes("abc"));
  EXPECT_EQ(f->append(text_bytes("x")).code(), StatusCode::kIoError);  // handle from before the crash
}

// A kCrash fault fails the chosen call and every later one, reads included, until cleared.
TEST(FaultInjectionEnvTest, CrashFaultStopsEverythingAfterIt) {
  FaultInjectionEnv env;
  ASSERT_TRUE(env.create_dir("/d").ok());
  env.set_fault(env.num_mutating_ops() + 1, FaultKind::kCrash);
  ASSERT_TRUE(env.create_dir("/d/1").ok());
  EXPECT_EQ(env.create_dir("/d/2").code(), StatusCode::kIoError);
  EXPECT_TRUE(env.crashed());
  EXPECT_EQ(env.list_dir("/d").status().code(), StatusCode::kIoError);
  EXPECT_FALSE(env.file_exists("/d/2"));
  env.clear_fault();
  EXPECT_EQ(env.list_dir("/d").value(), std::vector<std::string>{"1"});
}

// POSIX errors carry the path and the errno text, with the documented codes.
TEST(PosixEnvTest, ErrorsNameThePathAndTheReason) {
  const std::string missing = ::testing::TempDir() + "leanemb_no_such_dir." + std::to_string(getpid()) + "/f";
  const Status open = posix_env()->new_random_access_file(missing).status();
  EXPECT_EQ(open.code(), StatusCode::kNotFound);
  EXPECT_NE(open.message().find(missing), std::string::npos) << open.message();
  EXPECT_NE(open.message().find("No such file"), std::string::npos) << open.message();
  EXPECT_EQ(posix_env()->new_writable_file(missing).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(posix_env()->sync_dir(parent_dir(missing)).code(), StatusCode::kNotFound);
  EXPECT_TRUE(posix_env()->remove_all(missing).ok());  // absent is fine
  const std::string file = ::testing::TempDir() + "leanemb_ckpt_file." + std::to_string(getpid());
  ASSERT_TRUE(posix_env()->new_writable_file(file).ok());
  EXPECT_EQ(posix_env()->create_dir(file).code(), StatusCode::kIoError);  // a file has that name
  EXPECT_TRUE(posix_env()->remove_file(file).ok());
}

// The POSIX env on real files: write, verify, digest equal to the in-memory one (layout and
// Env do not matter), then a flipped byte is found and the finder falls back.
TEST(PosixEnvTest, RealFilesRoundTripAndCorruptionIsDetected) {
  const std::string out = ::testing::TempDir() + "leanemb_ckpt_test." + std::to_string(getpid());
  ASSERT_TRUE(posix_env()->remove_all(out).ok());
  const Content c1 = make_content(1, 1), c2 = make_content(2, 2);
  ASSERT_TRUE(write_content(out, c1, options_for(nullptr, 4096)).ok());
  auto info = write_content(out, c2, options_for(nullptr, 4096));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_TRUE(check_content(info->path, nullptr, c2).ok());
  EXPECT_TRUE(verify(info->path).ok());
  FaultInjectionEnv mem;
  ASSERT_TRUE(write_content(kOut, c2, options_for(&mem, 64)).ok());
  EXPECT_EQ(digest(info->path).value(), digest(dir_of(2), &mem).value());
  {
    std::fstream f(info->path + "/" + kDataFileName, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(5000);
    const int old = f.get();
    f.seekp(5000);
    f.put(static_cast<char>(~old));
  }
  const Status bad = verify(info->path).status();
  EXPECT_EQ(bad.code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.message().find("block 1"), std::string::npos) << bad.message();
  auto latest = find_latest_complete(out, {.warn_to_stderr = false});
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->ref.step, 1);
  EXPECT_TRUE(posix_env()->remove_all(out).ok());
}

}  // namespace
}  // namespace leanemb::ckpt
