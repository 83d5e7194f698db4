// FaultInjectionEnv: an in-memory file system for tests that knows what a crash would keep and
// can fail or "kill the process" at any chosen operation (LevelDB's FaultInjectionTestEnv plus
// SQLite-style "fail the k-th I/O" killpoints).
//
// Model. Files and directories are inodes. A file remembers how many of its bytes were synced
// (files are append-only after creation, so the durable content is a prefix). A directory keeps
// two entry tables: the current one and the durable one, copied from the current one by
// sync_dir(). simulate_crash() rebuilds the tree from the durable entry tables starting at "/"
// and cuts every file back to its synced prefix: unsynced appends are lost, and so is a file
// creation, rename or removal that was not followed by sync_dir() of its directory. Reads see the
// current (pre-crash) state, like reads through a page cache.
//
// Killpoints. Every mutating call (new_writable_file, new_appendable_file, append, sync, close, create_dir,
// remove_file, rename, sync_dir) gets the next index 0, 1, 2, ... (num_mutating_ops());
// remove_all gets one index per file and directory it removes (children first, as the POSIX
// env unlinks them), so a crash can stop it half-way. set_fault(n, kind) makes call n fail: kFailOnce fails only that call;
// kFailFromNow fails it and every later mutating call (a broken disk; reads still work);
// kCrash fails it and every later call of any kind, as if the process had been killed before
// the call took effect. A failed call changes nothing.
//
// Paths must be absolute ("/out/x"); "/" always exists. Ownership: files opened from the env
// must not outlive it; files opened before simulate_crash() fail afterwards.
// Thread safety: every method takes one mutex; files may be used from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "leanemb/env.h"

namespace leanemb::ckpt {

enum class FaultKind : uint8_t {
  kNone,
  kFailOnce,     // the chosen call returns IoError; later calls run normally
  kFailFromNow,  // the chosen call and every later mutating call return IoError
  kCrash,        // the chosen call and every later call return IoError ("process killed")
};

struct CrashOptions {
  // false (the default, LevelDB's model): directory changes not followed by sync_dir() are
  // lost. true: they are all kept (as if the file system's journal had committed them) while
  // unsynced file bytes are still lost -- the adversarial case of a directory entry that is
  // durable before the data it names.
  bool keep_unsynced_dir_entries = false;
};

class FaultInjectionEnv final : public Env {
 public:
  FaultInjectionEnv();
  ~FaultInjectionEnv() override;

  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& path) override;
  // Counts as a mutating call ("append-open"); the file's bytes (and its synced prefix) are kept.
  Result<std::unique_ptr<WritableFile>> new_appendable_file(const std::string& path) override;
  Result<std::unique_ptr<RandomAccessFile>> new_random_access_file(const std::string& path) override;
  Result<uint64_t> file_size(const std::string& path) override;
  bool file_exists(const std::string& path) override;
  Result<std::vector<std::string>> list_dir(const std::string& path) override;
  Status create_dir(const std::string& path) override;
  Status remove_file(const std::string& path) override;
  Status remove_all(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status sync_dir(const std::string& path) override;

  // Arms a fault at mutating call `op_index` (an absolute index, compare num_mutating_ops()).
  // Replaces an armed fault.
  void set_fault(uint64_t op_index, FaultKind kind);
  // Disarms the fault and revives a "crashed" env (without dropping anything).
  void clear_fault();
  // Mutating calls made so far (failed ones included).
  uint64_t num_mutating_ops() const;
  // True once a kCrash fault has fired (until clear_fault() or simulate_crash()).
  bool crashed() const;
  // "rename '/a' -> '/b'": the mutating call with index `op_index`, or "" if none yet.
  std::string op_description(uint64_t op_index) const;

  // true: sync() and sync_dir() succeed (and count as calls) but make nothing durable, like a
  // disk that acknowledges flushes it never does, or code that forgot to sync.
  void set_ignore_syncs(bool ignore);

  // Drops what a crash would lose (see the model above), then revives the env and disarms the
  // fault. Open files become invalid.
  void simulate_crash(const CrashOptions& options = {});

  // Test helpers that damage stored bytes directly (no op index, durable at once).
  // Errors: NotFound, OutOfRange (offset or size beyond the file).
  Status flip_byte(const std::string& path, uint64_t offset);
  Status truncate_file(const std::string& path, uint64_t size);
  Status append_garbage(const std::string& path, uint64_t num_bytes);

 private:
  struct Inode;
  class File;
  class Reader;
  friend class File;
  friend class Reader;

  // Counts a mutating call and decides whether it fails. Requires mu_ held.
  Status begin_op(const std::string& description);
  // Fails every call after a kCrash fault fired, and calls from before the last crash.
  Status check_alive(uint64_t epoch) const;
  std::shared_ptr<Inode> lookup(const std::string& path) const;
  // The directory that holds `path`, and the entry name within it. Errors: NotFound.
  Result<std::shared_ptr<Inode>> lookup_parent(const std::string& path, std::string* name) const;

  mutable std::mutex mu_;
  std::shared_ptr<Inode> root_;
  uint64_t num_ops_ = 0;
  uint64_t fault_op_ = 0;
  FaultKind fault_kind_ = FaultKind::kNone;
  bool crashed_ = false;
  bool failing_ = false;  // a kFailFromNow fault fired
  bool ignore_syncs_ = false;
  uint64_t epoch_ = 0;    // incremented by simulate_crash()
  std::vector<std::string> op_log_;
};

}  // namespace leanemb::ckpt
