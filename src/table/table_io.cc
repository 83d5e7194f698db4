// Row and state access, raw fat-row I/O and table save/load for EmbeddingCollection.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype_codes.h"
#include "kernels/backend.h"
#include "leanemb/embedding.h"
#include "table/collection_impl.h"

namespace leanemb {

namespace {

Status check_range(const EmbeddingCollection& c, int table, int64_t row_begin, int64_t count, size_t have,
                   size_t per_row, const char* what) {
  if (table < 0 || table >= c.num_tables())
    return out_of_range(std::string(what) + ": unknown table " + std::to_string(table));
  const int64_t rows = c.options().tables[table].num_rows;
  if (row_begin < 0 || count < 0 || row_begin > rows || count > rows - row_begin)
    return out_of_range(std::string(what) + ": rows [" + std::to_string(row_begin) + ", " +
                        std::to_string(row_begin + count) + ") outside table '" + c.options().tables[table].name +
                        "' of " + std::to_string(rows) + " rows");
  if (have != static_cast<size_t>(count) * per_row)
    return invalid_argument(std::string(what) + ": buffer has " + std::to_string(have) + " elements, expected " +
                            std::to_string(static_cast<size_t>(count) * per_row));
  return Status();
}

// Header of a saved table file. All fields little-endian as in memory on x86-64 / aarch64.
struct TableFileHeader {
  char magic[8];  // "LEANEMBT"
  uint32_t version;
  uint32_t weight_dtype;
  uint32_t optimizer;
  uint32_t state_dtype;
  int64_t dim;
  int64_t num_rows;
  uint64_t stride_bytes;
  int64_t step;
};
constexpr char kMagic[8] = {'L', 'E', 'A', 'N', 'E', 'M', 'B', 'T'};

}  // namespace

// Accessors defined here reach the table buffers only through read/write of raw rows (whatever
// the storage: resident, split or cached), and convert rows with the collection's backend.
Status EmbeddingCollection::read_rows(int table, int64_t row_begin, int64_t count, std::span<float> out) const {
  if (table < 0 || table >= num_tables()) return out_of_range("read_rows: unknown table " + std::to_string(table));
  LEANEMB_RETURN_IF_ERROR(check_range(*this, table, row_begin, count, out.size(),
                                      static_cast<size_t>(options().tables[table].dim), "read_rows"));
  const RowLayout& l = layout(table);
  std::vector<uint8_t> raw(l.stride_bytes);
  for (int64_t r = 0; r < count; ++r) {
    LEANEMB_RETURN_IF_ERROR(read_raw_rows(table, row_begin + r, 1, raw));
    impl_->backend->load_weights(l, raw.data(), out.data() + r * l.dim);
  }
  return Status();
}

Status EmbeddingCollection::write_rows(int table, int64_t row_begin, int64_t count, std::span<const float> in) {
  if (table < 0 || table >= num_tables()) return out_of_range("write_rows: unknown table " + std::to_string(table));
  LEANEMB_RETURN_IF_ERROR(check_range(*this, table, row_begin, count, in.size(),
                                      static_cast<size_t>(options().tables[table].dim), "write_rows"));
  const RowLayout& l = layout(table);
  std::vector<uint8_t> raw(l.stride_bytes);
  for (int64_t r = 0; r < count; ++r) {
    LEANEMB_RETURN_IF_ERROR(read_raw_rows(table, row_begin + r, 1, raw));
    impl_->backend->store_weights_rne(l, raw.data(), in.data() + r * l.dim);
    LEANEMB_RETURN_IF_ERROR(write_raw_rows(table, row_begin + r, 1, raw));
  }
  return Status();
}

int64_t EmbeddingTables::state_floats_per_row(int table) const {
  const RowLayout& l = layout(table);
  return l.num_elem_states * l.dim + (l.has_rowwise ? 1 : 0);
}

Status EmbeddingCollection::read_state(int table, int64_t row_begin, int64_t count, std::span<float> out) const {
  if (table < 0 || table >= num_tables()) return out_of_range("read_state: unknown table " + std::to_string(table));
  const int64_t per_row = state_floats_per_row(table);
  LEANEMB_RETURN_IF_ERROR(check_range(*this, table, row_begin, count, out.size(), static_cast<size_t>(per_row), "read_state"));
  const RowLayout& l = layout(table);
  std::vector<uint8_t> raw(l.stride_bytes);
  for (int64_t r = 0; r < count; ++r) {
    LEANEMB_RETURN_IF_ERROR(read_raw_rows(table, row_begin + r, 1, raw));
    float* o = out.data() + r * per_row;
    const kernels::KernelBackend& be = *impl_->backend;
    for (int k = 0; k < l.num_elem_states; ++k) be.load_elem_state(l, raw.data(), k, o + k * l.dim);
    if (l.has_rowwise) o[l.num_elem_states * l.dim] = be.load_rowwise_state(l, raw.data());
  }
  return Status();
}

Status EmbeddingCollection::save_table(int table, const std::string& path) const {
  if (table < 0 || table >= num_tables()) return out_of_range("save_table: unknown table " + std::to_string(table));
  const RowLayout& l = layout(table);
  const int64_t rows = options().tables[table].num_rows;
  const std::string tmp = path + ".tmp";
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) return Status(StatusCode::kIoError, "cannot open '" + tmp + "' for writing: " + std::strerror(errno));
  TableFileHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = 1;
  h.weight_dtype = static_cast<uint32_t>(l.weight_dtype);
  h.optimizer = static_cast<uint32_t>(l.optimizer.kind);
  h.state_dtype = state_dtype_code(l.optimizer.state_dtype);
  h.dim = l.dim;
  h.num_rows = rows;
  h.stride_bytes = l.stride_bytes;
  h.step = step();
  if (std::fwrite(&h, sizeof h, 1, f.get()) != 1) return Status(StatusCode::kIoError, "short write to '" + path + "'");
  constexpr int64_t kChunkRows = 4096;
  std::vector<uint8_t> buf(static_cast<size_t>(kChunkRows) * l.stride_bytes);
  for (int64_t r = 0; r < rows; r += kChunkRows) {
    const int64_t n = std::min(kChunkRows, rows - r);
    const size_t bytes = static_cast<size_t>(n) * l.stride_bytes;
    LEANEMB_RETURN_IF_ERROR(read_raw_rows(table, r, n, std::span<uint8_t>(buf.data(), bytes)));
    if (std::fwrite(buf.data(), 1, bytes, f.get()) != bytes)
      return Status(StatusCode::kIoError, "short write to '" + path + "': " + std::strerror(errno));
  }
  if (std::fclose(f.release()) != 0) return Status(StatusCode::kIoError, "close of '" + tmp + "' failed");
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Status(StatusCode::kIoError, "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  return Status();
}

Status EmbeddingCollection::load_table(int table, const std::string& path) {
  if (table < 0 || table >= num_tables()) return out_of_range("load_table: unknown table " + std::to_string(table));
  const RowLayout& l = layout(table);
  const int64_t rows = options().tables[table].num_rows;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return not_found("cannot open '" + path + "': " + std::strerror(errno));
  TableFileHeader h{};
  if (std::fread(&h, sizeof h, 1, f.get()) != 1 || std::memcmp(h.magic, kMagic, 8) != 0)
    return Status(StatusCode::kDataLoss, "'" + path + "' is not a leanemb table file");
  if (h.version != 1 || h.dim != l.dim || h.num_rows != rows || h.stride_bytes != l.stride_bytes ||
      h.weight_dtype != static_cast<uint32_t>(l.weight_dtype) || h.optimizer != static_cast<uint32_t>(l.optimizer.kind) ||
      h.state_dtype != state_dtype_code(l.optimizer.state_dtype))
    return invalid_argument("'" + path + "' holds a table of a different layout (rows " + std::to_string(h.num_rows) +
                            ", dim " + std::to_string(h.dim) + ", stride " + std::to_string(h.stride_bytes) + " B)");
  // Read everything first so that a truncated file leaves the table unchanged.
  std::vector<uint8_t> all(static_cast<size_t>(rows) * l.stride_bytes);
  if (std::fread(all.data(), 1, all.size(), f.get()) != all.size())
    return Status(StatusCode::kDataLoss, "'" + path + "' is truncated");
  if (std::fgetc(f.get()) != EOF)
    return Status(StatusCode::kDataLoss, "'" + path + "' has bytes after the last row (corrupt or not this table)");
  LEANEMB_RETURN_IF_ERROR(write_raw_rows(table, 0, rows, all));
  set_step(h.step < 0 ? 0 : h.step);
  return Status();
}

}  // namespace leanemb
