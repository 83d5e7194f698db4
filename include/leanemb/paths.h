// Paths a command writes, checked against what it reads and what a run owns, before anything
// opens them for writing: outputs_never_alias_inputs and writers_own_their_dirs
// (docs/reliability.md). The CLI checks every output path with these (src/data/io.cc).
//
// Thread safety: plain functions (they stat and resolve paths).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb::data {

// A path a command was given and what named it in messages ("--output", "--data").
struct NamedPath {
  std::string name;
  std::string path;
};

// outputs_never_alias_inputs (docs/train.md "Exit codes"): InvalidArgument naming both paths when
// `output` is the same file as one of `inputs`: equal realpaths, or the same st_dev and st_ino
// (a symlink or a hard link to the input; a symlink at `output` is followed, as opening it for
// writing would). An output that does not exist yet is no input; an input that does not exist
// is left to its reader. Call before anything opens the output for writing (fopen "w"
// truncates the input the command is about to read).
Status check_output_not_input(const NamedPath& output, std::span<const NamedPath> inputs);

// InvalidArgument when `output` would land on or inside `owned` (a run's checkpoints/ directory,
// its metrics.jsonl or LOCK, a checkpoint directory a command reads): those files belong to the
// run, and an output written there would replace or corrupt one of them (a summary over a
// checkpoint's MANIFEST, predictions over its data file). Neither needs to exist: the parts of a
// path that exist are resolved (symlinks, ".."), the rest normalized (a fresh run's metrics.jsonl
// is protected before the run creates it).
Status check_output_outside(const NamedPath& output, std::span<const NamedPath> owned);

// What a run directory `run` owns for check_output_outside: run/checkpoints, run/corrupt,
// run/metrics.jsonl, run/LOCK, and `run` itself when it is a checkpoint directory (holds a
// MANIFEST). Names are `what` + " 'path'".
std::vector<NamedPath> run_owned_paths(const std::string& run, const std::string& what);

}  // namespace leanemb::data
