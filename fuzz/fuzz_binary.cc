// libFuzzer harness: leanemb's binary data format (data/binary_format.h, docs/formats/
// binary-data.md): header, blocks, record decoding, through BinaryFileReader and the DataReader.
#include <cstdint>
#include <vector>

#include "data/binary_format.h"
#include "data/io.h"
#include "data/reader.h"
#include "fuzz/fuzz_util.h"

using namespace leanemb;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_input(data, size, ".bin");
  auto file = data::InputFile::open(path);
  if (!file.ok()) return 0;
  auto reader = data::BinaryFileReader::open(std::move(file).value());
  if (!reader.ok()) return 0;
  const data::BinaryHeader h = (*reader)->header();
  if (h.num_dense > 64 || h.num_sparse > 64) return 0;
  const std::vector<int64_t> rows(h.num_sparse, 97);
  auto schema = data::make_schema(static_cast<int>(h.num_dense), static_cast<int>(h.num_sparse), rows, 4);
  if (!schema.ok()) return 0;
  data::Record r;
  int64_t truncated = 0;
  for (int i = 0; i < 100000; ++i) {
    auto more = (*reader)->next(schema.value(), &r, &truncated);
    if (!more.ok() || !more.value()) break;
    if (r.dense.size() != h.num_dense || r.counts.size() != h.num_sparse) __builtin_trap();
  }
  // The same file through the DataReader (batches of ids reduced into the tables' rows).
  data::ReaderOptions o;
  o.files = {path};
  o.schema = schema.value();
  o.batch_size = 4;
  o.num_epochs = 1;
  auto dr = data::DataReader::open(o);
  if (!dr.ok()) return 0;
  data::Batch b;
  for (int i = 0; i < 100000; ++i) {
    auto more = (*dr)->next(&b);
    if (!more.ok() || !more.value()) break;
    for (const auto& col : b.sparse)
      for (int64_t id : col.ids)
        if (id < 0 || id >= 97) __builtin_trap();
  }
  return 0;
}
