#include "data/malformed.h"

#include <cstdio>

namespace leanemb::data {

std::string_view malformed_kind_name(MalformedKind k) {
  switch (k) {
    case MalformedKind::kFieldCount: return "field_count";
    case MalformedKind::kBadLabel: return "bad_label";
    case MalformedKind::kLabelNotBinary: return "label_not_binary";
    case MalformedKind::kBadDense: return "bad_dense";
    case MalformedKind::kBadHex: return "bad_hex";
    case MalformedKind::kNoLabel: return "no_label";
    case MalformedKind::kEmptyLabel: return "empty_label";
    case MalformedKind::kNoWords: return "no_words";
  }
  return "unknown";
}

Status MalformedTracker::on_malformed(std::string_view file, int64_t line, MalformedKind kind, const std::string& detail) {
  ++stats_.malformed;
  ++stats_.malformed_by_kind[static_cast<size_t>(kind)];
  if (replaying_) return Status::ok_status();
  std::string where = std::string(file) + ":" + std::to_string(line) + ": " + detail;
  if (warned_ < policy_.max_warnings) {
    ++warned_;
    const std::string msg = "malformed line skipped: " + where;
    if (policy_.warn) policy_.warn(msg);
    else std::fprintf(stderr, "leanemb: warning: %s\n", msg.c_str());
  }
  if (stats_.first_malformed.empty()) stats_.first_malformed = std::move(where);
  if (stats_.lines < policy_.min_lines) return Status::ok_status();
  return check_rate(file, line);
}

Status MalformedTracker::on_file_end(std::string_view file, int64_t line) {
  if (replaying_ || stats_.lines == 0) return Status::ok_status();
  return check_rate(file, line);
}

Status MalformedTracker::check_rate(std::string_view file, int64_t line) const {
  const double rate = static_cast<double>(stats_.malformed) / static_cast<double>(stats_.lines);
  if (rate <= policy_.max_rate) return Status::ok_status();
  char buf[160];
  std::snprintf(buf, sizeof buf, "malformed-line rate %.6g (%lld of %lld lines) exceeds max_malformed_rate %g", rate,
                static_cast<long long>(stats_.malformed), static_cast<long long>(stats_.lines), policy_.max_rate);
  return invalid_argument("data: " + std::string(file) + " line " + std::to_string(line) + ": " + buf +
                          "; first malformed: " + stats_.first_malformed);
}

}  // namespace leanemb::data
