// libFuzzer harness: the checkpoint reader (leanemb/checkpoint.h, docs/formats/checkpoint.md):
// manifest decoding, data file geometry, blob and row reads, verify and digest, over an
// in-memory file system. Input: u32 little-endian manifest length, the MANIFEST bytes, then the
// bytes of data-00000.dat.
#include <cstdint>
#include <cstring>
#include <vector>

#include "ckpt/fault_injection_env.h"
#include "ckpt/format.h"
#include "leanemb/checkpoint.h"

using namespace leanemb;

namespace {

void put_file(ckpt::Env& env, const std::string& path, const uint8_t* p, size_t n) {
  auto f = env.new_writable_file(path);
  if (!f.ok()) __builtin_trap();
  (void)(*f)->append(std::span<const uint8_t>(p, n));
  (void)(*f)->close();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t mlen = 0;
  std::memcpy(&mlen, data, 4);
  mlen = std::min<uint32_t>(mlen, static_cast<uint32_t>(size - 4));
  const uint8_t* manifest = data + 4;
  // The decoder alone.
  auto decoded = ckpt::decode_manifest(std::span<const uint8_t>(manifest, mlen), "MANIFEST");
  // The reader over a directory holding the two files, named for the manifest's step (a
  // step-<N> directory must hold checkpoint N: under another name the reader stops at once).
  ckpt::FaultInjectionEnv env;
  const std::string dir = "/c/checkpoints/" + ckpt::step_dir_name(decoded.ok() ? decoded->step : 7);
  for (const char* d : {"/c", "/c/checkpoints"}) (void)env.create_dir(d);
  (void)env.create_dir(dir);
  put_file(env, dir + "/" + ckpt::kManifestName, manifest, mlen);
  put_file(env, dir + "/" + ckpt::kDataFileName, manifest + mlen, size - 4 - mlen);
  auto r = ckpt::CheckpointReader::open(dir, &env);
  if (!r.ok()) return 0;
  (void)(*r)->verify();
  (void)(*r)->digest();
  uint64_t budget = 1u << 24;  // bytes read per input at most
  for (const ckpt::EntryInfo& e : (*r)->entries()) {
    if (e.size_bytes > budget) continue;
    budget -= e.size_bytes;
    if (e.kind == ckpt::EntryKind::kBlob) {
      auto b = (*r)->read_blob(e.name);
      if (b.ok() && b->size() != e.size_bytes) __builtin_trap();
    } else {
      std::vector<uint8_t> rows(e.size_bytes);
      (void)(*r)->read_rows(e.name, 0, e.total_rows, rows);
    }
  }
  (void)ckpt::find_latest_complete("/c", {.env = &env, .verify_blocks = true, .warn_to_stderr = false});
  return 0;
}
