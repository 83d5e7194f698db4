// Manifest encoding and validation, block geometry, checksums and directory names.
//
// The decoder treats its input as untrusted: every length is checked against the bytes left
// before it is used, every index and range against what it refers to, and arithmetic that could
// overflow is checked first. A manifest that decodes is safe to read with.
#include "ckpt/format.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <limits>
#include <random>

#include "core/bytes.h"

namespace leanemb::ckpt {

namespace {

constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8;  // magic, version, flags, step, body_bytes

// A bounds-checked cursor over the manifest body: core/bytes.h's ByteReader, with this format's
// DataLoss messages.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& path) : r_(bytes), path_(path) {}

  Status u8(uint8_t* v) { return r_.u8(v) ? Status() : truncated(); }
  Status u32(uint32_t* v) { return r_.u32(v) ? Status() : truncated(); }
  Status u64(uint64_t* v) { return r_.u64(v) ? Status() : truncated(); }
  Status i64(int64_t* v) { return r_.i64(v) ? Status() : truncated(); }
  Status bytes(size_t max_len, std::string* s, const char* what) {
    uint32_t n = 0;
    LEANEMB_RETURN_IF_ERROR(u32(&n));
    if (n > max_len) return error(std::string(what) + " of " + std::to_string(n) + " bytes exceeds the limit");
    return r_.raw(n, s) ? Status() : truncated();
  }
  size_t left() const { return r_.left(); }
  Status error(const std::string& what) const {
    return Status(StatusCode::kDataLoss, "manifest '" + path_ + "': " + what);
  }

 private:
  Status truncated() const { return error("ends in the middle of a record (truncated or corrupt)"); }

  ByteReader r_;
  std::string path_;
};

bool valid_file_name(const std::string& n) {
  return !n.empty() && n.size() <= 255 && n != "." && n != ".." && n != kManifestName &&
         n.find('/') == std::string::npos && n.find('\0') == std::string::npos;
}

// a * b <= limit without overflow.
bool mul_fits(uint64_t a, uint64_t b, uint64_t limit) { return b == 0 || a <= limit / b; }

Status decode_files(Cursor& c, Manifest* m) {
  uint32_t num_files = 0;
  LEANEMB_RETURN_IF_ERROR(c.u32(&num_files));
  if (num_files > c.left() / 16) return c.error("claims " + std::to_string(num_files) + " files, more than it holds");
  m->files.resize(num_files);
  for (uint32_t i = 0; i < num_files; ++i) {
    FileRecord& f = m->files[i];
    LEANEMB_RETURN_IF_ERROR(c.bytes(255, &f.name, "a file name"));
    LEANEMB_RETURN_IF_ERROR(c.u64(&f.payload_bytes));
    LEANEMB_RETURN_IF_ERROR(c.u32(&f.block_bytes));
    if (!valid_file_name(f.name)) return c.error("file " + std::to_string(i) + " has an invalid name");
    if (f.block_bytes == 0 || f.block_bytes > kMaxBlockBytes)
      return c.error("file '" + f.name + "' has block size " + std::to_string(f.block_bytes));
    if (f.payload_bytes > (uint64_t{1} << 62)) return c.error("file '" + f.name + "' has an impossible size");
    for (uint32_t j = 0; j < i; ++j)
      if (m->files[j].name == f.name) return c.error("file '" + f.name + "' is listed twice");
  }
  return Status();
}

// [offset, offset + bytes) lies inside file `file`'s payload.
Status check_region(const Cursor& c, const Manifest& m, const std::string& entry, uint32_t file, uint64_t offset,
                    uint64_t bytes) {
  if (file >= m.files.size()) return c.error("entry '" + entry + "' refers to file " + std::to_string(file) + " of " +
                                             std::to_string(m.files.size()));
  const uint64_t size = m.files[file].payload_bytes;
  if (offset > size || bytes > size - offset)
    return c.error("entry '" + entry + "' refers to bytes [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                   ") beyond the " + std::to_string(size) + " payload bytes of '" + m.files[file].name + "'");
  return Status();
}

Status decode_table(Cursor& c, const Manifest& m, EntryRecord* e) {
  LEANEMB_RETURN_IF_ERROR(c.u64(&e->row_bytes));
  LEANEMB_RETURN_IF_ERROR(c.i64(&e->total_rows));
  std::string meta;
  LEANEMB_RETURN_IF_ERROR(c.bytes(kMaxMetaBytes, &meta, "table meta"));
  e->meta.assign(meta.begin(), meta.end());
  if (e->row_bytes == 0 || e->row_bytes > kMaxRowBytes) return c.error("table '" + e->name + "' has row_bytes " + std::to_string(e->row_bytes));
  if (e->total_rows < 0 || !mul_fits(static_cast<uint64_t>(e->total_rows), e->row_bytes, uint64_t{1} << 62))
    return c.error("table '" + e->name + "' has an impossible row count " + std::to_string(e->total_rows));
  uint32_t num_chunks = 0;
  LEANEMB_RETURN_IF_ERROR(c.u32(&num_chunks));
  if (num_chunks > c.left() / 28) return c.error("table '" + e->name + "' claims more chunks than the manifest holds");
  e->chunks.resize(num_chunks);
  int64_t next_row = 0;  // chunks must tile [0, total_rows) in order
  for (ChunkRecord& ch : e->chunks) {
    LEANEMB_RETURN_IF_ERROR(c.i64(&ch.row_begin));
    LEANEMB_RETURN_IF_ERROR(c.i64(&ch.row_count));
    LEANEMB_RETURN_IF_ERROR(c.u32(&ch.file));
    LEANEMB_RETURN_IF_ERROR(c.u64(&ch.offset));
    if (ch.row_begin != next_row || ch.row_count <= 0 || ch.row_count > e->total_rows - ch.row_begin)
      return c.error("table '" + e->name + "': chunk of rows [" + std::to_string(ch.row_begin) + ", +" +
                     std::to_string(ch.row_count) + ") does not continue at row " + std::to_string(next_row) +
                     " within " + std::to_string(e->total_rows) + " rows");
    LEANEMB_RETURN_IF_ERROR(check_region(c, m, e->name, ch.file, ch.offset, static_cast<uint64_t>(ch.row_count) * e->row_bytes));
    next_row = ch.row_begin + ch.row_count;
  }
  if (next_row != e->total_rows)
    return c.error("table '" + e->name + "': rows [" + std::to_string(next_row) + ", " + std::to_string(e->total_rows) +
                   ") are in no chunk");
  return Status();
}

Status decode_entries(Cursor& c, Manifest* m) {
  uint32_t num_entries = 0;
  LEANEMB_RETURN_IF_ERROR(c.u32(&num_entries));
  if (num_entries > c.left() / 9) return c.error("claims " + std::to_string(num_entries) + " entries, more than it holds");
  m->entries.resize(num_entries);
  for (uint32_t i = 0; i < num_entries; ++i) {
    EntryRecord& e = m->entries[i];
    uint8_t kind = 0;
    LEANEMB_RETURN_IF_ERROR(c.u8(&kind));
    LEANEMB_RETURN_IF_ERROR(c.bytes(kMaxNameBytes, &e.name, "an entry name"));
    if (!check_entry_name(e.name).ok()) return c.error("entry " + std::to_string(i) + " has an invalid name");
    if (i > 0 && !(m->entries[i - 1].name < e.name))
      return c.error("entry '" + e.name + "' is out of order or listed twice");
    if (kind == static_cast<uint8_t>(EntryKind::kBlob)) {
      e.kind = EntryKind::kBlob;
      LEANEMB_RETURN_IF_ERROR(c.u32(&e.file));
      LEANEMB_RETURN_IF_ERROR(c.u64(&e.offset));
      LEANEMB_RETURN_IF_ERROR(c.u64(&e.size));
      LEANEMB_RETURN_IF_ERROR(check_region(c, *m, e.name, e.file, e.offset, e.size));
    } else if (kind == static_cast<uint8_t>(EntryKind::kTable)) {
      e.kind = EntryKind::kTable;
      LEANEMB_RETURN_IF_ERROR(decode_table(c, *m, &e));
    } else {
      return c.error("entry '" + e.name + "' has unknown kind " + std::to_string(kind));
    }
  }
  return Status();
}

}  // namespace

namespace {
constexpr std::string_view kParentMagic = "leanemb-parent-v1";
}  // namespace

std::vector<uint8_t> encode_parent_blob(int64_t step, std::string_view id_hex) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.raw(kParentMagic);
  w.i64(step);
  w.str32(id_hex);
  return out;
}

Result<ParentRef> decode_parent_blob(std::span<const uint8_t> bytes, const std::string& where) {
  ByteReader r(bytes);
  std::string magic;
  ParentRef p;
  const bool ok = r.raw(kParentMagic.size(), &magic) && magic == kParentMagic && r.get(&p.step) && r.str32(&p.id_hex, 64) && r.done();
  const bool hex = p.id_hex.size() == 2 * kCheckpointIdBytes &&
                   std::all_of(p.id_hex.begin(), p.id_hex.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
  if (!ok || p.step < 0 || !hex) return data_loss("checkpoint '" + where + "': blob '" + std::string(kParentBlob) + "' is malformed");
  return p;
}

namespace {
constexpr std::string_view kLinkedMagic = "leanemb-linked-v1";
}  // namespace

bool is_linked_file_path(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') return false;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = std::min(path.find('/', i), path.size());
    const std::string_view part = path.substr(i, j - i);
    if (part.empty() || part == "." || part == "..") return false;
    i = j + 1;
  }
  return true;
}

std::vector<uint8_t> encode_linked_files_blob(std::span<const LinkedFile> files) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.raw(kLinkedMagic);
  w.u32(static_cast<uint32_t>(files.size()));
  for (const LinkedFile& f : files) {
    w.str32(f.path);
    w.u64(f.bytes);
    w.u64(f.xxh3);
  }
  return out;
}

Result<std::vector<LinkedFile>> decode_linked_files_blob(std::span<const uint8_t> bytes, const std::string& where) {
  ByteReader r(bytes);
  std::string magic;
  uint32_t n = 0;
  const std::string bad = "checkpoint '" + where + "': blob '" + std::string(kLinkedFilesBlob) + "' is malformed";
  if (!r.raw(kLinkedMagic.size(), &magic) || magic != kLinkedMagic || !r.get(&n)) return data_loss(bad);
  std::vector<LinkedFile> files;
  for (uint32_t i = 0; i < n; ++i) {
    LinkedFile f;
    if (!r.str32(&f.path, 4096) || !r.get(&f.bytes) || !r.get(&f.xxh3) || !is_linked_file_path(f.path)) return data_loss(bad);
    files.push_back(std::move(f));
  }
  if (!r.done()) return data_loss(bad);
  return files;
}

void put_u32(std::vector<uint8_t>* out, uint32_t v) { ByteWriter(out).u32(v); }
void put_u64(std::vector<uint8_t>* out, uint64_t v) { ByteWriter(out).u64(v); }
uint32_t get_u32(const uint8_t* p) { return load_le<uint32_t>(p); }
uint64_t get_u64(const uint8_t* p) { return load_le<uint64_t>(p); }

std::vector<uint8_t> encode_manifest(const Manifest& m) {
  std::vector<uint8_t> body;
  ByteWriter b(&body);
  if (m.version >= 2) b.raw(m.id.data(), m.id.size());  // REQUIRES: kCheckpointIdBytes
  b.u32(static_cast<uint32_t>(m.files.size()));
  for (const FileRecord& f : m.files) {
    b.str32(f.name);
    b.u64(f.payload_bytes);
    b.u32(f.block_bytes);
  }
  b.u32(static_cast<uint32_t>(m.entries.size()));
  for (const EntryRecord& e : m.entries) {
    b.u8(static_cast<uint8_t>(e.kind));
    b.str32(e.name);
    if (e.kind == EntryKind::kBlob) {
      b.u32(e.file);
      b.u64(e.offset);
      b.u64(e.size);
      continue;
    }
    b.u64(e.row_bytes);
    b.u64(static_cast<uint64_t>(e.total_rows));
    b.str32(std::string_view(reinterpret_cast<const char*>(e.meta.data()), e.meta.size()));
    b.u32(static_cast<uint32_t>(e.chunks.size()));
    for (const ChunkRecord& ch : e.chunks) {
      b.u64(static_cast<uint64_t>(ch.row_begin));
      b.u64(static_cast<uint64_t>(ch.row_count));
      b.u32(ch.file);
      b.u64(ch.offset);
    }
  }
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.raw(kManifestMagic, 8);
  w.u32(m.version);
  w.u32(0);  // flags, reserved
  w.u64(static_cast<uint64_t>(m.step));
  w.u64(body.size());
  w.raw(body.data(), body.size());
  w.u64(XXH3_64bits(out.data(), out.size()));
  return out;
}

Result<Manifest> decode_manifest(std::span<const uint8_t> bytes, const std::string& path) {
  Cursor whole(bytes, path);
  if (bytes.size() < kHeaderBytes + kChecksumBytes) return whole.error("is " + std::to_string(bytes.size()) + " bytes, too short");
  if (std::memcmp(bytes.data(), kManifestMagic, 8) != 0) return whole.error("does not start with LEANCKPT");
  const uint32_t version = get_u32(bytes.data() + 8);
  const uint64_t body_bytes = get_u64(bytes.data() + 24);
  if (body_bytes != bytes.size() - kHeaderBytes - kChecksumBytes)
    return whole.error("is " + std::to_string(bytes.size()) + " bytes but its header announces a body of " +
                       std::to_string(body_bytes) + " (truncated or appended to)");
#ifndef LEANEMB_FUZZING  // the fuzz build reaches the field checks behind the checksum (fuzz/)
  const uint64_t stored = get_u64(bytes.data() + bytes.size() - kChecksumBytes);
  if (XXH3_64bits(bytes.data(), bytes.size() - kChecksumBytes) != stored) return whole.error("checksum mismatch");
#endif
  if (version > kFormatVersion)
    return unimplemented("manifest '" + path + "' has format version " + std::to_string(version) +
                         "; this build reads versions " + std::to_string(kOldestFormatVersion) + " to " +
                         std::to_string(kFormatVersion));
  if (version < kOldestFormatVersion) return whole.error("has format version " + std::to_string(version));
  if (get_u32(bytes.data() + 12) != 0) return whole.error("has unknown flags");
  Manifest m;
  m.step = static_cast<int64_t>(get_u64(bytes.data() + 16));
  if (m.step < 0) return whole.error("has a negative step");
  Cursor c(bytes.subspan(kHeaderBytes, body_bytes), path);
  m.version = version;
  if (version >= 2) {
    uint64_t lo = 0, hi = 0;
    LEANEMB_RETURN_IF_ERROR(c.u64(&lo));
    LEANEMB_RETURN_IF_ERROR(c.u64(&hi));
    m.id.resize(kCheckpointIdBytes);
    std::memcpy(m.id.data(), bytes.data() + kHeaderBytes, kCheckpointIdBytes);
  }
  LEANEMB_RETURN_IF_ERROR(decode_files(c, &m));
  LEANEMB_RETURN_IF_ERROR(decode_entries(c, &m));
  if (c.left() != 0) return c.error(std::to_string(c.left()) + " bytes after the last entry");
  return m;
}

uint64_t num_blocks(uint64_t payload_bytes, uint32_t block_bytes) {
  return payload_bytes / block_bytes + (payload_bytes % block_bytes != 0 ? 1 : 0);
}

uint64_t physical_file_bytes(uint64_t payload_bytes, uint32_t block_bytes) {
  return payload_bytes + kChecksumBytes * num_blocks(payload_bytes, block_bytes);
}

uint64_t block_checksum(const ChecksumKey& key, uint64_t block_index, std::span<const uint8_t> payload) {
  uint64_t seed = 0;
  if (key.checkpoint_id.empty()) {  // version 1: the file name
    seed = XXH3_64bits_withSeed(key.file_name.data(), key.file_name.size(), block_index);
  } else {  // version 2: the file name, then the id
    std::string k = key.file_name;
    k.append(reinterpret_cast<const char*>(key.checkpoint_id.data()), key.checkpoint_id.size());
    seed = XXH3_64bits_withSeed(k.data(), k.size(), block_index);
  }
  return XXH3_64bits_withSeed(payload.data(), payload.size(), seed);
}

std::vector<uint8_t> new_checkpoint_id(int64_t step) {
  std::random_device rd;
  uint64_t parts[6];
  for (int i = 0; i < 4; ++i) parts[i] = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  parts[4] = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) ^
             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  parts[5] = static_cast<uint64_t>(step);
  const XXH128_hash_t h = XXH3_128bits(parts, sizeof parts);
  std::vector<uint8_t> id;
  ByteWriter w(&id);
  w.u64(h.low64);
  w.u64(h.high64);
  return id;
}

std::string checkpoint_id_hex(std::span<const uint8_t> id) {
  if (id.empty()) return "none";
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : id) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

Status check_entry_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes)
    return invalid_argument("checkpoint entry names must have 1 to " + std::to_string(kMaxNameBytes) + " bytes, got " +
                            std::to_string(name.size()));
  for (char ch : name) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7F) return invalid_argument("checkpoint entry name '" + std::string(name) + "' has a control character");
  }
  return Status();
}

std::string step_dir_name(int64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < 10) digits.insert(0, 10 - digits.size(), '0');
  return "step-" + digits;
}

std::optional<int64_t> parse_step_dir_name(std::string_view name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view digits = name.substr(kPrefix.size());
  if (digits.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(ch - '0');
  }
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(v);
}

namespace {
bool is_step_dir_with_suffix(std::string_view name, std::string_view suffix) {
  return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix &&
         parse_step_dir_name(name.substr(0, name.size() - suffix.size())).has_value();
}
}  // namespace

bool is_tmp_dir_name(std::string_view name) { return is_step_dir_with_suffix(name, kTmpSuffix); }

bool is_leftover_dir_name(std::string_view name) {
  return is_step_dir_with_suffix(name, kTmpSuffix) || is_step_dir_with_suffix(name, kDeletingSuffix);
}

}  // namespace leanemb::ckpt
