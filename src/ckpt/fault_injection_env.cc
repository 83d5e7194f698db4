// FaultInjectionEnv (see the header for the crash model).
//
// Invariants: a file's `synced` never exceeds data.size(); the current tree is what reads see,
// the tree reachable from root_ through `durable_entries` is what simulate_crash() keeps. Inodes
// are shared_ptr so that an entry removed from the current tree stays alive while a durable
// entry (or an open file) still refers to it.
#include "ckpt/fault_injection_env.h"

#include <algorithm>
#include <functional>
#include <set>

namespace leanemb::ckpt {

struct FaultInjectionEnv::Inode {
  explicit Inode(bool dir) : is_dir(dir) {}
  bool is_dir;
  std::vector<uint8_t> data;  // files
  uint64_t synced = 0;        // files: bytes of `data` that survive a crash
  std::map<std::string, std::shared_ptr<Inode>> entries, durable_entries;  // directories
};

namespace {

Status io_error(std::string msg) { return Status(StatusCode::kIoError, std::move(msg)); }

// "/a//b/" -> {"a", "b"}; empty result for "/". Non-absolute paths are rejected by the callers.
std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    const size_t j = std::min(path.find('/', i), path.size());
    if (j > i && path.compare(i, j - i, ".") != 0) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

}  // namespace

class FaultInjectionEnv::File final : public WritableFile {
 public:
  File(FaultInjectionEnv* env, std::string path, std::shared_ptr<Inode> inode, uint64_t epoch)
      : env_(env), path_(std::move(path)), inode_(std::move(inode)), epoch_(epoch) {}

  Status append(std::span<const uint8_t> data) override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    LEANEMB_RETURN_IF_ERROR(env_->check_alive(epoch_));
    LEANEMB_RETURN_IF_ERROR(env_->begin_op("append " + std::to_string(data.size()) + " B to '" + path_ + "'"));
    if (closed_) return failed_precondition("append to closed file '" + path_ + "'");
    inode_->data.insert(inode_->data.end(), data.begin(), data.end());
    return Status();
  }

  Status sync() override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    LEANEMB_RETURN_IF_ERROR(env_->check_alive(epoch_));
    LEANEMB_RETURN_IF_ERROR(env_->begin_op("sync '" + path_ + "'"));
    if (closed_) return failed_precondition("sync of closed file '" + path_ + "'");
    if (!env_->ignore_syncs_) inode_->synced = inode_->data.size();
    return Status();
  }

  Status close() override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    LEANEMB_RETURN_IF_ERROR(env_->check_alive(epoch_));
    LEANEMB_RETURN_IF_ERROR(env_->begin_op("close '" + path_ + "'"));
    if (closed_) return failed_precondition("close of closed file '" + path_ + "'");
    closed_ = true;
    return Status();
  }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::shared_ptr<Inode> inode_;
  uint64_t epoch_;
  bool closed_ = false;
};

class FaultInjectionEnv::Reader final : public RandomAccessFile {
 public:
  Reader(FaultInjectionEnv* env, std::string path, std::shared_ptr<Inode> inode, uint64_t epoch)
      : env_(env), path_(std::move(path)), inode_(std::move(inode)), epoch_(epoch) {}

  Status read_at(uint64_t offset, std::span<uint8_t> out) const override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    LEANEMB_RETURN_IF_ERROR(env_->check_alive(epoch_));
    const uint64_t size = inode_->data.size();
    if (offset > size || out.size() > size - offset)
      return Status(StatusCode::kDataLoss, "'" + path_ + "' ends at byte " + std::to_string(size) + ", expected " +
                                               std::to_string(offset + out.size()) + " bytes");
    std::copy_n(inode_->data.begin() + static_cast<ptrdiff_t>(offset), out.size(), out.begin());
    return Status();
  }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::shared_ptr<Inode> inode_;
  uint64_t epoch_;
};

FaultInjectionEnv::FaultInjectionEnv() : root_(std::make_shared<Inode>(true)) {}

FaultInjectionEnv::~FaultInjectionEnv() = default;

Status FaultInjectionEnv::begin_op(const std::string& description) {
  const uint64_t index = num_ops_++;
  op_log_.push_back(description);
  const std::string at = " (op " + std::to_string(index) + ": " + description + ")";
  if (crashed_) return io_error("process was killed at op " + std::to_string(fault_op_) + at);
  if (failing_) return io_error("injected I/O error: disk failing since op " + std::to_string(fault_op_) + at);
  if (fault_kind_ == FaultKind::kNone || index != fault_op_) return Status();
  switch (fault_kind_) {
    case FaultKind::kFailOnce: return io_error("injected I/O error" + at);
    case FaultKind::kFailFromNow: failing_ = true; return io_error("injected I/O error, disk failing from now" + at);
    case FaultKind::kCrash: crashed_ = true; return io_error("injected crash: process killed" + at);
    case FaultKind::kNone: break;
  }
  return Status();
}

Status FaultInjectionEnv::check_alive(uint64_t epoch) const {
  if (crashed_) return io_error("process was killed at op " + std::to_string(fault_op_) + " (injected crash)");
  if (epoch != epoch_) return io_error("file opened before a simulated crash");
  return Status();
}

std::shared_ptr<FaultInjectionEnv::Inode> FaultInjectionEnv::lookup(const std::string& path) const {
  if (path.empty() || path[0] != '/') return nullptr;
  std::shared_ptr<Inode> node = root_;
  for (const std::string& part : split_path(path)) {
    if (!node->is_dir) return nullptr;
    auto it = node->entries.find(part);
    if (it == node->entries.end()) return nullptr;
    node = it->second;
  }
  return node;
}

Result<std::shared_ptr<FaultInjectionEnv::Inode>> FaultInjectionEnv::lookup_parent(const std::string& path,
                                                                                   std::string* name) const {
  const std::vector<std::string> parts = split_path(path);
  if (path.empty() || path[0] != '/' || parts.empty())
    return invalid_argument("FaultInjectionEnv: '" + path + "' is not an absolute path below '/'");
  std::shared_ptr<Inode> node = root_;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto it = node->entries.find(parts[i]);
    if (it == node->entries.end() || !it->second->is_dir)
      return not_found("directory of '" + path + "' does not exist");
    node = it->second;
  }
  *name = parts.back();
  return node;
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::new_writable_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  LEANEMB_RETURN_IF_ERROR(begin_op("create '" + path + "'"));
  std::string name;
  LEANEMB_ASSIGN_OR_RETURN(std::shared_ptr<Inode> dir, lookup_parent(path, &name));
  std::shared_ptr<Inode>& slot = dir->entries[name];
  if (slot && slot->is_dir) return io_error("cannot create '" + path + "': is a directory");
  if (slot) {
    // O_TRUNC keeps the inode; the truncation itself is treated as durable at once.
    slot->data.clear();
    slot->synced = 0;
  } else {
    slot = std::make_shared<Inode>(false);
  }
  return std::unique_ptr<WritableFile>(new File(this, path, slot, epoch_));
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::new_appendable_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  LEANEMB_RETURN_IF_ERROR(begin_op("append-open '" + path + "'"));
  std::string name;
  LEANEMB_ASSIGN_OR_RETURN(std::shared_ptr<Inode> dir, lookup_parent(path, &name));
  std::shared_ptr<Inode>& slot = dir->entries[name];
  if (slot && slot->is_dir) return io_error("cannot open '" + path + "' for appending: is a directory");
  if (!slot) slot = std::make_shared<Inode>(false);
  return std::unique_ptr<WritableFile>(new File(this, path, slot, epoch_));
}

Result<std::unique_ptr<RandomAccessFile>> FaultInjectionEnv::new_random_access_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  std::shared_ptr<Inode> node = lookup(path);
  if (!node) return not_found("cannot open '" + path + "': no such file");
  if (node->is_dir) return io_error("cannot open '" + path + "': is a directory");
  return std::unique_ptr<RandomAccessFile>(new Reader(this, path, node, epoch_));
}

Result<uint64_t> FaultInjectionEnv::file_size(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  std::shared_ptr<Inode> node = lookup(path);
  if (!node) return not_found("cannot stat '" + path + "': no such file");
  if (node->is_dir) return io_error("cannot take the size of '" + path + "': is a directory");
  return static_cast<uint64_t>(node->data.size());
}

bool FaultInjectionEnv::file_exists(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return !crashed_ && lookup(path) != nullptr;
}

Result<std::vector<std::string>> FaultInjectionEnv::list_dir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  std::shared_ptr<Inode> node = lookup(path);
  if (!node) return not_found("cannot list directory '" + path + "': no such directory");
  if (!node->is_dir) return io_error("cannot list directory '" + path + "': not a directory");
  std::vector<std::string> names;
  for (const auto& [name, child] : node->entries) names.push_back(name);
  return names;  // std::map keeps them sorted bytewise
}

Status FaultInjectionEnv::create_dir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  LEANEMB_RETURN_IF_ERROR(begin_op("mkdir '" + path + "'"));
  if (std::shared_ptr<Inode> node = lookup(path)) {
    if (node->is_dir) return Status();
    return io_error("cannot create directory '" + path + "': a file has that name");
  }
  std::string name;
  LEANEMB_ASSIGN_OR_RETURN(std::shared_ptr<Inode> dir, lookup_parent(path, &name));
  dir->entries[name] = std::make_shared<Inode>(true);
  return Status();
}

Status FaultInjectionEnv::remove_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  LEANEMB_RETURN_IF_ERROR(begin_op("unlink '" + path + "'"));
  std::string name;
  LEANEMB_ASSIGN_OR_RETURN(std::shared_ptr<Inode> dir, lookup_parent(path, &name));
  auto it = dir->entries.find(name);
  if (it == dir->entries.end()) return not_found("cannot remove '" + path + "': no such file");
  if (it->second->is_dir) return io_error("cannot remove '" + path + "': is a directory");
  dir->entries.erase(it);
  return Status();
}

Status FaultInjectionEnv::remove_all(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  if (!lookup(path)) return Status();
  // Children first, one op each, as PosixEnv unlinks them.
  std::function<Status(const std::string&)> remove = [&](const std::string& p) -> Status {
    std::string name;
    LEANEMB_ASSIGN_OR_RETURN(std::shared_ptr<Inode> dir, lookup_parent(p, &name));
    std::shared_ptr<Inode> node = dir->entries.at(name);
    if (node->is_dir) {
      std::vector<std::string> names;
      for (const auto& [n, child] : node->entries) names.push_back(n);
      for (const std::string& n : names) LEANEMB_RETURN_IF_ERROR(remove(join_path(p, n)));
    }
    LEANEMB_RETURN_IF_ERROR(begin_op((node->is_dir ? "rmdir '" : "unlink '") + p + "'"));
    dir->entries.erase(name);
    return Status();
  };
  return remove(path);
}

Status FaultInjectionEnv::rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  LEANEMB_RETURN_IF_ERROR(begin_op("rename '" + from + "' -> '" + to + "'"));
  std::string from_name, to_name;
  LEANEMB_ASSIGN_OR_RETURN(std::shared_ptr<Inode> from_dir, lookup_parent(from, &from_name));
  LEANEMB_ASSIGN_OR_RETURN(std::shared_ptr<Inode> to_dir, lookup_parent(to, &to_name));
  auto it = from_dir->entries.find(from_name);
  if (it == from_dir->entries.end()) return not_found("cannot rename '" + from + "': no such file or directory");
  std::shared_ptr<Inode> node = it->second;
  if (to.size() > from.size() && to.compare(0, from.size(), from) == 0 && to[from.size()] == '/')
    return io_error("cannot rename '" + from + "' into itself ('" + to + "')");
  auto old = to_dir->entries.find(to_name);
  if (old != to_dir->entries.end() && old->second != node) {
    if (old->second->is_dir != node->is_dir)
      return io_error("cannot rename '" + from + "' over '" + to + "': one is a directory, the other is not");
    if (old->second->is_dir && !old->second->entries.empty())
      return io_error("cannot rename '" + from + "' over '" + to + "': directory not empty");
  }
  from_dir->entries.erase(it);
  to_dir->entries[to_name] = node;
  return Status();
}

Status FaultInjectionEnv::sync_dir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  LEANEMB_RETURN_IF_ERROR(check_alive(epoch_));
  LEANEMB_RETURN_IF_ERROR(begin_op("fsync directory '" + path + "'"));
  std::shared_ptr<Inode> node = lookup(path);
  if (!node) return not_found("cannot open directory '" + path + "': no such directory");
  if (!node->is_dir) return io_error("cannot sync '" + path + "' as a directory: not a directory");
  if (!ignore_syncs_) node->durable_entries = node->entries;
  return Status();
}

void FaultInjectionEnv::set_fault(uint64_t op_index, FaultKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  fault_op_ = op_index;
  fault_kind_ = kind;
}

void FaultInjectionEnv::set_ignore_syncs(bool ignore) {
  std::lock_guard<std::mutex> lock(mu_);
  ignore_syncs_ = ignore;
}

void FaultInjectionEnv::clear_fault() {
  std::lock_guard<std::mutex> lock(mu_);
  fault_kind_ = FaultKind::kNone;
  crashed_ = false;
  failing_ = false;
}

uint64_t FaultInjectionEnv::num_mutating_ops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_ops_;
}

bool FaultInjectionEnv::crashed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return crashed_;
}

std::string FaultInjectionEnv::op_description(uint64_t op_index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return op_index < op_log_.size() ? op_log_[op_index] : std::string();
}

void FaultInjectionEnv::simulate_crash(const CrashOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<const Inode*> seen;
  std::function<void(Inode*)> settle = [&](Inode* node) {
    if (!seen.insert(node).second) return;
    if (!node->is_dir) {
      node->data.resize(node->synced);
      return;
    }
    if (options.keep_unsynced_dir_entries) {
      node->durable_entries = node->entries;
    } else {
      node->entries = node->durable_entries;
    }
    for (const auto& [name, child] : node->entries) settle(child.get());
  };
  settle(root_.get());
  ++epoch_;
  crashed_ = false;
  failing_ = false;
  fault_kind_ = FaultKind::kNone;
}

Status FaultInjectionEnv::flip_byte(const std::string& path, uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Inode> node = lookup(path);
  if (!node || node->is_dir) return not_found("flip_byte: no file '" + path + "'");
  if (offset >= node->data.size()) return out_of_range("flip_byte: offset beyond '" + path + "'");
  node->data[offset] ^= 0xFF;
  return Status();
}

Status FaultInjectionEnv::truncate_file(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Inode> node = lookup(path);
  if (!node || node->is_dir) return not_found("truncate_file: no file '" + path + "'");
  if (size > node->data.size()) return out_of_range("truncate_file: size beyond '" + path + "'");
  node->data.resize(size);
  node->synced = std::min<uint64_t>(node->synced, size);
  return Status();
}

Status FaultInjectionEnv::append_garbage(const std::string& path, uint64_t num_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Inode> node = lookup(path);
  if (!node || node->is_dir) return not_found("append_garbage: no file '" + path + "'");
  for (uint64_t i = 0; i < num_bytes; ++i) node->data.push_back(static_cast<uint8_t>(0xA5 ^ i));
  node->synced = node->data.size();
  return Status();
}

}  // namespace leanemb::ckpt
