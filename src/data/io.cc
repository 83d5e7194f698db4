#include "data/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <utility>

namespace leanemb::data {

namespace {

Status io_error(const std::string& what, const std::string& path, int err) {
  return Status(StatusCode::kIoError, "data: " + what + " '" + path + "': " + std::strerror(err));
}

}  // namespace

Result<InputFile> InputFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("data: no such file '" + path + "'");
    return io_error("cannot open", path, errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("data: '" + path + "' is not a regular file");
  }
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return InputFile(fd, path);
}

InputFile::InputFile(InputFile&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}

InputFile& InputFile::operator=(InputFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<size_t> InputFile::read(std::span<uint8_t> out) {
  while (true) {
    const ssize_t n = ::read(fd_, out.data(), out.size());
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) return io_error("read failed on", path_, errno);
  }
}

Status InputFile::read_full(std::span<uint8_t> out, bool* got_all) {
  size_t done = 0;
  while (done < out.size()) {
    LEANEMB_ASSIGN_OR_RETURN(size_t n, read(out.subspan(done)));
    if (n == 0) break;
    done += n;
  }
  *got_all = done == out.size();
  return Status::ok_status();
}

Status InputFile::seek(uint64_t offset) {
  if (::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) return io_error("seek failed on", path_, errno);
  return Status::ok_status();
}

Result<uint64_t> InputFile::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return io_error("stat failed on", path_, errno);
  return static_cast<uint64_t>(st.st_size);
}

Result<OutputFile> OutputFile::create(const std::string& path) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", tmp, errno);
  return OutputFile(fd, path);
}

OutputFile::OutputFile(OutputFile&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink((path_ + ".tmp").c_str());
    }
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink((path_ + ".tmp").c_str());
    fd_ = -1;
  }
}

Status OutputFile::write(std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("write failed on", path_ + ".tmp", errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok_status();
}

Status OutputFile::pwrite(uint64_t offset, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("write failed on", path_ + ".tmp", errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok_status();
}

Status OutputFile::commit() {
  const std::string tmp = path_ + ".tmp";
  if (::fsync(fd_) != 0) return io_error("fsync failed on", tmp, errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return io_error("close failed on", tmp, errno);
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot rename to", path_, err);
  }
  return Status::ok_status();
}

Status make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Status(StatusCode::kIoError, "data: cannot create directory '" + path + "': " + ec.message());
  return Status::ok_status();
}

Status check_output_not_input(const NamedPath& output, std::span<const NamedPath> inputs) {
  struct stat out_st {};
  if (::stat(output.path.c_str(), &out_st) != 0) return Status();  // not there yet: it can alias nothing
  char buf[PATH_MAX];
  const std::string out_real = ::realpath(output.path.c_str(), buf) ? std::string(buf) : output.path;
  for (const NamedPath& in : inputs) {
    if (in.path.empty()) continue;
    struct stat in_st {};
    if (::stat(in.path.c_str(), &in_st) != 0) continue;
    const std::string in_real = ::realpath(in.path.c_str(), buf) ? std::string(buf) : in.path;
    const bool same_inode = in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino;
    if (!same_inode && in_real != out_real) continue;
    const std::string how = in_real == out_real ? "both resolve to '" + out_real + "'"
                                                : "the same file, device " + std::to_string(out_st.st_dev) + " inode " +
                                                      std::to_string(out_st.st_ino) + ": a hard link";
    return invalid_argument(output.name + " '" + output.path + "' is " + in.name + " '" + in.path + "' (" + how +
                            "); writing it would destroy the input being read: choose another " + output.name);
  }
  return Status();
}

namespace {
// `p` with every existing part of it resolved (symlinks, "..") and the rest normalized: the file
// it names, whether or not it exists yet (the run directory of a fresh run does not).
std::string resolve_maybe_missing(const std::string& p) {
  std::error_code ec;
  const std::filesystem::path r = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
  return ec ? std::string() : r.lexically_normal().string();
}
}  // namespace

Status check_output_outside(const NamedPath& output, std::span<const NamedPath> owned) {
  const std::string out = resolve_maybe_missing(output.path);
  if (out.empty()) return Status();
  for (const NamedPath& o : owned) {
    if (o.path.empty()) continue;
    std::string own = resolve_maybe_missing(o.path);
    while (own.size() > 1 && own.back() == '/') own.pop_back();
    if (own.empty()) continue;
    if (out == own || (out.size() > own.size() && out.compare(0, own.size(), own) == 0 && out[own.size()] == '/')) {
      return invalid_argument(output.name + " '" + output.path + "' is " + (out == own ? "" : "inside ") + o.name +
                              " '" + o.path + "' (" + out + "); writing it would replace a file of that run: choose another " +
                              output.name);
    }
  }
  return Status();
}

std::vector<NamedPath> run_owned_paths(const std::string& run, const std::string& what) {
  std::vector<NamedPath> v;
  for (const char* sub : {"checkpoints", "corrupt", "metrics.jsonl", "LOCK"})
    v.push_back({what + "'s " + sub, run + "/" + sub});
  struct stat st {};
  if (::stat((run + "/MANIFEST").c_str(), &st) == 0) v.push_back({what + " (a checkpoint directory)", run});
  return v;
}

}  // namespace leanemb::data
