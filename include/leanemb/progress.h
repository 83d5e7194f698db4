// One progress line with rate and ETA for long work on a terminal (`train`, `predict`,
// `gen-data`, `convert`; docs/package.md "Progress"). On a terminal (isatty(stderr)) the line is
// rewritten in place ("\r...\033[K") at most every `min_interval_s` and ends with a newline when
// the work is done; elsewhere the commands keep their periodic lines, which tests parse.
//
// The formatting is pure (format_* below, unit-tested in progress_test.cc); TtyProgress adds the
// clock and the rate limit.
//
// Thread safety: the functions are pure; a TtyProgress is used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

namespace leanemb {

// 3 significant digits with a k/M/G/T suffix: 0 -> "0", 812 -> "812", 12345 -> "12.3k",
// 1234567 -> "1.23M". Negative or non-finite: "-".
std::string format_count(double v);

// A rate: format_count(per_second) + " " + unit + "/s", e.g. "281k samples/s".
std::string format_rate(double per_second, std::string_view unit);

// Seconds left when `done` of `total` took `elapsed_s` at a steady rate; negative when unknown
// (total <= 0, nothing done yet, or no time elapsed).
double eta_seconds(int64_t done, int64_t total, double elapsed_s);

// A duration as a clock: 4 -> "0:04", 125 -> "2:05", 3723 -> "1:02:03", 100 h and more -> "99:59:59+";
// negative or non-finite -> "?".
std::string format_duration(double seconds);

// The line's text (no \r, no newline):
//   "<label> <done>/<total> <unit> (<pct>%) | <rate> | ETA <m:ss>"     total known
//   "<label> <done> <unit> | <rate> | <m:ss> elapsed"                  total <= 0
// with counts by format_count, the rate of `done` per second, and at the end (done >= total)
// "done in <m:ss>" instead of the ETA. `extra`, when not empty, follows after " | ".
struct ProgressState {
  std::string_view label;  // "gen-data train", "convert", "predict", ...
  std::string_view unit;   // "rows", "MB", "lines", ...
  double done = 0;
  double total = 0;  // <= 0: unknown
  double elapsed_s = 0;
  std::string_view extra;
};
std::string format_progress(const ProgressState& s);

// What a terminal gets for `text`: "\r" + text + "\033[K" (clear the rest of the line), and a
// final "\n" when `final_line`.
std::string tty_line(std::string_view text, bool final_line);

// A progress line on `out` (stderr) for work of `total` units (<= 0: unknown).
class TtyProgress {
 public:
  TtyProgress(std::FILE* out, std::string label, std::string unit, double total, double min_interval_s = 0.25);
  // Rewrites the line when min_interval_s passed since the last one (or `force`).
  void update(double done, std::string_view extra = {}, bool force = false);
  // The last line, complete, with its newline (once; later calls do nothing).
  void finish(double done, std::string_view extra = {});
  double elapsed_s() const;
  void set_total(double total) { total_ = total; }
  double total() const { return total_; }
  bool printed() const { return printed_ || finished_; }  // a line is on the terminal

 private:
  using Clock = std::chrono::steady_clock;
  std::FILE* out_;
  std::string label_, unit_;
  double total_;
  double min_interval_s_;
  Clock::time_point start_, last_;
  bool printed_ = false, finished_ = false;
};

// Work in named phases, one line each (gen-data's "train" and "eval" splits): a phase's line is
// "<prefix> <phase> ..." and is finished (newline) when done >= total or another phase starts.
class PhasedProgress {
 public:
  PhasedProgress(std::FILE* out, std::string prefix, std::string unit, double min_interval_s = 0.25)
      : out_(out), prefix_(std::move(prefix)), unit_(std::move(unit)), min_interval_s_(min_interval_s) {}
  void update(std::string_view phase, double done, double total);
  void finish();  // the open line, if any, with its newline

 private:
  std::FILE* out_;
  std::string prefix_, unit_, phase_;
  double min_interval_s_, last_done_ = 0;
  std::unique_ptr<TtyProgress> line_;
};

}  // namespace leanemb
