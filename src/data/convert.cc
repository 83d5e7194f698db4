#include "leanemb/data_convert.h"

#include <chrono>

#include "data/binary_format.h"
#include "data/io.h"
#include "data/source.h"

namespace leanemb::data {

Result<ConvertReport> convert_to_binary(const ConvertOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.input.empty() || o.output.empty()) return invalid_argument("convert: input and output paths are required");
  // outputs_never_alias_inputs: the same file by name, symlink or hard link (data/io.h).
  if (o.input == o.output) return invalid_argument("convert: --out '" + o.output + "' is --in '" + o.input + "'; choose another --out");
  const NamedPath in{"--in", o.input};
  LEANEMB_RETURN_IF_ERROR(check_output_not_input({"--out", o.output}, std::span<const NamedPath>(&in, 1)));
  DataSchema schema;
  schema.num_dense = o.num_dense;
  schema.num_sparse = o.num_sparse;
  schema.id_mode = IdMode::kRaw;
  if (o.num_sparse >= 0) schema.sparse.resize(static_cast<size_t>(o.num_sparse));
  LEANEMB_RETURN_IF_ERROR(validate_schema(schema));
  if (!(o.malformed.max_rate >= 0.0 && o.malformed.max_rate <= 1.0))
    return invalid_argument("convert: max_malformed_rate must be in [0, 1]");
  MalformedTracker tracker(o.malformed);
  LEANEMB_ASSIGN_OR_RETURN(auto source, open_record_source(o.input, schema, &tracker, o.read_chunk_bytes));
  LEANEMB_ASSIGN_OR_RETURN(auto writer, BinaryWriter::create(o.output, o.num_dense, o.num_sparse, o.block_bytes));
  Record r;
  while (true) {
    LEANEMB_ASSIGN_OR_RETURN(bool got, source->next(&r));
    if (!got) break;
    LEANEMB_RETURN_IF_ERROR(writer->add(r));
    if (o.progress && writer->num_records() % 4096 == 0)
      o.progress(tracker.stats().bytes_read, static_cast<int64_t>(writer->num_records()));
  }
  const DataStats& st = tracker.stats();
  ConvertReport rep;
  rep.records = static_cast<int64_t>(writer->num_records());
  LEANEMB_RETURN_IF_ERROR(writer->finish(static_cast<uint64_t>(st.malformed + st.converted_malformed)));
  rep.stats = st;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace leanemb::data
