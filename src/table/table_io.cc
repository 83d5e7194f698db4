// Row and state access for EmbeddingCollection, through its raw fat-row I/O.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

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

}  // namespace leanemb
