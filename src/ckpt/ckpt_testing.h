// Test helpers for checkpoints: a seeded logical content (blobs and tables), a writer that
// stores it under a chosen chunking and order, and a checker that reads it all back.
//
// Header-only, for the ckpt tests and for other modules' crash tests. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "leanemb/env.h"
#include "leanemb/checkpoint.h"

namespace leanemb::ckpt::testing_util {

struct TableData {
  uint64_t row_bytes = 0;
  int64_t rows = 0;
  std::vector<uint8_t> meta;
  std::vector<uint8_t> bytes;  // [rows, row_bytes]
};

// The logical content of one checkpoint.
struct Content {
  int64_t step = 0;
  std::map<std::string, std::vector<uint8_t>> blobs;
  std::map<std::string, TableData> tables;
};

inline std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

inline std::vector<uint8_t> text_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// Blobs "config", "dense/w" (1000 B), "empty" (0 B), "rng"; tables "emb/a" (table_rows x 52 B),
// "emb/b" (97 x 7 B) and "emb/none" (0 rows). Different seeds give different bytes.
inline Content make_content(int64_t step, uint64_t seed, int64_t table_rows = 300) {
  std::mt19937_64 rng(seed);
  Content c;
  c.step = step;
  c.blobs["config"] = text_bytes("dim = 13\noptimizer = adagrad\n");
  c.blobs["dense/w"] = random_bytes(rng, 1000);
  c.blobs["empty"] = {};
  c.blobs["rng"] = random_bytes(rng, 16);
  auto table = [&](uint64_t row_bytes, int64_t rows, const std::string& meta) {
    return TableData{row_bytes, rows, text_bytes(meta), random_bytes(rng, static_cast<size_t>(rows) * row_bytes)};
  };
  c.tables["emb/a"] = table(52, table_rows, "f32 dim 13");
  c.tables["emb/b"] = table(7, 97, "int8 dim 3");
  c.tables["emb/none"] = table(16, 0, "");
  return c;
}

// How write_content lays the content out.
struct WritePlan {
  int64_t chunk_rows = 64;  // rows per append_rows call
  bool shuffle = false;     // all blobs and chunks of all tables in a seeded random order
  uint64_t seed = 1;
};

// Writes and commits `c` under out_dir with `options`, laid out as `plan` says.
inline Result<CommitInfo> write_content(const std::string& out_dir, const Content& c, const WriterOptions& options,
                                        const WritePlan& plan = {}) {
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointWriter> w, CheckpointWriter::create(out_dir, c.step, options));
  for (const auto& [name, t] : c.tables) LEANEMB_RETURN_IF_ERROR(w->add_table(name, t.row_bytes, t.rows, t.meta));
  // Work items: (blob name, -1, -1) or (table name, row_begin, row_count).
  struct Item {
    std::string name;
    int64_t begin, count;
  };
  std::vector<Item> items;
  for (const auto& [name, b] : c.blobs) items.push_back({name, -1, -1});
  for (const auto& [name, t] : c.tables)
    for (int64_t r = 0; r < t.rows; r += plan.chunk_rows) items.push_back({name, r, std::min(plan.chunk_rows, t.rows - r)});
  if (plan.shuffle) {
    std::mt19937_64 rng(plan.seed);
    std::shuffle(items.begin(), items.end(), rng);
  }
  for (const Item& it : items) {
    if (it.begin < 0) {
      LEANEMB_RETURN_IF_ERROR(w->add_blob(it.name, c.blobs.at(it.name)));
      continue;
    }
    const TableData& t = c.tables.at(it.name);
    const std::span<const uint8_t> all(t.bytes);
    LEANEMB_RETURN_IF_ERROR(w->append_rows(it.name, it.begin, all.subspan(it.begin * t.row_bytes, it.count * t.row_bytes)));
  }
  return w->commit();
}

// Reads checkpoint `dir` back and compares everything with `c`; the Status says what differs.
inline Status check_content(const std::string& dir, Env* env, const Content& c) {
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> r, CheckpointReader::open(dir, env));
  if (r->step() != c.step) return internal_error("step " + std::to_string(r->step()) + ", expected " + std::to_string(c.step));
  if (r->entries().size() != c.blobs.size() + c.tables.size()) return internal_error("wrong number of entries");
  for (const auto& [name, bytes] : c.blobs) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> got, r->read_blob(name));
    if (got != bytes) return internal_error("blob '" + name + "' differs");
  }
  for (const auto& [name, t] : c.tables) {
    const EntryInfo* e = r->find(name);
    if (e == nullptr || e->row_bytes != t.row_bytes || e->total_rows != t.rows || e->meta != t.meta)
      return internal_error("table '" + name + "' has a different shape or meta");
    std::vector<uint8_t> got(t.bytes.size());
    LEANEMB_RETURN_IF_ERROR(r->read_rows(name, 0, t.rows, got));
    if (got != t.bytes) return internal_error("rows of table '" + name + "' differ");
  }
  return Status();
}

}  // namespace leanemb::ckpt::testing_util
