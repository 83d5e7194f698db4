#include "dist/delta_rows.h"

#include <algorithm>

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

Status for_each_delta_row(const ckpt::CheckpointReader& r, const std::string& table, int64_t num_rows, int64_t chunk_rows,
                          const std::function<Status(int64_t, std::span<const uint8_t>)>& fn) {
  const std::string name = kDeltaPrefix + table;
  const ckpt::EntryInfo* e = r.find(name);
  if (e == nullptr || e->kind != ckpt::EntryKind::kTable) return data_loss("incremental checkpoint '" + r.dir() + "' has no table '" + name + "'");
  const size_t stride = e->row_bytes;
  std::vector<uint8_t> fat;
  for (int64_t k = 0; k * kDeltaIdsPerBlob < e->total_rows; ++k) {
    const int64_t r0 = k * kDeltaIdsPerBlob, count = std::min(kDeltaIdsPerBlob, e->total_rows - r0);
    const std::string blob = delta_rows_blob(table, k);
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, r.read_blob(blob));
    LEANEMB_ASSIGN_OR_RETURN(std::vector<int64_t> rows, decode_delta_rows(bytes, count, num_rows, r.dir() + " blob " + blob));
    for (int64_t c0 = 0; c0 < count; c0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, count - c0);
      fat.resize(static_cast<size_t>(n) * stride);
      LEANEMB_RETURN_IF_ERROR(r.read_rows(name, r0 + c0, n, fat));
      for (int64_t i = 0; i < n; ++i)
        LEANEMB_RETURN_IF_ERROR(fn(rows[static_cast<size_t>(c0 + i)], std::span<const uint8_t>(fat.data() + static_cast<size_t>(i) * stride, stride)));
    }
  }
  return Status();
}

}  // namespace leanemb::dist
