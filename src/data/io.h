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

// A path a command was given and what named it in messages ("--output", "--data").
struct NamedPath {
  std::string name;
  std::string path;
};

// outputs_never_alias_inputs (docs/train.md "Exit codes"): InvalidArgument naming both paths when
// `output` is the same file as one of `inputs`: equal realpaths, or the same st_dev and st_ino
// (a symlink or a hard link to the input; a symlink at `output` is followed, as opening it for
// writing would). An output that does not exist yet is no input; an input that does not exist
// is left to its reader. Call before anything opens the output for writing (fopen "w"
// truncates the input the command is about to read).
Status check_output_not_input(const NamedPath& output, std::span<const NamedPath> inputs);

// InvalidArgument when `output` would land on or inside `owned` (a run's checkpoints/ directory,
// its metrics.jsonl or LOCK, a checkpoint directory a command reads): those files belong to the
// run, and an output written there would replace or corrupt one of them (a summary over a
// checkpoint's MANIFEST, predictions over its data file). Neither needs to exist: the parts of a
// path that exist are resolved (symlinks, ".."), the rest normalized (a fresh run's metrics.jsonl
// is protected before the run creates it).
Status check_output_outside(const NamedPath& output, std::span<const NamedPath> owned);

// What a run directory `run` owns for check_output_outside: run/checkpoints, run/corrupt,
// run/metrics.jsonl, run/LOCK, and `run` itself when it is a checkpoint directory (holds a
// MANIFEST). Names are `what` + " 'path'".
std::vector<NamedPath> run_owned_paths(const std::string& run, const std::string& what);

}  // namespace leanemb::data
