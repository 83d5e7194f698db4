// The `arena-soak` workload: a fragmentation soak of the DeviceArena. Random requests,
// log-uniform from 1 KiB to 64 MiB, are allocated while the bytes in use are below 70% of the
// budget and random live blocks are freed above it, for `ops` operations; the same seeded
// sequence runs once with max_split_bytes off and once on. Reported per run: peak and mean
// fragmentation (1 - largest free / total free, sampled after every operation), out-of-memory
// results, and among them the fragmentation failures (total free >= the request, yet no block
// could serve it), budget violations (must be zero), segment releases, and the time per operation
// (informative only). The arena's memory is never touched, so the soak costs no RAM.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "bench_internal.h"
#include "leanemb/device_arena.h"

namespace leanemb::bench {
namespace internal {
namespace {

struct SoakResult {
  double peak_fragmentation = 0, mean_fragmentation = 0;
  uint64_t allocs = 0, frees = 0, ooms = 0, fragmentation_failures = 0, budget_violations = 0;
  uint64_t segment_releases = 0;
  double ns_per_op = 0;
  double mean_utilisation = 0;  // allocated / budget, mean over operations
};

Result<SoakResult> soak(size_t budget, size_t max_split, int64_t ops, uint64_t seed) {
  DeviceArenaOptions ao;
  ao.budget_bytes = budget;
  ao.max_split_bytes = max_split;
  ao.try_huge_pages = false;  // untouched memory: no page size matters
  LEANEMB_ASSIGN_OR_RETURN(auto arena, DeviceArena::create(ao));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_size(std::log(1024.0), std::log(64.0 * 1024 * 1024));
  std::vector<Allocation> live;
  size_t live_bytes = 0;
  const size_t target = budget / 10 * 7;
  SoakResult r;
  double frag_sum = 0, util_sum = 0;
  const auto t0 = Clock::now();
  for (int64_t op = 0; op < ops; ++op) {
    if (live_bytes < target || live.empty()) {
      const auto bytes = static_cast<size_t>(std::exp(log_size(rng)));
      const ArenaStats before = arena->arena_stats();
      auto a = arena->allocate(bytes, Category::kActivations, 512);
      if (a.ok()) {
        live_bytes += a.value().size_bytes();
        live.push_back(std::move(a).value());
        ++r.allocs;
      } else {
        ++r.ooms;
        if (before.total_free_bytes >= (bytes + 511) / 512 * 512) ++r.fragmentation_failures;
        // Free one block so that the soak moves on, as a training loop would after a failed step.
        if (!live.empty()) {
          const size_t k = rng() % live.size();
          live_bytes -= live[k].size_bytes();
          std::swap(live[k], live.back());
          live.pop_back();
          ++r.frees;
        }
      }
    } else {
      const size_t k = rng() % live.size();
      live_bytes -= live[k].size_bytes();
      std::swap(live[k], live.back());
      live.pop_back();
      ++r.frees;
    }
    const ArenaStats s = arena->arena_stats();
    if (s.allocated_bytes > budget || s.reserved_bytes > budget) ++r.budget_violations;
    r.peak_fragmentation = std::max(r.peak_fragmentation, s.fragmentation);
    frag_sum += s.fragmentation;
    util_sum += static_cast<double>(s.allocated_bytes) / static_cast<double>(budget);
  }
  r.ns_per_op = ms_since(t0) * 1e6 / static_cast<double>(std::max<int64_t>(ops, 1));
  r.mean_fragmentation = frag_sum / static_cast<double>(std::max<int64_t>(ops, 1));
  r.mean_utilisation = util_sum / static_cast<double>(std::max<int64_t>(ops, 1));
  r.segment_releases = arena->arena_stats().num_segment_releases;
  live.clear();
  return r;
}

json to_json(const SoakResult& r) {
  return {{"peak_fragmentation", r.peak_fragmentation},
          {"mean_fragmentation", r.mean_fragmentation},
          {"mean_utilisation", r.mean_utilisation},
          {"allocs", r.allocs},
          {"frees", r.frees},
          {"out_of_memory", r.ooms},
          {"fragmentation_failures", r.fragmentation_failures},
          {"budget_violations", r.budget_violations},
          {"segment_releases", r.segment_releases},
          {"ns_per_op_incl_stats", r.ns_per_op}};
}

}  // namespace

Status run_arena_soak(const BenchOptions& o, const Progress& progress, json* doc) {
  const size_t budget = o.memory.device_budget_bytes ? o.memory.device_budget_bytes : size_t{1} << 30;
  const size_t max_split = o.memory.max_split_bytes ? o.memory.max_split_bytes : size_t{16} << 20;
  const int64_t ops = o.soak_ops;
  if (ops < 1) return invalid_argument("--ops must be >= 1");
  if (budget < (size_t{256} << 20)) return invalid_argument("arena-soak needs --device-budget >= 256MiB (requests reach 64 MiB)");
  (*doc)["budget_bytes"] = budget;
  (*doc)["ops"] = ops;
  (*doc)["request_sizes"] = "log-uniform from 1 KiB to 64 MiB, 512-byte aligned";
  (*doc)["target_utilisation"] = 0.7;
  std::printf("arena soak: budget %s, %lld operations, requests log-uniform 1 KiB - 64 MiB, target 70%% in use\n",
              format_bytes(budget).c_str(), static_cast<long long>(ops));
  std::printf("%-22s %10s %10s %10s %12s %12s %10s\n", "max_split_bytes", "peak frag", "mean frag", "OOMs",
              "frag fails", "violations", "ns/op");
  for (size_t ms : {size_t{0}, max_split}) {
    progress("soak with max_split_bytes = %s", ms ? format_bytes(ms).c_str() : "off");
    LEANEMB_ASSIGN_OR_RETURN(SoakResult r, soak(budget, ms, ops, o.seed));
    json j = to_json(r);
    j["max_split_bytes"] = ms;
    (*doc)["runs"].push_back(j);
    std::printf("%-22s %10.4f %10.4f %10llu %12llu %12llu %10.0f\n", ms ? format_bytes(ms).c_str() : "off",
                r.peak_fragmentation, r.mean_fragmentation, static_cast<unsigned long long>(r.ooms),
                static_cast<unsigned long long>(r.fragmentation_failures),
                static_cast<unsigned long long>(r.budget_violations), r.ns_per_op);
  }
  std::fflush(stdout);
  for (const auto& run : (*doc)["runs"])
    if (run["budget_violations"].get<uint64_t>() != 0) return internal_error("the arena exceeded its budget in the soak");
  return Status();
}

}  // namespace internal
}  // namespace leanemb::bench
