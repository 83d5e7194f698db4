// tests/install_test.sh's consumer: tables saved and loaded through EmbeddingTables::save / load,
// the digest of table_checkpoint.h, and bench_workload_list of commands.h (in
// libleanemb_bench_workloads). Prints "ok <digest> <workloads>"; exit 1 on any error.
#include <cstdio>
#include <memory>
#include <string>

#include "leanemb/commands.h"
#include "leanemb/memory_system.h"
#include "leanemb/table_checkpoint.h"
#include "leanemb/tables.h"

int main(int argc, char** argv) {
  using namespace leanemb;
  if (argc != 2) return 2;
  CollectionOptions o;
  TableOptions t;
  t.name = "t";
  t.num_rows = 100;
  t.dim = 8;
  o.tables.push_back(t);
  FeatureOptions f;
  f.name = "f";
  o.features.push_back(f);
  auto mem = MemorySystem::create({});
  if (!mem.ok()) return 1;
  auto a = create_tables(o, mem.value().get());
  auto b = create_tables(o, mem.value().get());
  if (!a.ok() || !b.ok()) return 1;
  auto saved = a.value()->save(argv[1], 1);
  if (!saved.ok()) {
    std::fprintf(stderr, "%s\n", saved.status().to_string().c_str());
    return 1;
  }
  TablesLoadOptions lo;
  lo.collection_step = 0;
  auto loaded = b.value()->load(saved.value().path, lo);
  auto da = dist::tables_digest(*a.value()), db = dist::tables_digest(*b.value());
  if (!loaded.ok() || !da.ok() || !db.ok() || da.value() != db.value()) return 1;
  const std::string workloads = cli::bench_workload_list();
  if (workloads.find("roofline") == std::string::npos) return 1;
  std::printf("ok %s %s\n", da.value().c_str(), workloads.c_str());
  return 0;
}
