// model.table_rows = "auto" (see table_rows.h).
#include "ctr/table_rows.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unordered_set>

#include "leanemb/json.h"
#include "data/reader.h"

namespace leanemb::ctr {

using nlohmann::json;

Result<DistinctCounts> count_distinct_values(const CtrConfig& c) {
  data::ReaderOptions r;
  r.files = c.train_files;
  const std::vector<int64_t> one = {1};
  LEANEMB_ASSIGN_OR_RETURN(r.schema, data::make_schema(c.num_dense, c.num_sparse, one, c.max_len, data::IdMode::kRaw));
  r.schema.string_values = c.string_values;
  r.batch_size = std::min<int64_t>(c.batch_size, 4096);
  r.num_epochs = 1;
  r.malformed.max_rate = c.max_malformed_rate;
  LEANEMB_ASSIGN_OR_RETURN(auto reader, data::DataReader::open(std::move(r)));
  std::vector<std::unordered_set<int64_t>> seen(static_cast<size_t>(c.num_sparse));
  data::Batch b;
  for (;;) {
    LEANEMB_ASSIGN_OR_RETURN(bool more, reader->next(&b));
    if (!more) break;
    for (size_t f = 0; f < seen.size(); ++f) seen[f].insert(b.sparse[f].ids.begin(), b.sparse[f].ids.end());
  }
  DistinctCounts d;
  for (const auto& s : seen) d.distinct.push_back(static_cast<int64_t>(s.size()));
  d.records = reader->stats().records;
  d.malformed = reader->stats().malformed;
  return d;
}

std::vector<int64_t> table_rows_of(const DistinctCounts& d) {
  std::vector<int64_t> rows;
  for (int64_t n : d.distinct) rows.push_back(std::max<int64_t>(1, n));
  return rows;
}

Result<std::vector<int64_t>> read_table_rows_file(const std::string& path, int num_sparse) {
  std::ifstream f(path);
  if (!f) return not_found("cannot open '" + path + "'");
  const json j = parse_json_or_discarded(f);
  std::vector<int64_t> rows;
  if (!j.is_discarded() && j.is_object() && j.contains("table_rows") && j["table_rows"].is_array())
    for (const auto& v : j["table_rows"]) rows.push_back(v.is_number_integer() ? v.get<int64_t>() : 0);
  if (static_cast<int>(rows.size()) != num_sparse || std::any_of(rows.begin(), rows.end(), [](int64_t r) { return r < 1; }))
    return data_loss(path + " does not hold " + std::to_string(num_sparse) + " table sizes >= 1 (written by a run with "
                     "model.table_rows = \"auto\"); remove it to count again, or start fresh");
  return rows;
}

namespace {

std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

Status resolve_table_rows(CtrConfig* c, const std::string& run_dir, bool resume, bool write, std::string* said) {
  if (!c->table_rows_auto) return Status();
  const std::string path = run_dir + "/table_rows.json";
  std::error_code ec;
  if (resume && std::filesystem::exists(path, ec)) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<int64_t> rows, read_table_rows_file(path, c->num_sparse));
    c->table_rows = rows;
    *said = "model.table_rows = \"auto\": " + list(rows) + " (read from " + path + " on resume; not counted again)";
    return Status();
  }
  LEANEMB_ASSIGN_OR_RETURN(DistinctCounts d, count_distinct_values(*c));
  c->table_rows = table_rows_of(d);
  *said = "model.table_rows = \"auto\": " + list(c->table_rows) + " (distinct values per feature in " +
          std::to_string(d.records) + " training records; rows = distinct values, ids hash % rows)";
  if (write) {
    std::filesystem::create_directories(run_dir, ec);
    json j = {{"rule", "rows = distinct values of the feature in data.train (at least 1); ids are hash % rows (docs/train.md)"},
              {"table_rows", c->table_rows}, {"distinct", d.distinct}, {"records", d.records}, {"malformed", d.malformed},
              {"files", c->train_files}};
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp);
      f << dump_json(j, 2) << "\n";
      f.close();  // flushes: a full disk shows here, not in the destructor
      if (!f) return io_error("cannot write '" + tmp + "'");
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) return io_error("cannot write '" + path + "': " + ec.message());
  }
  return Status();
}

}  // namespace leanemb::ctr
