// MetricsLog: see metrics_log.h.
#include "train/metrics_log.h"

#include <cstdio>
#include <span>

#include "leanemb/env.h"

namespace leanemb::train {

MetricsLog::MetricsLog(std::string path, std::unique_ptr<ckpt::WritableFile> file)
    : path_(std::move(path)), file_(std::move(file)) {}

MetricsLog::~MetricsLog() = default;  // an unclosed file is closed by its own destructor

Result<std::unique_ptr<MetricsLog>> MetricsLog::open(ckpt::Env* env, std::string path) {
  env = env ? env : ckpt::posix_env();
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::WritableFile> f, env->new_appendable_file(path));
  return std::unique_ptr<MetricsLog>(new MetricsLog(std::move(path), std::move(f)));
}

void MetricsLog::fail(const Status& s, int64_t step, const char* what) {
  if (lost()) return;
  error_ = Status(s.code(), path_ + ": " + what + " at step " + std::to_string(step) + " failed: " + s.message());
  lost_at_step_ = step;
  std::fprintf(stderr,
               "leanemb: warning: %s; metrics.jsonl holds no line from here on (training goes on: its checkpoints are "
               "unaffected; the summary says \"metrics_lost\" and the exit code is 4)\n",
               error_.message().c_str());
}

void MetricsLog::append(const std::string& line, int64_t step) {
  if (lost() || closed_) {
    ++lines_lost_;
    return;
  }
  const std::string l = line + "\n";
  const Status s = file_->append(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(l.data()), l.size()));
  if (!s.ok()) {
    ++lines_lost_;
    fail(s, step, "writing a line");
  }
}

void MetricsLog::sync(int64_t step) {
  if (lost() || closed_) return;
  if (Status s = file_->sync(); !s.ok()) fail(s, step, "fsync");
}

Status MetricsLog::close(int64_t step) {
  if (!closed_) {
    sync(step);
    closed_ = true;
    if (Status s = file_->close(); !s.ok()) fail(s, step, "close");
  }
  return error_;
}

nlohmann::json MetricsLog::summary() const {
  if (!lost()) return nullptr;
  return {{"path", path_}, {"step", lost_at_step_}, {"lines_lost", lines_lost_}, {"error", error_.message()}};
}

}  // namespace leanemb::train
