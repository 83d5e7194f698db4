// Listing checkpoints, finding the newest complete one, removing one safely.
#include "ckpt/directory.h"

#include <algorithm>
#include <cstdio>

#include "ckpt/format.h"
#include "leanemb/checkpoint.h"

namespace leanemb::ckpt {

std::string checkpoints_dir(const std::string& out_dir) { return join_path(out_dir, "checkpoints"); }

Status remove_checkpoint_dir(Env* env, const std::string& dir) {
  if (!env->file_exists(dir)) return Status();
  const std::string doomed = dir + kDeletingSuffix;
  LEANEMB_RETURN_IF_ERROR(env->remove_all(doomed));  // an earlier attempt's leftover
  LEANEMB_RETURN_IF_ERROR(env->rename(dir, doomed));
  LEANEMB_RETURN_IF_ERROR(env->sync_dir(parent_dir(dir)));
  return env->remove_all(doomed);
}

std::string free_path(Env* env, const std::string& dir, const std::string& base) {
  std::string name = base;
  for (int k = 2; env->file_exists(join_path(dir, name)); ++k) name = base + "-" + std::to_string(k);
  return join_path(dir, name);
}

Result<std::string> set_aside_checkpoint_dir(Env* env, const std::string& out_dir, const std::string& dir) {
  const std::string into = join_path(out_dir, "corrupt");
  if (!env->file_exists(into)) {
    LEANEMB_RETURN_IF_ERROR(env->create_dir(into));
    LEANEMB_RETURN_IF_ERROR(env->sync_dir(out_dir));
  }
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  name = name.substr(name.find_last_of('/') + 1);
  const std::string to = free_path(env, into, name);
  LEANEMB_RETURN_IF_ERROR(env->rename(dir, to));
  LEANEMB_RETURN_IF_ERROR(env->sync_dir(into));
  LEANEMB_RETURN_IF_ERROR(env->sync_dir(parent_dir(dir)));
  return to;
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

Result<std::vector<CheckpointRef>> checkpoint_chain(const std::string& dir, Env* env, bool verify_blocks) {
  env = env_or_default(env);
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const std::string root = parent_dir(d);
  std::vector<CheckpointRef> chain;
  std::optional<ParentRef> expect;  // the parent the previous (newer) link recorded
  std::string child;
  for (std::string path = d;;) {
    auto reader = CheckpointReader::open(path, env);
    if (!reader.ok()) {
      if (!expect) return reader.status();
      const Status& st = reader.status();
      return Status(st.code(), "checkpoint '" + child + "' extends step " + std::to_string(expect->step) + ": " + st.message());
    }
    const CheckpointReader& r = **reader;
    if (expect && r.id_hex() != expect->id_hex)
      return data_loss("checkpoint '" + child + "' extends step " + std::to_string(expect->step) + " with id " + expect->id_hex +
                       ", but '" + path + "' has id " + r.id_hex() + " (replaced by another checkpoint of that step)");
    if (verify_blocks) LEANEMB_RETURN_IF_ERROR(r.verify(/*hash_linked_files=*/false).status());
    chain.push_back({r.step(), path});
    if (!r.parent()) break;
    expect = r.parent();
    child = path;
    path = join_path(root, step_dir_name(expect->step));
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

Result<LatestCheckpoint> find_latest_complete(const std::string& out_dir, const FindOptions& options) {
  Env* env = env_or_default(options.env);
  LEANEMB_ASSIGN_OR_RETURN(std::vector<CheckpointRef> refs, list_checkpoints(out_dir, env));
  LatestCheckpoint latest;
  for (auto it = refs.rbegin(); it != refs.rend(); ++it) {
    const Status s = checkpoint_chain(it->path, env, options.verify_blocks).status();
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
