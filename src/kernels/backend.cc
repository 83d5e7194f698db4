// The CPU and reference KernelBackends (backend.h). Both keep the transfer accounting in the
// helpers below, so that the two record exactly the same bytes for the same calls.
#include "kernels/backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/parallel.h"

namespace leanemb::kernels {

namespace {

// A lookup of nnz rows reads their weights over the link when the view lives off the device.
void record_lookup(const TableView& t, int64_t nnz, const ExecContext& x) {
  x.record(t.tier, Tier::kDevice, static_cast<uint64_t>(nnz) * t.layout->weight_bytes);
}

// An update reads and writes each row's weights and state (the view's fat rows) once.
void record_update(const TableView& t, int64_t num_unique, const ExecContext& x) {
  const uint64_t bytes = static_cast<uint64_t>(num_unique) * (t.layout->weight_bytes + t.layout->state_bytes);
  x.record(t.tier, Tier::kDevice, bytes);
  x.record(Tier::kDevice, t.tier, bytes);
}

int64_t job_nnz(const PooledArgs& a) { return a.batch_size > 0 ? a.offsets[a.batch_size] : 0; }

void copy_row_parts(std::span<const RowCopy> parts, int64_t u0, int64_t u1) {
  for (int64_t u = u0; u < u1; ++u) {
    for (const RowCopy& p : parts) {
      const int64_t s = p.src_rows ? p.src_rows[u] : u, d = p.dst_rows ? p.dst_rows[u] : u;
      std::memcpy(p.dst + static_cast<size_t>(d) * p.dst_stride, p.src + static_cast<size_t>(s) * p.src_stride,
                  p.row_bytes);
    }
  }
}

void record_copies(std::span<const RowCopy> parts, int64_t count, const ExecContext& x) {
  for (const RowCopy& p : parts) x.record(p.src_tier, p.dst_tier, static_cast<uint64_t>(count) * p.row_bytes);
}

// ---- cpu -------------------------------------------------------------------------------------

// Both host backends read rows with the scalar readers: they serve row I/O, not the step.
class HostBackend : public KernelBackend {
 public:
  void load_weights(const RowLayout& l, const uint8_t* row, float* out) const override { ref_load_weights(l, row, out); }
  void load_elem_state(const RowLayout& l, const uint8_t* row, int k, float* out) const override {
    ref_load_elem_state(l, row, k, out);
  }
  float load_rowwise_state(const RowLayout& l, const uint8_t* row) const override {
    return ref_load_rowwise_state(l, row);
  }
};

class CpuBackend final : public HostBackend {
 public:
  std::string_view name() const override { return "cpu"; }

  void pooled_lookup(const PooledJob* jobs, int num_jobs, const ExecContext& x) const override {
    if (num_jobs <= 0) return;
    pooled_lookup_multi(jobs, num_jobs, x.num_threads);
    for (int k = 0; k < num_jobs; ++k) record_lookup(jobs[k].table, job_nnz(jobs[k].args), x);
  }
  void sequence_lookup(const TableView& t, const int64_t* ids, int64_t nnz, float* out,
                       const ExecContext& x) const override {
    kernels::sequence_lookup(t, ids, nnz, out, x.num_threads);
    record_lookup(t, nnz, x);
  }

  void sort_row_src(uint64_t* keys, uint64_t* scratch, int64_t n, int row_bits, const ExecContext& x) const override {
    radix_sort_row_src(keys, scratch, n, row_bits, x.num_threads);
  }
  bool reduce_segments(const SegmentSource& s, int64_t num_unique, float* out, const ExecContext& x) const override {
    std::atomic<bool> bad{false};
    parallel_for(num_unique, grain_for(4 * s.dim), [&](int64_t u0, int64_t u1, int) {
      if (!kernels::reduce_segments(s, u0, u1, out + u0 * s.dim)) bad = true;
    }, x.num_threads);
    return !bad;
  }
  void update_rows(const TableView& t, const int64_t* rows, const float* grads, int64_t num_unique, const UpdateStep& s,
                   const ExecContext& x) const override {
    kernels::update_rows(t, rows, grads, num_unique, s, x.num_threads);
    record_update(t, num_unique, x);
  }
  void reduce_and_update(const TableView& t, const SegmentSource& s, const int64_t* rows, int64_t num_unique,
                         const UpdateStep& step, const ExecContext& x, float* scratch) const override {
    kernels::reduce_and_update(t, s, rows, num_unique, step, x.num_threads, scratch);
    record_update(t, num_unique, x);
  }
  size_t reduce_and_update_scratch_floats(int64_t dim, int num_threads) const override {
    return kernels::reduce_and_update_scratch_floats(dim, num_threads);
  }

  void uniform_fill(uint32_t key, int64_t d, float bound, float* out) const override {
    kernels::uniform_fill(key, d, bound, out);
  }
  void store_weights_rne(const RowLayout& l, uint8_t* row, const float* w) const override {
    kernels::store_weights_rne(l, row, w);
  }

  void copy(void* dst, Tier dst_tier, const void* src, Tier src_tier, size_t bytes,
            const ExecContext& x) const override {
    if (bytes) std::memcpy(dst, src, bytes);
    x.record(src_tier, dst_tier, bytes);
  }
  void copy_rows(std::span<const RowCopy> parts, int64_t count, const ExecContext& x) const override {
    if (count <= 0) return;
    size_t row_bytes = 0;
    for (const RowCopy& p : parts) row_bytes += p.row_bytes;
    parallel_for(count, grain_for(static_cast<int64_t>(row_bytes)),
                 [&](int64_t u0, int64_t u1, int) { copy_row_parts(parts, u0, u1); }, x.num_threads);
    record_copies(parts, count, x);
  }
};

// ---- reference -------------------------------------------------------------------------------

// The scalar references, serial: the oracle. Its copies are plain loops of memcpy, and it
// records what the CPU backend records.
class ReferenceBackend final : public HostBackend {
 public:
  std::string_view name() const override { return "reference"; }

  void pooled_lookup(const PooledJob* jobs, int num_jobs, const ExecContext& x) const override {
    for (int k = 0; k < num_jobs; ++k) {
      ref_pooled_lookup(jobs[k].table, jobs[k].args);
      record_lookup(jobs[k].table, job_nnz(jobs[k].args), x);
    }
  }
  void sequence_lookup(const TableView& t, const int64_t* ids, int64_t nnz, float* out,
                       const ExecContext& x) const override {
    ref_sequence_lookup(t, ids, nnz, out);
    record_lookup(t, nnz, x);
  }

  void sort_row_src(uint64_t* keys, uint64_t*, int64_t n, int, const ExecContext&) const override {
    std::stable_sort(keys, keys + n, [](uint64_t a, uint64_t b) { return (a >> 32) < (b >> 32); });
  }
  bool reduce_segments(const SegmentSource& s, int64_t num_unique, float* out, const ExecContext&) const override {
    return ref_reduce_segments(s, 0, num_unique, out);
  }
  void update_rows(const TableView& t, const int64_t* rows, const float* grads, int64_t num_unique, const UpdateStep& s,
                   const ExecContext& x) const override {
    for (int64_t u = 0; u < num_unique; ++u) ref_update_row(t, rows[u], grads + u * t.layout->dim, s);
    record_update(t, num_unique, x);
  }
  // The fused kernel's definition: each row's gradient reduced, then the row updated.
  void reduce_and_update(const TableView& t, const SegmentSource& s, const int64_t* rows, int64_t num_unique,
                         const UpdateStep& step, const ExecContext& x, float* scratch) const override {
    for (int64_t u = 0; u < num_unique; ++u) {
      ref_reduce_segments(s, u, u + 1, scratch);
      ref_update_row(t, rows[u], scratch, step);
    }
    record_update(t, num_unique, x);
  }
  // As the CPU backend, so that both hold the same buffers (this one uses dim floats of them).
  size_t reduce_and_update_scratch_floats(int64_t dim, int num_threads) const override {
    return kernels::reduce_and_update_scratch_floats(dim, num_threads);
  }

  void uniform_fill(uint32_t key, int64_t d, float bound, float* out) const override {
    ref_uniform_fill(key, d, bound, out);
  }
  void store_weights_rne(const RowLayout& l, uint8_t* row, const float* w) const override {
    ref_store_weights_rne(l, row, w);
  }

  void copy(void* dst, Tier dst_tier, const void* src, Tier src_tier, size_t bytes,
            const ExecContext& x) const override {
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    for (size_t i = 0; i < bytes; ++i) d[i] = s[i];
    x.record(src_tier, dst_tier, bytes);
  }
  void copy_rows(std::span<const RowCopy> parts, int64_t count, const ExecContext& x) const override {
    if (count <= 0) return;
    copy_row_parts(parts, 0, count);
    record_copies(parts, count, x);
  }
};

}  // namespace

const KernelBackend& cpu_backend() {
  static const CpuBackend b{};
  return b;
}

const KernelBackend& reference_backend() {
  static const ReferenceBackend b{};
  return b;
}

}  // namespace leanemb::kernels
