// make_residency's registry and the Residency defaults (residency.h).
#include "table/residency.h"

#include <cstring>

namespace leanemb::table_internal {

namespace {

struct Kind {
  std::string_view name;  // TableOptions::residency
  Result<std::unique_ptr<Residency>> (*make)(const ResidencyContext&);
};

// The first that applies makes the table's rows. A new residency: one line here.
constexpr Kind kResidencies[] = {
    {"cached", make_cached_rows},      // TableOptions::cache: a row cache over a store
    {"split", make_split_rows},        // weights and optimizer state placed in different tiers
    {"mirrored", make_mirrored_rows},  // only when named: resident rows with a checked copy
    {"resident", make_resident_rows},  // everything else (always applies)
};

}  // namespace

Result<std::unique_ptr<Residency>> make_residency(const ResidencyContext& ctx) {
  const std::string& named = ctx.options.residency;
  // Cache options choose the cached residency; naming another would drop them silently.
  if (!named.empty() && named != "cached" && ctx.options.cache.enabled())
    return invalid_argument("table '" + ctx.options.name + "': residency '" + named +
                            "' with cache options (the cache needs residency 'cached', or none named)");
  bool known = named.empty();
  for (const Kind& k : kResidencies) {
    if (!named.empty() && named != k.name) continue;
    known = true;
    LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<Residency> r, k.make(ctx));
    if (r) return r;
  }
  std::string names;
  for (const Kind& k : kResidencies) names += (names.empty() ? "" : ", ") + std::string(k.name);
  if (!known)
    return invalid_argument("table '" + ctx.options.name + "': unknown residency '" + named + "' (expected one of " +
                            names + ")");
  return invalid_argument("table '" + ctx.options.name + "': residency '" + named +
                          "' does not apply to its options and placement");
}

void ResidencyContext::init_row(int64_t row, const RowLayout& l, float* tmp, uint8_t* out) const {
  initial_row(options, l, seed, static_cast<uint32_t>(table), row * key_stride + key_offset, tmp, out, *backend);
}

Status Residency::read_rows_at(std::span<const int64_t> rows, size_t stride, uint8_t* out, Tier tier) const {
  for (size_t a = 0; a < rows.size();) {
    size_t e = a + 1;
    while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
    LEANEMB_RETURN_IF_ERROR(read_rows(rows[a], static_cast<int64_t>(e - a), out + a * stride, tier));
    a = e;
  }
  return Status();
}

Result<LinkedRows> Residency::link_rows(const std::string&, const RowPlaceSink&) {
  return unimplemented("link_rows: the '" + std::string(name()) + "' residency keeps no store files to link");
}

Status Residency::adopt_links(const std::string&, const LinkedRows&, const RowPlaceSource&) {
  return unimplemented("adopt_links: the '" + std::string(name()) + "' residency takes no linked files");
}

Status Residency::acquire(std::span<const int64_t> rows, int64_t* out, tiered::PinSet, bool) {
  if (!rows.empty()) std::memcpy(out, rows.data(), rows.size() * 8);
  return Status();
}

Result<bool> Residency::take_prefetched(std::span<const int64_t>, int64_t*) { return false; }

Result<RowCacheStats> Residency::cache_stats() const { return failed_precondition("has no cache"); }

}  // namespace leanemb::table_internal
