// SegmentFiles: the files of the log store's segments (docs/tiered.md, "file, log layout").
//
// Segment slot s of a log store is one file of its own, `<id>.seg` (id: 16 hex digits, never
// reused within one directory) in the store's directory `<path>.log/`. A file is written only
// from empty to sealed: a segment that compaction frees has its file unlinked, and a slot that
// is used again gets a new file. So a sealed file never changes, and a checkpoint can keep a
// store's rows by hard-linking its sealed files (link()) instead of copying the rows: the bytes
// stay on disk as long as any name of them does, whatever the store does next.
//
// Each file's bytes are hashed as they are written (XXH3-64 of the file's bytes [0, bytes)), so a
// sealed file's hash is known without reading it back.
//
// Thread safety: one writer (the store's write_mu_) calls everything but fd(); fd(slot) may be
// read at the same time by readers of a slot the writer is not creating or dropping.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::tiered {

struct SegmentFileInfo {
  std::string name;    // "<16 hex digits>.seg"
  uint64_t bytes = 0;  // written so far: the file's size
  uint64_t hash = 0;   // XXH3-64 of bytes [0, bytes) (final once sealed)
};

class SegmentFiles {
 public:
  SegmentFiles() = default;
  SegmentFiles(const SegmentFiles&) = delete;
  SegmentFiles& operator=(const SegmentFiles&) = delete;
  // Closes every file and unlinks the store's names of them (a checkpoint's links keep theirs).
  ~SegmentFiles();

  // Makes directory `dir` if needed (its parent must exist) and removes the segment files an
  // earlier store left in it; `slots` is the most segments the store makes. `direct`: O_DIRECT.
  // Raises the soft limit of open files to the hard one (a 36 GB log holds over 500 files).
  // Errors: IoError, ResourceExhausted (no space).
  Status open(const std::string& dir, bool direct, size_t slots);
  const std::string& dir() const { return dir_; }

  // A new empty file for `slot` (which has none). Errors: IoError, ResourceExhausted.
  Status create(uint32_t slot);
  // Slot `slot` (which has none) takes the sealed file `from` of `info.bytes` bytes, hard-linked
  // into the directory under a new name (a restore from a checkpoint's links: no byte copied).
  // Errors: NotFound, DataLoss (the file's size is not info.bytes), IoError.
  Status adopt(uint32_t slot, const std::string& from, const SegmentFileInfo& info);
  // Closes the slot's file and unlinks the store's name of it.
  void drop(uint32_t slot);
  bool has(uint32_t slot) const { return slots_[slot].fd.load(std::memory_order_relaxed) >= 0; }
  int fd(uint32_t slot) const { return slots_[slot].fd.load(std::memory_order_acquire); }

  // Bytes [offset, offset + len) of the slot's file are on disk (after a successful write, in
  // increasing offsets): the written end and the running hash move on (a gap hashes as zeros,
  // which is what the file reads there).
  void wrote(uint32_t slot, uint64_t offset, const uint8_t* data, uint64_t len);
  // No more writes to the slot's file: its hash is final.
  void seal(uint32_t slot);
  bool sealed(uint32_t slot) const { return slots_[slot].sealed; }
  SegmentFileInfo info(uint32_t slot) const;
  std::string path(uint32_t slot) const;

  // fdatasync of every file written since the last sync, and fsync of the directory when files
  // were made or unlinked. Errors: IoError.
  Status sync();
  // Hard-links the slot's sealed file into directory `to_dir` under its name (an existing link
  // to the same file is kept). Errors: IoError, FailedPrecondition (not sealed).
  Status link(uint32_t slot, const std::string& to_dir) const;

  // May be called from any thread.
  uint64_t num_files() const { return files_.load(std::memory_order_relaxed); }
  uint64_t disk_bytes() const { return bytes_.load(std::memory_order_relaxed); }  // the files' written bytes

 private:
  struct Hasher;
  struct HasherDelete {
    void operator()(Hasher* h) const;
  };
  struct Slot {
    std::atomic<int> fd{-1};
    uint64_t id = 0, bytes = 0, hash = 0;
    bool sealed = false, unsynced = false;
    std::unique_ptr<Hasher, HasherDelete> hasher;  // while written
  };
  Status remove_leftovers();
  std::string name_of(uint64_t id) const;

  std::string dir_;
  int dir_fd_ = -1;
  bool direct_ = false;
  bool dir_dirty_ = false;
  uint64_t next_id_ = 1;
  std::vector<Slot> slots_;
  std::atomic<uint64_t> files_{0}, bytes_{0};
};

// Whether `a` and `b` (or their nearest existing ancestors) are on one file system: a hard link
// between them can be made.
bool same_file_system(const std::string& a, const std::string& b);

// XXH3-64 of a whole file's bytes (what SegmentFileInfo::hash says of a sealed file): checks a
// linked file. Errors: NotFound, IoError.
Result<uint64_t> file_xxh3(const std::string& path);

}  // namespace leanemb::tiered
