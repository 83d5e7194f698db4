// CheckpointWriter: streams entries into step-<N>.tmp/ and publishes them atomically.
//
// The commit protocol (each numbered step is one or more Env calls; a crash between any two
// leaves the previous checkpoints intact and step-<N> either absent or complete):
//   1. the data file: last block, fsync, close;
//   2. MANIFEST in step-<N>.tmp/: write, fsync, close;
//   3. fsync step-<N>.tmp/ (the directory entries of the files it holds);
//   4. remove every complete step-<M> with M >= N (renamed to .deleting first, see
//      directory.h); a step-<M> without a valid manifest is moved into <out>/corrupt/ instead;
//      fsync checkpoints/;
//   5. rename step-<N>.tmp -> step-<N>;
//   6. fsync checkpoints/                       <- the checkpoint is committed here
//   7. cleanup: remove .tmp and .deleting leftovers and all but the newest keep_last complete
//      checkpoints; fsync checkpoints/. Directories without a valid manifest are never removed
//      (only leanemb's own leftovers are, and those are never named step-<N>).
// A step-<N> directory only ever appears through the rename of step 5, after steps 1-3 made
// everything in it durable; so whatever subset of unsynced operations a crash keeps, a
// directory with a manifest holds exactly the synced bytes that manifest describes.
#include <algorithm>
#include <map>
#include <set>

#include "ckpt/block_file.h"
#include "ckpt/directory.h"
#include "ckpt/format.h"
#include "leanemb/checkpoint.h"

namespace leanemb::ckpt {

namespace {

// A table being written: its record plus its chunks keyed by first row (for overlap checks).
struct TableState {
  EntryRecord record;
  std::map<int64_t, ChunkRecord> chunks;
};

// Writes `bytes` as file `path`, durably (fsync), and closes it.
Status write_small_file(Env* env, const std::string& path, std::span<const uint8_t> bytes) {
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->new_writable_file(path));
  LEANEMB_RETURN_IF_ERROR(f->append(bytes));
  LEANEMB_RETURN_IF_ERROR(f->sync());
  return f->close();
}

// Creates `dir` if missing; a directory we create is made durable in its parent.
Status ensure_dir(Env* env, const std::string& dir) {
  if (env->file_exists(dir)) return Status();
  LEANEMB_RETURN_IF_ERROR(env->create_dir(dir));
  return env->sync_dir(parent_dir(dir));
}

}  // namespace

struct CheckpointWriter::Impl {
  Env* env = nullptr;
  WriterOptions options;
  int64_t step = 0;
  std::vector<uint8_t> id;  // the checkpoint id (format version 2), empty for version 1
  std::string out_dir;
  std::string root;       // <out>/checkpoints
  std::string tmp_dir;    // <root>/step-<N>.tmp
  std::string final_dir;  // <root>/step-<N>
  std::unique_ptr<BlockFileWriter> data;
  std::map<std::string, EntryRecord, std::less<>> blobs;
  std::map<std::string, TableState, std::less<>> tables;
  std::vector<LinkedFile> linked;  // add_linked_file, recorded at commit
  Status failed;          // first I/O error; the writer is unusable after one
  bool finished = false;  // commit() ran (successfully or not)
  bool published = false; // the checkpoint was renamed into place
  bool removed_tmp = false;

  Status usable() const {
    if (finished) return failed_precondition("checkpoint writer for '" + tmp_dir + "' already committed or failed");
    if (!failed.ok()) return failed_precondition("checkpoint writer for '" + tmp_dir + "' failed earlier: " + failed.to_string());
    return Status();
  }
  // Remembers the first I/O failure and passes it on.
  Status fail(Status s) {
    if (!s.ok() && failed.ok()) failed = s;
    return s;
  }
  Status check_new_name(std::string_view name) const {
    LEANEMB_RETURN_IF_ERROR(check_entry_name(name));
    if (blobs.count(name) != 0 || tables.count(name) != 0)
      return invalid_argument("checkpoint entry '" + std::string(name) + "' was already added");
    return Status();
  }
  Status add_parent();
  Status add_linked_blob();
  // Blob `name` of `bytes`, written now (the name already checked).
  Status append_blob(std::string_view name, std::span<const uint8_t> bytes);
  Status check_complete() const;
  Manifest build_manifest() const;
  Status publish(CommitInfo* info);
  void cleanup(CommitInfo* info);
};

CheckpointWriter::CheckpointWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
// An uncommitted (failed or forgotten) checkpoint's .tmp goes with its writer, so that a failed
// write on a full disk does not leave its bytes there; a crash leaves it to the next commit.
CheckpointWriter::~CheckpointWriter() {
  if (impl_ && !impl_->published && !impl_->removed_tmp) {
    impl_->data.reset();
    (void)impl_->env->remove_all(impl_->tmp_dir);
  }
}

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::create(const std::string& out_dir, int64_t step,
                                                                   const WriterOptions& options) {
  if (step < 0) return invalid_argument("checkpoint step must be >= 0, got " + std::to_string(step));
  if (options.block_bytes == 0 || options.block_bytes > kMaxBlockBytes)
    return invalid_argument("checkpoint block_bytes must be in [1, " + std::to_string(kMaxBlockBytes) + "], got " +
                            std::to_string(options.block_bytes));
  if (options.keep_last < 0) return invalid_argument("checkpoint keep_last must be >= 0 (0 keeps all)");
  if (options.format_version < kOldestFormatVersion || options.format_version > kFormatVersion)
    return invalid_argument("checkpoint format_version must be in [" + std::to_string(kOldestFormatVersion) + ", " +
                            std::to_string(kFormatVersion) + "], got " + std::to_string(options.format_version));
  auto impl = std::make_unique<Impl>();
  impl->env = env_or_default(options.env);
  impl->options = options;
  impl->step = step;
  if (options.format_version >= 2) impl->id = new_checkpoint_id(step);
  impl->out_dir = out_dir;
  impl->root = checkpoints_dir(out_dir);
  impl->final_dir = join_path(impl->root, step_dir_name(step));
  impl->tmp_dir = impl->final_dir + kTmpSuffix;
  Env* env = impl->env;
  LEANEMB_RETURN_IF_ERROR(ensure_dir(env, out_dir));
  LEANEMB_RETURN_IF_ERROR(env->create_dir(impl->root));
  // Always: a checkpoints/ created by an earlier attempt whose sync failed must become durable.
  LEANEMB_RETURN_IF_ERROR(env->sync_dir(out_dir));
  LEANEMB_RETURN_IF_ERROR(env->remove_all(impl->tmp_dir));
  LEANEMB_RETURN_IF_ERROR(env->create_dir(impl->tmp_dir));
  LEANEMB_ASSIGN_OR_RETURN(impl->data, BlockFileWriter::create(env, impl->tmp_dir, kDataFileName, options.block_bytes, impl->id));
  if (options.parent_step >= 0) LEANEMB_RETURN_IF_ERROR(impl->add_parent());
  return std::unique_ptr<CheckpointWriter>(new CheckpointWriter(std::move(impl)));
}

// The reserved blob naming the parent (WriterOptions::parent_step): it must be a complete
// checkpoint of an earlier step under the same checkpoints/, with an id (format version 2).
Status CheckpointWriter::Impl::add_parent() {
  const int64_t p = options.parent_step;
  const std::string what = "checkpoint " + std::to_string(step) + ": parent step " + std::to_string(p);
  if (p >= step) return invalid_argument(what + " is not earlier");
  if (id.empty()) return invalid_argument(what + ": incremental checkpoints need format version 2");
  LEANEMB_ASSIGN_OR_RETURN(auto parent, CheckpointReader::open(join_path(root, step_dir_name(p)), env));
  if (parent->format_version() < 2) return invalid_argument(what + " has format version 1 (no id)");
  return append_blob(kParentBlob, encode_parent_blob(p, parent->id_hex()));
}

Status CheckpointWriter::Impl::append_blob(std::string_view name, std::span<const uint8_t> bytes) {
  EntryRecord e;
  e.kind = EntryKind::kBlob;
  e.name = std::string(name);
  e.file = 0;
  e.offset = data->payload_bytes();
  e.size = bytes.size();
  LEANEMB_RETURN_IF_ERROR(fail(data->append(bytes)));
  blobs.emplace(e.name, std::move(e));
  return Status();
}

Status CheckpointWriter::add_blob(std::string_view name, std::span<const uint8_t> bytes) {
  Impl& w = *impl_;
  LEANEMB_RETURN_IF_ERROR(w.usable());
  if (name == kParentBlob) return invalid_argument("checkpoint entry name '" + std::string(name) + "' is reserved (WriterOptions::parent_step)");
  if (name == kLinkedFilesBlob) return invalid_argument("checkpoint entry name '" + std::string(name) + "' is reserved (add_linked_file)");
  LEANEMB_RETURN_IF_ERROR(w.check_new_name(name));
  return w.append_blob(name, bytes);
}

const std::string& CheckpointWriter::staging_dir() const { return impl_->tmp_dir; }

Status CheckpointWriter::add_linked_file(std::string_view path, uint64_t bytes, uint64_t xxh3) {
  Impl& w = *impl_;
  LEANEMB_RETURN_IF_ERROR(w.usable());
  const std::string p(path);
  if (!is_linked_file_path(p) || p == kManifestName || p == kDataFileName)
    return invalid_argument("linked file path '" + p + "' is not a relative path of the caller's own");
  for (const LinkedFile& f : w.linked)
    if (f.path == p) return invalid_argument("linked file '" + p + "' was already added");
  w.linked.push_back({p, bytes, xxh3});
  return Status();
}

// The reserved blob of the linked files, after every directory holding one is made durable.
Status CheckpointWriter::Impl::add_linked_blob() {
  if (linked.empty()) return Status();
  std::vector<std::string> dirs;
  for (const LinkedFile& f : linked) {
    for (size_t slash = f.path.rfind('/'); slash != std::string::npos && slash > 0; slash = f.path.rfind('/', slash - 1)) {
      const std::string d = f.path.substr(0, slash);
      if (std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
    }
  }
  std::sort(dirs.begin(), dirs.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& d : dirs) LEANEMB_RETURN_IF_ERROR(env->sync_dir(join_path(tmp_dir, d)));  // deepest first
  return append_blob(kLinkedFilesBlob, encode_linked_files_blob(linked));
}

Status CheckpointWriter::add_table(std::string_view name, uint64_t row_bytes, int64_t total_rows,
                                   std::span<const uint8_t> meta) {
  Impl& w = *impl_;
  LEANEMB_RETURN_IF_ERROR(w.usable());
  LEANEMB_RETURN_IF_ERROR(w.check_new_name(name));
  const std::string what = "checkpoint table '" + std::string(name) + "': ";
  if (row_bytes == 0 || row_bytes > kMaxRowBytes) return invalid_argument(what + "row_bytes must be in [1, 2^32], got " + std::to_string(row_bytes));
  if (total_rows < 0 || static_cast<uint64_t>(total_rows) > (uint64_t{1} << 62) / row_bytes)
    return invalid_argument(what + "total_rows " + std::to_string(total_rows) + " is negative or too large");
  if (meta.size() > kMaxMetaBytes) return invalid_argument(what + "meta of " + std::to_string(meta.size()) + " bytes exceeds 1 MiB");
  TableState t;
  t.record.kind = EntryKind::kTable;
  t.record.name = std::string(name);
  t.record.row_bytes = row_bytes;
  t.record.total_rows = total_rows;
  t.record.meta.assign(meta.begin(), meta.end());
  w.tables.emplace(t.record.name, std::move(t));
  return Status();
}

Status CheckpointWriter::append_rows(std::string_view name, int64_t row_begin, std::span<const uint8_t> rows) {
  Impl& w = *impl_;
  LEANEMB_RETURN_IF_ERROR(w.usable());
  auto it = w.tables.find(name);
  if (it == w.tables.end()) {
    if (w.blobs.count(name) != 0) return invalid_argument("append_rows: checkpoint entry '" + std::string(name) + "' is a blob");
    return not_found("append_rows: no checkpoint table '" + std::string(name) + "' (add_table first)");
  }
  TableState& t = it->second;
  const uint64_t rb = t.record.row_bytes;
  const std::string what = "append_rows: table '" + t.record.name + "': ";
  if (rows.size() % rb != 0)
    return invalid_argument(what + std::to_string(rows.size()) + " bytes is not a whole number of " + std::to_string(rb) + "-byte rows");
  const auto count = static_cast<int64_t>(rows.size() / rb);
  if (row_begin < 0 || row_begin > t.record.total_rows || count > t.record.total_rows - row_begin)
    return out_of_range(what + "rows [" + std::to_string(row_begin) + ", +" + std::to_string(count) + ") outside its " +
                        std::to_string(t.record.total_rows) + " rows");
  if (count == 0) return Status();
  // Overlap: the chunk starting at or after row_begin, and the one before it.
  auto next = t.chunks.lower_bound(row_begin);
  if (next != t.chunks.end() && next->first < row_begin + count)
    return invalid_argument(what + "rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + count) +
                            ") overlap rows written before, from " + std::to_string(next->first));
  ChunkRecord* prev = next == t.chunks.begin() ? nullptr : &std::prev(next)->second;
  if (prev != nullptr && prev->row_begin + prev->row_count > row_begin)
    return invalid_argument(what + "rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + count) +
                            ") overlap rows written before, up to " + std::to_string(prev->row_begin + prev->row_count));
  const uint64_t offset = w.data->payload_bytes();
  LEANEMB_RETURN_IF_ERROR(w.fail(w.data->append(rows)));
  // Continues the previous chunk in both rows and file bytes: extend it instead of adding one.
  if (prev != nullptr && prev->row_begin + prev->row_count == row_begin &&
      prev->offset + static_cast<uint64_t>(prev->row_count) * rb == offset) {
    prev->row_count += count;
  } else {
    t.chunks.emplace(row_begin, ChunkRecord{row_begin, count, 0, offset});
  }
  return Status();
}

Status CheckpointWriter::Impl::check_complete() const {
  for (const auto& [name, t] : tables) {
    int64_t next_row = 0;
    for (const auto& [begin, ch] : t.chunks) {
      if (begin != next_row) break;
      next_row = begin + ch.row_count;
    }
    if (next_row != t.record.total_rows) {
      auto gap_end = t.chunks.upper_bound(next_row);
      const int64_t end = gap_end == t.chunks.end() ? t.record.total_rows : gap_end->first;
      return failed_precondition("checkpoint table '" + name + "': rows [" + std::to_string(next_row) + ", " +
                                 std::to_string(end) + ") were never written");
    }
  }
  return Status();
}

Manifest CheckpointWriter::Impl::build_manifest() const {
  Manifest m;
  m.version = options.format_version;
  m.id = id;
  m.step = step;
  m.files.push_back(data->record());
  // Blobs and tables have distinct names; merge both sorted maps into name order.
  for (const auto& [name, e] : blobs) m.entries.push_back(e);
  for (const auto& [name, t] : tables) {
    EntryRecord e = t.record;
    for (const auto& [begin, ch] : t.chunks) e.chunks.push_back(ch);
    m.entries.push_back(std::move(e));
  }
  std::sort(m.entries.begin(), m.entries.end(), [](const EntryRecord& a, const EntryRecord& b) { return a.name < b.name; });
  return m;
}

// Steps 1-6 of the protocol.
Status CheckpointWriter::Impl::publish(CommitInfo* info) {
  LEANEMB_RETURN_IF_ERROR(data->finish());
  const std::vector<uint8_t> manifest = encode_manifest(build_manifest());
  LEANEMB_RETURN_IF_ERROR(write_small_file(env, join_path(tmp_dir, kManifestName), manifest));
  LEANEMB_RETURN_IF_ERROR(env->sync_dir(tmp_dir));
  LEANEMB_ASSIGN_OR_RETURN(std::vector<CheckpointRef> existing, list_checkpoints(out_dir, env));
  bool removed = false;
  for (const CheckpointRef& ref : existing) {
    if (ref.step < step) continue;
    if (!CheckpointReader::open(ref.path, env).ok()) {  // not a complete checkpoint: kept aside
      LEANEMB_ASSIGN_OR_RETURN(std::string to, set_aside_checkpoint_dir(env, out_dir, ref.path));
      info->set_aside.push_back(ref.path + " -> " + to);
      continue;
    }
    LEANEMB_RETURN_IF_ERROR(remove_checkpoint_dir(env, ref.path));
    removed = true;
  }
  if (removed) LEANEMB_RETURN_IF_ERROR(env->sync_dir(root));
  LEANEMB_RETURN_IF_ERROR(env->rename(tmp_dir, final_dir));
  published = true;
  return env->sync_dir(root);
}

// Step 7: failures are reported as warnings, the checkpoint is already committed.
void CheckpointWriter::Impl::cleanup(CommitInfo* info) {
  auto warn = [&](const Status& s) { info->warnings.push_back(s.to_string()); };
  bool removed = false;
  auto names = env->list_dir(root);
  if (!names.ok()) return warn(names.status());
  for (const std::string& name : *names) {
    if (!is_leftover_dir_name(name)) continue;
    const std::string path = join_path(root, name);
    if (Status s = env->remove_all(path); !s.ok()) return warn(s);
    info->removed.push_back(path);
    removed = true;
  }
  auto refs = list_checkpoints(out_dir, env);
  if (!refs.ok()) return warn(refs.status());
  // The newest keep_last complete checkpoints are kept, and with each the chain it extends.
  int kept = 0;
  std::set<int64_t> needed;
  std::vector<CheckpointRef> spare;  // complete, not among the newest keep_last
  for (auto it = refs->rbegin(); it != refs->rend(); ++it) {
    auto opened = CheckpointReader::open(it->path, env);
    // Not a complete checkpoint (no or a corrupt manifest, a newer format, an I/O error): not
    // this writer's to delete.
    if (!opened.ok()) {
      const Status& st = opened.status();
      warn(Status(st.code(), "left '" + it->path + "' in place (not a complete checkpoint: " + st.message() + ")"));
      continue;
    }
    const bool keep = options.keep_last == 0 || kept < options.keep_last || needed.count(it->step) != 0;
    if (!keep) {
      spare.push_back(*it);
      continue;
    }
    if (options.keep_last == 0 || kept < options.keep_last) ++kept;
    if (const auto& parent = (*opened)->parent(); parent) needed.insert(parent->step);
  }
  for (const CheckpointRef& ref : spare) {
    if (needed.count(ref.step) != 0) continue;  // a kept checkpoint's chain reaches it
    if (Status s = remove_checkpoint_dir(env, ref.path); !s.ok()) return warn(s);
    info->removed.push_back(ref.path);
    removed = true;
  }
  if (removed) {
    if (Status s = env->sync_dir(root); !s.ok()) warn(s);
  }
}

Result<CommitInfo> CheckpointWriter::commit() {
  Impl& w = *impl_;
  LEANEMB_RETURN_IF_ERROR(w.usable());
  LEANEMB_RETURN_IF_ERROR(w.check_complete());  // caller's mistake: the writer stays usable
  w.finished = true;
  CommitInfo info;
  LEANEMB_RETURN_IF_ERROR(w.fail(w.add_linked_blob()));
  LEANEMB_RETURN_IF_ERROR(w.fail(w.publish(&info)));
  info.step = w.step;
  info.path = w.final_dir;
  for (const auto& [name, e] : w.blobs) info.entry_bytes += e.size;
  for (const auto& [name, t] : w.tables) info.entry_bytes += static_cast<uint64_t>(t.record.total_rows) * t.record.row_bytes;
  w.cleanup(&info);
  return info;
}

Status CheckpointWriter::abandon() {
  Impl& w = *impl_;
  if (w.finished && w.failed.ok()) return failed_precondition("abandon: checkpoint '" + w.final_dir + "' was committed");
  w.finished = true;
  w.data.reset();
  w.removed_tmp = true;
  return w.env->remove_all(w.tmp_dir);
}

}  // namespace leanemb::ckpt
