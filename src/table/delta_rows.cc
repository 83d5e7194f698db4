#include "table/delta_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/bytes.h"
#include "leanemb/json.h"
#include "table/residency.h"

namespace leanemb::table_ckpt {

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

void InitialRows::row(int64_t r, const RowLayout& l, float* tmp, uint8_t* out) const {
  initial_row(options, l, seed, static_cast<uint32_t>(table), r, tmp, out);
}

namespace {
// The initializer kinds as configs name them (train/toml_section.cc's table).
constexpr std::pair<InitKind, const char*> kInitNames[] = {
    {InitKind::kUniform, "uniform"}, {InitKind::kNormal, "normal"}, {InitKind::kZeros, "zeros"}};
}  // namespace

std::string initial_rows_meta_json(const TableOptions& to, uint64_t seed, int table) {
  // The bound as the initializer resolves it (embedding_collection.cc, init_row_keyed).
  const int64_t rows = to.shard.global_rows > 0 ? to.shard.global_rows : to.num_rows;
  const float bound = to.init.bound > 0.0f ? to.init.bound : 1.0f / std::sqrt(static_cast<float>(rows));
  const nlohmann::json j = {{"init", [&] {
                              for (const auto& [k, n] : kInitNames)
                                if (k == to.init.kind) return std::string(n);
                              return std::string("?");
                            }()}, {"bound", static_cast<double>(bound)},
                            {"mean", static_cast<double>(to.init.mean)}, {"std", static_cast<double>(to.init.std)},
                            {"seed", seed}, {"table", table}, {"dynamic", to.dynamic.enabled}};
  return dump_json(j);
}

Result<InitialRows> parse_initial_rows(std::span<const uint8_t> meta, int64_t num_rows, const std::string& where) {
  auto bad = [&](const std::string& what) { return data_loss("sparse base: " + where + ": " + what); };
  const nlohmann::json m = parse_json_or_discarded(meta.data(), meta.size());
  if (!m.is_object() || !m.contains("initial") || !m["initial"].is_object()) return bad("meta has no \"initial\" object");
  const nlohmann::json& j = m["initial"];
  InitialRows ir;
  ir.options.num_rows = num_rows;
  auto num = [&](const char* key, float* out) {
    if (!j.contains(key) || !j[key].is_number()) return false;
    *out = static_cast<float>(j[key].get<double>());
    return true;
  };
  if (!j.contains("init") || !j["init"].is_string()) return bad("\"initial\" has no string \"init\"");
  const std::string kind = j["init"].get<std::string>();
  const auto* it = std::find_if(std::begin(kInitNames), std::end(kInitNames), [&](const auto& e) { return kind == e.second; });
  if (it == std::end(kInitNames)) return bad("unknown initializer \"" + kind + "\"");
  ir.options.init.kind = it->first;
  if (!num("bound", &ir.options.init.bound) || !num("mean", &ir.options.init.mean) || !num("std", &ir.options.init.std))
    return bad("\"initial\" needs numbers \"bound\", \"mean\" and \"std\"");
  if (!j.contains("seed") || !j["seed"].is_number_unsigned() || !j.contains("table") || !j["table"].is_number_unsigned() ||
      !j.contains("dynamic") || !j["dynamic"].is_boolean())
    return bad("\"initial\" needs \"seed\", \"table\" and \"dynamic\"");
  ir.seed = j["seed"].get<uint64_t>();
  ir.table = j["table"].get<int>();
  ir.options.dynamic.enabled = j["dynamic"].get<bool>();
  return ir;
}

Status RowRunWriter::add(int64_t row, std::span<const uint8_t> fat) {
  if (rows_ > 0 && (row != begin_ + rows_ || rows_ == max_rows_)) LEANEMB_RETURN_IF_ERROR(flush());
  if (rows_ == 0) begin_ = row;
  run_.resize(static_cast<size_t>(rows_ + 1) * stride_);
  std::memcpy(run_.data() + static_cast<size_t>(rows_) * stride_, fat.data(), stride_);
  ++rows_;
  return Status();
}

Status RowRunWriter::flush() {
  if (rows_ == 0) return Status();
  const Status st = tables_.write_raw_rows(t_, begin_, rows_, std::span<const uint8_t>(run_.data(), static_cast<size_t>(rows_) * stride_));
  rows_ = 0;
  return st;
}

bool is_sparse_base(const ckpt::CheckpointReader& r) {
  if (r.parent().has_value()) return false;
  for (const ckpt::EntryInfo& e : r.entries())
    if (e.kind == ckpt::EntryKind::kTable && e.name.rfind(kDeltaPrefix, 0) == 0) return true;
  return false;
}

}  // namespace leanemb::table_ckpt
