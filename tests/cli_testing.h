// Helpers of the tests that run the leanemb CLI binary (LEANEMB_CLI_PATH) as a user would: run a
// command line with stdout and stderr captured, or start one in the background to signal it.
// Tests only; each test binary defines LEANEMB_CLI_PATH.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#ifndef LEANEMB_CLI_PATH
#error "LEANEMB_CLI_PATH must name the CLI binary"
#endif

namespace leanemb::testing_cli {

struct RunResult {
  bool exited = false;  // ended by exit(), not by a signal
  int exit_code = -1;   // -1 when killed by a signal
  int signal = 0;       // the signal that ended it, if one did
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline RunResult result_of(int status, const std::string& out, const std::string& err) {
  RunResult r;
  r.exited = status != -1 && WIFEXITED(status);
  r.exit_code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = status != -1 && WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.out = slurp(out);
  r.err = slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

// The shell command line that runs `leanemb <args>` (OMP_NUM_THREADS=2 keeps it small).
inline std::string cli_command(const std::string& args) {
  return std::string("OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive exec '") + LEANEMB_CLI_PATH + "' " + args;
}

// Runs `leanemb <args>` with stdout and stderr captured in files named after this process
// (CTest runs tests as parallel processes); `prefix` is shell text run first (e.g. ulimit).
inline RunResult run_cli(const std::string& args, const std::string& prefix = "") {
  const std::string stem = ::testing::TempDir() + "leanemb_cli." + std::to_string(getpid());
  const std::string out = stem + ".out", err = stem + ".err";
  const std::string cmd = prefix + cli_command(args) + " >'" + out + "' 2>'" + err + "' </dev/null";
  return result_of(std::system(cmd.c_str()), out, err);
}

// A CLI process in the background (exec'd by sh, so pid() is leanemb's own).
class Background {
 public:
  explicit Background(const std::string& args) {
    stem_ = ::testing::TempDir() + "leanemb_bg." + std::to_string(getpid()) + "." + std::to_string(++counter());
    const std::string cmd = cli_command(args) + " >'" + stem_ + ".out' 2>'" + stem_ + ".err' </dev/null";
    pid_ = fork();
    if (pid_ == 0) {
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);  // as in a terminal, not inherited ignores
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !waited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  std::string err_so_far() const { return slurp(stem_ + ".err"); }
  void signal(int sig) const { kill(pid_, sig); }
  RunResult wait() {
    int status = -1;
    waitpid(pid_, &status, 0);
    waited_ = true;
    return result_of(status, stem_ + ".out", stem_ + ".err");
  }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  pid_t pid_ = -1;
  bool waited_ = false;
  std::string stem_;
};

// Polls `cond` every 20 ms for up to `seconds`; true once it holds.
inline bool wait_for(const std::function<bool()>& cond, double seconds = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

// Expects a clean failure: a normal exit with a non-zero code (127 would mean the shell could
// not run the binary) and stderr mentioning `needle`.
inline void expect_clean_failure(const std::string& args, const std::string& needle) {
  SCOPED_TRACE("leanemb " + args);
  const RunResult r = run_cli(args);
  ASSERT_TRUE(r.exited) << "killed by a signal";
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 127) << "the CLI binary did not run";
  EXPECT_LT(r.exit_code, 126);
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
}

}  // namespace leanemb::testing_cli
