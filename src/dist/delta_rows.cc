#include "dist/delta_rows.h"

#include "core/bytes.h"

namespace leanemb::dist {

std::string delta_rows_blob(const std::string& table, int64_t k) {
  return std::string(kDeltaRowsPrefix) + table + "/" + std::to_string(k);
}

std::vector<uint8_t> encode_delta_rows(std::span<const int64_t> rows) {
  std::vector<uint8_t> out;
  out.reserve(8 + rows.size() * 2);
  ByteWriter(&out).u64(rows.size());
  int64_t prev = -1;
  for (int64_t r : rows) {
    uint64_t gap = static_cast<uint64_t>(r - prev - 1);
    prev = r;
    while (gap >= 0x80) {
      out.push_back(static_cast<uint8_t>(gap | 0x80));
      gap >>= 7;
    }
    out.push_back(static_cast<uint8_t>(gap));
  }
  return out;
}

Result<std::vector<int64_t>> decode_delta_rows(std::span<const uint8_t> bytes, int64_t count, int64_t num_rows,
                                               const std::string& where) {
  auto bad = [&](const std::string& what) { return data_loss("incremental checkpoint: " + where + ": " + what); };
  ByteReader r(bytes);
  uint64_t n = 0;
  if (!r.u64(&n) || n != static_cast<uint64_t>(count)) return bad("expected " + std::to_string(count) + " rows");
  std::vector<int64_t> rows(static_cast<size_t>(count));
  size_t pos = 8;
  int64_t prev = -1;
  for (int64_t i = 0; i < count; ++i) {
    uint64_t gap = 0;
    for (int shift = 0;; shift += 7) {
      if (pos >= bytes.size() || shift > 63) return bad("truncated or malformed row numbers");
      const uint8_t b = bytes[pos++];
      gap |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) break;
    }
    if (gap >= static_cast<uint64_t>(num_rows) || static_cast<int64_t>(gap) >= num_rows - prev - 1)
      return bad("a row beyond the table's " + std::to_string(num_rows) + " rows");
    prev = prev + 1 + static_cast<int64_t>(gap);
    rows[static_cast<size_t>(i)] = prev;
  }
  if (pos != bytes.size()) return bad("trailing bytes");
  return rows;
}

}  // namespace leanemb::dist
