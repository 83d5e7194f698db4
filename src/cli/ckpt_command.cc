// `leanemb ckpt verify DIR | digest [--training] DIR | list OUT_DIR`: checks a checkpoint's
// every checksum, prints its layout-independent content digest (or, with --training, the
// training digest, equal for a plain and a sharded checkpoint of the same training state), or
// lists the checkpoints of a run (docs/formats/checkpoint.md).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "leanemb/table_checkpoint.h"
#include "leanemb/training_digest.h"
#include "leanemb/checkpoint.h"
#include "leanemb/commands.h"

namespace leanemb::cli {

// "; incremental: N links over the full checkpoint of step B, all verified" for a chain
// (docs/formats/checkpoint.md, "Chains"); "" for a full checkpoint. Then "; K linked store files
// (B bytes), hashes checked" when tables are kept by links ("Linked rows").
std::string chain_note(const ckpt::VerifyReport& r) {
  const std::string base = r.sparse_base ? "sparse base" : "full checkpoint";
  const std::string linked = r.num_linked_files == 0 ? "" :
      "; " + std::to_string(r.num_linked_files) + " linked store files (" + std::to_string(r.linked_bytes) + " bytes), hashes checked";
  if (r.num_links <= 1) return (r.sparse_base ? "; a sparse base (the rows changed since the initial rows)" : "") + linked;
  return "; incremental: " + std::to_string(r.num_links) + " links over the " + base + " of step " + std::to_string(r.base_step) +
         ", all verified" + linked;
}

// "ok: ..." of a verified checkpoint (plain or sharded: every shard).
std::string verified_line(const ckpt::VerifyReport& r) {
  char buf[320];
  std::snprintf(buf, sizeof buf, "ok: %zu entries, %llu bytes (step %lld, %zu data files%s, %llu blocks checked; format %u, id %s)",
                r.num_entries, static_cast<unsigned long long>(r.entry_bytes), static_cast<long long>(r.step), r.num_files,
                r.num_shards ? (" in " + std::to_string(r.num_shards) + " shards").c_str() : "",
                static_cast<unsigned long long>(r.num_blocks), r.format_version, r.checkpoint_id.c_str());
  return buf + chain_note(r);
}

// Checks what `--resume`, `test` and `predict` would read: the manifest, every block, and of a
// sharded checkpoint every shard (a global manifest alone verifying is not enough).
int run_ckpt_verify(const std::string& dir) {
  auto rep = dist::verify_tables_checkpoint(dir);
  if (!rep.ok()) return report_error(rep.status());
  std::printf("%s\n", verified_line(*rep).c_str());
  return 0;
}

int run_ckpt_digest(const std::string& dir, bool training) {
  auto d = training ? dist::training_digest(dir) : ckpt::digest(dir);
  if (!d.ok()) return report_error(d.status());
  std::printf("%s\n", d->c_str());
  return 0;
}

// One line per step directory: "ok" only when `ckpt verify` would say ok (manifest, every
// block, every shard), else "incomplete" (no manifest) or "bad" with the reason. The newest ok
// one is what `--resume` and `test --run` take.
int run_ckpt_list(const std::string& out_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(out_dir, ec))
    return report_error(not_found("ckpt list: no such directory '" + out_dir + "'"));
  auto refs = ckpt::list_checkpoints(out_dir);
  if (!refs.ok()) return report_error(refs.status());
  if (refs->empty()) std::printf("no checkpoints under %s\n", ckpt::checkpoints_dir(out_dir).c_str());
  for (const ckpt::CheckpointRef& ref : *refs) {
    auto r = dist::verify_tables_checkpoint(ref.path);
    if (!r.ok()) {
      const char* what = r.status().code() == StatusCode::kNotFound ? "incomplete" : "bad";
      std::printf("%s  %s: %s\n", ref.path.c_str(), what, r.status().to_string().c_str());
      continue;
    }
    std::printf("%s  step %lld, %zu entries, %llu bytes; verified: %zu data files%s, %llu blocks; format %u, id %s%s\n",
                ref.path.c_str(), static_cast<long long>(r->step), r->num_entries, static_cast<unsigned long long>(r->entry_bytes),
                r->num_files, r->num_shards ? (" in " + std::to_string(r->num_shards) + " shards").c_str() : "",
                static_cast<unsigned long long>(r->num_blocks), r->format_version, r->checkpoint_id.c_str(), chain_note(*r).c_str());
  }
  return 0;
}


}  // namespace leanemb::cli
