// MetricsLog: a run's metrics.jsonl (rank 0's), appended one JSON line at a time through a
// ckpt::Env, every write checked (no_silent_write_errors, docs/train.md "The output directory").
//
// A write that fails (disk full, EIO) is warned about at once on stderr, naming the file, the
// step and the error, and ends the log: later lines are counted as lost, not written, so no
// line ever follows a cut one. The training goes on (its checkpoints are the run's real
// output); lost() and summary() tell the trainer to mark the summary, and `leanemb train`
// exits 4 (I/O) for such a run. sync() (at checkpoints) and close() (at the end) make the lines
// durable and are checked the same way.
//
// Ownership: owns its file. Thread safety: one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "leanemb/json.h"
#include "leanemb/status.h"

namespace leanemb::ckpt {
class Env;
class WritableFile;
}  // namespace leanemb::ckpt

namespace leanemb::train {

class MetricsLog {
 public:
  // Opens `path` for appending (created when missing) in `env` (null: the real file system).
  // Errors: IoError naming the path.
  static Result<std::unique_ptr<MetricsLog>> open(ckpt::Env* env, std::string path);
  ~MetricsLog();

  // Appends `line` and a newline; `step` is for the warning. A no-op (counted) after a loss.
  void append(const std::string& line, int64_t step);
  // fsync of what was appended; a failure is a loss like a failed append.
  void sync(int64_t step);
  // sync + close. Returns the first error (OK when nothing was lost).
  Status close(int64_t step);

  bool lost() const { return !error_.ok(); }
  // {"path", "step" (of the first lost line), "lines_lost", "error"}; null when nothing was lost.
  nlohmann::json summary() const;

 private:
  MetricsLog(std::string path, std::unique_ptr<ckpt::WritableFile> file);
  void fail(const Status& s, int64_t step, const char* what);

  std::string path_;
  std::unique_ptr<ckpt::WritableFile> file_;
  Status error_;
  int64_t lost_at_step_ = -1;
  int64_t lines_lost_ = 0;
  bool closed_ = false;
};

}  // namespace leanemb::train
