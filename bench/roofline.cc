// Measured ceilings of this machine: sequential read, STREAM triad, random row gather and random
// row read-modify-write, with N OpenMP threads over a buffer far larger than L3; and the latency
// of one dependent random load (pointer chase) on small and on huge pages, the page-walk cost.
//
// Each probe runs `repeats` times and keeps the best (as STREAM does): a ceiling is what the
// machine can do, and interference only ever lowers a run. Buffers are first touched by the
// threads that use them, outside the timed region. Row gathers sum rows as 64-bit words into a
// small accumulator, the way a pooled lookup sums rows into its output; the row indices come
// from a precomputed array, like a lookup's ids. The probe buffers are allocated like the engine's
// tables (TrackingAllocator, DeviceArena): 2 MiB aligned and marked for transparent huge pages,
// so that a kernel's efficiency against them compares like with like.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/multiversion.h"
#include "kernels/row_access.h"
#include "workloads.h"

namespace leanemb::bench {

namespace {

using Clock = std::chrono::steady_clock;

volatile uint64_t g_sink = 0;  // keeps probe results alive

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

constexpr size_t kHugePage = size_t{2} << 20;

// Bytes of this process's anonymous memory on transparent huge pages (/proc/self/smaps_rollup's
// AnonHugePages), or -1 where the kernel does not say.
int64_t anon_huge_bytes() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string key;
  while (f >> key) {
    if (key == "AnonHugePages:") {
      int64_t kib = -1;
      f >> kib;
      return kib < 0 ? -1 : kib * 1024;
    }
  }
  return -1;
}

// A buffer of `bytes` (rounded up to 2 MiB), 2 MiB aligned, marked MADV_HUGEPAGE (huge = true, the
// engine's policy for large buffers) or MADV_NOHUGEPAGE; first touched by `nt` threads with
// non-zero contents (no zero-page tricks). *huge_bytes: the huge-page bytes the touch obtained.
Result<Buffer> alloc_touched(size_t bytes, int nt, bool huge = true, int64_t* huge_bytes = nullptr) {
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) return resource_exhausted("roofline: cannot allocate " + std::to_string(rounded) + " bytes");
  madvise(p, rounded, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);  // best effort, as the allocators
  const int64_t before = anon_huge_bytes();
  uint8_t* b = static_cast<uint8_t*>(p);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(rounded / 8); ++i) {
    const uint64_t v = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    std::memcpy(b + i * 8, &v, 8);
  }
  if (huge_bytes != nullptr) {
    const int64_t after = anon_huge_bytes();
    *huge_bytes = before < 0 || after < 0 ? -1 : std::max<int64_t>(0, after - before);
  }
  return Buffer(b);
}

template <typename F>
double best_seconds(int repeats, F&& f) {
  double best = 1e30;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto t0 = Clock::now();
    f();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
  }
  return best;
}

LEANEMB_MULTIVERSION
uint64_t sum_words(const uint64_t* p, int64_t n) {
  uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
  for (; i < n; ++i) acc[0] += p[i];
  return acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
}

LEANEMB_MULTIVERSION
void triad(double* __restrict a, const double* __restrict b, const double* __restrict c, double s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

// Reads rows idx[i0..i1) of `row_words` 64-bit words (plus `tail` bytes) and returns their sum.
// The sums live in registers (four lanes, vectorized), so the loop issues nothing but the row
// loads: it is the cheapest way to touch every byte of the rows, which is what a ceiling needs.
LEANEMB_MULTIVERSION
uint64_t gather_rows(const uint8_t* base, size_t stride, const int64_t* idx, int64_t i0, int64_t i1, int64_t row_words,
                     size_t tail, size_t row_bytes, int prefetch) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int64_t i = i0; i < i1; ++i) {
    if (prefetch > 0 && i + prefetch < i1) {
      const uint8_t* q = base + static_cast<size_t>(idx[i + prefetch]) * stride;
      kernels::prefetch_span<0, 3>(q, row_bytes);
    } else if (prefetch < 0 && i - prefetch < i1) {  // negative distance: non-temporal hint
      const uint8_t* q = base + static_cast<size_t>(idx[i - prefetch]) * stride;
      kernels::prefetch_span<0, 0>(q, row_bytes);
    }
    const uint8_t* row = base + static_cast<size_t>(idx[i]) * stride;
    const uint64_t* w = reinterpret_cast<const uint64_t*>(row);
    int64_t j = 0;
    for (; j + 4 <= row_words; j += 4) {
      s0 += w[j];
      s1 += w[j + 1];
      s2 += w[j + 2];
      s3 += w[j + 3];
    }
    for (; j < row_words; ++j) s0 += w[j];
    for (size_t t = 0; t < tail; ++t) s1 += row[static_cast<size_t>(row_words) * 8 + t];
  }
  return (s0 + s1) + (s2 + s3);
}

// Adds 1 to every word of rows idx[i0..i1) (read, modify, write back).
LEANEMB_MULTIVERSION
void rmw_rows(uint8_t* base, size_t stride, const int64_t* idx, int64_t i0, int64_t i1, int64_t row_words, size_t tail,
              size_t row_bytes) {
  constexpr int64_t kPrefetch = 8;
  for (int64_t i = i0; i < i1; ++i) {
    if (i + kPrefetch < i1) {
      uint8_t* q = base + static_cast<size_t>(idx[i + kPrefetch]) * stride;
      kernels::prefetch_span<1, 0>(q, row_bytes);
    }
    uint8_t* row = base + static_cast<size_t>(idx[i]) * stride;
    uint64_t* w = reinterpret_cast<uint64_t*>(row);
    for (int64_t j = 0; j < row_words; ++j) w[j] += 1;
    for (size_t t = 0; t < tail; ++t) row[static_cast<size_t>(row_words) * 8 + t] += 1;
  }
}

uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Random row indices: thread t's share [chunk t] draws rows from [lo_t, hi_t) when `partition`
// (RMW: threads never write the same row), else from all rows.
std::vector<int64_t> random_rows(int64_t count, int64_t num_rows, int nt, bool partition, uint64_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(count));
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    int64_t i0, i1, lo = 0, hi = num_rows;
    kernels::static_chunk(count, t, n, &i0, &i1);
    if (partition) kernels::static_chunk(num_rows, t, n, &lo, &hi);
    uint64_t s = seed + static_cast<uint64_t>(t) * 0x632be59bd9b4e019ull;
    const uint64_t span = static_cast<uint64_t>(std::max<int64_t>(1, hi - lo));
    for (int64_t i = i0; i < i1; ++i)
      idx[static_cast<size_t>(i)] =
          lo + static_cast<int64_t>((static_cast<unsigned __int128>(splitmix(&s)) * span) >> 64);
  }
  return idx;
}

double gbs(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }

// Row indices of a gather pattern: uniform over the buffer, or, with segments, groups of
// `per_segment` rows uniform inside one segment (a table), the segments visited in turn.
std::vector<int64_t> pattern_rows(int64_t count, int64_t num_rows, const GatherPattern& p, uint64_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(count));
  uint64_t s = seed;
  const int64_t seg_rows =
      p.segment_bytes > 0 ? std::min<int64_t>(num_rows, std::max<int64_t>(1, static_cast<int64_t>(p.segment_bytes / p.stride_bytes))) : num_rows;
  const int64_t num_segs = std::max<int64_t>(1, num_rows / seg_rows);
  const int64_t group = p.segment_bytes > 0 && p.per_segment > 0 ? p.per_segment : count;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t seg = (i / group) % num_segs;
    idx[static_cast<size_t>(i)] =
        seg * seg_rows + static_cast<int64_t>((static_cast<unsigned __int128>(splitmix(&s)) * static_cast<uint64_t>(seg_rows)) >> 64);
  }
  return idx;
}

// One timed gather pass; seconds. Indices are processed in groups of `group` (one segment at a
// time, like one feature at a time), each group split over the threads.
double gather_pass(const uint8_t* base, const std::vector<int64_t>& idx, const GatherPattern& p, int nt, int prefetch) {
  const int64_t count = static_cast<int64_t>(idx.size());
  const int64_t group = p.segment_bytes > 0 && p.per_segment > 0 ? p.per_segment : count;
  const int64_t row_words = static_cast<int64_t>(p.row_bytes / 8);
  const size_t tail = p.row_bytes % 8;
  uint64_t total = 0;
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(nt) reduction(+ : total)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    for (int64_t g0 = 0; g0 < count; g0 += group) {
      const int64_t g1 = std::min(count, g0 + group);
      int64_t i0, i1;
      kernels::static_chunk(g1 - g0, t, n, &i0, &i1);
      total += gather_rows(base, p.stride_bytes, idx.data(), g0 + i0, g0 + i1, row_words, tail, p.row_bytes, prefetch);
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  g_sink = g_sink + total;
  return s;
}

// Full probe over an existing buffer.
GatherCeiling gather_on(const Buffer& buf, size_t buffer_bytes, const GatherPattern& p, int nt, int repeats) {
  GatherCeiling g;
  g.row_bytes = p.row_bytes;
  g.stride_bytes = p.stride_bytes;
  g.segment_bytes = p.segment_bytes;
  g.per_segment = p.per_segment;
  const int64_t num_rows = static_cast<int64_t>(buffer_bytes / p.stride_bytes);
  // About 256 MiB of row traffic per timed pass: long enough to swamp timer and fork/join noise.
  const int64_t count = std::max<int64_t>(int64_t{1} << 16, static_cast<int64_t>((size_t{256} << 20) / p.row_bytes));
  const std::vector<int64_t> idx = pattern_rows(count, num_rows, p, 0x1234 + p.row_bytes);
  auto best_gbs = [&](int prefetch) {
    double best = 1e30;
    for (int r = 0; r < std::max(1, repeats); ++r) best = std::min(best, gather_pass(buf.get(), idx, p, nt, prefetch));
    return gbs(static_cast<double>(count) * static_cast<double>(p.row_bytes), best);
  };
  const double bytes = static_cast<double>(count) * static_cast<double>(p.row_bytes);
  g.gather_plain_gbs = best_gbs(0);
  // Software prefetch helps random gathers on this kind of VM, and the best distance and hint
  // depend on the row size: try a few and keep the best (it is a ceiling). A negative distance
  // means the non-temporal hint (prefetchnta), which the lookup kernels use.
  for (int distance : {8, 16, 32, -8, -16, -32}) {
    const double v = best_gbs(distance);
    if (v > g.gather_prefetch_gbs) {
      g.gather_prefetch_gbs = v;
      g.best_prefetch_rows = distance;
    }
  }
  g.gather_gbs = std::max(g.gather_plain_gbs, g.gather_prefetch_gbs);
  if (g.gather_plain_gbs >= g.gather_prefetch_gbs) g.best_prefetch_rows = 0;

  const int64_t row_words = static_cast<int64_t>(p.row_bytes / 8);
  const size_t tail = p.row_bytes % 8;
  const std::vector<int64_t> widx = random_rows(count, num_rows, nt, true, 0x5678 + p.row_bytes);
  uint8_t* base = buf.get();
  g.rmw_gbs = gbs(2.0 * bytes, best_seconds(repeats, [&] {
#pragma omp parallel num_threads(nt)
                    {
                      int64_t i0, i1;
                      kernels::static_chunk(count, omp_get_thread_num(), omp_get_num_threads(), &i0, &i1);
                      rmw_rows(base, p.stride_bytes, widx.data(), i0, i1, row_words, tail, p.row_bytes);
                    }
                  }));
  return g;
}

// Nanoseconds per load of a pointer chase over `bytes`: one 8-byte link per 64-byte line, the
// lines in one random cycle (Sattolo's shuffle), so every load depends on the last and misses the
// caches and, on small pages, the TLB. Best of `repeats` passes of `loads` loads.
Result<PageWalkPoint::Side> chase(size_t bytes, bool huge, int64_t loads, int repeats) {
  PageWalkPoint::Side side;
  LEANEMB_ASSIGN_OR_RETURN(Buffer buf, alloc_touched(bytes, 1, huge, &side.huge_page_bytes));
  const int64_t lines = static_cast<int64_t>(bytes / 64);
  std::vector<uint32_t> order(static_cast<size_t>(lines));
  for (int64_t i = 0; i < lines; ++i) order[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  uint64_t s = 0x5eed + bytes;
  for (int64_t i = lines - 1; i > 0; --i) std::swap(order[static_cast<size_t>(i)], order[splitmix(&s) % static_cast<uint64_t>(i)]);
  uint64_t* w = reinterpret_cast<uint64_t*>(buf.get());
  for (int64_t i = 0; i < lines; ++i)
    w[static_cast<size_t>(order[static_cast<size_t>(i)]) * 8] = static_cast<uint64_t>(order[static_cast<size_t>((i + 1) % lines)]) * 8;
  uint64_t x = 0;
  for (int64_t i = 0; i < std::min<int64_t>(lines, loads); ++i) x = w[x];  // warm the TLB and caches alike
  const double sec = best_seconds(repeats, [&] {
    for (int64_t i = 0; i < loads; ++i) x = w[x];
  });
  g_sink = g_sink + x;
  side.ns_per_load = sec / static_cast<double>(loads) * 1e9;
  return side;
}

}  // namespace

Result<std::vector<PageWalkPoint>> measure_page_walk(const std::vector<size_t>& buffer_bytes, int64_t loads, int repeats) {
  if (loads < 1 || repeats < 1) return invalid_argument("page walk: loads and repeats must be >= 1");
  std::vector<PageWalkPoint> out;
  for (size_t b : buffer_bytes) {
    if (b < (size_t{1} << 20) || b > (size_t{64} << 30))
      return invalid_argument("page walk: buffer sizes must be in [1 MiB, 64 GiB], got " + std::to_string(b) + " bytes");
    PageWalkPoint p;
    p.buffer_bytes = b;
    LEANEMB_ASSIGN_OR_RETURN(p.small, chase(b, /*huge=*/false, loads, repeats));
    LEANEMB_ASSIGN_OR_RETURN(p.huge, chase(b, /*huge=*/true, loads, repeats));
    out.push_back(p);
  }
  return out;
}

namespace {

Status check_common(size_t buffer_bytes, int nt) {
  if (buffer_bytes < (size_t{64} << 20))
    return invalid_argument("roofline: buffer must be >= 64 MiB (>> L3), got " + std::to_string(buffer_bytes) + " bytes");
  if (nt <= 0) return invalid_argument("roofline: num_threads must be > 0");
  return Status();
}

}  // namespace

struct GatherProbe::Impl {
  Buffer buf;
  size_t buffer_bytes = 0;
  int nt = 1;
  std::map<std::tuple<size_t, size_t, size_t, int64_t>, std::vector<int64_t>> quick_idx;  // pattern -> rows
};

GatherProbe::GatherProbe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GatherProbe::~GatherProbe() = default;

Result<std::unique_ptr<GatherProbe>> GatherProbe::create(size_t buffer_bytes, int num_threads) {
  LEANEMB_RETURN_IF_ERROR(check_common(buffer_bytes, num_threads));
  auto impl = std::make_unique<Impl>();
  LEANEMB_ASSIGN_OR_RETURN(impl->buf, alloc_touched(buffer_bytes, num_threads));
  impl->buffer_bytes = buffer_bytes;
  impl->nt = num_threads;
  return std::unique_ptr<GatherProbe>(new GatherProbe(std::move(impl)));
}

size_t GatherProbe::buffer_bytes() const { return impl_->buffer_bytes; }

static Status check_pattern(const GatherPattern& p, size_t buffer_bytes) {
  if (p.row_bytes == 0 || p.stride_bytes < p.row_bytes || p.stride_bytes > buffer_bytes)
    return invalid_argument("roofline: need 0 < row_bytes <= stride_bytes <= buffer bytes");
  return Status();
}

Result<GatherCeiling> GatherProbe::measure(const GatherPattern& p, int repeats) {
  LEANEMB_RETURN_IF_ERROR(check_pattern(p, impl_->buffer_bytes));
  return gather_on(impl_->buf, impl_->buffer_bytes, p, impl_->nt, repeats);
}

Result<double> GatherProbe::quick_gbs(const GatherPattern& p, int prefetch_rows, size_t traffic_bytes) {
  LEANEMB_RETURN_IF_ERROR(check_pattern(p, impl_->buffer_bytes));
  auto& idx = impl_->quick_idx[{p.row_bytes, p.stride_bytes, p.segment_bytes, p.per_segment}];
  if (idx.empty()) {
    int64_t count = std::max<int64_t>(int64_t{1} << 14, static_cast<int64_t>(traffic_bytes / p.row_bytes));
    if (p.per_segment > 0) count = std::max<int64_t>(p.per_segment, count / p.per_segment * p.per_segment);
    idx = pattern_rows(count, static_cast<int64_t>(impl_->buffer_bytes / p.stride_bytes), p, 0x9abc + p.row_bytes);
  }
  const double s = gather_pass(impl_->buf.get(), idx, p, impl_->nt, prefetch_rows);
  return gbs(static_cast<double>(idx.size()) * static_cast<double>(p.row_bytes), s);
}

Result<GatherCeiling> measure_gather_ceiling(size_t row_bytes, size_t stride_bytes, size_t buffer_bytes, int num_threads,
                                             int repeats) {
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<GatherProbe> probe, GatherProbe::create(buffer_bytes, num_threads));
  GatherPattern p;
  p.row_bytes = row_bytes;
  p.stride_bytes = stride_bytes;
  return probe->measure(p, repeats);
}

Result<RooflineResult> measure_roofline(const RooflineOptions& o) {
  LEANEMB_RETURN_IF_ERROR(check_common(o.buffer_bytes, o.num_threads));
  const int nt = o.num_threads;
  RooflineResult r;
  r.buffer_bytes = o.buffer_bytes;
  r.num_threads = nt;
  LEANEMB_ASSIGN_OR_RETURN(Buffer buf, alloc_touched(o.buffer_bytes, nt, /*huge=*/true, &r.huge_page_bytes));

  const int64_t words = static_cast<int64_t>(o.buffer_bytes / 8);
  const uint64_t* w = reinterpret_cast<const uint64_t*>(buf.get());
  r.seq_read_gbs = gbs(static_cast<double>(words) * 8.0, best_seconds(o.repeats, [&] {
                         uint64_t total = 0;
#pragma omp parallel num_threads(nt) reduction(+ : total)
                         {
                           int64_t i0, i1;
                           kernels::static_chunk(words, omp_get_thread_num(), omp_get_num_threads(), &i0, &i1);
                           total += sum_words(w + i0, i1 - i0);
                         }
                         g_sink = g_sink + total;
                       }));

  // Triad over three thirds of the buffer; each thread works on the part it first touched.
  const int64_t n = static_cast<int64_t>(o.buffer_bytes / 3 / 8);
  double* a = reinterpret_cast<double*>(buf.get());
  double* b = a + n;
  double* c = b + n;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    a[i] = 0.0;
    b[i] = 1.0;
    c[i] = 2.0;
  }
  r.triad_gbs = gbs(3.0 * static_cast<double>(n) * 8.0, best_seconds(o.repeats, [&] {
#pragma omp parallel num_threads(nt)
                      {
                        int64_t i0, i1;
                        kernels::static_chunk(n, omp_get_thread_num(), omp_get_num_threads(), &i0, &i1);
                        triad(a + i0, b + i0, c + i0, 3.0, i1 - i0);
                      }
                    }));
  g_sink = g_sink + static_cast<uint64_t>(a[n / 2]);

  for (size_t rb : o.row_bytes) {
    if (rb == 0) continue;
    GatherPattern p;
    p.row_bytes = rb;
    p.stride_bytes = rb;
    r.rows.push_back(gather_on(buf, o.buffer_bytes, p, nt, o.repeats));
  }
  buf.reset();
  LEANEMB_ASSIGN_OR_RETURN(r.page_walk, measure_page_walk(o.page_walk_bytes, o.page_walk_loads, std::min(o.repeats, 2)));
  return r;
}

nlohmann::json to_json(const GatherCeiling& g) {
  return {{"row_bytes", g.row_bytes},
          {"stride_bytes", g.stride_bytes},
          {"gather_gbs", g.gather_gbs},
          {"gather_plain_gbs", g.gather_plain_gbs},
          {"gather_prefetch_gbs", g.gather_prefetch_gbs},
          {"best_prefetch_distance_rows", g.best_prefetch_rows},
          {"rmw_gbs", g.rmw_gbs},
          {"segment_bytes", g.segment_bytes},
          {"rows_per_segment_visit", g.per_segment}};
}

nlohmann::json to_json(const PageWalkPoint& p) {
  return {{"buffer_bytes", p.buffer_bytes},
          {"small_pages_ns_per_load", p.small.ns_per_load},
          {"huge_pages_ns_per_load", p.huge.ns_per_load},
          {"huge_pages_obtained_bytes", p.huge.huge_page_bytes},
          {"small_pages_obtained_huge_bytes", p.small.huge_page_bytes}};
}

nlohmann::json to_json(const RooflineResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& g : r.rows) rows.push_back(to_json(g));
  nlohmann::json walk = nlohmann::json::array();
  for (const auto& p : r.page_walk) walk.push_back(to_json(p));
  return {{"buffer_bytes", r.buffer_bytes},
          {"threads", r.num_threads},
          {"seq_read_gbs", r.seq_read_gbs},
          {"triad_gbs", r.triad_gbs},
          {"random_rows", rows},
          {"huge_page_bytes", r.huge_page_bytes},
          {"page_walk", walk},
          {"note", "GB/s = 1e9 bytes/s, best of repeats; rmw counts read + write bytes; triad counts 3 x 8 B per element; "
                   "buffers 2 MiB aligned with MADV_HUGEPAGE like the engine's tables (huge_page_bytes: what the kernel "
                   "granted); page_walk: one-thread pointer chase, ns per dependent load, 4 KiB vs huge pages"}};
}

}  // namespace leanemb::bench
