// Printing and writing `leanemb bench` results, and the machine-load monitor.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "bench_internal.h"
#include "leanemb/json.h"

namespace leanemb::bench::internal {

CpuLoadMonitor::CpuLoadMonitor()
    : t0_(Clock::now()), sys0_(read_system()), self0_(read_self_ticks()), load0_(read_loadavg()) {}

json CpuLoadMonitor::finish() const {
  const double wall = std::chrono::duration<double>(Clock::now() - t0_).count();
  const SysTicks sys1 = read_system();
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double busy = static_cast<double>(sys1.busy - sys0_.busy) / hz;
  const double self = static_cast<double>(read_self_ticks() - self0_) / hz;
  const double steal = static_cast<double>(sys1.steal - sys0_.steal) / hz;
  const double foreign = wall > 0 ? std::max(0.0, busy - self) / wall : 0.0;
  json j = {{"wall_s", wall},
            {"foreign_cpu_cores", foreign},
            {"steal_cpu_cores", wall > 0 ? steal / wall : 0.0},
            {"self_cpu_cores", wall > 0 ? self / wall : 0.0},
            {"loadavg_at_start", load0_},
            {"note", "foreign_cpu_cores: average number of cores other processes kept busy during the run "
                     "(/proc/stat minus this process); above ~0.25 the timings are disturbed"}};
  if (foreign > 0.25) j["warning"] = "other processes used the CPUs during this run: timings are disturbed";
  return j;
}

CpuLoadMonitor::SysTicks CpuLoadMonitor::read_system() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  uint64_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  f >> cpu;
  for (uint64_t& x : v) f >> x;  // user nice system idle iowait irq softirq steal
  return SysTicks{v[0] + v[1] + v[2] + v[5] + v[6], v[7]};
}

uint64_t CpuLoadMonitor::read_self_ticks() {
  std::ifstream f("/proc/self/stat");
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t rp = all.rfind(')');  // the command name may hold spaces
  if (rp == std::string::npos || rp + 2 > all.size()) return 0;
  std::istringstream in(all.substr(rp + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {  // fields 14 and 15: utime, stime (all threads)
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  return utime + stime;
}

double CpuLoadMonitor::read_loadavg() {
  std::ifstream f("/proc/loadavg");
  double l = 0;
  f >> l;
  return l;
}

// ---- output ------------------------------------------------------------------------------------

std::string ms_cell(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", j[key].get<double>());
  return b;
}

void print_load(const json& doc) {
  if (!doc.contains("machine_load")) return;
  const json& l = doc["machine_load"];
  std::printf("machine load during the run: other processes %.2f cores, steal %.2f cores%s\n",
              l["foreign_cpu_cores"].get<double>(), l["steal_cpu_cores"].get<double>(),
              l.contains("warning") ? "  WARNING: timings disturbed by other processes" : "");
}

void print_table(const json& doc) {
  std::printf("\nworkload %s: %d thread(s), %d warm-up + %d measured iterations per contender, interleaved in rounds; "
              "median [p10-p90]\n",
              doc["workload"].get<std::string>().c_str(), doc["threads"].get<int>(), doc["warmup"].get<int>(),
              doc["iters"].get<int>());
  std::printf("%-36s %-4s %21s %21s %9s %8s %7s %5s %7s %8s %10s\n", "contender", "gate", "forward ms", "step ms",
              "Mlookup/s", "fwd GB/s", "ceiling", "eff", "step/bl", "B/param", "engine peak");
  for (const json& c : doc["contenders"]) {
    auto range = [&](const char* m, const char* lo, const char* hi) {
      if (c[m].is_null()) return std::string("-");
      return ms_cell(c, m) + " [" + ms_cell(c, lo) + "-" + ms_cell(c, hi) + "]";
    };
    char ceil[16] = "-", eff[16] = "-", ratio[16] = "-";
    if (c.contains("gather_ceiling_gbs")) {
      std::snprintf(ceil, sizeof ceil, "%.1f", c["gather_ceiling_gbs"].get<double>());
      std::snprintf(eff, sizeof eff, "%.0f%%", 100.0 * c["forward_efficiency"].get<double>());
    }
    const char* rk = c.value("step_ms_ratio_vs_baseline", json()).is_null() ? "forward_ms_ratio_vs_baseline"
                                                                              : "step_ms_ratio_vs_baseline";
    if (c.contains(rk) && !c[rk].is_null()) std::snprintf(ratio, sizeof ratio, "%.2f", c[rk].get<double>());
    std::printf("%-36s %-4s %21s %21s %9.2f %8.2f %7s %5s %7s %8.3f %10s\n", c["name"].get<std::string>().c_str(),
                c["gate"].get<std::string>().c_str(), range("forward_ms_median", "forward_ms_p10", "forward_ms_p90").c_str(),
                range("step_ms_median", "step_ms_p10", "step_ms_p90").c_str(), c["lookups_per_s"].get<double>() / 1e6,
                c["forward_gbs"].get<double>(), ceil, eff, ratio, c["bytes_per_param"].get<double>(),
                format_bytes(c["memory"]["peak_bytes"].get<size_t>()).c_str());
  }
  std::printf("(step/bl: step time / the shape's baseline contender's, median of per-round ratios (forward for "
              "lookup-only rows); engine peak: the contender's own allocator, all categories; process peak RSS %s)\n",
              format_bytes(doc["peak_rss_bytes"].get<size_t>()).c_str());
  if (doc.contains("summary") && !doc["summary"].empty()) std::printf("summary: %s\n", dump_json(doc["summary"]).c_str());
  print_load(doc);
  std::fflush(stdout);
}

void print_roofline(const json& r) {
  std::printf("\nroofline: %s buffer, %d thread(s), best of repeats (GB/s = 1e9 B/s)\n",
              format_bytes(r["buffer_bytes"].get<size_t>()).c_str(), r["threads"].get<int>());
  std::printf("  sequential read %8.2f GB/s\n  triad           %8.2f GB/s\n", r["seq_read_gbs"].get<double>(),
              r["triad_gbs"].get<double>());
  std::printf("  %-10s %12s %12s %12s %12s\n", "row bytes", "gather", "plain", "prefetched", "rmw");
  for (const json& g : r["random_rows"])
    std::printf("  %-10zu %12.2f %12.2f %12.2f %12.2f\n", g["row_bytes"].get<size_t>(), g["gather_gbs"].get<double>(),
                g["gather_plain_gbs"].get<double>(), g["gather_prefetch_gbs"].get<double>(), g["rmw_gbs"].get<double>());
  const int64_t hb = r.value("huge_page_bytes", int64_t{-1});
  std::printf("  probe buffer on huge pages: %s\n", hb < 0 ? "unknown" : format_bytes(static_cast<size_t>(hb)).c_str());
  if (r.contains("page_walk") && !r["page_walk"].empty()) {
    std::printf("  page walk (one-thread pointer chase, ns per dependent load):\n");
    std::printf("  %-12s %12s %12s %10s %16s\n", "buffer", "4 KiB pages", "huge pages", "saved", "huge obtained");
    for (const json& p : r["page_walk"]) {
      const double sm = p["small_pages_ns_per_load"].get<double>(), hu = p["huge_pages_ns_per_load"].get<double>();
      const int64_t got = p["huge_pages_obtained_bytes"].get<int64_t>();
      std::printf("  %-12s %12.1f %12.1f %9.1f%% %16s\n", format_bytes(p["buffer_bytes"].get<size_t>()).c_str(), sm, hu,
                  sm > 0 ? 100.0 * (sm - hu) / sm : 0.0, got < 0 ? "unknown" : format_bytes(static_cast<size_t>(got)).c_str());
    }
  }
}

Status write_json(const std::string& path, const json& doc) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);  // a failure shows at open
  std::ofstream f(path);
  if (!f) return Status(StatusCode::kIoError, "cannot open '" + path + "' for writing");
  f << dump_json(doc, 2) << "\n";
  f.close();
  if (!f) return Status(StatusCode::kIoError, "cannot write '" + path + "'");
  return Status();
}

// Cross-contender figures: per shape, each contender's speed relative to the shape's baseline.
json summarize_workload(const std::string& w, const json& contenders) {
  json s = json::object();
  for (const json& c : contenders) {
    if (!c.contains("baseline")) continue;
    const std::string shape = c["shape"].get<std::string>();
    if (w == "precision") {
      if (!c["forward_ms_ratio_vs_baseline"].is_null())
        s["forward_speedup_vs_fp32"][shape][c["dtype"].get<std::string>()] = 1.0 / c["forward_ms_ratio_vs_baseline"].get<double>();
      if (!c["forward_only_ms_ratio_vs_baseline"].is_null())
        s["forward_only_speedup_vs_fp32"][shape][c["dtype"].get<std::string>()] =
            1.0 / c["forward_only_ms_ratio_vs_baseline"].get<double>();
    } else if (!c["step_ms_ratio_vs_baseline"].is_null()) {
      s["step_ms_ratio_vs_" + c["baseline"].get<std::string>()][c["name"].get<std::string>()] =
          c["step_ms_ratio_vs_baseline"].get<double>();
    }
    if (c.contains("forward_efficiency")) {
      s["forward_efficiency"][c["name"].get<std::string>()] = c["forward_efficiency"];
      s["forward_efficiency_same_round"][c["name"].get<std::string>()] = c["forward_efficiency_same_round"];
    }
    s["bytes_per_param"][c["name"].get<std::string>()] = c["bytes_per_param"];
  }
  return s;
}

}  // namespace leanemb::bench::internal
