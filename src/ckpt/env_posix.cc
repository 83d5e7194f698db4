// PosixEnv: Env over POSIX syscalls. Every call retries EINTR and short writes/reads; every
// error names the operation, the path and the errno text.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "leanemb/env.h"

namespace leanemb::ckpt {

namespace {

Status posix_error(const std::string& what, const std::string& path, int err) {
  std::string msg = what + " '" + path + "': " + std::generic_category().message(err);
  if (err == ENOENT) return not_found(std::move(msg));
  // A full disk is an I/O failure (exit code 4), not an exhausted memory budget.
  if (err == ENOSPC || err == EDQUOT) return io_error("disk full: " + msg);
  return Status(StatusCode::kIoError, std::move(msg));
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status append(std::span<const uint8_t> data) override {
    if (fd_ < 0) return failed_precondition("append to closed file '" + path_ + "'");
    const uint8_t* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return posix_error("write to", path_, errno);
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    return Status();
  }

  Status sync() override {
    if (fd_ < 0) return failed_precondition("sync of closed file '" + path_ + "'");
    while (::fsync(fd_) != 0) {
      if (errno != EINTR) return posix_error("fsync of", path_, errno);
    }
    return Status();
  }

  Status close() override {
    if (fd_ < 0) return failed_precondition("close of closed file '" + path_ + "'");
    const int fd = fd_;
    fd_ = -1;
    // No retry on EINTR: on Linux the descriptor is released even then.
    if (::close(fd) != 0 && errno != EINTR) return posix_error("close of", path_, errno);
    return Status();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  Status read_at(uint64_t offset, std::span<uint8_t> out) const override {
    uint8_t* p = out.data();
    size_t left = out.size();
    uint64_t off = offset;
    while (left > 0) {
      const ssize_t n = ::pread(fd_, p, left, static_cast<off_t>(off));
      if (n < 0) {
        if (errno == EINTR) continue;
        return posix_error("read of", path_, errno);
      }
      if (n == 0)
        return Status(StatusCode::kDataLoss, "'" + path_ + "' ends at byte " + std::to_string(off) + ", expected " +
                                                 std::to_string(offset + out.size()) + " bytes");
      p += n;
      left -= static_cast<size_t>(n);
      off += static_cast<uint64_t>(n);
    }
    return Status();
  }

 private:
  std::string path_;
  int fd_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return posix_error("cannot create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  Result<std::unique_ptr<WritableFile>> new_appendable_file(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return posix_error("cannot open for appending", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  Result<std::unique_ptr<RandomAccessFile>> new_random_access_file(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return posix_error("cannot open", path, errno);
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd));
  }

  Result<uint64_t> file_size(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return posix_error("cannot stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  bool file_exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  Result<std::vector<std::string>> list_dir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return posix_error("cannot list directory", path, errno);
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) return posix_error("cannot list directory", path, err);
    std::sort(names.begin(), names.end());
    return names;
  }

  Status create_dir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) == 0) return Status();
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status();
    return posix_error("cannot create directory", path, err);
  }

  Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return posix_error("cannot remove", path, errno);
    return Status();
  }

  Status remove_all(const std::string& path) override {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status();
      return posix_error("cannot stat", path, errno);
    }
    if (S_ISDIR(st.st_mode)) {
      LEANEMB_ASSIGN_OR_RETURN(std::vector<std::string> names, list_dir(path));
      for (const std::string& n : names) LEANEMB_RETURN_IF_ERROR(remove_all(join_path(path, n)));
      if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return posix_error("cannot remove directory", path, errno);
      return Status();
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return posix_error("cannot remove", path, errno);
    return Status();
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      const int err = errno;
      return posix_error("cannot rename", from + "' to '" + to, err);
    }
    return Status();
  }

  Status sync_dir(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return posix_error("cannot open directory", path, errno);
    Status s;
    while (::fsync(fd) != 0) {
      if (errno != EINTR) {
        s = posix_error("fsync of directory", path, errno);
        break;
      }
    }
    ::close(fd);
    return s;
  }
};

}  // namespace

Result<std::unique_ptr<WritableFile>> Env::new_appendable_file(const std::string& path) {
  return unimplemented("this file system cannot open '" + path + "' for appending");
}

Result<std::vector<uint8_t>> Env::read_file(const std::string& path) {
  LEANEMB_ASSIGN_OR_RETURN(uint64_t size, file_size(path));
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, new_random_access_file(path));
  std::vector<uint8_t> data(size);
  LEANEMB_RETURN_IF_ERROR(f->read_at(0, data));
  return data;
}

Env* posix_env() {
  static PosixEnv* env = new PosixEnv();  // never destroyed: usable from static destructors
  return env;
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string parent_dir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

}  // namespace leanemb::ckpt
