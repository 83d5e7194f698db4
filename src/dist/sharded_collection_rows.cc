// ShardedEmbeddingCollection's rows by global row (read_rows, read_raw_rows, read_state,
// write_rows, write_raw_rows, dynamic_row): collectives in which each rank reads or writes the
// rows it owns.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dist/sharded_collection.h"
#include "dist/sharded_collection_internal.h"
#include "kernels/kernels.h"

namespace leanemb::dist {

Status ShardedEmbeddingCollection::Impl::check_rows(int t, int64_t begin, int64_t count, size_t have, size_t per_row,
                                                    const char* what) const {
  if (t < 0 || t >= num_tables) return out_of_range(std::string(what) + ": unknown table " + std::to_string(t));
  const int64_t rows = plan.num_rows(t);
  if (begin < 0 || count < 0 || begin > rows || count > rows - begin)
    return out_of_range(std::string(what) + ": rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                        ") outside table '" + options.collection.tables[static_cast<size_t>(t)].name + "' of " +
                        std::to_string(rows) + " rows");
  if (have != static_cast<size_t>(count) * per_row)
    return invalid_argument(std::string(what) + ": buffer has " + std::to_string(have) + " elements, expected " +
                            std::to_string(static_cast<size_t>(count) * per_row));
  return Status::ok_status();
}

template <typename Fn>
Status ShardedEmbeddingCollection::Impl::for_owned_runs(int t, int64_t begin, int64_t count, Fn fn) const {
  const int r = comm->rank();
  int64_t run_local = -1, run_len = 0, run_index = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t g = begin + i;
    if (plan.owner(t, g) != r) continue;
    const int64_t l = plan.local_row(t, g);
    if (run_len > 0 && l == run_local + run_len && i == run_index + run_len) {
      ++run_len;
      continue;
    }
    if (run_len > 0) LEANEMB_RETURN_IF_ERROR(fn(run_local, run_len, run_index));
    run_local = l;
    run_len = 1;
    run_index = i;
  }
  if (run_len > 0) LEANEMB_RETURN_IF_ERROR(fn(run_local, run_len, run_index));
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::Impl::gather_raw(int t, int64_t begin, int64_t count, std::span<uint8_t> out) const {
  const size_t stride = local->layout(t).stride_bytes;
  // Every rank contributes its own rows and zeros elsewhere; an integer sum of the bytes (as
  // 64-bit words: exact) gives every rank every row.
  std::vector<int64_t> words((static_cast<size_t>(count) * stride + 7) / 8, 0);
  auto* bytes = reinterpret_cast<uint8_t*>(words.data());
  const Status mine = for_owned_runs(t, begin, count, [&](int64_t l, int64_t n, int64_t i) {
    return local->read_raw_rows(t, l, n, std::span<uint8_t>(bytes + static_cast<size_t>(i) * stride, static_cast<size_t>(n) * stride));
  });
  LEANEMB_RETURN_IF_ERROR(dist::agree(*comm, mine, "dist: read rows"));
  LEANEMB_RETURN_IF_ERROR(comm->all_reduce(std::span<int64_t>(words), ReduceOp::kSum));
  if (!out.empty()) std::memcpy(out.data(), bytes, out.size());
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::read_raw_rows(int table, int64_t row_begin, int64_t count, std::span<uint8_t> out) const {
  const Impl& im = *impl_;
  const Status ok = im.check_rows(table, row_begin, count, out.size(), table < 0 || table >= im.num_tables ? 1 : layout(table).stride_bytes, "read_raw_rows");
  LEANEMB_RETURN_IF_ERROR(dist::agree(*im.comm, ok, "dist: read_raw_rows"));
  return im.gather_raw(table, row_begin, count, out);
}

Status ShardedEmbeddingCollection::read_rows(int table, int64_t row_begin, int64_t count, std::span<float> out) const {
  const Impl& im = *impl_;
  const Status ok = im.check_rows(table, row_begin, count, out.size(), table < 0 || table >= im.num_tables ? 1 : static_cast<size_t>(layout(table).dim), "read_rows");
  LEANEMB_RETURN_IF_ERROR(dist::agree(*im.comm, ok, "dist: read_rows"));
  const RowLayout& l = layout(table);
  std::vector<uint8_t> raw(static_cast<size_t>(count) * l.stride_bytes);
  LEANEMB_RETURN_IF_ERROR(im.gather_raw(table, row_begin, count, raw));
  for (int64_t r = 0; r < count; ++r) kernels::ref_load_weights(l, raw.data() + static_cast<size_t>(r) * l.stride_bytes, out.data() + r * l.dim);
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::read_state(int table, int64_t row_begin, int64_t count, std::span<float> out) const {
  const Impl& im = *impl_;
  const bool known = table >= 0 && table < im.num_tables;
  const int64_t per_row = known ? state_floats_per_row(table) : 1;
  const Status ok = im.check_rows(table, row_begin, count, out.size(), static_cast<size_t>(per_row), "read_state");
  LEANEMB_RETURN_IF_ERROR(dist::agree(*im.comm, ok, "dist: read_state"));
  const RowLayout& l = layout(table);
  std::vector<uint8_t> raw(static_cast<size_t>(count) * l.stride_bytes);
  LEANEMB_RETURN_IF_ERROR(im.gather_raw(table, row_begin, count, raw));
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* row = raw.data() + static_cast<size_t>(r) * l.stride_bytes;
    float* o = out.data() + r * per_row;
    for (int k = 0; k < l.num_elem_states; ++k) kernels::ref_load_elem_state(l, row, k, o + k * l.dim);
    if (l.has_rowwise) o[l.num_elem_states * l.dim] = kernels::ref_load_rowwise_state(l, row);
  }
  return Status::ok_status();
}

Status ShardedEmbeddingCollection::write_raw_rows(int table, int64_t row_begin, int64_t count, std::span<const uint8_t> in) {
  Impl& im = *impl_;
  Status st = im.check_rows(table, row_begin, count, in.size(), table < 0 || table >= im.num_tables ? 1 : layout(table).stride_bytes, "write_raw_rows");
  if (st.ok()) {
    const size_t stride = layout(table).stride_bytes;
    st = im.for_owned_runs(table, row_begin, count, [&](int64_t l, int64_t n, int64_t i) {
      return im.local->write_raw_rows(table, l, n, in.subspan(static_cast<size_t>(i) * stride, static_cast<size_t>(n) * stride));
    });
  }
  return dist::agree(*im.comm, st, "dist: write_raw_rows");
}

Status ShardedEmbeddingCollection::write_rows(int table, int64_t row_begin, int64_t count, std::span<const float> in) {
  Impl& im = *impl_;
  Status st = im.check_rows(table, row_begin, count, in.size(), table < 0 || table >= im.num_tables ? 1 : static_cast<size_t>(layout(table).dim), "write_rows");
  if (st.ok()) {
    const auto dim = static_cast<size_t>(layout(table).dim);
    st = im.for_owned_runs(table, row_begin, count, [&](int64_t l, int64_t n, int64_t i) {
      return im.local->write_rows(table, l, n, in.subspan(static_cast<size_t>(i) * dim, static_cast<size_t>(n) * dim));
    });
  }
  return dist::agree(*im.comm, st, "dist: write_rows");
}

Result<int64_t> ShardedEmbeddingCollection::dynamic_row(int table, int64_t raw_id) const {
  const Impl& im = *impl_;
  Status st = table < 0 || table >= im.num_tables ? out_of_range("dynamic_row: unknown table " + std::to_string(table))
              : im.partitions[static_cast<size_t>(table)] == 0
                  ? failed_precondition("dynamic_row: table '" + options().tables[static_cast<size_t>(table)].name + "' is not dynamic")
                  : Status::ok_status();
  int64_t row = -1;
  if (st.ok() && im.owner(table, raw_id) == im.comm->rank()) {
    auto l = im.local->dynamic_row(table, raw_id);
    if (!l.ok()) st = l.status();
    else if (l.value() >= 0) row = im.plan.global_row(table, im.comm->rank(), l.value());
  }
  LEANEMB_RETURN_IF_ERROR(dist::agree(*im.comm, st, "dist: dynamic_row"));
  std::vector<int64_t> v = {row};
  LEANEMB_RETURN_IF_ERROR(im.comm->all_reduce(std::span<int64_t>(v), ReduceOp::kMax));
  return v[0];
}

}  // namespace leanemb::dist
