// Env: the file seam. Checkpoints (their files and directories, leanemb/checkpoint.h and
// leanemb/table_checkpoint.h) and a run's metrics log are read and written through this
// interface (as LevelDB's Env), so that callers and tests can swap the real file system for
// one that injects faults and simulates crashes. Functions that take an `Env*`
// (leanemb/checkpoint.h, leanemb/table_checkpoint.h) read nullptr as posix_env().
//
// Two implementations: posix_env() (real syscalls: open/write/fsync/rename/fsync of the parent
// directory) and the library's FaultInjectionEnv (src/ckpt/fault_injection_env.h, in memory, for
// its tests). Other implementations subclass Env.
//
// Durability contract, which callers must follow and FaultInjectionEnv enforces: bytes
// appended to a file survive a crash only after WritableFile::sync(); a file creation, a rename
// or a removal survives a crash only after sync_dir() of the directory that holds the entry.
//
// Paths are plain strings joined with '/'. Errors carry the path and, for the POSIX env, the
// errno text: NotFound (ENOENT), IoError otherwise (ENOSPC and EDQUOT as "disk full: ...").
//
// Ownership: files returned by an Env are owned by the caller and must not outlive the Env.
// Thread safety: an Env may be used from several threads at once; one WritableFile must not be
// used by two threads at once; RandomAccessFile::read_at may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::ckpt {

// A file opened for appending. The destructor closes it if close() was not called (errors are
// then lost: call close() to see them).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Appends `data` at the end of the file. Errors: IoError (also a full disk).
  virtual Status append(std::span<const uint8_t> data) = 0;
  // Makes every byte appended so far durable (fsync). Errors: IoError.
  virtual Status sync() = 0;
  // Closes the file; later calls fail with FailedPrecondition. Errors: IoError.
  virtual Status close() = 0;
};

// A file opened for reading at arbitrary offsets.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads exactly out.size() bytes starting at byte `offset`.
  // Errors: DataLoss if the file ends before offset + out.size(), IoError.
  virtual Status read_at(uint64_t offset, std::span<uint8_t> out) const = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // Creates `path` (or truncates an existing file) and opens it for appending.
  // Errors: NotFound (parent directory missing), IoError.
  virtual Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) = 0;
  // Opens `path` for appending, creating it when missing; its bytes are kept (logs such as a
  // run's metrics.jsonl). Errors: NotFound (parent directory missing), IoError; Unimplemented
  // by an Env that has no such operation (the default).
  virtual Result<std::unique_ptr<WritableFile>> new_appendable_file(const std::string& path);
  // Opens an existing file for reading. Errors: NotFound, IoError.
  virtual Result<std::unique_ptr<RandomAccessFile>> new_random_access_file(const std::string& path) = 0;
  // The whole content of a file. Errors: NotFound, IoError.
  virtual Result<std::vector<uint8_t>> read_file(const std::string& path);
  // Size in bytes of a file. Errors: NotFound, IoError.
  virtual Result<uint64_t> file_size(const std::string& path) = 0;
  // True if `path` names an existing file or directory.
  virtual bool file_exists(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, without "." and "..", sorted bytewise.
  // Errors: NotFound, IoError (also when `path` is not a directory).
  virtual Result<std::vector<std::string>> list_dir(const std::string& path) = 0;

  // Creates a directory; OK if it already exists as a directory. Not durable until
  // sync_dir(parent). Errors: NotFound (parent missing), IoError (a file has that name).
  virtual Status create_dir(const std::string& path) = 0;
  // Removes one file. Errors: NotFound, IoError.
  virtual Status remove_file(const std::string& path) = 0;
  // Removes a file, or a directory and everything below it. OK if `path` does not exist.
  // Errors: IoError.
  virtual Status remove_all(const std::string& path) = 0;
  // Renames a file or directory; replaces `to` if it is a file or an empty directory.
  // Errors: NotFound (`from` missing), IoError (e.g. `to` is a non-empty directory).
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // Makes the entries of directory `path` (creations, renames, removals) durable (fsync of the
  // directory). Errors: NotFound, IoError.
  virtual Status sync_dir(const std::string& path) = 0;
};

// The real file system. Process-wide, never destroyed.
Env* posix_env();

// "a/b" from ("a", "b"); `dir` may end with '/'.
std::string join_path(const std::string& dir, const std::string& name);
// The directory part of a path: "a/b" for "a/b/c", "/" for "/c", "." for "c".
std::string parent_dir(const std::string& path);

}  // namespace leanemb::ckpt
