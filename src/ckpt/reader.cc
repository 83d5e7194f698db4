// CheckpointReader: manifest-checked access to blobs and table rows, full verification and the
// layout-independent digest.
#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <cstdio>

#include "ckpt/block_file.h"
#include "ckpt/directory.h"
#include "ckpt/format.h"
#include "ckpt/xxh128_stream.h"
#include "leanemb/checkpoint.h"

namespace leanemb::ckpt {

namespace {

constexpr char kDigestDomain[] = "leanemb-checkpoint-digest-v1";
constexpr size_t kDigestPieceBytes = size_t{1} << 20;  // bytes read per step while hashing

using Hasher = Xxh128Stream;

}  // namespace

std::string_view entry_kind_name(EntryKind kind) { return kind == EntryKind::kBlob ? "blob" : "table"; }

struct CheckpointReader::Impl {
  Env* env = nullptr;
  std::string dir;
  Manifest manifest;
  std::vector<EntryInfo> infos;  // parallel to manifest.entries
  std::vector<std::unique_ptr<BlockFileReader>> files;
  std::optional<ParentRef> parent;  // blob kParentBlob, read at open
  std::vector<LinkedFile> linked;    // blob kLinkedFilesBlob, read (and sizes checked) at open

  // Index into manifest.entries, or -1.
  ptrdiff_t index_of(std::string_view name) const {
    auto it = std::lower_bound(manifest.entries.begin(), manifest.entries.end(), name,
                               [](const EntryRecord& e, std::string_view n) { return std::string_view(e.name) < n; });
    return it != manifest.entries.end() && it->name == name ? it - manifest.entries.begin() : -1;
  }
  // Reads payload bytes of one file for entry `e`; a failure names the checkpoint and entry.
  Status read_region(const EntryRecord& e, const std::string& part, uint32_t file, uint64_t offset,
                     std::span<uint8_t> out) const {
    Status s = files[file]->read(offset, out);
    if (s.ok()) return s;
    return Status(s.code(), "checkpoint '" + dir + "': entry '" + e.name + "'" + part + ": " + s.message());
  }
  // Rows [begin, begin + count) of table `e` into out (sizes already checked).
  Status read_table_rows(const EntryRecord& e, int64_t begin, int64_t count, std::span<uint8_t> out) const;
  // "entries 'a', 'b' rows [x, y)" overlapping payload bytes [lo, hi) of file `file`.
  std::string entries_in(uint32_t file, uint64_t lo, uint64_t hi) const;
};

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::~CheckpointReader() = default;

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::open(const std::string& dir, Env* env) {
  auto impl = std::make_unique<Impl>();
  impl->env = env_or_default(env);
  impl->dir = dir;
  const std::string path = join_path(dir, kManifestName);
  auto bytes = impl->env->read_file(path);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound)
      return not_found("'" + dir + "' has no " + kManifestName + ": not a checkpoint, or an incomplete one");
    return bytes.status();
  }
  LEANEMB_ASSIGN_OR_RETURN(impl->manifest, decode_manifest(*bytes, path));
  // A step-<N> directory holds checkpoint N: a renamed one is not taken for another step.
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  base = base.substr(base.find_last_of('/') + 1);
  if (auto named = parse_step_dir_name(base); named && *named != impl->manifest.step)
    return data_loss("checkpoint '" + dir + "': the directory is named for step " + std::to_string(*named) +
                     " but its manifest says step " + std::to_string(impl->manifest.step) + " (renamed?)");
  for (const FileRecord& f : impl->manifest.files) {
    LEANEMB_ASSIGN_OR_RETURN(auto reader, BlockFileReader::open(impl->env, dir, f, impl->manifest.id));
    impl->files.push_back(std::move(reader));
  }
  for (const EntryRecord& e : impl->manifest.entries) {
    EntryInfo info;
    info.name = e.name;
    info.kind = e.kind;
    info.size_bytes = e.kind == EntryKind::kBlob ? e.size : static_cast<uint64_t>(e.total_rows) * e.row_bytes;
    info.row_bytes = e.row_bytes;
    info.total_rows = e.total_rows;
    info.meta = e.meta;
    info.num_chunks = e.chunks.size();
    impl->infos.push_back(std::move(info));
  }
  auto reader = std::unique_ptr<CheckpointReader>(new CheckpointReader(std::move(impl)));
  if (reader->find(kParentBlob) != nullptr) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> parent, reader->read_blob(kParentBlob));
    LEANEMB_ASSIGN_OR_RETURN(ParentRef ref, decode_parent_blob(parent, dir));
    if (ref.step >= reader->step())
      return data_loss("checkpoint '" + dir + "': its parent step " + std::to_string(ref.step) + " is not earlier");
    reader->impl_->parent = std::move(ref);
  }
  if (reader->find(kLinkedFilesBlob) != nullptr) {
    LEANEMB_ASSIGN_OR_RETURN(std::vector<uint8_t> blob, reader->read_blob(kLinkedFilesBlob));
    LEANEMB_ASSIGN_OR_RETURN(reader->impl_->linked, decode_linked_files_blob(blob, dir));
    for (const LinkedFile& f : reader->impl_->linked) {
      auto size = reader->impl_->env->file_size(join_path(dir, f.path));
      if (!size.ok() || *size != f.bytes)
        return data_loss("checkpoint '" + dir + "': linked file '" + f.path + "' " +
                         (size.ok() ? "has " + std::to_string(*size) + " bytes, " + std::to_string(f.bytes) + " expected" : "is missing (" + size.status().message() + ")"));
    }
  }
  return reader;
}

int64_t CheckpointReader::step() const { return impl_->manifest.step; }
const std::string& CheckpointReader::dir() const { return impl_->dir; }
uint32_t CheckpointReader::format_version() const { return impl_->manifest.version; }
std::string CheckpointReader::id_hex() const { return checkpoint_id_hex(impl_->manifest.id); }
const std::vector<EntryInfo>& CheckpointReader::entries() const { return impl_->infos; }
const std::optional<ParentRef>& CheckpointReader::parent() const { return impl_->parent; }
const std::vector<LinkedFile>& CheckpointReader::linked_files() const { return impl_->linked; }

const EntryInfo* CheckpointReader::find(std::string_view name) const {
  const ptrdiff_t i = impl_->index_of(name);
  return i < 0 ? nullptr : &impl_->infos[static_cast<size_t>(i)];
}

Result<std::vector<uint8_t>> CheckpointReader::read_blob(std::string_view name) const {
  const ptrdiff_t i = impl_->index_of(name);
  if (i < 0) return not_found("checkpoint '" + impl_->dir + "' has no entry '" + std::string(name) + "'");
  const EntryRecord& e = impl_->manifest.entries[static_cast<size_t>(i)];
  if (e.kind != EntryKind::kBlob) return invalid_argument("checkpoint entry '" + e.name + "' is a table, not a blob");
  std::vector<uint8_t> out(e.size);
  LEANEMB_RETURN_IF_ERROR(impl_->read_region(e, "", e.file, e.offset, out));
  return out;
}

Status CheckpointReader::Impl::read_table_rows(const EntryRecord& e, int64_t begin, int64_t count,
                                               std::span<uint8_t> out) const {
  // The chunk holding row `begin`: the last one starting at or before it (chunks tile the table).
  auto it = std::upper_bound(e.chunks.begin(), e.chunks.end(), begin,
                             [](int64_t row, const ChunkRecord& c) { return row < c.row_begin; });
  --it;
  int64_t row = begin;
  size_t done = 0;
  while (row < begin + count) {
    const int64_t n = std::min(begin + count, it->row_begin + it->row_count) - row;
    const size_t bytes = static_cast<size_t>(n) * e.row_bytes;
    const uint64_t offset = it->offset + static_cast<uint64_t>(row - it->row_begin) * e.row_bytes;
    LEANEMB_RETURN_IF_ERROR(read_region(e, " rows [" + std::to_string(row) + ", " + std::to_string(row + n) + ")",
                                        it->file, offset, out.subspan(done, bytes)));
    row += n;
    done += bytes;
    ++it;
  }
  return Status();
}

Status CheckpointReader::read_rows(std::string_view name, int64_t row_begin, int64_t count, std::span<uint8_t> out) const {
  const ptrdiff_t i = impl_->index_of(name);
  if (i < 0) return not_found("checkpoint '" + impl_->dir + "' has no entry '" + std::string(name) + "'");
  const EntryRecord& e = impl_->manifest.entries[static_cast<size_t>(i)];
  if (e.kind != EntryKind::kTable) return invalid_argument("checkpoint entry '" + e.name + "' is a blob, not a table");
  if (row_begin < 0 || count < 0 || row_begin > e.total_rows || count > e.total_rows - row_begin)
    return out_of_range("read_rows: rows [" + std::to_string(row_begin) + ", +" + std::to_string(count) +
                        ") outside table '" + e.name + "' of " + std::to_string(e.total_rows) + " rows");
  if (out.size() != static_cast<uint64_t>(count) * e.row_bytes)
    return invalid_argument("read_rows: buffer of " + std::to_string(out.size()) + " bytes for " + std::to_string(count) +
                            " rows of " + std::to_string(e.row_bytes) + " bytes of table '" + e.name + "'");
  if (count == 0) return Status();
  return impl_->read_table_rows(e, row_begin, count, out);
}

std::string CheckpointReader::Impl::entries_in(uint32_t file, uint64_t lo, uint64_t hi) const {
  // The first few entries by name, then a count (a block can hold hundreds of small blobs).
  constexpr int kShown = 6;
  std::string s;
  int n = 0;
  auto add = [&](const std::string& text) {
    if (n++ < kShown) s += (s.empty() ? "" : ", ") + text;
  };
  for (const EntryRecord& e : manifest.entries) {
    if (e.kind == EntryKind::kBlob) {
      if (e.file == file && e.offset < hi && e.offset + e.size > lo) add("blob '" + e.name + "'");
      continue;
    }
    for (const ChunkRecord& c : e.chunks) {
      const uint64_t end = c.offset + static_cast<uint64_t>(c.row_count) * e.row_bytes;
      if (c.file != file || c.offset >= hi || end <= lo) continue;
      // Rows of this chunk that have bytes in [lo, hi).
      const uint64_t first = (std::max(lo, c.offset) - c.offset) / e.row_bytes;
      const uint64_t last = (std::min(hi, end) - c.offset + e.row_bytes - 1) / e.row_bytes;
      add("table '" + e.name + "' rows [" + std::to_string(c.row_begin + static_cast<int64_t>(first)) + ", " +
          std::to_string(c.row_begin + static_cast<int64_t>(last)) + ")");
    }
  }
  if (n > kShown) s += " and " + std::to_string(n - kShown) + " more";
  return s.empty() ? "no entry" : s;
}

namespace {
// XXH3-64 of the first `bytes` bytes of a file, read 1 MiB at a time through `env`.
Result<uint64_t> xxh3_of_file_uncached(Env* env, const std::string& path, uint64_t bytes) {
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, env->new_random_access_file(path));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
  if (st == nullptr) return resource_exhausted("XXH3_createState");
  XXH3_64bits_reset(st.get());
  std::vector<uint8_t> buf(size_t{1} << 20);
  for (uint64_t off = 0; off < bytes; off += buf.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - off));
    LEANEMB_RETURN_IF_ERROR(f->read_at(off, std::span<uint8_t>(buf.data(), n)));
    XXH3_64bits_update(st.get(), buf.data(), n);
  }
  return static_cast<uint64_t>(XXH3_64bits_digest(st.get()));
}

// The same, once per file per process: the checkpoints of a chain link the same files (one
// inode under several names), and `ckpt list` verifies every chain, so without this the store's
// files would be read once per link that names them. Keyed by device, inode, size and change
// time of the real file system's file; a file changed in place since gets another ctime.
Result<uint64_t> xxh3_of_file(Env* env, const std::string& path, uint64_t bytes) {
  struct stat st {};
  if (env != posix_env() || ::stat(path.c_str(), &st) != 0) return xxh3_of_file_uncached(env, path, bytes);
  using Key = std::tuple<uint64_t, uint64_t, uint64_t, int64_t, int64_t, uint64_t>;
  static std::mutex mu;
  static std::map<Key, uint64_t> seen;
  const Key key{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                static_cast<int64_t>(st.st_ctim.tv_sec), static_cast<int64_t>(st.st_ctim.tv_nsec), bytes};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = seen.find(key); it != seen.end()) return it->second;
  }
  LEANEMB_ASSIGN_OR_RETURN(const uint64_t h, xxh3_of_file_uncached(env, path, bytes));
  std::lock_guard<std::mutex> lock(mu);
  seen.emplace(key, h);
  return h;
}
}  // namespace

Result<VerifyReport> CheckpointReader::verify(bool hash_linked_files) const {
  const Impl& r = *impl_;
  VerifyReport rep;
  rep.step = r.manifest.step;
  rep.format_version = r.manifest.version;
  rep.checkpoint_id = checkpoint_id_hex(r.manifest.id);
  rep.num_entries = r.infos.size();
  for (const EntryInfo& e : r.infos) rep.entry_bytes += e.size_bytes;
  rep.num_files = r.files.size();
  for (size_t f = 0; f < r.files.size(); ++f) {
    const BlockFileReader& file = *r.files[f];
    rep.file_bytes += physical_file_bytes(file.record().payload_bytes, file.record().block_bytes);
    for (uint64_t b = 0; b < file.num_blocks(); ++b) {
      Status s = file.check_block(b);
      if (!s.ok())
        return Status(s.code(), "checkpoint '" + r.dir + "': " + s.message() + "; it holds " +
                                    r.entries_in(static_cast<uint32_t>(f), file.block_begin(b), file.block_end(b)));
      ++rep.num_blocks;
    }
  }
  for (const LinkedFile& f : r.linked) {
    if (!hash_linked_files) continue;
    LEANEMB_ASSIGN_OR_RETURN(const uint64_t h, xxh3_of_file(r.env, join_path(r.dir, f.path), f.bytes));
    if (h != f.xxh3)
      return data_loss("checkpoint '" + r.dir + "': linked file '" + f.path + "' does not hold the bytes it was linked with (XXH3 differs)");
    ++rep.num_linked_files;
    rep.linked_bytes += f.bytes;
  }
  return rep;
}

Result<std::string> CheckpointReader::digest() const {
  const Impl& r = *impl_;
  Hasher h;
  h.bytes(kDigestDomain, sizeof(kDigestDomain) - 1);
  h.u64(static_cast<uint64_t>(r.manifest.step));
  h.u64(r.manifest.entries.size());
  std::vector<uint8_t> piece;
  for (const EntryRecord& e : r.manifest.entries) {
    h.u8(static_cast<uint8_t>(e.kind));
    h.u64(e.name.size());
    h.bytes(e.name.data(), e.name.size());
    if (e.kind == EntryKind::kBlob) {
      h.u64(e.size);
      for (uint64_t off = 0; off < e.size; off += kDigestPieceBytes) {
        piece.resize(static_cast<size_t>(std::min<uint64_t>(kDigestPieceBytes, e.size - off)));
        LEANEMB_RETURN_IF_ERROR(r.read_region(e, "", e.file, e.offset + off, piece));
        h.bytes(piece.data(), piece.size());
      }
      continue;
    }
    h.u64(e.row_bytes);
    h.u64(static_cast<uint64_t>(e.total_rows));
    h.u64(e.meta.size());
    h.bytes(e.meta.data(), e.meta.size());
    // Rows in row order, a whole number of rows per piece (at least one).
    const int64_t rows_per_piece = std::max<int64_t>(1, static_cast<int64_t>(kDigestPieceBytes / e.row_bytes));
    for (int64_t row = 0; row < e.total_rows; row += rows_per_piece) {
      const int64_t n = std::min(rows_per_piece, e.total_rows - row);
      piece.resize(static_cast<size_t>(n) * e.row_bytes);
      LEANEMB_RETURN_IF_ERROR(r.read_table_rows(e, row, n, piece));
      h.bytes(piece.data(), piece.size());
    }
  }
  return h.hex();
}

Result<VerifyReport> verify(const std::string& dir, Env* env) {
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> r, CheckpointReader::open(dir, env));
  return r->verify();
}

Result<std::string> digest(const std::string& dir, Env* env) {
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> r, CheckpointReader::open(dir, env));
  return r->digest();
}

}  // namespace leanemb::ckpt
