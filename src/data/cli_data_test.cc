// Tests of the `convert` and `gen-data` commands run as a user would (the CLI binary at
// LEANEMB_CLI_PATH): bad arguments exit with code 2 and a message naming the flag or file; a
// small gen-data + convert round trip succeeds.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "data/data_testing.h"

#ifndef LEANEMB_CLI_PATH
#error "LEANEMB_CLI_PATH must name the CLI binary"
#endif

namespace leanemb::data {
namespace {

using testing_util::ScratchDir;
using testing_util::slurp;

struct CliRun {
  int exit_code = -1;  // -1: ended by a signal
  std::string out, err;
};

CliRun run_cli(const ScratchDir& dir, const std::string& args) {
  const std::string out = dir.file("cli.out"), err = dir.file("cli.err");
  const std::string cmd = std::string("OMP_NUM_THREADS=2 '") + LEANEMB_CLI_PATH + "' " + args + " >'" + out + "' 2>'" + err + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// Each bad argument exits with code 2 and names the flag or file on stderr.
TEST(DataCliTest, BadArgumentsExitWithCode2AndNameTheProblem) {
  ScratchDir dir;
  const std::string out = "--out '" + dir.file("g") + "'";
  const std::pair<std::string, std::string> cases[] = {
      {"gen-data", "--out"},
      {"gen-data " + out + " --train-rows -5", "--train-rows"},
      {"gen-data " + out + " --train-rows 1.5", "--train-rows"},
      {"gen-data " + out + " --vocab 10,20", "--vocab"},
      {"gen-data " + out + " --vocab 10,x", "--vocab"},
      {"gen-data " + out + " --zipf abc", "--zipf"},
      {"gen-data " + out + " --format xml", "--format"},
      {"gen-data " + out + " --teacher-auc 1.5", "--teacher-auc"},
      {"gen-data " + out + " --train-rows 0 --eval-rows 0", "both 0"},
      {"gen-data " + out + " --seed ''", "--seed"},
      {"convert --in x.tsv", "--out"},
      {"convert --in '" + dir.file("missing.tsv") + "' --out '" + dir.file("o.bin") + "'", "missing.tsv"},
      {"convert --in a --out b --num-dense -1", "--num-dense"},
      {"convert --in a --out b --max-malformed-rate 2", "--max-malformed-rate"},
  };
  for (const auto& [args, needle] : cases) {
    const CliRun r = run_cli(dir, args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
  }
}

// gen-data writes train, eval and meta.json; convert turns the TSV into binary records.
TEST(DataCliTest, GenDataThenConvertSucceeds) {
  ScratchDir dir;
  const CliRun g = run_cli(dir, "gen-data --out '" + dir.file("g") + "' --train-rows 3000 --eval-rows 1000 --quiet");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_TRUE(g.err.empty()) << g.err;
  EXPECT_NE(g.out.find("teacher on eval: AUC"), std::string::npos) << g.out;
  EXPECT_TRUE(std::filesystem::exists(dir.file("g/meta.json")));
  const CliRun c = run_cli(dir, "convert --in '" + dir.file("g/train.tsv") + "' --out '" + dir.file("g/train.bin") + "'");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("3000 records"), std::string::npos) << c.out;
  EXPECT_TRUE(std::filesystem::exists(dir.file("g/train.bin")));
}

}  // namespace
}  // namespace leanemb::data
