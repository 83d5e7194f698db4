// `leanemb ckpt verify DIR | digest [--training] DIR | list OUT_DIR`: checks a checkpoint's
// every checksum, prints its layout-independent content digest (or, with --training, the
// training digest, equal for a plain and a sharded checkpoint of the same training state), or
// lists the checkpoints of a run (docs/formats/checkpoint.md).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "dist/training_digest.h"
#include "leanemb/checkpoint.h"
#include "tools/commands.h"

namespace leanemb::tools {

int run_ckpt_verify(const std::string& dir) {
  auto rep = ckpt::verify(dir);
  if (!rep.ok()) return report_error(rep.status());
  std::printf("ok: %zu entries, %llu bytes (step %lld, %zu data files, %llu blocks checked)\n", rep->num_entries,
              static_cast<unsigned long long>(rep->entry_bytes), static_cast<long long>(rep->step), rep->num_files,
              static_cast<unsigned long long>(rep->num_blocks));
  return 0;
}

int run_ckpt_digest(const std::string& dir, bool training) {
  auto d = training ? dist::training_digest(dir) : ckpt::digest(dir);
  if (!d.ok()) return report_error(d.status());
  std::printf("%s\n", d->c_str());
  return 0;
}

// One line per step directory: complete (manifest and file sizes check out) or why not.
int run_ckpt_list(const std::string& out_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(out_dir, ec))
    return report_error(not_found("ckpt list: no such directory '" + out_dir + "'"));
  auto refs = ckpt::list_checkpoints(out_dir);
  if (!refs.ok()) return report_error(refs.status());
  if (refs->empty()) std::printf("no checkpoints under %s\n", ckpt::checkpoints_dir(out_dir).c_str());
  for (const ckpt::CheckpointRef& ref : *refs) {
    auto r = ckpt::CheckpointReader::open(ref.path);
    if (!r.ok()) {
      std::printf("%s  incomplete: %s\n", ref.path.c_str(), r.status().to_string().c_str());
      continue;
    }
    uint64_t bytes = 0;
    for (const ckpt::EntryInfo& e : (*r)->entries()) bytes += e.size_bytes;
    std::printf("%s  step %lld, %zu entries, %llu bytes\n", ref.path.c_str(), static_cast<long long>((*r)->step()),
                (*r)->entries().size(), static_cast<unsigned long long>(bytes));
  }
  return 0;
}


}  // namespace leanemb::tools
