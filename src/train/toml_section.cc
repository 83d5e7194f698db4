// TOML config helpers shared by the train and text configs (toml++ exceptions stop here).
#include "train/toml_section.h"

#include "core/enum_names.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace leanemb {
template <>
struct EnumNames<nn::DenseOptimizerKind> {
  static constexpr std::string_view kWhat = "dense optimizer";
  static constexpr EnumName<nn::DenseOptimizerKind> kNames[] = {{nn::DenseOptimizerKind::kSgd, "sgd", ""},
                                                                {nn::DenseOptimizerKind::kAdagrad, "adagrad", ""},
                                                                {nn::DenseOptimizerKind::kAdam, "adam", ""}};
};
template <>
struct EnumNames<InitKind> {
  static constexpr std::string_view kWhat = "init";
  static constexpr EnumName<InitKind> kNames[] = {
      {InitKind::kUniform, "uniform", ""}, {InitKind::kNormal, "normal", ""}, {InitKind::kZeros, "zeros", ""}};
};
}  // namespace leanemb

namespace leanemb::train {

namespace {

// toml++ 3.3.0 (Debian 12) asserts -- undefined behaviour in a release build -- on a table
// header whose first character after "[" or "[[" is not a key character ("[#", "[=", "[" at the
// end of a line; found by fuzz/fuzz_toml, kept in fuzz/regressions/toml/). Such a header is
// refused before toml++ sees the text. A small lexer finds the headers: a "[" first on a line
// outside strings, comments, arrays and inline tables. The same scan refuses the non-ASCII code
// points on which toml++'s whitespace test reaches __builtin_unreachable() (also found by
// fuzz_toml): any outside a string or comment (never valid TOML: keys and whitespace are ASCII),
// and the first one after a multi-line string's line-ending backslash (valid TOML, refused with
// the reason).
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

Status check_before_tomlpp(std::string_view t, const std::string& origin) {
  std::string open;  // the open [ and { of values, innermost last
  int64_t line_no = 1;
  bool line_start = true;
  bool header = false;  // inside a table header line: its brackets are not values
  auto starts = [&](size_t i, const char* q) { return t.compare(i, 3, q) == 0; };
  auto blank = [&](size_t i) { return t[i] == ' ' || t[i] == '\t' || t[i] == '\r' || t[i] == '\n'; };
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '\n') {
      ++line_no;
      line_start = true;
      header = false;
      continue;
    }
    // TOML's keys and whitespace are ASCII; toml++ 3.3.0 reaches __builtin_unreachable() on some
    // non-ASCII code points where whitespace may stand (found by fuzz_toml), so they stop here.
    if (static_cast<unsigned char>(c) >= 0x80) {
      return invalid_argument(origin + ":" + std::to_string(line_no) +
                              ": a non-ASCII character outside a string or comment (TOML keys are ASCII; quote them)");
    }
    if (c == ' ' || c == '\t' || c == '\r') continue;
    if (c == '#') {  // a comment, to the end of the line
      while (i + 1 < t.size() && t[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {  // a string: skip it (multi-line ones count their lines)
      const bool multi = i + 2 < t.size() && starts(i, c == '"' ? "\"\"\"" : "\'\'\'");
      size_t j = i + (multi ? 3 : 1);
      for (; j < t.size(); ++j) {
        if (c == '"' && t[j] == '\\') {
          size_t k = j + 1;
          if (multi && k < t.size() && blank(k)) {
            for (; k < t.size() && blank(k); ++k) line_no += t[k] == '\n';
            if (k < t.size() && static_cast<unsigned char>(t[k]) >= 0x80) {
              return invalid_argument(origin + ":" + std::to_string(line_no) +
                                      ": a non-ASCII character right after a line-ending backslash in a multi-line "
                                      "string (toml++ 3.3.0 cannot parse it; start the line with an ASCII character)");
            }
            j = k - 1;
            continue;
          }
          ++j;
          continue;
        }
        if (t[j] == '\n') {
          if (!multi) break;  // an unterminated string: toml++ reports it
          ++line_no;
        }
        if (t[j] == c && (!multi || (j + 2 < t.size() && starts(j, c == '"' ? "\"\"\"" : "\'\'\'")))) break;
      }
      i = multi ? std::min(t.size(), j + 2) : j;
      line_start = false;
      continue;
    }
    if (c == '[' && line_start && open.empty()) {  // a table header
      size_t k = i + 1;
      if (k < t.size() && t[k] == '[') ++k;
      while (k < t.size() && (t[k] == ' ' || t[k] == '\t')) ++k;
      const char h = k < t.size() ? t[k] : '\n';
      if (!(std::isalnum(static_cast<unsigned char>(h)) || h == '_' || h == '-' || h == '"' || h == '\'' || h == ']')) {
        // Built by appends: GCC 12 -O3 reports a false -Wrestrict on "'" + std::string(1, h) + "'".
        std::string got = "the end of the line";
        if (h != '\n' && h != '\r') {
          got.assign(1, '\'');
          got.push_back(h);
          got.push_back('\'');
        }
        return invalid_argument(origin + ":" + std::to_string(line_no) + ": a table header must start with a key, got " +
                                got);
      }
      i = k - 1;  // the rest of the header line is scanned like any other (strings, comments)
      header = true;
      line_start = false;
      continue;
    }
    if (!header && (c == '[' || c == '{')) open.push_back(c);
    if (!header && (c == ']' || c == '}') && !open.empty()) {
      // A closing bracket of the other kind is invalid TOML; toml++ 3.3.0 fails an assertion
      // (undefined behaviour without assertions) on a '}' where an array's value may stand
      // (found by fuzz_toml), so both mismatches stop here.
      const char want = open.back() == '[' ? ']' : '}';
      if (c != want) {
        return invalid_argument(origin + ":" + std::to_string(line_no) + ": '" + std::string(1, c) +
                                "' closes the '" + std::string(1, open.back()) + "' of " +
                                (open.back() == '[' ? "an array" : "an inline table") + " (expected '" +
                                std::string(1, want) + "')");
      }
      open.pop_back();
    }
    line_start = false;
  }
  return Status();
}

// Applies "section.key=value" to the parsed document.
Status apply_set(toml::table& doc, const std::string& set, const std::string& origin) {
  const size_t eq = set.find('=');
  const size_t dot = set.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    return invalid_argument("--set '" + set + "': expected section.key=value");
  const std::string path = set.substr(0, eq), value = set.substr(eq + 1);
  toml::table parsed;
  if (Status s = check_before_tomlpp("v = " + value, "--set '" + set + "'"); !s.ok()) return s;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{};
    parsed.insert("v", value);  // not a TOML value: a bare string
  }
  // Walk / create the sections of the dotted path.
  toml::table* t = &doc;
  size_t pos = 0;
  while (true) {
    const size_t next = path.find('.', pos);
    const std::string part = path.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    if (part.empty()) return invalid_argument("--set '" + set + "': empty key");
    if (next == std::string::npos) {
      t->insert_or_assign(part, *parsed.get("v"));
      return Status();
    }
    toml::node* n = t->get(part);
    if (!n) {
      t->insert(part, toml::table{});
      n = t->get(part);
    }
    if (!n->is_table()) return invalid_argument(origin + ": --set '" + set + "': " + part + " is not a section");
    t = n->as_table();
    pos = next + 1;
  }
}

}  // namespace

std::string Section::shown(const toml::node& n) {
  std::ostringstream os;
  if (n.is_boolean()) os << (*n.value<bool>() ? "true" : "false") << " (a boolean)";
  else if (n.is_integer()) os << *n.value<int64_t>() << " (an integer)";
  else if (n.is_floating_point()) os << *n.value<double>() << " (a float)";
  else if (n.is_string()) os << quoted(*n.value<std::string>()) << " (a string)";
  else if (n.is_array()) os << "an array";
  else if (n.is_table()) os << "a table";
  else os << "a date or time";
  return os.str();
}

std::string Section::quoted(const std::string& s) {
  std::string r = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') r += '\\';
    r += ch;
  }
  return r + "\"";
}

std::string Section::number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

Result<nn::DenseOptimizerKind> parse_dense_optimizer(std::string_view s) { return parse_enum<nn::DenseOptimizerKind>(s); }
std::string_view dense_optimizer_name(nn::DenseOptimizerKind k) { return enum_name(k); }
Result<InitKind> parse_init_kind(std::string_view s) { return parse_enum<InitKind>(s); }
std::string_view init_kind_name(InitKind k) { return enum_name(k); }

Status read_row_table_keys(Section& e, DType* dtype, OptimizerOptions* o, InitOptions* init) {
  LEANEMB_RETURN_IF_ERROR(e.read_dtype("dtype", dtype, DTypeUse::kRows));
  LEANEMB_RETURN_IF_ERROR(e.read_enum("optimizer", &o->kind, parse_optimizer, optimizer_name));
  o->eps = default_eps(o->kind);
  LEANEMB_RETURN_IF_ERROR(e.read("learning_rate", &o->learning_rate, 0.0, 1e6));
  LEANEMB_RETURN_IF_ERROR(e.read("eps", &o->eps, 0.0, 1.0));
  LEANEMB_RETURN_IF_ERROR(e.read("beta1", &o->beta1, 0.0, 0.999999));
  LEANEMB_RETURN_IF_ERROR(e.read("beta2", &o->beta2, 0.0, 0.999999));
  LEANEMB_RETURN_IF_ERROR(e.read("weight_decay", &o->weight_decay, 0.0, 1e6));
  LEANEMB_RETURN_IF_ERROR(e.read_dtype("state_dtype", &o->state_dtype, DTypeUse::kOptimizerState));
  LEANEMB_RETURN_IF_ERROR(e.read_enum("init", &init->kind, parse_init_kind, init_kind_name));
  LEANEMB_RETURN_IF_ERROR(e.read("init_bound", &init->bound, 0.0, 1e3));
  return e.read("init_std", &init->std, 0.0, 1e3);
}

Result<toml::table> parse_toml_document(std::string_view toml_text, const std::string& origin,
                                        std::span<const std::string> sets) {
  toml::table doc;
  // A leading UTF-8 byte order mark is dropped before both the scan and toml++ (which hits
  // undefined behaviour on some inputs that start with one: fuzz/regressions/toml/).
  const std::string_view body = toml_text.starts_with(kUtf8Bom) ? toml_text.substr(kUtf8Bom.size()) : toml_text;
  LEANEMB_RETURN_IF_ERROR(check_before_tomlpp(body, origin));
  try {
    doc = toml::parse(body, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    return invalid_argument(os.str());
  }
  for (const std::string& s : sets) LEANEMB_RETURN_IF_ERROR(apply_set(doc, s, origin));
  return doc;
}

Result<std::string> read_text_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return not_found(std::string("cannot open ") + what + " '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(std::string("cannot read ") + what + " '" + path + "'");
  return ss.str();
}

Result<std::string> config_task(std::string_view toml_text, const std::string& origin, std::span<const std::string> sets) {
  LEANEMB_ASSIGN_OR_RETURN(toml::table doc, parse_toml_document(toml_text, origin, sets));
  const toml::node* n = doc.get("task");
  if (!n) return std::string("ctr");
  auto s = n->value<std::string>();
  if (!s) return invalid_argument(origin + ": task: expected a string (\"ctr\" or \"text\")");
  return *s;
}

}  // namespace leanemb::train
