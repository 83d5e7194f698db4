// RunOptions: how one run of `leanemb train` is started, whatever its task (train/task.h): the
// output directory, resume, the stop signal, the steps override and the communicator. The task's
// own config travels beside it (ctr::run_ctr_training, text::run_text_training).
//
// Thread safety: plain data.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace leanemb::ckpt {
class Env;
}
namespace leanemb::dist {
class Communicator;
}

namespace leanemb::train {

class StopSignal;

struct RunOptions {
  std::string out_dir = "runs/ctr_small";  // locked for the run; see leanemb/run_dir.h
  bool resume = false;
  bool overwrite = false;    // move an earlier run's checkpoints and metrics aside (run_dir.h)
  bool start_fresh = false;  // with resume: no valid checkpoint -> set them aside, step 0
  // Graceful stop (train/stop_signal.h): checked before every step; when set on any rank,
  // every rank stops after the same step, writes a checkpoint and returns outcome "stopped".
  // Null: signals keep their default action.
  StopSignal* stop = nullptr;
  ckpt::Env* ckpt_env = nullptr;  // tests: the checkpoints' file system (null: the real one)
  // tests: the file system of metrics.jsonl (null: the real one; train/metrics_log.h)
  ckpt::Env* log_env = nullptr;
  int64_t steps = -1;              // >= 0 overrides the config's steps
  bool progress_tty = false;       // rewrite one progress line (\r) instead of printing lines
  bool quiet = false;              // no progress at all
  // Multi-process training (docs/dist.md): this rank's communicator (null: one process). Every
  // rank runs the task's entry point with the same options; rank 0 prints and writes metrics.
  dist::Communicator* comm = nullptr;
  // Testing: called after each completed step with the step number (1-based).
  std::function<void(int64_t)> after_step;
};

}  // namespace leanemb::train
