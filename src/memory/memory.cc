#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <sys/mman.h>
#include <string>

#include "leanemb/memory.h"

#include "core/enum_names.h"
#include "leanemb/memory_system.h"

namespace leanemb {

template <>
struct EnumNames<Tier> {
  static constexpr std::string_view kWhat = "tier";
  static constexpr EnumName<Tier> kNames[] = {
      {Tier::kDevice, "device", ""}, {Tier::kHost, "host", ""}, {Tier::kDisk, "disk", ""}};
};

template <>
struct EnumNames<Category> {
  static constexpr std::string_view kWhat = "memory category";
  static constexpr EnumName<Category> kNames[] = {
      {Category::kWeights, "weights", ""},         {Category::kOptimizerState, "optimizer_state", ""},
      {Category::kGradients, "gradients", ""},     {Category::kActivations, "activations", ""},
      {Category::kWorkspace, "workspace", ""},     {Category::kRowCache, "row_cache", ""},
      {Category::kCommBuffers, "comm_buffers", ""}, {Category::kIoBuffers, "io_buffers", ""}};
};

std::string_view tier_name(Tier t) { return enum_name(t); }

// Placement names the tiers a category may be put on by configuration: not disk (tables reach
// the disk through a row store).
Result<Tier> parse_tier(std::string_view s) {
  static constexpr Tier kPlaceable[] = {Tier::kDevice, Tier::kHost};
  return parse_enum_in(s, std::span<const Tier>(kPlaceable), EnumNames<Tier>::kWhat);
}

Result<Category> parse_category(std::string_view s) { return parse_enum<Category>(s); }

std::string_view tier_label(Tier t) { return t == Tier::kDevice ? "device (cpu)" : tier_name(t); }

std::string_view category_name(Category c) { return enum_name(c); }

std::string format_bytes(size_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, kUnits[u]);
  return buf;
}

Result<size_t> parse_bytes(std::string_view s) {
  std::string str(s);
  size_t i = 0;
  while (i < str.size() && (std::isdigit(static_cast<unsigned char>(str[i])) || str[i] == '.')) ++i;
  if (i == 0) return invalid_argument("bad byte size '" + str + "' (expected e.g. 512MiB, 32GiB, 4096)");
  // The whole digits-and-dots prefix must be one number ("1.2.3" is not 1.2).
  const std::string digits = str.substr(0, i);
  char* end = nullptr;
  const double num = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size()) return invalid_argument("bad number in byte size '" + str + "'");
  std::string unit = str.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB" || unit == "K" || unit == "k") mult = 1024.0;
  else if (unit == "MiB" || unit == "M") mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  else return invalid_argument("bad unit '" + unit + "' in byte size '" + str + "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  double bytes = num * mult;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > 1.8e19) return invalid_argument("byte size '" + str + "' out of range");
  return static_cast<size_t>(bytes);
}

// ---- MemoryStats ----------------------------------------------------------------------------

std::string MemoryStats::summary_table() const {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-16s %14s %14s %7s   (tier: %s%s%s)\n", "category", "current",
                "peak", "share", std::string(tier_label(tier)).c_str(),
                budget_bytes ? ", budget " : "", budget_bytes ? format_bytes(budget_bytes).c_str() : "");
  out += line;
  for (int c = 0; c < kNumCategories; ++c) {
    const auto& cs = by_category[c];
    if (cs.peak_bytes == 0) continue;
    double share = current_bytes ? 100.0 * static_cast<double>(cs.current_bytes) / static_cast<double>(current_bytes) : 0.0;
    std::snprintf(line, sizeof line, "%-16s %14s %14s %6.1f%%\n",
                  std::string(category_name(static_cast<Category>(c))).c_str(),
                  format_bytes(cs.current_bytes).c_str(), format_bytes(cs.peak_bytes).c_str(), share);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-16s %14s %14s %6.1f%%\n", "total", format_bytes(current_bytes).c_str(),
                format_bytes(peak_bytes).c_str(), current_bytes ? 100.0 : 0.0);
  out += line;
  if (caching) {
    std::snprintf(line, sizeof line, "%-16s %14s   largest free block %s, fragmentation %.3f\n", "cached free",
                  format_bytes(cached_free_bytes).c_str(), format_bytes(largest_free_bytes).c_str(), fragmentation);
    out += line;
  }
  return out;
}

std::string MemoryStats::to_json() const {
  // Built with snprintf and append: GCC 12's -Wrestrict misfires on chains of string operator+.
  char buf[256];
  std::snprintf(buf, sizeof buf, "{\"tier\":\"%s\",\"current_bytes\":%zu,\"peak_bytes\":%zu,\"budget_bytes\":%zu,\"categories\":{",
                std::string(tier_name(tier)).c_str(), current_bytes, peak_bytes, budget_bytes);
  std::string out = buf;
  for (int c = 0; c < kNumCategories; ++c) {
    const auto& cs = by_category[c];
    std::snprintf(buf, sizeof buf, "%s\"%s\":{\"current_bytes\":%zu,\"peak_bytes\":%zu,\"num_allocs\":%llu}",
                  c == 0 ? "" : ",", std::string(category_name(static_cast<Category>(c))).c_str(), cs.current_bytes,
                  cs.peak_bytes, static_cast<unsigned long long>(cs.num_allocs));
    out.append(buf);
  }
  out += "}";
  if (caching) {
    std::snprintf(buf, sizeof buf, ",\"cached_free_bytes\":%zu,\"largest_free_bytes\":%zu,\"fragmentation\":%.6f",
                  cached_free_bytes, largest_free_bytes, fragmentation);
    out.append(buf);
  }
  std::snprintf(buf, sizeof buf, ",\"num_failed_allocs\":%llu}", static_cast<unsigned long long>(num_failed_allocs));
  out.append(buf);
  return out;
}

void MemoryStats::record_alloc(size_t bytes, const std::array<size_t, kNumCategories>& parts) {
  current_bytes += bytes;
  peak_bytes = std::max(peak_bytes, current_bytes);
  for (int c = 0; c < kNumCategories; ++c) {
    if (parts[c] == 0) continue;
    auto& cs = by_category[c];
    cs.current_bytes += parts[c];
    cs.peak_bytes = std::max(cs.peak_bytes, cs.current_bytes);
    ++cs.num_allocs;
  }
}

void MemoryStats::record_free(size_t bytes, const std::array<size_t, kNumCategories>& parts) {
  current_bytes -= bytes;
  for (int c = 0; c < kNumCategories; ++c) by_category[c].current_bytes -= parts[c];
}

void MemoryStats::reset_peaks() {
  peak_bytes = current_bytes;
  for (auto& c : by_category) c.peak_bytes = c.current_bytes;
}

// ---- Allocation / Allocator -----------------------------------------------------------------

Allocation& Allocation::operator=(Allocation&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    owner_ = o.owner_;
    parts_ = o.parts_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
    o.owner_ = nullptr;
  }
  return *this;
}

void Allocation::reset() {
  if (ptr_ != nullptr && owner_ != nullptr) owner_->do_free(ptr_, bytes_, parts_);
  ptr_ = nullptr;
  bytes_ = 0;
  owner_ = nullptr;
}

Result<Allocation> Allocator::allocate(size_t bytes, Category category, size_t alignment) {
  CategoryBytes part{category, bytes};
  return allocate_parts(std::span<const CategoryBytes>(&part, 1), alignment);
}

Result<Allocation> Allocator::allocate_parts(std::span<const CategoryBytes> parts, size_t alignment) {
  std::array<size_t, kNumCategories> by_cat{};
  size_t total = 0;
  for (const auto& p : parts) {
    by_cat[static_cast<size_t>(p.category)] += p.bytes;
    total += p.bytes;
  }
  if (total == 0) return invalid_argument("allocation of 0 bytes");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096)
    return invalid_argument("alignment " + std::to_string(alignment) + " is not a power of two <= 4096");
  LEANEMB_ASSIGN_OR_RETURN(void* ptr, do_allocate(total, alignment, by_cat));
  Allocation a;
  a.ptr_ = ptr;
  a.bytes_ = total;
  a.owner_ = this;
  a.parts_ = by_cat;
  return a;
}

// ---- TrackingAllocator ----------------------------------------------------------------------

TrackingAllocator::TrackingAllocator(TrackingAllocatorOptions options) : options_(options) {
  stats_.tier = options.tier;
  stats_.budget_bytes = options.budget_bytes;
}

TrackingAllocator::~TrackingAllocator() {
  // Outstanding allocations would dangle; that is a bug in the owner.
  LEANEMB_CHECK(stats_.current_bytes == 0,
                "TrackingAllocator destroyed with " + std::to_string(stats_.current_bytes) + " bytes outstanding");
}

MemoryStats TrackingAllocator::memory_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void TrackingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.reset_peaks();
}

void TrackingAllocator::inject_failure(int64_t k, bool always) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_at_ = k;
  fail_always_ = always;
  alloc_counter_ = 0;
}

std::string describe_parts(const std::array<size_t, kNumCategories>& parts) {
  std::string out;
  for (int c = 0; c < kNumCategories; ++c) {
    if (parts[c] == 0) continue;
    if (!out.empty()) out += ", ";
    out.append(category_name(static_cast<Category>(c))).append(" ").append(format_bytes(parts[c]));
  }
  return out.empty() ? "nothing" : out;
}

std::string MemoryStats::in_use_string() const {
  std::string out;
  for (int c = 0; c < kNumCategories; ++c) {
    if (by_category[c].current_bytes == 0) continue;
    if (!out.empty()) out += ", ";
    out += std::string(category_name(static_cast<Category>(c))) + " " + format_bytes(by_category[c].current_bytes);
  }
  return out.empty() ? "nothing" : out;
}

Result<void*> TrackingAllocator::do_allocate(size_t bytes, size_t alignment,
                                             const std::array<size_t, kNumCategories>& parts) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t n = alloc_counter_++;
  const bool injected = fail_at_ >= 0 && (n == fail_at_ || (fail_always_ && n > fail_at_));
  // Written so that no sum can wrap around for requests near SIZE_MAX.
  const bool over_budget = options_.budget_bytes != 0 && (stats_.current_bytes > options_.budget_bytes ||
                                                          bytes > options_.budget_bytes - stats_.current_bytes);
  const bool too_big = bytes > SIZE_MAX - alignment;  // the rounding below would wrap
  void* p = nullptr;
  if (!injected && !over_budget && !too_big) {
    // Large buffers (tables) are aligned to 2 MiB and marked for transparent huge pages: random
    // row access then misses the TLB far less. Small ones use the requested alignment.
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t align = bytes >= kHuge ? std::max(alignment, kHuge) : alignment;
    // C11 aligned_alloc wants a size that is a multiple of the alignment; free() takes it back.
    const size_t rounded = (bytes + align - 1) / align * align;
    p = std::aligned_alloc(align, rounded);
    if (p != nullptr && align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);  // best effort
  }
  if (p == nullptr) {
    ++stats_.num_failed_allocs;
    return resource_exhausted(
        "out of " + std::string(tier_name(options_.tier)) + " memory: requested " + format_bytes(bytes) +
        " (" + describe_parts(parts) + ")" + (injected ? " (injected failure)" : "") + "; budget " +
        (options_.budget_bytes ? format_bytes(options_.budget_bytes) : std::string("unlimited")) + "; in use " +
        format_bytes(stats_.current_bytes) + " (" + stats_.in_use_string() + ")");
  }
  stats_.record_alloc(bytes, parts);
  return p;
}

void TrackingAllocator::do_free(void* ptr, size_t bytes, const std::array<size_t, kNumCategories>& parts) {
  std::free(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.record_free(bytes, parts);
}

Allocator* default_host_allocator() {
  static TrackingAllocator* a = new TrackingAllocator();  // never destroyed: process lifetime
  return a;
}

}  // namespace leanemb
