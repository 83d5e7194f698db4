// Listing checkpoints, finding the newest complete one, removing one safely.
#include "ckpt/directory.h"

#include <algorithm>
#include <cstdio>

#include "ckpt/format.h"
#include "leanemb/checkpoint.h"

namespace leanemb::ckpt {

std::string checkpoints_dir(const std::string& out_dir) { return join_path(out_dir, "checkpoints"); }

Status remove_checkpoint_dir(Env* env, const std::string& dir) {
  const std::string manifest = join_path(dir, kManifestName);
  if (env->file_exists(manifest)) {
    LEANEMB_RETURN_IF_ERROR(env->remove_file(manifest));
    LEANEMB_RETURN_IF_ERROR(env->sync_dir(dir));
  }
  return env->remove_all(dir);
}

Result<std::vector<CheckpointRef>> list_checkpoints(const std::string& out_dir, Env* env) {
  env = env_or_default(env);
  const std::string root = checkpoints_dir(out_dir);
  if (!env->file_exists(root)) return std::vector<CheckpointRef>{};
  LEANEMB_ASSIGN_OR_RETURN(std::vector<std::string> names, env->list_dir(root));
  std::vector<CheckpointRef> refs;
  for (const std::string& name : names) {
    if (auto step = parse_step_dir_name(name)) refs.push_back({*step, join_path(root, name)});
  }
  std::sort(refs.begin(), refs.end(), [](const CheckpointRef& a, const CheckpointRef& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return refs;
}

Result<LatestCheckpoint> find_latest_complete(const std::string& out_dir, const FindOptions& options) {
  Env* env = env_or_default(options.env);
  LEANEMB_ASSIGN_OR_RETURN(std::vector<CheckpointRef> refs, list_checkpoints(out_dir, env));
  LatestCheckpoint latest;
  for (auto it = refs.rbegin(); it != refs.rend(); ++it) {
    Status s;
    auto reader = CheckpointReader::open(it->path, env);
    if (!reader.ok()) {
      s = reader.status();
    } else if (options.verify_blocks) {
      s = (*reader)->verify().status();
    }
    if (s.ok()) {
      latest.ref = *it;
      return latest;
    }
    latest.skipped.push_back("'" + it->path + "': " + s.to_string());
    if (options.warn_to_stderr)
      std::fprintf(stderr, "leanemb: warning: skipping checkpoint %s\n", latest.skipped.back().c_str());
  }
  std::string msg = "no complete checkpoint under '" + checkpoints_dir(out_dir) + "'";
  for (const std::string& s : latest.skipped) msg += "; skipped " + s;
  return not_found(msg);
}

}  // namespace leanemb::ckpt
