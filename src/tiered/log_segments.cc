// SegmentFiles (log_segments.h): one file per segment of the log store.
#include "tiered/log_segments.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <csignal>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>
#include <vector>

namespace leanemb::tiered {

namespace segment_files_detail {

std::string errno_text(int err) { return std::generic_category().message(err); }

Status os_error(const std::string& what, int err) {
  std::string msg = what + ": " + errno_text(err);
  if (err == ENOSPC || err == EDQUOT) return resource_exhausted(std::move(msg));
  if (err == ENOENT) return not_found(std::move(msg));
  return io_error(std::move(msg));
}

bool is_segment_name(const char* n) {
  const size_t len = std::strlen(n);
  return len == 20 && std::strcmp(n + 16, ".seg") == 0 && std::strspn(n, "0123456789abcdef") == 16;
}

// The soft limit of open files up to the hard one, once per process.
void raise_open_file_limit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
      r.rlim_cur = r.rlim_max;
      (void)::setrlimit(RLIMIT_NOFILE, &r);
    }
  });
}

Status sync_fd(int fd, const std::string& what, bool data_only) {
  while ((data_only ? ::fdatasync(fd) : ::fsync(fd)) != 0) {
    if (errno != EINTR) return os_error(what, errno);
  }
  return Status();
}

// Directories `<dir>.old-<pid>-<n>` whose process is gone (set aside by remove_leftovers).
std::vector<std::string> old_dirs(const std::string& dir) {
  std::vector<std::string> out;
  const size_t slash = dir.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
  const std::string prefix = (slash == std::string::npos ? dir : dir.substr(slash + 1)) + ".old-";
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) out.push_back(parent + "/" + name);
  }
  ::closedir(d);
  return out;
}

}  // namespace segment_files_detail

namespace sfd = segment_files_detail;

struct SegmentFiles::Hasher {
  XXH3_state_t state{};
  Hasher() { XXH3_64bits_reset(&state); }
};

void SegmentFiles::HasherDelete::operator()(Hasher* h) const { delete h; }

SegmentFiles::~SegmentFiles() {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (has(static_cast<uint32_t>(s))) drop(static_cast<uint32_t>(s));
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::string SegmentFiles::name_of(uint64_t id) const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 ".seg", id);
  return buf;
}

std::string SegmentFiles::path(uint32_t slot) const { return dir_ + "/" + name_of(slots_[slot].id); }

Status SegmentFiles::open(const std::string& dir, bool direct, size_t slots) {
  sfd::raise_open_file_limit();
  dir_ = dir;
  direct_ = direct;
  slots_ = std::vector<Slot>(slots);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return sfd::os_error("mkdir of log store directory '" + dir + "'", errno);
  dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) return sfd::os_error("open of log store directory '" + dir + "'", errno);
  return remove_leftovers();
}

// Segment files of an earlier store (a run that crashed before its store closed): their rows are
// never read (a store starts with no row present), and checkpoints hold links of their own.
// Unlinking tens of GB of them costs tens of seconds (one discard per extent on a file system
// mounted with `discard`), so the directory is renamed aside at once (`<dir>.old-<pid>-<n>`) and
// removed by a background thread at the lowest priority; directories set aside by earlier
// processes that ended first go the same way. Start-up does not grow with the old store.
Status SegmentFiles::remove_leftovers() {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return sfd::os_error("opendir of '" + dir_ + "'", errno);
  bool any = false;
  while (const dirent* e = ::readdir(d)) any = any || sfd::is_segment_name(e->d_name);
  ::closedir(d);
  std::vector<std::string> doomed = sfd::old_dirs(dir_);
  if (any) {
    static std::atomic<int> n{0};
    const std::string aside = dir_ + ".old-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
    ::close(dir_fd_);
    dir_fd_ = -1;
    if (::rename(dir_.c_str(), aside.c_str()) != 0) return sfd::os_error("rename of '" + dir_ + "' to '" + aside + "'", errno);
    if (::mkdir(dir_.c_str(), 0755) != 0) return sfd::os_error("mkdir of log store directory '" + dir_ + "'", errno);
    dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0) return sfd::os_error("open of log store directory '" + dir_ + "'", errno);
    doomed.push_back(aside);
    dir_dirty_ = true;
  }
  if (!doomed.empty()) {
    std::thread([doomed] {
      (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
      for (const std::string& d : doomed) {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);  // best effort: what is left goes the next time
      }
    }).detach();
  }
  return Status();
}

Status SegmentFiles::create(uint32_t slot) {
  Slot& s = slots_[slot];
  const uint64_t id = next_id_++;
  const std::string name = name_of(id);
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | (direct_ ? O_DIRECT : 0);
  const int fd = ::openat(dir_fd_, name.c_str(), flags, 0644);
  if (fd < 0) return sfd::os_error("create of log segment '" + dir_ + "/" + name + "'", errno);
  s.id = id;
  s.bytes = 0;
  s.hash = 0;
  s.sealed = false;
  s.unsynced = false;
  s.hasher.reset(new Hasher());
  s.fd.store(fd, std::memory_order_release);
  files_.fetch_add(1, std::memory_order_relaxed);
  dir_dirty_ = true;
  return Status();
}

Status SegmentFiles::adopt(uint32_t slot, const std::string& from, const SegmentFileInfo& info) {
  Slot& s = slots_[slot];
  const uint64_t id = next_id_++;
  const std::string name = name_of(id);
  if (::linkat(AT_FDCWD, from.c_str(), dir_fd_, name.c_str(), 0) != 0)
    return sfd::os_error("link of '" + from + "' into the log store '" + dir_ + "'", errno);
  dir_dirty_ = true;
  const int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_CLOEXEC | (direct_ ? O_DIRECT : 0));
  if (fd < 0) {
    const int err = errno;
    (void)::unlinkat(dir_fd_, name.c_str(), 0);
    return sfd::os_error("open of '" + dir_ + "/" + name + "'", err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != info.bytes) {
    ::close(fd);
    (void)::unlinkat(dir_fd_, name.c_str(), 0);
    return data_loss("log segment '" + from + "' has " + std::to_string(st.st_size) + " bytes, its checkpoint says " +
                     std::to_string(info.bytes));
  }
  s.id = id;
  s.bytes = info.bytes;
  s.hash = info.hash;
  s.sealed = true;
  s.unsynced = false;
  s.hasher.reset();
  s.fd.store(fd, std::memory_order_release);
  files_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(info.bytes, std::memory_order_relaxed);
  return Status();
}

void SegmentFiles::drop(uint32_t slot) {
  Slot& s = slots_[slot];
  const int fd = s.fd.exchange(-1, std::memory_order_acq_rel);
  if (fd < 0) return;
  ::close(fd);
  (void)::unlinkat(dir_fd_, name_of(s.id).c_str(), 0);  // best effort: a leftover goes at the next open
  files_.fetch_sub(1, std::memory_order_relaxed);
  bytes_.fetch_sub(s.bytes, std::memory_order_relaxed);
  s.bytes = 0;
  s.hasher.reset();
  s.sealed = false;
  s.unsynced = false;
  dir_dirty_ = true;
}

void SegmentFiles::wrote(uint32_t slot, uint64_t offset, const uint8_t* data, uint64_t len) {
  Slot& s = slots_[slot];
  if (s.hasher == nullptr) return;
  static const uint8_t kZeros[4096] = {};
  while (s.bytes < offset) {  // a gap: the file reads zeros there
    const uint64_t n = std::min<uint64_t>(sizeof kZeros, offset - s.bytes);
    XXH3_64bits_update(&s.hasher->state, kZeros, n);
    s.bytes += n;
    bytes_.fetch_add(n, std::memory_order_relaxed);
  }
  if (offset + len > s.bytes) {  // a rewrite of bytes already hashed (a retried write) adds nothing
    const uint64_t skip = s.bytes - offset;
    XXH3_64bits_update(&s.hasher->state, data + skip, len - skip);
    bytes_.fetch_add(offset + len - s.bytes, std::memory_order_relaxed);
    s.bytes = offset + len;
  }
  s.unsynced = true;
}

void SegmentFiles::seal(uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.sealed) return;
  if (s.hasher) s.hash = XXH3_64bits_digest(&s.hasher->state);
  s.hasher.reset();
  s.sealed = true;
}

SegmentFileInfo SegmentFiles::info(uint32_t slot) const {
  const Slot& s = slots_[slot];
  return {name_of(s.id), s.bytes, s.sealed ? s.hash : 0};
}

Status SegmentFiles::sync() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.unsynced) continue;
    LEANEMB_RETURN_IF_ERROR(sfd::sync_fd(s.fd.load(std::memory_order_relaxed), "fdatasync of '" + path(static_cast<uint32_t>(i)) + "'", true));
    s.unsynced = false;
  }
  if (dir_dirty_) {
    LEANEMB_RETURN_IF_ERROR(sfd::sync_fd(dir_fd_, "fsync of directory '" + dir_ + "'", false));
    dir_dirty_ = false;
  }
  return Status();
}

Status SegmentFiles::link(uint32_t slot, const std::string& to_dir) const {
  const Slot& s = slots_[slot];
  if (!s.sealed) return failed_precondition("log segment '" + path(slot) + "' is not sealed: it cannot be linked");
  const std::string to = to_dir + "/" + name_of(s.id);
  if (::linkat(dir_fd_, name_of(s.id).c_str(), AT_FDCWD, to.c_str(), 0) == 0) return Status();
  const int err = errno;
  struct stat a {}, b {};
  if (err == EEXIST && ::fstat(s.fd.load(std::memory_order_relaxed), &a) == 0 && ::stat(to.c_str(), &b) == 0 &&
      a.st_ino == b.st_ino && a.st_dev == b.st_dev)
    return Status();
  return sfd::os_error("link of log segment '" + path(slot) + "' to '" + to + "'", err);
}

namespace {
bool device_of(const std::string& p, dev_t* dev) {
  std::error_code ec;
  std::filesystem::path path = std::filesystem::absolute(p, ec);
  if (ec) return false;
  for (;;) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      *dev = st.st_dev;
      return true;
    }
    if (!path.has_parent_path() || path.parent_path() == path) return false;
    path = path.parent_path();
  }
}
}  // namespace

bool same_file_system(const std::string& a, const std::string& b) {
  dev_t da = 0, db = 0;
  return device_of(a, &da) && device_of(b, &db) && da == db;
}

Result<uint64_t> file_xxh3(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sfd::os_error("open of '" + path + "'", errno);
  XXH3_state_t h{};
  XXH3_64bits_reset(&h);
  std::vector<uint8_t> buf(size_t{1} << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return sfd::os_error("read of '" + path + "'", err);
    }
    if (n == 0) break;
    XXH3_64bits_update(&h, buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return static_cast<uint64_t>(XXH3_64bits_digest(&h));
}

}  // namespace leanemb::tiered
