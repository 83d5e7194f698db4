// prune_shards (sharded_checkpoint_internal.h): after rank 0 commits a global checkpoint (and its
// writer removed the global checkpoints keep_last drops), the shard checkpoints that no global
// checkpoint left under out_dir needs are removed. A global checkpoint needs each shard its
// layout names and every link of that shard's chain (its parents back to the full shard), so a
// kept checkpoint never loses a base or a parent. Layout: sharded_checkpoint.h.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dist/sharded_checkpoint_internal.h"

namespace leanemb::dist::sharded_ckpt_internal {

namespace {

// Shard out_dirs relative to out_dir ("shards/rank-<r>-of-<P>", or "shards/step-<N>/rank-...")
// -> the steps of their shard checkpoints that some global checkpoint needs.
using Needed = std::map<std::string, std::set<int64_t>>;

struct Scan {
  Needed needed;
  std::set<int64_t> unknown;  // global checkpoints whose layout could not be read: their own step is kept everywhere
};

Scan scan_globals(const std::string& out_dir, ckpt::Env* env, const std::vector<ckpt::CheckpointRef>& refs) {
  Scan scan;
  for (const ckpt::CheckpointRef& ref : refs) {
    auto g = open_global(ref.path, env);
    if (!g.ok()) {
      scan.unknown.insert(ref.step);
      continue;
    }
    for (const ShardRecord& rec : g->layout.shards) {
      std::set<int64_t>& steps = scan.needed[rec.rel_dir];
      steps.insert(g->layout.step);
      // A chain that does not resolve makes the global incomplete (nothing to keep for it), but
      // the parents that do exist are kept: each parent's record is followed as far as it goes.
      const std::string ckpts = ckpt::checkpoints_dir(ckpt::join_path(out_dir, rec.rel_dir));
      for (int64_t at = g->layout.step;;) {
        auto r = ckpt::CheckpointReader::open(ckpt::join_path(ckpts, ckpt::step_dir_name(at)), env);
        if (!r.ok() || !(*r)->parent().has_value() || (*r)->parent()->step >= at) break;
        at = (*r)->parent()->step;
        steps.insert(at);
      }
    }
  }
  return scan;
}

class Pruner {
 public:
  Pruner(ckpt::Env* env, std::vector<std::string>* removed, std::vector<std::string>* warnings)
      : env_(env), removed_(removed), warnings_(warnings) {}
  bool remove(const std::string& path) {
    if (Status st = env_->remove_all(path); !st.ok()) {
      warnings_->push_back(st.to_string());
      return false;
    }
    removed_->push_back(path);
    return true;
  }
  void sync(const std::string& dir) {
    if (Status st = env_->sync_dir(dir); !st.ok()) warnings_->push_back(st.to_string());
  }
  // A shard out_dir `rel` (under out_dir): its step-<M> checkpoints no one needs (all of it when
  // no step of it is needed and no unreadable global could need it).
  void prune_shard_dir(const std::string& out_dir, const std::string& rel, const Scan& scan) {
    const std::string path = ckpt::join_path(out_dir, rel);
    const auto it = scan.needed.find(rel);
    if (it == scan.needed.end() && scan.unknown.empty()) {
      remove(path);
      return;
    }
    const std::string ckpts = ckpt::checkpoints_dir(path);
    auto names = env_->list_dir(ckpts);
    if (!names.ok()) return;  // no checkpoints/ (nothing committed there)
    bool any = false;
    for (const std::string& name : *names) {
      const auto s = ckpt::parse_step_dir_name(name);
      if (!s || scan.unknown.count(*s) != 0 || (it != scan.needed.end() && it->second.count(*s) != 0)) continue;
      any = remove(ckpt::join_path(ckpts, name)) || any;
    }
    if (any) sync(ckpts);
  }

 private:
  ckpt::Env* env_;
  std::vector<std::string>* removed_;
  std::vector<std::string>* warnings_;
};

}  // namespace

void prune_shards(const std::string& out_dir, ckpt::Env* env, std::vector<std::string>* removed, std::vector<std::string>* warnings) {
  env = env_or_posix(env);
  auto refs = ckpt::list_checkpoints(out_dir, env);
  if (!refs.ok()) return warnings->push_back(refs.status().to_string());
  const Scan scan = scan_globals(out_dir, env, *refs);
  const std::string root = ckpt::join_path(out_dir, "shards");
  auto names = env->list_dir(root);
  if (!names.ok()) return warnings->push_back(names.status().to_string());
  Pruner pruner(env, removed, warnings);
  const size_t before = removed->size();
  for (const std::string& name : *names) {
    if (name.rfind("rank-", 0) == 0) {  // a rank's shard chains
      pruner.prune_shard_dir(out_dir, "shards/" + name, scan);
      continue;
    }
    const auto step = ckpt::parse_step_dir_name(name);  // shards/step-<N>/: one step's shards (before chains)
    if (!step || scan.unknown.count(*step) != 0) continue;
    const std::string dir = ckpt::join_path(root, name);
    auto ranks = env->list_dir(dir);
    if (!ranks.ok()) continue;
    size_t kept = 0;
    bool any = false;
    for (const std::string& rank : *ranks) {
      if (scan.needed.count("shards/" + name + "/" + rank) != 0) {
        ++kept;
      } else {
        any = pruner.remove(ckpt::join_path(dir, rank)) || any;
      }
    }
    if (kept == 0) {
      pruner.remove(dir);
    } else if (any) {
      pruner.sync(dir);
    }
  }
  if (removed->size() != before) pruner.sync(root);
}

}  // namespace leanemb::dist::sharded_ckpt_internal
