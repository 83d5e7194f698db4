// Test helpers of src/dist (tests only): run a function on every rank of a local-thread world.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/local_comm.h"

namespace leanemb::dist::test_util {

using RankFn = std::function<Status(Communicator&)>;

// Runs fn on `p` threads, one per rank of a fresh LocalWorld, and returns each rank's Status.
inline std::vector<Status> run_world(int p, const RankFn& fn, int64_t timeout_ms = 30000) {
  auto world = LocalWorld::create(p, CommOptions{timeout_ms});
  EXPECT_TRUE(world.ok()) << world.status().to_string();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < p; ++r) comms.push_back(std::move((*world)->communicator(r)).value());
  std::vector<Status> out(static_cast<size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] { out[static_cast<size_t>(r)] = fn(*comms[static_cast<size_t>(r)]); });
  }
  for (auto& t : threads) t.join();
  return out;
}

inline void expect_all_ok(const std::vector<Status>& st) {
  for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
}

// A fresh directory under the test temp dir, removed with the object.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::path(testing::TempDir()) / "leanemb_dist_XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string sub(const char* name) const { return (std::filesystem::path(path) / name).string(); }
};

// n gradient values drawn from N(0, 1) by mt19937_64(seed): the same on every rank.
inline std::vector<float> normal_grads(uint64_t seed, int64_t n) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g(rng);
  return v;
}

// A Status that carries a test's mismatch out of a rank's thread.
inline Status mismatch(const std::string& what) { return internal_error("test mismatch: " + what); }

}  // namespace leanemb::dist::test_util
