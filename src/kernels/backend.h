// KernelBackend: the one interface between the table layer (src/table) and the code that reads,
// writes and moves rows. The table layer decides what to compute (which rows, which tables,
// which step); a backend decides how: the lookup, reduce, update and row-format kernels, and
// every copy of row bytes between tiers. A collection holds one backend, chosen once when it is
// created (CollectionOptions::backend; docs/backend.md), and calls nothing else that touches
// rows.
//
//   cpu_backend()        today's fast kernels (kernels.h, dispatched by CPU feature) and memcpy.
//   reference_backend()  the scalar references (ref_*) and memcpy: the oracle a new backend is
//                        tested against (a collection on it must give bit-identical outputs,
//                        rows and optimizer state; see src/table/backend_test.cc).
//
// A CUDA or Ascend backend is a new KernelBackend (its kernels on device memory, copy() as
// cudaMemcpy / aclrtMemcpy), plus an Allocator for device memory behind the MemorySystem; the
// table layer does not change.
//
// Calls are per kernel launch, never per element: a backend parallelizes inside a call
// (ExecContext::num_threads) and records the bytes the call moves between tiers into
// ExecContext::transfers (what is recorded: docs/memory.md, "Transfers"). Results must not
// depend on the thread count.
//
// Ownership and thread safety: backends are stateless (or count with atomics) and live for the
// whole program; cpu_backend() and reference_backend() return process-wide objects. Any method
// may be called from several threads at once (for different collections).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "kernels/kernels.h"
#include "leanemb/memory.h"

namespace leanemb::kernels {

// Receives the bytes a backend moves between tiers; the table layer forwards them to the
// collection's MemorySystem::record_transfer. record() may be called concurrently.
class TransferSink {
 public:
  virtual ~TransferSink() = default;
  virtual void record(Tier from, Tier to, uint64_t bytes) = 0;
};

// What every backend call gets besides its operands.
struct ExecContext {
  int num_threads = 1;                // threads a call may use (>= 1)
  TransferSink* transfers = nullptr;  // null: nothing is recorded (a collection on one allocator)
  // Records `bytes` moved from `from` to `to` (nothing when the tiers are equal or bytes is 0).
  void record(Tier from, Tier to, uint64_t bytes) const {
    if (transfers != nullptr && from != to && bytes != 0) transfers->record(from, to, bytes);
  }
};

// One part of a row copy: for u < count (copy_rows' argument),
//   row_bytes bytes  src + src_row(u) * src_stride  ->  dst + dst_row(u) * dst_stride,
// with src_row(u) = src_rows ? src_rows[u] : u (dst_row likewise). A gather (src_rows set), a
// scatter (dst_rows set) or a strided block copy (neither). REQUIRES: source and destination
// rows do not overlap.
struct RowCopy {
  uint8_t* dst = nullptr;
  size_t dst_stride = 0;
  const int64_t* dst_rows = nullptr;  // [count] or null
  Tier dst_tier = Tier::kDevice;
  const uint8_t* src = nullptr;
  size_t src_stride = 0;
  const int64_t* src_rows = nullptr;  // [count] or null
  Tier src_tier = Tier::kDevice;
  size_t row_bytes = 0;
};

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  // "cpu", "reference", ...: for messages and docs.
  virtual std::string_view name() const = 0;

  // ---- lookups (forward) ----------------------------------------------------------------------
  // The pooled lookups of several features in one launch (kernels.h pooled_lookup: for each bag
  // b of job k, out[b] = sum_i w_i * row(ids[i]), kMean divided by the bag length). A table
  // whose view lives off the device (TableView::tier) is read over the host link: records
  // nnz x weight_bytes from that tier to the device per job.
  virtual void pooled_lookup(const PooledJob* jobs, int num_jobs, const ExecContext& x) const = 0;
  // out[i, :] = row(ids[i]) for i < nnz ([nnz, dim] fp32); records as pooled_lookup.
  virtual void sequence_lookup(const TableView& t, const int64_t* ids, int64_t nnz, float* out,
                               const ExecContext& x) const = 0;

  // ---- backward ---------------------------------------------------------------------------------
  // Sorts keys [n] (row << 32 | contribution) ascending by the row part, stably; the rows are
  // below 2^row_bits. scratch: [n].
  virtual void sort_row_src(uint64_t* keys, uint64_t* scratch, int64_t n, int row_bits, const ExecContext& x) const = 0;
  // out[u * dim + j] for u < num_unique: kernels.h reduce_segments over all runs. Returns false
  // if any output is Inf or NaN.
  virtual bool reduce_segments(const SegmentSource& s, int64_t num_unique, float* out, const ExecContext& x) const = 0;
  // The optimizer applied to rows[u] with gradient grads[u * dim ...], u < num_unique (kernels.h
  // update_rows). A view off the device records num_unique x (weight_bytes + state_bytes) each
  // way. REQUIRES: rows distinct, gradients finite.
  virtual void update_rows(const TableView& t, const int64_t* rows, const float* grads, int64_t num_unique,
                           const UpdateStep& s, const ExecContext& x) const = 0;
  // Reduce and update in one pass (kernels.h reduce_and_update); records as update_rows.
  // scratch: reduce_and_update_scratch_floats(dim, x.num_threads) floats.
  virtual void reduce_and_update(const TableView& t, const SegmentSource& s, const int64_t* rows, int64_t num_unique,
                                 const UpdateStep& step, const ExecContext& x, float* scratch) const = 0;
  virtual size_t reduce_and_update_scratch_floats(int64_t dim, int num_threads) const = 0;

  // ---- row format (initialization, fp32 row and state access) ----------------------------------
  // One row's bytes, host-addressable (kernels.h row element helpers).
  virtual void uniform_fill(uint32_t key, int64_t d, float bound, float* out) const = 0;  // out [d]
  virtual void store_weights_rne(const RowLayout& l, uint8_t* row, const float* w) const = 0;
  virtual void load_weights(const RowLayout& l, const uint8_t* row, float* out) const = 0;  // out [dim]
  virtual void load_elem_state(const RowLayout& l, const uint8_t* row, int k, float* out) const = 0;
  virtual float load_rowwise_state(const RowLayout& l, const uint8_t* row) const = 0;

  // ---- copies between tiers ------------------------------------------------------------------
  // bytes from src (in src_tier) to dst (in dst_tier); records them when the tiers differ.
  // REQUIRES: the ranges do not overlap.
  virtual void copy(void* dst, Tier dst_tier, const void* src, Tier src_tier, size_t bytes,
                    const ExecContext& x) const = 0;
  // `count` rows of every part (RowCopy) in one launch; records count x row_bytes per part from
  // its source to its destination tier.
  virtual void copy_rows(std::span<const RowCopy> parts, int64_t count, const ExecContext& x) const = 0;
};

// The process-wide backends (never null).
const KernelBackend& cpu_backend();
const KernelBackend& reference_backend();

}  // namespace leanemb::kernels
