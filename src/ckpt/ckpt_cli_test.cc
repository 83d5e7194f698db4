// `leanemb ckpt verify | digest | list`, run as a user would (LEANEMB_CLI_PATH) on a checkpoint
// written to a temp directory: exit codes, output, and error messages that name the damage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include "ckpt/ckpt_testing.h"
#include "ckpt/format.h"
#include "tests/cli_testing.h"

namespace leanemb::ckpt {
namespace {

using testing_cli::run_cli;
using testing_cli::RunResult;

// A committed checkpoint (step 3) on disk, removed at the end.
class CkptCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(posix_env()->remove_all(out_).ok());
    WriterOptions o;
    o.block_bytes = 4096;
    auto info = testing_util::write_content(out_, testing_util::make_content(3, 3), o);
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    dir_ = info->path;
  }
  void TearDown() override { EXPECT_TRUE(posix_env()->remove_all(out_).ok()); }

  std::string out_ = ::testing::TempDir() + "leanemb_ckpt_cli_test_dir." + std::to_string(getpid());
  std::string dir_;
};

// verify of an intact checkpoint exits 0 and counts entries and bytes.
TEST_F(CkptCliTest, VerifyOfAnIntactCheckpointSaysOk) {
  const RunResult r = run_cli("ckpt verify '" + dir_ + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("ok: 7 entries, ", 0), 0u) << r.out;
}

// digest prints the library's digest: 32 hex digits.
TEST_F(CkptCliTest, DigestPrintsTheLibraryDigest) {
  const RunResult r = run_cli("ckpt digest '" + dir_ + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, digest(dir_).value() + "\n");
}

// A damaged data byte: verify exits 1 naming the file and the block; digest fails too.
TEST_F(CkptCliTest, VerifyOfACorruptCheckpointNamesFileAndBlock) {
  {
    std::fstream f(dir_ + "/" + kDataFileName, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(10);
    const int old = f.get();
    f.seekp(10);
    f.put(static_cast<char>(~old));
  }
  const RunResult r = run_cli("ckpt verify '" + dir_ + "'");
  EXPECT_EQ(r.exit_code, 4);  // I/O: a corrupt file
  EXPECT_NE(r.err.find(std::string(kDataFileName) + "' block 0"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli("ckpt digest '" + dir_ + "'").exit_code, 4);
}

// The exit code docs/formats/checkpoint.md gives for a bad block is the one verify returns
// (issue 37 item 12: the page said 1, the command exits 4, the I/O code of the exit table).
TEST_F(CkptCliTest, DocumentedVerifyExitCodeIsTheReturnedOne) {
  std::ifstream doc(std::string(LEANEMB_SOURCE_DIR) + "/docs/formats/checkpoint.md");
  ASSERT_TRUE(doc.good());
  const std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  const std::string said = "and exits 0, or exits ";
  const size_t at = text.find(said);
  ASSERT_NE(at, std::string::npos) << "the Verify section's sentence moved";
  const int documented = text[at + said.size()] - '0';
  {
    std::fstream f(dir_ + "/" + kDataFileName, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(10);
    const int old = f.get();
    f.seekp(10);
    f.put(static_cast<char>(~old));
  }
  EXPECT_EQ(run_cli("ckpt verify '" + dir_ + "'").exit_code, documented);
}

// Not a checkpoint, or no argument: exit 2 with a message.
TEST_F(CkptCliTest, MissingDirectoryOrArgumentIsABadArgument) {
  const RunResult r = run_cli("ckpt verify '" + out_ + "/nope'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no MANIFEST"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli("ckpt verify").exit_code, 2);
  EXPECT_EQ(run_cli("ckpt").exit_code, 2);
}

// list shows each step directory and whether it is complete.
TEST_F(CkptCliTest, ListShowsCompleteAndIncompleteCheckpoints) {
  ASSERT_TRUE(posix_env()->create_dir(out_ + "/checkpoints/" + step_dir_name(9)).ok());
  const RunResult r = run_cli("ckpt list '" + out_ + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(step_dir_name(3) + "  step 3, 7 entries"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(step_dir_name(9) + "  incomplete"), std::string::npos) << r.out;
  // A missing run directory is a bad argument (it printed nothing and exited 0 before).
  const RunResult missing = run_cli("ckpt list '" + out_ + "/nope'");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("no such directory"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace leanemb::ckpt
