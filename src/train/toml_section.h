// Strict TOML config reading shared by the configs of `leanemb train` (ctr/ctr_config.h: CTR
// models; text/text_config.h: text models): a Section reads the keys of one TOML table and
// remembers which were used, so that unknown keys are errors; `--set section.key=value`
// overrides; the parsers of enum-valued keys both configs share.
//
// toml++ exceptions are caught inside these functions; none cross them.
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "leanemb/embedding.h"
#include "leanemb/memory_system.h"
#include "leanemb/status.h"
#include "nn/dense_optimizer.h"

namespace leanemb::train {

// Every key's effective value after parsing ("section.key" -> canonical text: 3, 0.5, true,
// "sum", [1, 2]), defaults included: what a checkpoint stores and a resume compares
// (train/config_diff.h).
using ConfigRecord = std::map<std::string, std::string>;

// Reads the keys of one section, remembering which were used so that unknown ones are errors.
// Types are strict: an integer key takes only a TOML integer (not a boolean, not 2.0), a number
// key an integer or a float, a boolean key only true or false, a string key only a string.
// With a `record`, every read also records the key's effective value (the default when absent).
class Section {
 public:
  Section(const toml::table* t, std::string name, const std::string& origin, ConfigRecord* record = nullptr)
      : t_(t), name_(std::move(name)), origin_(origin), record_(record) {}

  Status error(const std::string& key, const std::string& what) const {
    return invalid_argument(origin_ + ": " + name_ + "." + key + ": " + what);
  }
  const toml::node* get(const std::string& key) {
    used_.insert(key);
    return t_ ? t_->get(key) : nullptr;
  }
  // Records `value` as the effective value of `key` (when recording).
  void note(const std::string& key, std::string value) {
    if (record_) (*record_)[name_ + "." + key] = std::move(value);
  }
  Status read(const std::string& key, int64_t* v, int64_t lo, int64_t hi) {
    if (const toml::node* n = get(key)) {
      auto x = n->is_integer() ? n->value<int64_t>() : std::nullopt;
      if (!x || *x < lo || *x > hi)
        return error(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + shown(*n));
      *v = *x;
    }
    note(key, std::to_string(*v));
    return Status();
  }
  Status read(const std::string& key, int* v, int64_t lo, int64_t hi) {
    int64_t x = *v;
    LEANEMB_RETURN_IF_ERROR(read(key, &x, lo, hi));
    *v = static_cast<int>(x);
    return Status();
  }
  Status read(const std::string& key, uint64_t* v) {
    int64_t x = static_cast<int64_t>(*v);
    LEANEMB_RETURN_IF_ERROR(read(key, &x, 0, INT64_MAX));
    *v = static_cast<uint64_t>(x);
    return Status();
  }
  Status read(const std::string& key, double* v, double lo, double hi) {
    if (const toml::node* n = get(key)) {
      auto x = n->is_number() ? n->value<double>() : std::nullopt;  // integers convert
      if (!x || !(*x >= lo && *x <= hi))
        return error(key, "expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + shown(*n));
      *v = *x;
    }
    note(key, number_text(*v));
    return Status();
  }
  Status read(const std::string& key, float* v, double lo, double hi) {
    double x = *v;
    LEANEMB_RETURN_IF_ERROR(read(key, &x, lo, hi));
    *v = static_cast<float>(x);
    note(key, number_text(*v));
    return Status();
  }
  Status read(const std::string& key, bool* v) {
    if (const toml::node* n = get(key)) {
      if (!n->is_boolean()) return error(key, "expected true or false, got " + shown(*n));
      *v = *n->value<bool>();
    }
    note(key, *v ? "true" : "false");
    return Status();
  }
  Status read(const std::string& key, std::string* v) {
    if (const toml::node* n = get(key)) {
      if (!n->is_string()) return error(key, "expected a string, got " + shown(*n));
      *v = *n->value<std::string>();
    }
    note(key, quoted(*v));
    return Status();
  }
  // A string or an array of strings.
  Status read(const std::string& key, std::vector<std::string>* v) {
    if (const toml::node* n = get(key)) {
      v->clear();
      if (n->is_string()) {
        v->push_back(*n->value<std::string>());
      } else if (const toml::array* a = n->as_array()) {
        for (const auto& e : *a) {
          if (!e.is_string()) return error(key, "expected an array of strings, got an element " + shown(e));
          v->push_back(*e.value<std::string>());
        }
      } else {
        return error(key, "expected a string or an array of strings, got " + shown(*n));
      }
    }
    std::string r = "[";
    for (size_t i = 0; i < v->size(); ++i) r += (i ? ", " : "") + quoted((*v)[i]);
    note(key, r + "]");
    return Status();
  }
  // An integer or an array of integers, each in [lo, hi].
  Status read(const std::string& key, std::vector<int64_t>* v, int64_t lo, int64_t hi) {
    if (const toml::node* n = get(key)) {
      v->clear();
      if (n->is_integer()) {
        v->push_back(*n->value<int64_t>());
      } else if (const toml::array* a = n->as_array()) {
        for (const auto& e : *a) {
          if (!e.is_integer()) return error(key, "expected an array of integers, got an element " + shown(e));
          v->push_back(*e.value<int64_t>());
        }
      } else {
        return error(key, "expected an integer or an array of integers, got " + shown(*n));
      }
      for (int64_t x : *v)
        if (x < lo || x > hi) return error(key, "value " + std::to_string(x) + " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    std::string r = "[";
    for (size_t i = 0; i < v->size(); ++i) r += (i ? ", " : "") + std::to_string((*v)[i]);
    note(key, r + "]");
    return Status();
  }
  // An enum-valued string key; `name` (T -> string_view) gives the recorded name of the value
  // when the key is absent (without it the record says "(default)").
  template <typename T, typename Parse>
  Status read_enum(const std::string& key, T* v, Parse parse) {
    return read_enum(key, v, parse, [](T) { return std::string_view("(default)"); });
  }
  template <typename T, typename Parse, typename Name>
  Status read_enum(const std::string& key, T* v, Parse parse, Name name) {
    std::string s;
    LEANEMB_RETURN_IF_ERROR(read(key, &s));
    if (!s.empty()) {
      auto r = parse(s);
      if (!r.ok()) return error(key, r.status().message());
      *v = r.value();
    }
    note(key, quoted(std::string(name(*v))));
    return Status();
  }
  // A dtype key of `use` (leanemb/dtype.h): the spellings parse_dtype accepts, the use's subset.
  Status read_dtype(const std::string& key, DType* v, DTypeUse use) {
    return read_enum(key, v, [use](std::string_view s) { return parse_dtype(s, use); }, dtype_name);
  }
  Status read_bytes(const std::string& key, size_t* v) {
    if (const toml::node* n = get(key)) {
      if (n->is_integer()) {
        const int64_t x = *n->value<int64_t>();
        if (x < 0) return error(key, "expected a byte size >= 0");
        *v = static_cast<size_t>(x);
      } else if (n->is_string()) {
        auto b = parse_bytes(*n->value<std::string>());
        if (!b.ok()) return error(key, b.status().message());
        *v = b.value();
      } else {
        return error(key, "expected a byte size such as \"512MiB\" or an integer, got " + shown(*n));
      }
    }
    note(key, std::to_string(*v));
    return Status();
  }
  // Errors for keys that were never read.
  Status check_unknown() const {
    if (!t_) return Status();
    for (const auto& [k, node] : *t_) {
      const std::string key(k.str());
      if (!used_.count(key) && !node.is_table())
        return invalid_argument(origin_ + ": unknown key " + name_ + "." + key);
    }
    return Status();
  }

  // "true (a boolean)", "2.5 (a float)", "\"x\" (a string)": a value as the error messages show it.
  static std::string shown(const toml::node& n);
  static std::string quoted(const std::string& s);
  static std::string number_text(double v);

 private:
  const toml::table* t_;
  std::string name_;
  const std::string& origin_;
  ConfigRecord* record_;
  std::set<std::string> used_;
};

// Parses TOML text and applies `sets` ("section.key=value"; value is a TOML value or else a
// bare string). Errors: InvalidArgument "origin:line:col: ..." or naming the bad --set.
Result<toml::table> parse_toml_document(std::string_view toml_text, const std::string& origin,
                                        std::span<const std::string> sets);
// Reads a whole file. Errors: NotFound / IoError.
Result<std::string> read_text_file(const std::string& path, const char* what);
// The top-level `task` key of a config ("ctr" when absent): which trainer a config is for.
// Errors: as parse_toml_document; InvalidArgument when task is not a string.
Result<std::string> config_task(std::string_view toml_text, const std::string& origin,
                                std::span<const std::string> sets = {});

// The [embedding] keys both configs share: dtype, optimizer, learning_rate, eps, beta1, beta2,
// weight_decay, state_dtype, init, init_bound, init_std. *optimizer's kind and learning_rate
// hold the config's defaults on entry; eps defaults to the chosen optimizer's default_eps().
Status read_row_table_keys(Section& e, DType* dtype, OptimizerOptions* optimizer, InitOptions* init);

Result<nn::DenseOptimizerKind> parse_dense_optimizer(std::string_view s);  // sgd | adagrad | adam
std::string_view dense_optimizer_name(nn::DenseOptimizerKind k);
Result<InitKind> parse_init_kind(std::string_view s);                      // uniform | normal | zeros
std::string_view init_kind_name(InitKind k);

}  // namespace leanemb::train
