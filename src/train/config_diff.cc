// Saved vs resumed configuration. See config_diff.h.
#include "train/config_diff.h"

#include <cstdio>

#include "leanemb/json.h"

namespace leanemb::train {

namespace {

constexpr char kFormat[] = "leanemb-config-1";

// Keys that may change on resume: whole sections (a trailing '.') or single keys.
constexpr const char* kMayChange[] = {
    "memory.", "dist.",
    "train.steps", "train.epochs", "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints",
    "train.incremental_checkpoints", "train.full_checkpoint_every", "train.max_delta_fraction", "train.link_store_rows", "train.disk_check",
    "train.log_every", "train.threads", "train.max_consecutive_skipped", "train.max_loss_growth", "train.inject_nonfinite_steps",
    "data.eval", "data.eval_rows", "data.train", "data.dir", "data.generate",
    "embedding.cache_fraction", "embedding.cache_policy", "embedding.cache_min_rows", "embedding.cache_prefetch_nice",
    "embedding.cache_prefetch",
    "embedding.store", "embedding.store_dir",
};

}  // namespace

bool may_change_on_resume(const std::string& key) {
  for (const char* k : kMayChange) {
    const std::string p(k);
    if (p.back() == '.' ? key.compare(0, p.size(), p) == 0 : key == p) return true;
  }
  return false;
}

ConfigDiff diff_configs(const ConfigRecord& saved, const ConfigRecord& now) {
  ConfigDiff d;
  auto s = saved.begin();
  auto n = now.begin();
  while (s != saved.end() || n != now.end()) {
    if (n == now.end() || (s != saved.end() && s->first < n->first)) {
      d.notes.push_back(s->first + ": " + s->second + " in the checkpoint, not a key of this version");
      ++s;
    } else if (s == saved.end() || n->first < s->first) {
      d.notes.push_back(n->first + ": not in the checkpoint's configuration, " + n->second + " now");
      ++n;
    } else {
      if (s->second != n->second)
        (may_change_on_resume(s->first) ? d.notes : d.errors).push_back(s->first + ": " + s->second + " in the checkpoint, " + n->second + " now");
      ++s;
      ++n;
    }
  }
  return d;
}

std::vector<uint8_t> encode_config_record(const ConfigRecord& record) {
  nlohmann::json keys = nlohmann::json::object();
  for (const auto& [k, v] : record) keys[k] = v;
  const std::string text = dump_json(nlohmann::json{{"format", kFormat}, {"keys", keys}});
  return {text.begin(), text.end()};
}

Result<ConfigRecord> decode_config_record(std::span<const uint8_t> bytes) {
  const auto j = parse_json_or_discarded(bytes.data(), bytes.size());
  if (j.is_discarded() || !j.is_object()) return data_loss("train/config is not a JSON object");
  if (!j.contains("format") || j["format"] != kFormat) return data_loss(std::string("train/config: format is not \"") + kFormat + "\"");
  if (!j.contains("keys") || !j["keys"].is_object()) return data_loss("train/config has no \"keys\" object");
  ConfigRecord r;
  for (const auto& [k, v] : j["keys"].items()) {
    if (!v.is_string()) return data_loss("train/config: key " + k + " is not a string");
    r[k] = v.get<std::string>();
  }
  return r;
}

Status check_resume_config(std::span<const uint8_t> saved_bytes, const ConfigRecord& now, const std::string& dir, bool print) {
  LEANEMB_ASSIGN_OR_RETURN(ConfigRecord saved, decode_config_record(saved_bytes));
  const ConfigDiff d = diff_configs(saved, now);
  if (print)
    for (const std::string& n : d.notes) std::fprintf(stderr, "leanemb: note: resuming with a changed %s\n", n.c_str());
  if (d.errors.empty()) return Status();
  std::string msg = "resuming from " + dir + ": the configuration differs from the checkpoint's in " + std::to_string(d.errors.size()) +
                    (d.errors.size() == 1 ? " key" : " keys") + " that change what is trained:";
  for (const std::string& e : d.errors) msg += "\n  " + e;
  return invalid_argument(msg + "\n(keep them as they were to resume, or start a new run with another --out or --overwrite)");
}

}  // namespace leanemb::train
