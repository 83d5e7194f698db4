// libFuzzer harness: Criteo TSV lines (data/tsv.h parse_tsv_line) and the whole DataReader over
// them (line splitting, malformed-line accounting, batching), with multi-hot values and max_len.
#include <cstdint>
#include <string_view>
#include <vector>

#include "data/reader.h"
#include "data/tsv.h"
#include "fuzz/fuzz_util.h"

using namespace leanemb;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<int64_t> rows = {7, 1000, 1};
  static const data::DataSchema schema = data::make_schema(2, 3, rows, 3).value();
  // Every line on its own.
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  data::Record r;
  data::ParseError err;
  int64_t truncated = 0;
  for (size_t pos = 0; pos <= text.size();) {
    const size_t nl = text.find('\n', pos);
    const std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    (void)data::parse_tsv_line(line, schema, &r, &truncated, &err);
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  // The reader over the same bytes as a file.
  data::ReaderOptions o;
  o.files = {fuzz::write_input(data, size, ".tsv")};
  o.schema = schema;
  o.batch_size = 3;
  o.shuffle_buffer = 5;
  o.num_epochs = 2;
  o.read_chunk_bytes = 4096;
  o.malformed.max_rate = 0.5;
  o.malformed.max_warnings = 0;
  auto reader = data::DataReader::open(o);
  if (!reader.ok()) return 0;
  data::Batch b;
  for (int i = 0; i < 1000; ++i) {
    auto more = (*reader)->next(&b);
    if (!more.ok() || !more.value()) break;
  }
  // Save and restore the position (a resume).
  const std::vector<uint8_t> state = (*reader)->save_state();
  auto again = data::DataReader::open(o);
  if (again.ok()) (void)(*again)->restore_state(state);
  return 0;
}
