// RunDir: the output directory of a training run (--out), held exclusively for the run, and the
// decision of how the run starts there (docs/train.md, "The output directory").
//
// Lock. <out>/LOCK is locked with flock(2) for the whole run and holds the holder's pid, host
// and start time. The kernel releases the lock when the process ends in any way (kill -9
// included), so a lock is never stale; the file stays and says who held it last. A second run
// on a locked directory is refused with a message naming the directory and the holder.
//
// Consent. An earlier run's work is checkpoints/ (step-<N> directories), shards/ (sharded
// checkpoints) and metrics.jsonl. A fresh run on a directory holding any of them is refused
// unless given --resume (continue that run) or --overwrite (move it aside into
// <out>/replaced-<YYYYmmdd-HHMMSS>/; nothing is deleted). So metrics.jsonl holds one run.
//
// Resume. The newest checkpoint whose manifest and every block check out (and, for a sharded
// one, every shard) is the resume point. Step directories newer than it that fail the checks are
// moved into <out>/corrupt/ (named in a warning), so that no later commit deletes them; older
// ones with a broken or missing manifest too. If step directories exist but none is valid, the
// run fails (DataLoss naming each and why) unless start_fresh is set: then they are moved into
// <out>/corrupt/ and the run starts at step 0. No checkpoint at all: the run starts at step 0.
// metrics.jsonl keeps the lines of steps up to the resume point (later lines belong to the
// part of the run that is redone) and moves aside on a start at step 0.
//
// Other checkpoint writers (writers_own_their_dirs, docs/train.md "The output directory"):
// `export --serving` and leanemb.torch's module.save() open their output directory as a RunDir
// too (options.writer names them): the same lock, and the same consent rule for a fresh start
// (an earlier run's or an earlier writer's work is refused unless the writer was told to
// overwrite, which moves it aside), so no writer deletes a checkpoint it did not write itself.
//
// Public (leanemb/run_dir.h) because every writer of checkpoints into a directory it was given
// (the CLI, the Python module's save()) must follow the same protocol; implemented in
// src/train/run_dir.cc.
//
// Ownership: a RunDir owns the lock until it is destroyed.
// Thread safety: one thread at a time; the lock excludes other processes and other RunDirs
// of this process.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::ckpt {
class Env;  // leanemb/env.h
}
namespace leanemb::dist {
class Communicator;  // leanemb/communicator.h
}

namespace leanemb::train {

// An exclusive flock(2) on <dir>/LOCK (created if missing) holding "pid host time" lines.
class DirLock {
 public:
  // Errors: FailedPrecondition "... is in use by another leanemb run (pid P on host H since
  // T)" when another process (or another DirLock of this one) holds it; IoError.
  static Result<std::unique_ptr<DirLock>> acquire(const std::string& dir);
  ~DirLock();  // closes the file: the lock is released
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  DirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

struct RunDirOptions {
  std::string out_dir;
  bool resume = false;       // --resume: continue from the newest valid checkpoint
  bool overwrite = false;    // --overwrite: move an earlier run's work aside, start at step 0
  bool start_fresh = false;  // --start-fresh (with --resume): no valid checkpoint -> step 0
  // Receives each note ("moved FROM -> TO"); null: "leanemb: note: ..." on stderr (always,
  // --quiet or not: moving a run's files is never silent).
  std::function<void(const std::string&)> say;
  // The file system of the checkpoints (tests: a FaultInjectionEnv); null: the real one. The
  // lock and metrics.jsonl always use the real file system.
  ckpt::Env* env = nullptr;
  // Who writes the directory, in messages: empty for `leanemb train` (the refusal offers
  // --resume and --overwrite); else e.g. "export --serving" or "module.save()", whose refusal
  // offers only `overwrite_flag` (such writers never resume: resume must stay false).
  std::string writer;
  std::string overwrite_flag = "--overwrite";
};

// Where the run starts.
struct ResumePoint {
  std::string dir;       // checkpoint directory to load; empty: start at step 0
  bool sharded = false;  // a sharded (global) checkpoint
  int64_t step = -1;     // its step, -1 when empty
};

class RunDir {
 public:
  // Creates out_dir when missing, takes the lock, then applies the rules in the header comment.
  // Errors: InvalidArgument (contradicting options; a fresh run on an earlier run's work,
  // naming what is there and the choices), FailedPrecondition (locked by another run), DataLoss
  // (--resume and no valid checkpoint among existing ones), IoError.
  static Result<std::unique_ptr<RunDir>> open(const RunDirOptions& options);
  ~RunDir();

  const ResumePoint& resume_point() const { return resume_; }
  // Paths moved aside by open(), each as "FROM -> TO".
  const std::vector<std::string>& moved() const { return moved_; }

 private:
  RunDir() = default;
  std::unique_ptr<DirLock> lock_;
  ResumePoint resume_;
  std::vector<std::string> moved_;
};

// RunDir::open on rank 0 of `comm` (every process when comm is null or has one rank), its
// verdict agreed by every rank and its resume point broadcast. Collective. *held receives rank
// 0's RunDir (null elsewhere). Errors: rank 0's, on every rank.
Result<ResumePoint> open_run_dir(const RunDirOptions& options, dist::Communicator* comm,
                                 std::unique_ptr<RunDir>* held);

}  // namespace leanemb::train
