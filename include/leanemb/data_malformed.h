// Counting of malformed input lines and the reader's data statistics.
//
// Policy: a malformed line is skipped, counted by kind, and (the first `max_warnings` of them)
// reported as "FILE:LINE: reason" through the warning sink. Reading fails when the malformed
// fraction (malformed / lines) exceeds `max_rate`. With `total_input_bytes` (the DataReader sets
// it: the bytes of one pass over all its files) the verdict does not depend on where the bad
// lines sit or on file order: the rate of the whole first pass is judged when it ends, and a
// malformed line fails earlier only when the verdict is already certain (malformed lines exceed
// max_rate times every line the pass could still hold, at least one byte each). Without it (a
// single stream: convert), the rate so far is checked at every malformed line once `min_lines`
// lines were seen, and at the end of every file. Nothing is dropped silently: DataStats holds
// every count.
//
// Ownership: the tracker owns its stats; sources hold a pointer to the reader's tracker.
// Thread safety: one tracker per thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "leanemb/status.h"

namespace leanemb::data {

enum class MalformedKind : uint8_t {
  kFieldCount,      // not 1 + num_dense + num_sparse tab-separated fields
  kBadLabel,        // the label is empty or not a number
  kLabelNotBinary,  // the label is a number other than 0 or 1
  kBadDense,        // a dense value is not a finite number
  kBadHex,          // a categorical value is not 1..16 hex digits (also an empty item in a list)
  // Text lines (fastText's supervised format, text/text_data.h):
  kNoLabel,         // words but no __label__ token
  kEmptyLabel,      // a __label__ token with an empty name
  kNoWords,         // labels but no word
};
inline constexpr int kNumMalformedKinds = 8;
std::string_view malformed_kind_name(MalformedKind k);  // "field_count", "bad_label", ...

// Receives one warning line (no trailing newline). Null = print "leanemb: warning: ..." to stderr.
using WarningSink = std::function<void(const std::string&)>;

struct MalformedPolicy {
  double max_rate = 0.001;  // fail when malformed / lines exceeds this (1.0 = never fail)
  int64_t min_lines = 1000;  // lines seen before the rate is checked at a malformed line
  int max_warnings = 5;      // malformed lines reported through `warn`; all are counted
  int64_t total_input_bytes = 0;  // > 0: bytes of one pass over every input (see above)
  WarningSink warn;          // null = stderr
};

// Counts since the reader (or converter) was created; cumulative over files and epochs.
struct DataStats {
  int64_t lines = 0;                // TSV lines examined (good + malformed)
  int64_t records = 0;              // good records produced by the sources (TSV and binary)
  int64_t malformed = 0;            // malformed TSV lines skipped
  std::array<int64_t, kNumMalformedKinds> malformed_by_kind{};  // indexed by MalformedKind
  int64_t truncated_values = 0;     // categorical values dropped by max_len
  int64_t converted_malformed = 0;  // lines dropped when binary inputs were converted (their headers)
  int64_t bytes_read = 0;           // bytes read from files
  int64_t line_bytes = 0;           // bytes of the TSV lines examined, newlines included (not saved)
  std::string first_malformed;      // "FILE:LINE: reason" of the first malformed line, or empty
};

class MalformedTracker {
 public:
  explicit MalformedTracker(MalformedPolicy policy) : policy_(std::move(policy)) {}

  // Counts one malformed line, warns, checks the rate.
  // Errors: InvalidArgument "data: FILE line N: malformed-line rate R (M of L lines) exceeds
  // max_malformed_rate X; first malformed: ...".
  Status on_malformed(std::string_view file, int64_t line, MalformedKind kind, const std::string& detail);
  // Checks the rate at the end of a file (any line count; not with total_input_bytes).
  // Errors: as on_malformed.
  Status on_file_end(std::string_view file, int64_t line);
  // With total_input_bytes: the first pass over every file ended; checks its rate (once).
  // Errors: as on_malformed.
  Status on_pass_end(std::string_view last_file);

  DataStats& stats() { return stats_; }
  const DataStats& stats() const { return stats_; }
  // While replaying (restore_state), no warnings are printed and no rate is checked: the lines
  // passed both when first read.
  void set_replaying(bool replaying) { replaying_ = replaying; }

 private:
  Status check_rate(std::string_view file, int64_t line) const;
  MalformedPolicy policy_;
  DataStats stats_;
  int warned_ = 0;
  bool pass_judged_ = false;  // total_input_bytes: the first pass's rate was checked
  bool replaying_ = false;
};

}  // namespace leanemb::data
