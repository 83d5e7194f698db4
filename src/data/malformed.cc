#include "leanemb/data_malformed.h"

#include "core/enum_names.h"

#include <cstdio>

namespace leanemb {
template <>
struct EnumNames<data::MalformedKind> {
  using K = data::MalformedKind;
  static constexpr std::string_view kWhat = "malformed kind";
  static constexpr EnumName<K> kNames[] = {
      {K::kFieldCount, "field_count", ""}, {K::kBadLabel, "bad_label", ""},   {K::kLabelNotBinary, "label_not_binary", ""},
      {K::kBadDense, "bad_dense", ""},     {K::kBadHex, "bad_hex", ""},       {K::kNoLabel, "no_label", ""},
      {K::kEmptyLabel, "empty_label", ""}, {K::kNoWords, "no_words", ""}};
};
}  // namespace leanemb

namespace leanemb::data {

std::string_view malformed_kind_name(MalformedKind k) { return enum_name(k); }

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
  if (policy_.total_input_bytes > 0) {
    // Conclusive only: even if every byte left in the pass were a good line of one byte.
    // Binary inputs have no lines: counting their bytes as lines only delays this check.
    if (pass_judged_ || stats_.line_bytes >= policy_.total_input_bytes) return Status::ok_status();
    const double most_lines = static_cast<double>(stats_.lines + (policy_.total_input_bytes - stats_.line_bytes));
    if (static_cast<double>(stats_.malformed) <= policy_.max_rate * most_lines) return Status::ok_status();
    return check_rate(file, line);
  }
  if (stats_.lines < policy_.min_lines) return Status::ok_status();
  return check_rate(file, line);
}

Status MalformedTracker::on_file_end(std::string_view file, int64_t line) {
  if (replaying_ || stats_.lines == 0) return Status::ok_status();
  if (policy_.total_input_bytes > 0) return Status::ok_status();  // judged at the pass's end
  return check_rate(file, line);
}

Status MalformedTracker::on_pass_end(std::string_view last_file) {
  if (replaying_ || pass_judged_ || policy_.total_input_bytes == 0 || stats_.lines == 0) return Status::ok_status();
  pass_judged_ = true;
  return check_rate("the whole input (the pass ended at " + std::string(last_file) + ")", -1);
}

Status MalformedTracker::check_rate(std::string_view file, int64_t line) const {
  const double rate = static_cast<double>(stats_.malformed) / static_cast<double>(stats_.lines);
  if (rate <= policy_.max_rate) return Status::ok_status();
  char buf[160];
  std::snprintf(buf, sizeof buf, "malformed-line rate %.6g (%lld of %lld lines) exceeds max_malformed_rate %g", rate,
                static_cast<long long>(stats_.malformed), static_cast<long long>(stats_.lines), policy_.max_rate);
  const std::string where = line >= 0 ? std::string(file) + " line " + std::to_string(line) : std::string(file);
  return invalid_argument("data: " + where + ": " + buf + "; first malformed: " + stats_.first_malformed);
}

}  // namespace leanemb::data
