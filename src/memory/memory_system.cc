// MemorySystem: tiers, placement, transfers, the breakdown table. See memory_system.h.
#include "leanemb/memory_system.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace leanemb {

namespace {

// Categories that may live off the device: compute reads gradients, activations, workspace and
// the row cache where it runs.
bool may_leave_device(Category c) {
  return c == Category::kWeights || c == Category::kOptimizerState || c == Category::kCommBuffers ||
         c == Category::kIoBuffers;
}

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const size_t bytes = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : size_t{1} << 34;
  return bytes / (size_t{2} << 20) * (size_t{2} << 20);  // whole 2 MiB pages
}

}  // namespace

std::string Placement::to_string() const {
  std::string out;
  for (int c = 0; c < kNumCategories; ++c) {
    if (c) out += ',';
    out.append(category_name(static_cast<Category>(c))).append("=").append(tier_name(tier[c]));
  }
  return out;
}

Status validate_placement(const Placement& p) {
  for (int c = 0; c < kNumCategories; ++c) {
    const Category cat = static_cast<Category>(c);
    if (p.tier[c] == Tier::kDisk)
      return invalid_argument("placement: " + std::string(category_name(cat)) +
                              " cannot be placed on disk (tables go to disk through a row store)");
    if (p.tier[c] != Tier::kDevice && !may_leave_device(cat))
      return invalid_argument("placement: " + std::string(category_name(cat)) +
                              " must stay on the device (only weights, optimizer_state, comm_buffers and io_buffers "
                              "may be placed on the host)");
  }
  return Status();
}

Result<Placement> parse_placement(std::string_view s, const Placement& base) {
  Placement p = base;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    std::string_view item = s.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) {
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos)
        return invalid_argument("placement entry '" + std::string(item) + "' is not category=tier");
      LEANEMB_ASSIGN_OR_RETURN(Category c, parse_category(item.substr(0, eq)));
      LEANEMB_ASSIGN_OR_RETURN(Tier t, parse_tier(item.substr(eq + 1)));
      p[c] = t;
    }
    pos = end + 1;
  }
  LEANEMB_RETURN_IF_ERROR(validate_placement(p));
  return p;
}

std::string TransferStats::to_json() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "{\"host_to_device\":%llu,\"device_to_host\":%llu",
                static_cast<unsigned long long>(host_to_device()), static_cast<unsigned long long>(device_to_host()));
  std::string out = buf;
  for (int f = 0; f < kNumTiers; ++f)
    for (int t = 0; t < kNumTiers; ++t) {
      if (f == t || bytes[f][t] == 0) continue;
      if ((f == 1 && t == 0) || (f == 0 && t == 1)) continue;
      std::snprintf(buf, sizeof buf, ",\"%s_to_%s\":%llu", std::string(tier_name(static_cast<Tier>(f))).c_str(),
                    std::string(tier_name(static_cast<Tier>(t))).c_str(), static_cast<unsigned long long>(bytes[f][t]));
      out.append(buf);
    }
  out += '}';
  return out;
}

MemorySystem::~MemorySystem() = default;

Result<std::unique_ptr<MemorySystem>> MemorySystem::create(const MemorySystemOptions& options) {
  LEANEMB_RETURN_IF_ERROR(validate_placement(options.placement));
  if (options.device_budget_bytes == 0 && (options.reserve_bytes || options.max_split_bytes))
    return invalid_argument("reserve_bytes and max_split_bytes need a device budget");
  std::unique_ptr<MemorySystem> m(new MemorySystem());
  m->options_ = options;
  // The device tier is always a caching arena: without a budget, one over the machine's physical
  // memory (mapped without reservation: untouched pages cost nothing). Freed blocks are reused, so
  // per-step buffers do not cost fresh zeroed pages from the OS every step.
  DeviceArenaOptions ao;
  ao.budget_bytes = options.device_budget_bytes ? options.device_budget_bytes : physical_memory_bytes();
  ao.max_split_bytes = options.max_split_bytes;
  ao.reserve_bytes = options.reserve_bytes;
  LEANEMB_ASSIGN_OR_RETURN(auto arena, DeviceArena::create(ao));
  m->arena_ = arena.get();
  m->device_ = std::move(arena);
  m->host_ = std::make_unique<TrackingAllocator>(TrackingAllocatorOptions{Tier::kHost, options.host_budget_bytes});
  return m;
}

TransferStats MemorySystem::transfers() const {
  TransferStats t;
  for (int f = 0; f < kNumTiers; ++f)
    for (int to = 0; to < kNumTiers; ++to)
      t.bytes[f][to] = transfers_[static_cast<size_t>(f * kNumTiers + to)].load(std::memory_order_relaxed);
  return t;
}

void MemorySystem::reset_transfers() {
  for (auto& a : transfers_) a.store(0, std::memory_order_relaxed);
}

std::array<MemoryStats, 2> MemorySystem::stats() const { return {device_->memory_stats(), host_->memory_stats()}; }

void MemorySystem::reset_peaks() {
  arena_->reset_peaks();
  static_cast<TrackingAllocator*>(host_.get())->reset_peaks();
}

std::string MemorySystem::memory_summary() const {
  std::string out;
  for (const MemoryStats& s : stats()) {
    if (s.peak_bytes == 0 && s.tier == Tier::kHost) continue;  // an unused host tier adds nothing
    out += s.summary_table();
  }
  const TransferStats t = transfers();
  char line[200];
  std::snprintf(line, sizeof line, "transfers        host->device %s, device->host %s\n",
                format_bytes(t.host_to_device()).c_str(), format_bytes(t.device_to_host()).c_str());
  out += line;
  bool default_placement = true;
  const Placement def;
  for (int c = 0; c < kNumCategories; ++c) default_placement = default_placement && def.tier[c] == placement().tier[c];
  if (!default_placement) {
    out += "placement        ";
    for (int c = 0; c < kNumCategories; ++c)
      if (placement().tier[c] != def.tier[c])
        out.append(category_name(static_cast<Category>(c))).append("=").append(tier_name(placement().tier[c])).append(" ");
    out += "(the rest as default: on the device, io_buffers on the host)\n";
  }
  return out;
}

std::string MemorySystem::to_json() const {
  std::string out = "{\"placement\":{";
  for (int c = 0; c < kNumCategories; ++c) {
    if (c) out += ',';
    out.append("\"").append(category_name(static_cast<Category>(c))).append("\":\"").append(tier_name(placement().tier[c])).append("\"");
  }
  const auto s = stats();
  out.append("},\"device\":").append(s[0].to_json()).append(",\"host\":").append(s[1].to_json());
  out.append(",\"transfers\":").append(transfers().to_json()).append("}");
  return out;
}

}  // namespace leanemb
