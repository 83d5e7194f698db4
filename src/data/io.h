// Thin POSIX file wrappers for src/data: sequential reads of large chunks and writes through a
// temporary file that is renamed over the target on commit (readers never see a half-written
// file). Errors name the path and the OS error.
//
// Ownership: each object owns its file descriptor and closes it on destruction; an OutputFile
// destroyed without commit() removes its temporary file.
// Thread safety: one object per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>
#include <string>

#include "leanemb/paths.h"
#include "leanemb/status.h"

namespace leanemb::data {

class InputFile {
 public:
  // Errors: NotFound (no such file), IoError (any other open failure, or a directory).
  static Result<InputFile> open(const std::string& path);
  InputFile(InputFile&& o) noexcept;
  InputFile& operator=(InputFile&& o) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  // Reads up to out.size() bytes at the current position; returns the count (0 = end of file).
  // Errors: IoError.
  Result<size_t> read(std::span<uint8_t> out);
  // Reads exactly out.size() bytes; *got_all is false (and the file ended) if fewer remained.
  Status read_full(std::span<uint8_t> out, bool* got_all);
  // Moves the read position to `offset` bytes from the start. Errors: IoError.
  Status seek(uint64_t offset);
  Result<uint64_t> size() const;
  const std::string& path() const { return path_; }

 private:
  InputFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

class OutputFile {
 public:
  // Creates `path`.tmp (truncating any old one). Errors: IoError naming the path.
  static Result<OutputFile> create(const std::string& path);
  OutputFile(OutputFile&& o) noexcept;
  OutputFile& operator=(OutputFile&& o) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();  // removes the temporary file unless committed

  // Appends bytes. Errors: IoError (ENOSPC, short write).
  Status write(std::span<const uint8_t> bytes);
  Status write(std::string_view s) { return write({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  // Overwrites bytes at `offset` (already written) without moving the append position.
  Status pwrite(uint64_t offset, std::span<const uint8_t> bytes);
  // fsync, close, rename `path`.tmp -> `path`. Errors: IoError.
  Status commit();
  const std::string& path() const { return path_; }

 private:
  OutputFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;  // final path; the data goes to path_ + ".tmp" until commit()
};

// Creates a directory (and its parents) if missing. Errors: IoError.
Status make_dirs(const std::string& path);

}  // namespace leanemb::data
