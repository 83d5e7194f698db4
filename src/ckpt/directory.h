// Directory-level helpers shared by the checkpoint writer and the finder: which Env to use and
// how to remove a checkpoint directory without ever leaving a half-deleted one that looks
// complete.
//
// Stateless functions; thread safety is that of the Env.
#pragma once

#include <string>

#include "ckpt/env.h"

namespace leanemb::ckpt {

// `env`, or posix_env() when it is null.
inline Env* env_or_default(Env* env) { return env != nullptr ? env : posix_env(); }

// Removes checkpoint directory `dir`: first its MANIFEST, then sync_dir(dir) so that the removal
// is durable, then everything else. A crash at any point leaves either the whole checkpoint or a
// directory without a manifest (never taken as complete; removed by the next commit).
// OK if `dir` does not exist. Errors: IoError.
Status remove_checkpoint_dir(Env* env, const std::string& dir);

}  // namespace leanemb::ckpt
