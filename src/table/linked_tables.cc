// Linked tables in plain checkpoints (linked_tables.h).
#include "table/linked_tables.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "core/bytes.h"
#include "table/delta_rows.h"
#include "leanemb/json.h"

namespace leanemb::table_ckpt {

namespace {

int64_t g_places_per_blob = 0;  // set_places_per_blob_for_testing
int64_t places_per_blob() { return g_places_per_blob > 0 ? g_places_per_blob : kPlacesPerBlob; }

std::string places_blob(const std::string& table, int64_t k) {
  return std::string(kLinkPlacesPrefix) + table + "/" + std::to_string(k);
}

void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

bool get_varint(std::span<const uint8_t> in, size_t* pos, uint64_t* v) {
  *v = 0;
  for (int shift = 0;; shift += 7) {
    if (*pos >= in.size() || shift > 63) return false;
    const uint8_t b = in[(*pos)++];
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
}

// Accumulates places into blobs of kPlacesPerBlob.
class PlaceBlobs {
 public:
  PlaceBlobs(ckpt::CheckpointWriter& w, std::string table) : w_(w), table_(std::move(table)) {}
  Status add(std::span<const RowPlace> chunk) {
    for (const RowPlace& p : chunk) {
      if (count_ == places_per_blob()) LEANEMB_RETURN_IF_ERROR(flush());
      pending_.push_back(p);
      ++count_;
    }
    return Status();
  }
  Status flush() {
    if (count_ == 0) return Status();
    std::vector<uint8_t> out;
    out.reserve(8 + pending_.size() * 7);
    ByteWriter(&out).u64(static_cast<uint64_t>(count_));
    int64_t prev = -1;
    for (const RowPlace& p : pending_) {
      put_varint(out, static_cast<uint64_t>(p.row - prev - 1));
      put_varint(out, p.file);
      put_varint(out, p.offset);
      prev = p.row;
    }
    LEANEMB_RETURN_IF_ERROR(w_.add_blob(places_blob(table_, k_++), out));
    pending_.clear();
    count_ = 0;
    return Status();
  }

 private:
  ckpt::CheckpointWriter& w_;
  std::string table_;
  std::vector<RowPlace> pending_;
  int64_t count_ = 0, k_ = 0;
};

nlohmann::json table_meta(const EmbeddingCollection& emb, int t, uint64_t seed) {
  const RowLayout& l = emb.layout(t);
  const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
  return {{"dim", l.dim},
          {"dtype", std::string(dtype_name(l.weight_dtype))},
          {"optimizer", std::string(optimizer_name(l.optimizer.kind))},
          {"state_dtype", std::string(dtype_name(l.optimizer.state_dtype))},
          {"stride_bytes", l.stride_bytes},
          {"table_rows", to.num_rows},
          {"initial", parse_json_or_discarded(initial_rows_meta_json(to, seed, t))}};
}

}  // namespace

int64_t set_places_per_blob_for_testing(int64_t n) {
  const int64_t old = g_places_per_blob;
  g_places_per_blob = n;
  return old;
}

Result<int64_t> write_linked_table(ckpt::CheckpointWriter& w, EmbeddingCollection& emb, int t, uint64_t seed) {
  const TableOptions& to = emb.options().tables[static_cast<size_t>(t)];
  const std::string rel = "links/" + std::to_string(t);
  const std::string dir = w.staging_dir() + "/" + rel;
  for (const std::string& d : {w.staging_dir() + "/links", dir}) {
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST)
      return io_error("mkdir of '" + d + "': " + std::generic_category().message(errno));
  }
  PlaceBlobs blobs(w, to.name);
  LEANEMB_ASSIGN_OR_RETURN(const LinkedRows linked, emb.link_rows(t, dir, [&](std::span<const RowPlace> c) { return blobs.add(c); }));
  LEANEMB_RETURN_IF_ERROR(blobs.flush());
  nlohmann::json meta = table_meta(emb, t, seed);
  meta["row_bytes"] = linked.row_bytes;
  meta["block_bytes"] = linked.block_bytes;
  meta["segment_bytes"] = linked.segment_bytes;
  meta["places"] = linked.rows;
  meta["places_per_blob"] = places_per_blob();
  meta["dir"] = rel;
  nlohmann::json files = nlohmann::json::array();
  for (const LinkedRowFile& f : linked.files) {
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"hash", f.hash}});
    LEANEMB_RETURN_IF_ERROR(w.add_linked_file(rel + "/" + f.name, f.bytes, f.hash));
  }
  meta["files"] = std::move(files);
  const std::string text = dump_json(meta);
  LEANEMB_RETURN_IF_ERROR(w.add_blob(kLinksPrefix + to.name, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
  return static_cast<int64_t>(linked.rows);
}

bool has_linked_table(const ckpt::CheckpointReader& r, const std::string& name) {
  return r.find(kLinksPrefix + name) != nullptr;
}

Result<LinkedTable> read_linked_table(const ckpt::CheckpointReader& r, const std::string& name) {
  const std::string blob = kLinksPrefix + name;
  auto bad = [&](const std::string& what) { return data_loss("checkpoint '" + r.dir() + "': blob '" + blob + "': " + what); };
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, r.read_blob(blob));
  const nlohmann::json m = parse_json_or_discarded(bytes.data(), bytes.size());
  if (!m.is_object()) return bad("not a JSON object");
  LinkedTable lt;
  lt.name = name;
  lt.meta = bytes;
  try {
    lt.num_rows = m.at("table_rows").get<int64_t>();
    lt.linked.row_bytes = m.at("row_bytes").get<size_t>();
    lt.linked.block_bytes = m.at("block_bytes").get<uint32_t>();
    lt.linked.segment_bytes = m.at("segment_bytes").get<uint64_t>();
    lt.linked.rows = m.at("places").get<uint64_t>();
    lt.places_per_blob = m.at("places_per_blob").get<int64_t>();
    const std::string dir = m.at("dir").get<std::string>();
    if (dir.empty() || dir.find("..") != std::string::npos || dir.front() == '/') return bad("\"dir\" is not a relative path");
    lt.dir = r.dir() + "/" + dir;
    for (const auto& f : m.at("files")) {
      lt.linked.files.push_back({f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(), f.at("hash").get<uint64_t>()});
      if (lt.linked.files.back().name.find('/') != std::string::npos) return bad("a file name with '/'");
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(std::string("missing or mistyped field (") + e.what() + ")");
  }
  if (lt.num_rows < 1 || lt.linked.row_bytes == 0 || lt.linked.block_bytes == 0 || lt.linked.segment_bytes == 0 || lt.places_per_blob < 1)
    return bad("a size is zero");
  return lt;
}

PlaceCursor::PlaceCursor(const ckpt::CheckpointReader& r, const LinkedTable& lt) : r_(r), lt_(lt) {}

Result<std::span<const RowPlace>> PlaceCursor::next() {
  const int64_t total = static_cast<int64_t>(lt_.linked.rows);
  const int64_t per_blob = lt_.places_per_blob;
  if (k_ * per_blob >= total) return std::span<const RowPlace>();
  const std::string name = places_blob(lt_.name, k_);
  auto bad = [&](const std::string& what) { return data_loss("checkpoint '" + r_.dir() + "': blob '" + name + "': " + what); };
  LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, r_.read_blob(name));
  const int64_t count = std::min(per_blob, total - k_ * per_blob);
  ++k_;
  ByteReader br(bytes);
  uint64_t n = 0;
  if (!br.u64(&n) || n != static_cast<uint64_t>(count)) return bad("expected " + std::to_string(count) + " places");
  places_.resize(static_cast<size_t>(count));
  size_t pos = 8;
  // Each blob's gaps start from row -1 (as the writer's); its rows follow the blob before's.
  const int64_t last = prev_;
  prev_ = -1;
  for (int64_t i = 0; i < count; ++i) {
    uint64_t gap = 0, file = 0, off = 0;
    if (!get_varint(bytes, &pos, &gap) || !get_varint(bytes, &pos, &file) || !get_varint(bytes, &pos, &off)) return bad("truncated");
    if (gap >= static_cast<uint64_t>(lt_.num_rows - prev_ - 1) || file >= lt_.linked.files.size() ||
        off + lt_.linked.row_bytes > lt_.linked.files[file].bytes)
      return bad("a place outside the table or its file");
    prev_ += 1 + static_cast<int64_t>(gap);
    if (i == 0 && prev_ <= last) return bad("its rows do not follow the blob before's");
    places_[static_cast<size_t>(i)] = {prev_, static_cast<uint32_t>(file), off};
  }
  if (pos != bytes.size()) return bad("trailing bytes");
  return std::span<const RowPlace>(places_);
}

Status for_each_place_chunk(const ckpt::CheckpointReader& r, const LinkedTable& lt,
                            const std::function<Status(std::span<const RowPlace>)>& fn) {
  PlaceCursor cursor(r, lt);
  for (;;) {
    LEANEMB_ASSIGN_OR_RETURN(const std::span<const RowPlace> c, cursor.next());
    if (c.empty()) return Status();
    LEANEMB_RETURN_IF_ERROR(fn(c));
  }
}

Status for_each_linked_row(const ckpt::CheckpointReader& r, const LinkedTable& lt,
                           const std::function<Status(int64_t, std::span<const uint8_t>)>& fn) {
  // Every place of the table (16 bytes each), by file and offset: each file is read once, front
  // to back, in windows of up to 1 MiB that start at a place and end at the last place they hold
  // whole. (Chunk by chunk in row order, every chunk would read nearly every file.)
  std::vector<RowPlace> places;
  places.reserve(static_cast<size_t>(lt.linked.rows));
  LEANEMB_RETURN_IF_ERROR(for_each_place_chunk(r, lt, [&](std::span<const RowPlace> c) {
    places.insert(places.end(), c.begin(), c.end());
    return Status();
  }));
  std::sort(places.begin(), places.end(), [](const RowPlace& a, const RowPlace& b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });
  const size_t rb = lt.linked.row_bytes;
  constexpr uint64_t kWindow = uint64_t{1} << 20;
  std::vector<uint8_t> window(std::max<size_t>(kWindow, rb));
  for (size_t i = 0; i < places.size();) {
    const uint32_t file = places[i].file;
    const std::string path = lt.dir + "/" + lt.linked.files[file].name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return Status(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                    "open of linked file '" + path + "': " + std::generic_category().message(errno));
    Status st;
    while (st.ok() && i < places.size() && places[i].file == file) {
      const uint64_t w0 = places[i].offset;
      size_t end = i + 1;  // the places [i, end) the window holds whole
      while (end < places.size() && places[end].file == file && places[end].offset + rb - w0 <= window.size()) ++end;
      const uint64_t len = places[end - 1].offset + rb - w0;
      for (uint64_t got = 0; st.ok() && got < len;) {
        const ssize_t n = ::pread(fd, window.data() + got, len - got, static_cast<off_t>(w0 + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          st = n == 0 ? data_loss("linked file '" + path + "' ends early") : io_error("read of '" + path + "': " + std::generic_category().message(errno));
          break;
        }
        got += static_cast<uint64_t>(n);
      }
      for (; st.ok() && i < end; ++i) st = fn(places[i].row, std::span<const uint8_t>(window.data() + (places[i].offset - w0), rb));
    }
    ::close(fd);
    LEANEMB_RETURN_IF_ERROR(st);
  }
  return Status();
}

Status load_linked_table(const ckpt::CheckpointReader& r, const LinkedTable& lt, EmbeddingTables& tables,
                         EmbeddingCollection* local, int t, int64_t chunk_rows, const InitialRows* writer_initial, bool* adopted) {
  if (adopted) *adopted = false;
  if (writer_initial == nullptr && tables.communicator() == nullptr && local->has_initial_rows(t) && local->can_link_rows(t)) {
    PlaceCursor cursor(r, lt);  // the places stream from their blobs into the store
    const Status st = local->adopt_linked_rows(t, lt.dir, lt.linked, [&cursor]() { return cursor.next(); });
    if (st.ok()) {
      if (adopted) *adopted = true;
      return Status();
    }
    if (st.code() != StatusCode::kFailedPrecondition) return st;
    // Another layout: copied below, over the table's initial rows again.
  }
  const size_t stride = lt.linked.row_bytes;
  if (writer_initial == nullptr) {
    LEANEMB_RETURN_IF_ERROR(local->reset_rows_to_initial(t));
  } else {  // the writer's initial bytes in every row first
    const RowLayout& l = tables.layout(t);
    std::vector<uint8_t> rows;
    std::vector<float> tmp(static_cast<size_t>(l.dim));
    for (int64_t r0 = 0; r0 < lt.num_rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, lt.num_rows - r0);
      rows.assign(static_cast<size_t>(n) * stride, 0);
      for (int64_t i = 0; i < n; ++i) writer_initial->row(r0 + i, l, tmp.data(), rows.data() + static_cast<size_t>(i) * stride);
      LEANEMB_RETURN_IF_ERROR(tables.write_raw_rows(t, r0, n, rows));
    }
  }
  RowRunWriter runs(tables, t, stride, chunk_rows);
  LEANEMB_RETURN_IF_ERROR(for_each_linked_row(r, lt, [&](int64_t row, std::span<const uint8_t> fat) { return runs.add(row, fat); }));
  return runs.flush();
}

}  // namespace leanemb::table_ckpt
