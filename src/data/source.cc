#include "data/source.h"

#include "data/binary_format.h"
#include "data/tsv.h"

namespace leanemb::data {

namespace {

class TsvSource final : public RecordSource {
 public:
  TsvSource(InputFile file, const DataSchema& schema, MalformedTracker* tracker, size_t chunk_bytes)
      : lines_(std::move(file), chunk_bytes), schema_(schema), tracker_(tracker) {}

  Result<bool> next(Record* r) override {
    DataStats& st = tracker_->stats();
    std::string_view line;
    while (true) {
      const int64_t before = lines_.bytes_read();
      auto got = lines_.next(&line);
      st.bytes_read += lines_.bytes_read() - before;
      if (!got.ok()) return got.status();
      if (!got.value()) {
        LEANEMB_RETURN_IF_ERROR(tracker_->on_file_end(lines_.path(), lines_.line_number()));
        return false;
      }
      ++st.lines;
      st.line_bytes += static_cast<int64_t>(line.size()) + 1;
      if (parse_tsv_line(line, schema_, r, &st.truncated_values, &error_)) {
        ++st.records;
        return true;
      }
      LEANEMB_RETURN_IF_ERROR(tracker_->on_malformed(lines_.path(), lines_.line_number(), error_.kind, error_.detail));
    }
  }
  FileFormat format() const override { return FileFormat::kTsv; }

 private:
  LineReader lines_;
  const DataSchema& schema_;
  MalformedTracker* tracker_;
  ParseError error_;
};

class BinarySource final : public RecordSource {
 public:
  BinarySource(std::unique_ptr<BinaryFileReader> reader, const DataSchema& schema, MalformedTracker* tracker)
      : reader_(std::move(reader)), schema_(schema), tracker_(tracker) {}

  Result<bool> next(Record* r) override {
    DataStats& st = tracker_->stats();
    const int64_t before = reader_->bytes_read();
    auto got = reader_->next(schema_, r, &st.truncated_values);
    st.bytes_read += reader_->bytes_read() - before;
    if (got.ok() && got.value()) ++st.records;
    return got;
  }
  FileFormat format() const override { return FileFormat::kBinary; }

 private:
  std::unique_ptr<BinaryFileReader> reader_;
  const DataSchema& schema_;
  MalformedTracker* tracker_;
};

}  // namespace

Result<FileFormat> detect_format(const std::string& path) {
  LEANEMB_ASSIGN_OR_RETURN(InputFile file, InputFile::open(path));
  uint8_t prefix[8];
  bool full = false;
  LEANEMB_RETURN_IF_ERROR(file.read_full(prefix, &full));
  return full && has_binary_magic(prefix) ? FileFormat::kBinary : FileFormat::kTsv;
}

Result<std::unique_ptr<RecordSource>> open_record_source(const std::string& path, const DataSchema& schema,
                                                         MalformedTracker* tracker, size_t chunk_bytes) {
  LEANEMB_ASSIGN_OR_RETURN(FileFormat format, detect_format(path));
  LEANEMB_ASSIGN_OR_RETURN(InputFile file, InputFile::open(path));
  if (format == FileFormat::kTsv) return std::unique_ptr<RecordSource>(new TsvSource(std::move(file), schema, tracker, chunk_bytes));
  LEANEMB_ASSIGN_OR_RETURN(auto reader, BinaryFileReader::open(std::move(file)));
  const BinaryHeader& h = reader->header();
  if (h.num_dense != static_cast<uint32_t>(schema.num_dense) || h.num_sparse != static_cast<uint32_t>(schema.num_sparse))
    return invalid_argument("data: " + path + " holds " + std::to_string(h.num_dense) + " dense and " +
                            std::to_string(h.num_sparse) + " sparse features, the schema expects " +
                            std::to_string(schema.num_dense) + " and " + std::to_string(schema.num_sparse));
  tracker->stats().converted_malformed += static_cast<int64_t>(h.num_malformed);
  tracker->stats().bytes_read += kBinaryHeaderBytes;
  return std::unique_ptr<RecordSource>(new BinarySource(std::move(reader), schema, tracker));
}

}  // namespace leanemb::data
