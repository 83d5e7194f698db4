// TSV parsing and chunked line reading. The parser walks each line once with memchr for the
// tab positions and never allocates on the success path (error details are built only for
// malformed lines).
#include "data/tsv.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>

namespace leanemb::data {

namespace {

// A field for an error message: quoted, cut to 40 characters.
std::string quoted(std::string_view s) {
  std::string q(1, '\'');
  q.append(s.substr(0, 40));
  if (s.size() > 40) q += "...";
  q += '\'';
  return q;
}

// Parses a finite number: an integer fast path, then from_chars for decimals and exponents.
bool parse_number(std::string_view s, double* out) {
  if (s.empty()) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i < s.size() && s.size() - i <= 18) {
    int64_t v = 0;
    size_t j = i;
    for (; j < s.size(); ++j) {
      const unsigned d = static_cast<unsigned>(s[j] - '0');
      if (d > 9) break;
      v = v * 10 + d;
    }
    if (j == s.size()) {
      *out = static_cast<double>(i ? -v : v);
      return true;
    }
  }
  double d = 0.0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(d)) return false;
  *out = d;
  return true;
}

// Value of a hex digit, or -1.
int hex_digit(char c) {
  static constexpr auto kTable = [] {
    std::array<int8_t, 256> t{};
    for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = -1;
    for (int i = 0; i < 10; ++i) t[static_cast<size_t>('0' + i)] = static_cast<int8_t>(i);
    for (int i = 0; i < 6; ++i) t[static_cast<size_t>('a' + i)] = t[static_cast<size_t>('A' + i)] = static_cast<int8_t>(10 + i);
    return t;
  }();
  return kTable[static_cast<unsigned char>(c)];
}

int64_t count_fields(std::string_view line) { return 1 + std::count(line.begin(), line.end(), '\t'); }

bool field_count_error(std::string_view line, int num_fields, ParseError* e) {
  e->kind = MalformedKind::kFieldCount;
  e->detail = "expected " + std::to_string(num_fields) + " tab-separated fields, got " + std::to_string(count_fields(line));
  return false;
}

// Reports a bad value, unless the line also has the wrong number of fields: then that is the
// problem reported (a short line's values are not where the schema expects them).
bool value_error(std::string_view line, int num_fields, MalformedKind kind, std::string detail, ParseError* e) {
  if (count_fields(line) != num_fields) return field_count_error(line, num_fields, e);
  e->kind = kind;
  e->detail = std::move(detail);
  return false;
}

// Splits a line at tabs, one field at a time.
class FieldCursor {
 public:
  explicit FieldCursor(std::string_view line) : p_(line.data()), end_(line.data() + line.size()) {}
  // The next field; false when the line has no more.
  bool next(std::string_view* f) {
    if (!more_) return false;
    const char* tab = static_cast<const char*>(std::memchr(p_, '\t', static_cast<size_t>(end_ - p_)));
    const char* stop = tab ? tab : end_;
    *f = std::string_view(p_, static_cast<size_t>(stop - p_));
    skip_to(stop);
    return true;
  }
  bool more() const { return more_; }
  const char* pos() const { return p_; }
  const char* end() const { return end_; }
  // Continues after a field that ends at `stop` (a tab or the end of the line).
  void skip_to(const char* stop) {
    more_ = stop < end_;
    p_ = more_ ? stop + 1 : end_;
  }

 private:
  const char* p_;
  const char* end_;
  bool more_ = true;  // another field starts at p_
};

// Parses the categorical field at `p` (up to a tab or `end`): ','-separated hex values, each
// hashed for `feature`; keeps the first max_len (0 = all). Returns the end of the field, or
// null with *bad set to the offending item.
const char* parse_bag(const char* p, const char* end, int feature, int64_t max_len, Record* out, uint32_t* kept,
                      int64_t* dropped, std::string_view* bad, bool strings) {
  if (p == end || *p == '\t') return p;  // an empty field is an empty bag
  while (strings) {  // any non-empty value between separators
    const char* item = p;
    while (p < end && *p != ',' && *p != '\t') ++p;
    if (p == item) {
      *bad = std::string_view();
      return nullptr;
    }
    if (max_len == 0 || *kept < max_len) {
      out->hashes.push_back(hash_categorical_string(std::string_view(item, static_cast<size_t>(p - item)), feature));
      ++*kept;
    } else {
      ++*dropped;
    }
    if (p == end || *p != ',') return p;
    ++p;
  }
  while (true) {
    const char* item = p;
    uint64_t value = 0;
    int d;
    while (p < end && (d = hex_digit(*p)) >= 0) {
      value = (value << 4) | static_cast<uint64_t>(d);
      ++p;
    }
    const size_t len = static_cast<size_t>(p - item);
    if (len == 0 || len > 16 || (p < end && *p != ',' && *p != '\t')) {
      const char* stop = item;
      while (stop < end && *stop != ',' && *stop != '\t') ++stop;
      *bad = std::string_view(item, static_cast<size_t>(stop - item));
      return nullptr;
    }
    if (max_len == 0 || *kept < max_len) {
      out->hashes.push_back(hash_categorical(value, feature));
      ++*kept;
    } else {
      ++*dropped;
    }
    if (p == end || *p != ',') return p;
    ++p;
  }
}

}  // namespace

bool parse_tsv_line(std::string_view line, const DataSchema& schema, Record* out, int64_t* truncated,
                    ParseError* error) {
  const int num_fields = schema.num_fields();
  FieldCursor fields(line);
  std::string_view f;
  if (!fields.next(&f)) return field_count_error(line, num_fields, error);
  // Label: "0" and "1" directly, other spellings of 0 and 1 through parse_number.
  double label = 0.0;
  if (f.size() == 1 && (f[0] == '0' || f[0] == '1')) label = f[0] - '0';
  else if (!parse_number(f, &label))
    return value_error(line, num_fields, MalformedKind::kBadLabel, "label " + quoted(f) + " is not a number", error);
  else if (label != 0.0 && label != 1.0)
    return value_error(line, num_fields, MalformedKind::kLabelNotBinary, "label " + quoted(f) + " is not 0 or 1", error);
  out->label = static_cast<float>(label);
  // Dense: empty = 0.
  out->dense.resize(static_cast<size_t>(schema.num_dense));
  for (int j = 0; j < schema.num_dense; ++j) {
    if (!fields.next(&f)) return field_count_error(line, num_fields, error);
    double v = 0.0;
    if (!f.empty() && !parse_number(f, &v))
      return value_error(line, num_fields, MalformedKind::kBadDense,
                         "dense field I" + std::to_string(j + 1) + " " + quoted(f) + " is not a finite number", error);
    out->dense[static_cast<size_t>(j)] = transform_dense(v);
  }
  // Categorical: one pass per field over digits and separators (no memchr, no split).
  out->counts.resize(static_cast<size_t>(schema.num_sparse));
  out->hashes.clear();
  int64_t dropped = 0;
  for (int c = 0; c < schema.num_sparse; ++c) {
    if (!fields.more()) return field_count_error(line, num_fields, error);
    uint32_t kept = 0;
    std::string_view bad;
    const char* stop = parse_bag(fields.pos(), fields.end(), c, schema.sparse[static_cast<size_t>(c)].max_len, out, &kept,
                                 &dropped, &bad, schema.string_values);
    if (stop == nullptr)
      return value_error(line, num_fields, MalformedKind::kBadHex,
                         "categorical field C" + std::to_string(c + 1) + " value " + quoted(bad) +
                             (schema.string_values ? " is empty (data.categorical = \"string\": an empty item in a list)"
                                                   : " is not 1-16 hex digits (any strings: data.categorical = \"string\")"),
                         error);
    out->counts[static_cast<size_t>(c)] = kept;
    fields.skip_to(stop);
  }
  if (fields.more()) return field_count_error(line, num_fields, error);
  *truncated += dropped;
  return true;
}

namespace {

char* append_int(int64_t v, char* p) {
  uint64_t u = static_cast<uint64_t>(v);
  if (v < 0) {
    *p++ = '-';
    u = ~u + 1;
  }
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u);
  while (n) *p++ = tmp[--n];
  return p;
}

char* append_hex(uint64_t v, char* p) {
  static constexpr char kDigits[] = "0123456789abcdef";
  // At least 8 digits, like Criteo's 32-bit values; more when the value needs them.
  int n = 8;
  while (n < 16 && (v >> (4 * n)) != 0) ++n;
  for (int i = n - 1; i >= 0; --i) *p++ = kDigits[(v >> (4 * i)) & 15];
  return p;
}

}  // namespace

void append_tsv_line(float label, std::span<const int64_t> raw_dense, std::span<const uint32_t> counts,
                     std::span<const uint64_t> values, std::string* out) {
  const size_t old = out->size();
  out->resize(old + 4 + raw_dense.size() * 22 + counts.size() + values.size() * 17);
  char* const begin = out->data() + old;
  char* p = begin;
  *p++ = label > 0.5f ? '1' : '0';
  for (int64_t x : raw_dense) {
    *p++ = '\t';
    if (x != INT64_MIN) p = append_int(x, p);
  }
  size_t k = 0;
  for (uint32_t n : counts) {
    *p++ = '\t';
    for (uint32_t i = 0; i < n; ++i, ++k) {
      if (i) *p++ = ',';
      p = append_hex(values[k], p);
    }
  }
  *p++ = '\n';
  out->resize(old + static_cast<size_t>(p - begin));
}

LineReader::LineReader(InputFile file, size_t chunk_bytes) : file_(std::move(file)), buf_(std::max<size_t>(chunk_bytes, 1)) {}

Result<bool> LineReader::next(std::string_view* line) {
  while (true) {
    const char* base = buf_.data();
    const void* nl = std::memchr(base + scanned_, '\n', end_ - scanned_);
    if (nl != nullptr) {
      const size_t stop = static_cast<size_t>(static_cast<const char*>(nl) - base);
      size_t len = stop - begin_;
      if (len > 0 && base[begin_ + len - 1] == '\r') --len;
      *line = std::string_view(base + begin_, len);
      begin_ = scanned_ = stop + 1;
      ++line_number_;
      return true;
    }
    scanned_ = end_;
    if (eof_) {
      if (begin_ == end_) return false;
      size_t len = end_ - begin_;
      if (base[begin_ + len - 1] == '\r') --len;
      *line = std::string_view(base + begin_, len);
      begin_ = scanned_ = end_;
      ++line_number_;
      return true;
    }
    // Keep the partial line, then read more behind it.
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      scanned_ = end_;
      begin_ = 0;
    }
    if (end_ == buf_.size()) {
      if (buf_.size() >= kMaxLineBytes)
        return invalid_argument("data: " + file_.path() + " line " + std::to_string(line_number_ + 1) +
                                " is longer than " + std::to_string(kMaxLineBytes >> 20) + " MiB (not a TSV file?)");
      buf_.resize(std::min(buf_.size() * 2, kMaxLineBytes));
    }
    LEANEMB_ASSIGN_OR_RETURN(size_t n, file_.read({reinterpret_cast<uint8_t*>(buf_.data()) + end_, buf_.size() - end_}));
    if (n == 0) eof_ = true;
    end_ += n;
    bytes_read_ += static_cast<int64_t>(n);
  }
}

}  // namespace leanemb::data
