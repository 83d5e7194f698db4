#include "leanemb/progress.h"

#include <algorithm>
#include <cmath>

namespace leanemb {

std::string format_count(double v) {
  if (!std::isfinite(v) || v < 0) return "-";
  static const char* const kSuffix[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  // Round first, so that 999.96 becomes "1.00k", not "1000".
  auto rounded = [](double x) {  // to 3 significant digits (x >= 1)
    const double p = std::pow(10.0, 2 - std::floor(std::log10(x)));
    return std::round(x * p) / p;
  };
  if (v < 1000) {
    char buf[16];
    if (v == std::floor(v) || v >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
    else if (v >= 10) std::snprintf(buf, sizeof buf, "%.1f", v);
    else std::snprintf(buf, sizeof buf, "%.2f", v);
    if (std::string(buf) != "1000") return buf;
  }
  while (i < 5 && rounded(v) >= 1000) {
    v /= 1000;
    ++i;
  }
  v = rounded(v);
  char buf[24];
  if (v >= 100) std::snprintf(buf, sizeof buf, "%.0f%s", v, kSuffix[i]);
  else if (v >= 10) std::snprintf(buf, sizeof buf, "%.1f%s", v, kSuffix[i]);
  else std::snprintf(buf, sizeof buf, "%.2f%s", v, kSuffix[i]);
  return buf;
}

std::string format_rate(double per_second, std::string_view unit) {
  std::string t = format_count(per_second);
  t += ' ';
  t += unit;
  t += "/s";
  return t;
}

double eta_seconds(int64_t done, int64_t total, double elapsed_s) {
  if (total <= 0 || done <= 0 || !(elapsed_s > 0)) return -1;
  if (done >= total) return 0;
  return static_cast<double>(total - done) * elapsed_s / static_cast<double>(done);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds >= 100 * 3600.0) return "99:59:59+";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                               static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

std::string format_progress(const ProgressState& s) {
  // Appends only: GCC 12 warns (-Wrestrict, a false positive) on `"literal" + std::string`.
  std::string t(s.label);
  const double rate = s.elapsed_s > 0 ? s.done / s.elapsed_s : -1;
  t += ' ';
  t += format_count(s.done);
  if (s.total > 0) {
    // Floored (99% until the end), and exactly 100 at the end (100 * x / x may be 99.999...).
    const double pct = s.done >= s.total ? 100.0 : std::min(100.0, std::max(0.0, 100.0 * s.done / s.total));
    char p[16];
    std::snprintf(p, sizeof p, " (%.0f%%)", std::floor(pct));
    t += '/';
    t += format_count(s.total);
    t += ' ';
    t += s.unit;
    t += p;
    t += " | ";
    t += format_rate(rate, s.unit);
    if (s.done >= s.total) {
      t += " | done in ";
      t += format_duration(s.elapsed_s);
    } else {
      t += " | ETA ";
      t += format_duration(eta_seconds(static_cast<int64_t>(s.done), static_cast<int64_t>(s.total), s.elapsed_s));
    }
  } else {
    t += ' ';
    t += s.unit;
    t += " | ";
    t += format_rate(rate, s.unit);
    t += " | ";
    t += format_duration(s.elapsed_s);
    t += " elapsed";
  }
  if (!s.extra.empty()) {
    t += " | ";
    t += s.extra;
  }
  return t;
}

std::string tty_line(std::string_view text, bool final_line) {
  std::string out = "\r";
  out += text;
  out += "\033[K";
  if (final_line) out += "\n";
  return out;
}

TtyProgress::TtyProgress(std::FILE* out, std::string label, std::string unit, double total, double min_interval_s)
    : out_(out), label_(std::move(label)), unit_(std::move(unit)), total_(total), min_interval_s_(min_interval_s),
      start_(Clock::now()), last_(start_) {}

double TtyProgress::elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

void TtyProgress::update(double done, std::string_view extra, bool force) {
  if (finished_) return;
  const auto now = Clock::now();
  if (!force && printed_ && std::chrono::duration<double>(now - last_).count() < min_interval_s_) return;
  if (!force && !printed_ && std::chrono::duration<double>(now - start_).count() < min_interval_s_) return;
  last_ = now;
  printed_ = true;
  const std::string text = format_progress({label_, unit_, done, total_, elapsed_s(), extra});
  std::fputs(tty_line(text, false).c_str(), out_);
  std::fflush(out_);
}

void TtyProgress::finish(double done, std::string_view extra) {
  if (finished_) return;
  finished_ = true;
  const std::string text = format_progress({label_, unit_, done, total_, elapsed_s(), extra});
  std::fputs(tty_line(text, true).c_str(), out_);
  std::fflush(out_);
}

void PhasedProgress::update(std::string_view phase, double done, double total) {
  if (!line_ || phase != phase_) {
    finish();
    phase_ = std::string(phase);
    std::string label = prefix_;
    if (!label.empty() && !phase_.empty()) label += ' ';
    label += phase_;
    line_ = std::make_unique<TtyProgress>(out_, std::move(label), unit_, total, min_interval_s_);
  }
  last_done_ = done;
  if (total > 0 && done >= total) {
    line_->finish(done);
    return;
  }
  line_->update(done);
}

void PhasedProgress::finish() {
  if (line_) line_->finish(last_done_);
  line_.reset();
}

}  // namespace leanemb
