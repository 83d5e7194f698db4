// libFuzzer harness: the sharded checkpoint reader (table/sharded_layout.h,
// dist/sharded_checkpoint.h, docs/formats/checkpoint.md "Sharded checkpoints"): the global
// checkpoint's "sharded/layout" blob, the shards it names (recorded MANIFEST, "shard/info", row
// tables), verify, the shard-count-independent digest and a load into a small collection (either
// format, through EmbeddingTables::load), over an in-memory file system holding a sharded
// checkpoint of out_dir /c at world size 2.
// Input: u8 file count, then per file: u8 file index (mod 6) into
//   0 checkpoints/step-<N>/MANIFEST                                    (the global checkpoint)
//   1 checkpoints/step-<N>/data-00000.dat
//   2 shards/step-<N>/rank-0-of-2/checkpoints/step-<N>/MANIFEST        (shard 0)
//   3 shards/step-<N>/rank-0-of-2/checkpoints/step-<N>/data-00000.dat
//   4 shards/step-<N>/rank-1-of-2/checkpoints/step-<N>/MANIFEST        (shard 1)
//   5 shards/step-<N>/rank-1-of-2/checkpoints/step-<N>/data-00000.dat
// u32 little-endian length (cut to the bytes left), the file's bytes. A later file of the same
// index replaces an earlier one. N is the global MANIFEST's step when it decodes (else 1).
// The collection loaded into: tables "a" (6 rows) and "b" (5 rows), dim 4, fp32, row-wise
// Adagrad; the seeds (fuzz/corpus/sharded_ckpt/) are checkpoints of it: sharded row_modulo and
// table-wise at world size 2, and a plain one.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/fault_injection_env.h"
#include "ckpt/format.h"
#include "dist/sharded_checkpoint.h"
#include "leanemb/checkpoint.h"
#include "leanemb/embedding.h"

using namespace leanemb;

namespace {

constexpr int kNumFiles = 6;
constexpr uint64_t kBudget = 1u << 24;  // bytes of entries any one manifest may declare

struct File {
  int index = 0;
  const uint8_t* p = nullptr;
  size_t n = 0;
};

// The file of index i under out_dir "/c" for checkpoint `step`.
std::string file_path(int i, int64_t step) {
  const std::string s = ckpt::step_dir_name(step);
  std::string dir = "/c";
  if (i >= 2) dir += "/shards/" + s + "/rank-" + std::to_string((i - 2) / 2) + "-of-2";
  dir += "/checkpoints/" + s;
  return dir + "/" + (i % 2 == 0 ? ckpt::kManifestName : ckpt::kDataFileName);
}

void put_file(ckpt::Env& env, const std::string& path, const uint8_t* p, size_t n) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1))
    (void)env.create_dir(path.substr(0, at));
  auto f = env.new_writable_file(path);
  if (!f.ok()) __builtin_trap();
  (void)(*f)->append(std::span<const uint8_t>(p, n));
  (void)(*f)->close();
}

// The collection of the seeds (created once; every load overwrites its rows).
EmbeddingCollection& collection() {
  static std::unique_ptr<EmbeddingCollection> coll = [] {
    CollectionOptions o;
    OptimizerOptions opt;
    opt.kind = OptimizerKind::kRowwiseAdagrad;
    o.tables = {TableOptions{"a", 6, 4, DType::kF32, opt, {}, false, {}, {}, {}, {}},
                TableOptions{"b", 5, 4, DType::kF32, opt, {}, false, {}, {}, {}, {}}};
    o.features = {FeatureOptions{"fa", 0, PoolingMode::kSum}, FeatureOptions{"fb", 1, PoolingMode::kSum}};
    o.seed = 5;
    o.num_threads = 1;
    auto c = EmbeddingCollection::create(o);
    if (!c.ok()) __builtin_trap();
    return std::move(c).value();
  }();
  return *coll;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<File> files;
  size_t at = 1;
  for (int k = 0; k < data[0] && size - at >= 5; ++k) {
    File f;
    f.index = data[at] % kNumFiles;
    uint32_t n = 0;
    std::memcpy(&n, data + at + 1, 4);
    at += 5;
    f.n = std::min<size_t>(n, size - at);
    f.p = data + at;
    at += f.n;
    files.push_back(f);
  }
  // Bound the work: every manifest that decodes declares at most kBudget bytes of entries (the
  // reads, the digest's row chunks and the shards' row counts follow from them).
  int64_t step = 1;
  for (const File& f : files) {
    if (f.index % 2 != 0) continue;
    auto m = ckpt::decode_manifest(std::span<const uint8_t>(f.p, f.n), "MANIFEST");
    if (!m.ok()) continue;
    uint64_t declared = 0;
    for (const ckpt::EntryRecord& e : m->entries) {
      declared += e.kind == ckpt::EntryKind::kBlob ? e.size : e.row_bytes * static_cast<uint64_t>(e.total_rows);
      if (declared > kBudget) return 0;
    }
    if (f.index == 0) step = m->step;
  }
  ckpt::FaultInjectionEnv env;
  for (const File& f : files) put_file(env, file_path(f.index, step), f.p, f.n);
  const std::string global = "/c/checkpoints/" + ckpt::step_dir_name(step);
  (void)dist::verify_sharded_checkpoint(global, &env, true);
  (void)dist::verify_sharded_checkpoint(global, &env, false);
  (void)dist::verify_tables_checkpoint(global, &env);
  (void)dist::sharded_checkpoint_digest(global, &env);
  TablesLoadOptions lo;
  lo.env = &env;
  lo.chunk_rows = 4;  // several chunks per table
  lo.collection_step = 2;
  (void)collection().load(global, lo);
  (void)dist::find_latest_tables_checkpoint("/c", {.env = &env, .verify_blocks = true, .warn_to_stderr = false});
  return 0;
}
