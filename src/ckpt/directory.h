// Directory-level helpers shared by the checkpoint writer and the finder: which Env to use and
// how to remove a checkpoint directory without ever leaving a half-deleted one that looks
// complete.
//
// Stateless functions; thread safety is that of the Env.
#pragma once

#include <string>

#include "leanemb/env.h"

namespace leanemb::ckpt {

// `env`, or posix_env() when it is null.
inline Env* env_or_default(Env* env) { return env != nullptr ? env : posix_env(); }

// Removes checkpoint directory `dir` (<root>/step-<N>): first renames it to step-<N>.deleting
// and syncs <root> so that the removal is durable, then removes everything in it. A crash at
// any point leaves either the whole checkpoint or a .deleting leftover (never taken as a
// checkpoint; removed by the next commit). So a step-<N> directory without a valid manifest is
// never a leftover of leanemb's own: it is kept (set_aside_checkpoint_dir), never deleted.
// OK if `dir` does not exist. Errors: IoError.
Status remove_checkpoint_dir(Env* env, const std::string& dir);

// Moves checkpoint directory `dir` into <out_dir>/corrupt/ (created when missing) under its own
// name, or name-2, name-3, ... when taken; both directory entries are made durable. Returns
// the new path. Errors: NotFound, IoError.
Result<std::string> set_aside_checkpoint_dir(Env* env, const std::string& out_dir, const std::string& dir);

// A name under `dir` that no entry has yet: base, base-2, base-3, ... (joined with dir).
std::string free_path(Env* env, const std::string& dir, const std::string& base);

}  // namespace leanemb::ckpt
