// Strict TOML config reading shared by the configs of `leanemb train` (train/config.h: CTR
// models; text/text_config.h: text models): a Section reads the keys of one TOML table and
// remembers which were used, so that unknown keys are errors; `--set section.key=value`
// overrides; the parsers of enum-valued keys both configs share.
//
// toml++ exceptions are caught inside these functions; none cross them.
// Thread safety: plain values.
#pragma once

#include <cstdint>
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

// Reads the keys of one section, remembering which were used so that unknown ones are errors.
class Section {
 public:
  Section(const toml::table* t, std::string name, const std::string& origin)
      : t_(t), name_(std::move(name)), origin_(origin) {}

  Status error(const std::string& key, const std::string& what) const {
    return invalid_argument(origin_ + ": " + name_ + "." + key + ": " + what);
  }
  const toml::node* get(const std::string& key) {
    used_.insert(key);
    return t_ ? t_->get(key) : nullptr;
  }
  Status read(const std::string& key, int64_t* v, int64_t lo, int64_t hi) {
    const toml::node* n = get(key);
    if (!n) return Status();
    auto x = n->value<int64_t>();
    if (!x || *x < lo || *x > hi)
      return error(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    *v = *x;
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
    const toml::node* n = get(key);
    if (!n) return Status();
    auto x = n->value<double>();  // integers convert
    if (!x || !(*x >= lo && *x <= hi))
      return error(key, "expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    *v = *x;
    return Status();
  }
  Status read(const std::string& key, float* v, double lo, double hi) {
    double x = *v;
    LEANEMB_RETURN_IF_ERROR(read(key, &x, lo, hi));
    *v = static_cast<float>(x);
    return Status();
  }
  Status read(const std::string& key, bool* v) {
    const toml::node* n = get(key);
    if (!n) return Status();
    auto x = n->value<bool>();
    if (!x) return error(key, "expected true or false");
    *v = *x;
    return Status();
  }
  Status read(const std::string& key, std::string* v) {
    const toml::node* n = get(key);
    if (!n) return Status();
    auto x = n->value<std::string>();
    if (!x) return error(key, "expected a string");
    *v = *x;
    return Status();
  }
  // A string or an array of strings.
  Status read(const std::string& key, std::vector<std::string>* v) {
    const toml::node* n = get(key);
    if (!n) return Status();
    v->clear();
    if (auto s = n->value<std::string>()) {
      v->push_back(*s);
      return Status();
    }
    const toml::array* a = n->as_array();
    if (!a) return error(key, "expected a string or an array of strings");
    for (const auto& e : *a) {
      auto s = e.value<std::string>();
      if (!s) return error(key, "expected an array of strings");
      v->push_back(*s);
    }
    return Status();
  }
  // An integer or an array of integers, each in [lo, hi].
  Status read(const std::string& key, std::vector<int64_t>* v, int64_t lo, int64_t hi) {
    const toml::node* n = get(key);
    if (!n) return Status();
    v->clear();
    if (auto x = n->value<int64_t>()) {
      v->push_back(*x);
    } else if (const toml::array* a = n->as_array()) {
      for (const auto& e : *a) {
        auto y = e.value<int64_t>();
        if (!y) return error(key, "expected an array of integers");
        v->push_back(*y);
      }
    } else {
      return error(key, "expected an integer or an array of integers");
    }
    for (int64_t x : *v)
      if (x < lo || x > hi) return error(key, "value " + std::to_string(x) + " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return Status();
  }
  template <typename T, typename Parse>
  Status read_enum(const std::string& key, T* v, Parse parse) {
    std::string s;
    LEANEMB_RETURN_IF_ERROR(read(key, &s));
    if (s.empty()) return Status();
    auto r = parse(s);
    if (!r.ok()) return error(key, r.status().message());
    *v = r.value();
    return Status();
  }
  Status read_bytes(const std::string& key, size_t* v) {
    const toml::node* n = get(key);
    if (!n) return Status();
    if (auto x = n->value<int64_t>()) {
      if (*x < 0) return error(key, "expected a byte size >= 0");
      *v = static_cast<size_t>(*x);
      return Status();
    }
    auto s = n->value<std::string>();
    if (!s) return error(key, "expected a byte size such as \"512MiB\"");
    auto b = parse_bytes(*s);
    if (!b.ok()) return error(key, b.status().message());
    *v = b.value();
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

 private:
  const toml::table* t_;
  std::string name_;
  const std::string& origin_;
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
Result<InitKind> parse_init_kind(std::string_view s);                      // uniform | normal | zeros

}  // namespace leanemb::train
