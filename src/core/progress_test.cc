// The progress line's formatting (core/progress.h): counts, rates, ETA, the \r-rewritten line
// and its final newline.
#include "leanemb/progress.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace leanemb {
namespace {

TEST(ProgressTest, Counts) {
  EXPECT_EQ(format_count(0), "0");
  EXPECT_EQ(format_count(5), "5");
  EXPECT_EQ(format_count(5.5), "5.50");
  EXPECT_EQ(format_count(12.34), "12.3");
  EXPECT_EQ(format_count(812), "812");
  EXPECT_EQ(format_count(999.6), "1.00k");
  EXPECT_EQ(format_count(1000), "1.00k");
  EXPECT_EQ(format_count(12345), "12.3k");
  EXPECT_EQ(format_count(281000), "281k");
  EXPECT_EQ(format_count(999999), "1.00M");
  EXPECT_EQ(format_count(1234567), "1.23M");
  EXPECT_EQ(format_count(4.5e9), "4.50G");
  EXPECT_EQ(format_count(-1), "-");
  EXPECT_EQ(format_count(std::numeric_limits<double>::quiet_NaN()), "-");
  EXPECT_EQ(format_count(std::numeric_limits<double>::infinity()), "-");
}

TEST(ProgressTest, Rate) {
  EXPECT_EQ(format_rate(281034.5, "samples"), "281k samples/s");
  EXPECT_EQ(format_rate(0, "rows"), "0 rows/s");
  EXPECT_EQ(format_rate(-1, "rows"), "- rows/s");
}

TEST(ProgressTest, Eta) {
  EXPECT_DOUBLE_EQ(eta_seconds(25, 100, 10), 30);   // a quarter in 10 s: 30 s left
  EXPECT_DOUBLE_EQ(eta_seconds(100, 100, 10), 0);
  EXPECT_DOUBLE_EQ(eta_seconds(150, 100, 10), 0);
  EXPECT_LT(eta_seconds(0, 100, 10), 0);             // nothing done yet: unknown
  EXPECT_LT(eta_seconds(10, 0, 10), 0);              // total unknown
  EXPECT_LT(eta_seconds(10, 100, 0), 0);             // no time elapsed
}

TEST(ProgressTest, Duration) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(4.4), "0:04");
  EXPECT_EQ(format_duration(59.6), "1:00");
  EXPECT_EQ(format_duration(125), "2:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(360000), "99:59:59+");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::numeric_limits<double>::infinity()), "?");
}

TEST(ProgressTest, LineWithTotal) {
  EXPECT_EQ(format_progress({"gen-data train", "rows", 250000, 1000000, 2.0, ""}),
            "gen-data train 250k/1.00M rows (25%) | 125k rows/s | ETA 0:06");
  EXPECT_EQ(format_progress({"convert", "MB", 0, 40, 0.0, ""}), "convert 0/40 MB (0%) | - MB/s | ETA ?");
  EXPECT_EQ(format_progress({"convert", "MB", 40, 40, 8.0, "1.00M records"}),
            "convert 40/40 MB (100%) | 5 MB/s | done in 0:08 | 1.00M records");
  // 100 * x / x is not always 100 in floating point; the end still says 100%.
  EXPECT_EQ(format_progress({"predict", "MB", 5.123539, 5.123539, 1.0, ""}).substr(0, 31), "predict 5.12/5.12 MB (100%) | 5");
  // A percentage is floored: 99.9% is not shown as done.
  EXPECT_EQ(format_progress({"x", "rows", 999, 1000, 1.0, ""}), "x 999/1.00k rows (99%) | 999 rows/s | ETA 0:00");
}

TEST(ProgressTest, LineWithoutTotal) {
  EXPECT_EQ(format_progress({"predict", "lines", 12345, 0, 3.0, ""}), "predict 12.3k lines | 4.12k lines/s | 0:03 elapsed");
}

TEST(ProgressTest, TtyLine) {
  EXPECT_EQ(tty_line("step 5", false), "\rstep 5\033[K");
  EXPECT_EQ(tty_line("step 5", true), "\rstep 5\033[K\n");
}

// TtyProgress writes \r-rewritten lines, rate-limited, and exactly one final newline.
TEST(ProgressTest, TtyProgressRewritesOneLine) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ASSERT_NE(f, nullptr);
  {
    TtyProgress p(f, "convert", "MB", 10, /*min_interval_s=*/1000);
    p.update(1);                   // within the interval after the start: nothing
    p.update(2, {}, /*force=*/true);
    p.update(3);                   // within the interval: nothing
    p.finish(10, "done");
    p.finish(10);                  // once
    p.update(11, {}, true);        // after finish: nothing
  }
  std::fclose(f);
  const std::string out(buf, len);
  std::free(buf);
  EXPECT_EQ(out.find('\r'), 0u);
  int crs = 0, nls = 0;
  for (char c : out) {
    crs += c == '\r';
    nls += c == '\n';
  }
  EXPECT_EQ(crs, 2);
  EXPECT_EQ(nls, 1);
  EXPECT_EQ(out.back(), '\n');
  EXPECT_NE(out.find("convert 2/10 MB (20%)"), std::string::npos) << out;
  EXPECT_NE(out.find("convert 10/10 MB (100%)"), std::string::npos) << out;
  EXPECT_NE(out.find("| done\033[K\n"), std::string::npos) << out;
}

// Phases: a finished phase keeps its line (newline); the next phase starts a new one.
TEST(ProgressTest, PhasedProgressOneLinePerPhase) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ASSERT_NE(f, nullptr);
  {
    PhasedProgress p(f, "gen-data", "rows", /*min_interval_s=*/1000);
    p.update("train", 10, 100);   // rate-limited: nothing yet
    p.update("train", 100, 100);  // the split's end: its final line
    p.update("eval", 5, 10);
    p.finish();                   // the open eval line ends too
    p.finish();
  }
  std::fclose(f);
  const std::string out(buf, len);
  std::free(buf);
  EXPECT_EQ(out.rfind("\rgen-data train 100/100 rows (100%)", 0), 0u) << out;  // the first line written
  int nls = 0;
  for (char c : out) nls += c == '\n';
  EXPECT_EQ(nls, 2);
  EXPECT_NE(out.find("\rgen-data train 100/100 rows (100%)"), std::string::npos) << out;
  EXPECT_NE(out.find("\rgen-data eval 5/10 rows (50%)"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');
}

}  // namespace
}  // namespace leanemb
