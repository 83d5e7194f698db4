// The residency layer of a table: where its fat rows live and how a step reaches them
// (docs/architecture.md, "Table layers"). EmbeddingCollection holds one Residency per table and
// reaches the rows only through this interface:
//
//   forward   [id mapping] -> acquire (maps_rows() only: rows -> view rows, pinned)
//             -> lookup kernel on view()
//   update    acquire (touch = false) -> begin_update -> fused update kernel -> end_update
//   row I/O   read_rows / write_rows (restores, checkpoints) / write_row (a row admitted by a
//             dynamic table); pins are released with release() at the end of the step.
//
// Implementations (one file each):
//   ResidentRows  resident_rows.cc  fat rows in one tier (the weights' tier)
//   SplitRows     resident_rows.cc  weights and optimizer state in two tiers; an update stages
//                                   the touched fat rows in workspace memory
//   CachedRows    cached_rows.cc    a device-tier RowCache over a host or file RowStore
// and layers over any of them:
//   MirroredRows  mirrored_rows.cc  a checked copy of every row (testing)
//   TrackedRows   tracked_rows.cc   marks changed rows (incremental checkpoints)
// make_residency (residency.cc) picks the first entry of its registry that applies to the table
// (TableOptions::residency names one explicitly): a new residency is a new file with its class
// and factory, its factory's declaration below and one line in the registry.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kernels/backend.h"
#include "kernels/kernels.h"
#include "leanemb/embedding.h"
#include "leanemb/linked_rows.h"
#include "leanemb/memory_system.h"
#include "table/step_sizes.h"
#include "tiered/row_cache.h"

namespace leanemb {

// A row's initial fat-row bytes (padding zeroed); depends only on (seed, table, key): the key is
// the global row (a resident table's row number; for a dynamic table the raw id holding it).
// tmp: [dim] floats of scratch. `backend` provides the initializer's kernels (uniform_fill,
// store_weights_rne). Defined in embedding_collection.cc.
void init_row(const TableOptions& to, const RowLayout& l, uint64_t seed, uint32_t table, int64_t key, float* tmp,
              uint8_t* row, const kernels::KernelBackend& backend = kernels::cpu_backend());
// A row's bytes before anything wrote it: zeros for a dynamic table (a row gets values when an
// id is admitted), else init_row's. Defined in embedding_collection.cc.
void initial_row(const TableOptions& to, const RowLayout& l, uint64_t seed, uint32_t table, int64_t key, float* tmp,
                 uint8_t* row, const kernels::KernelBackend& backend = kernels::cpu_backend());

}  // namespace leanemb

namespace leanemb::table_internal {

// What creating one table's rows needs, and the table's initial values.
struct ResidencyContext {
  TableOptions options;  // the table's (a copy: the residency may outlive a caller's options)
  int table = 0;         // index in the collection (part of the initializer's RNG key)
  uint64_t seed = 0;
  RowLayout layout;      // the fat row
  int64_t key_stride = 1, key_offset = 0;  // local row l has global key l * key_stride + key_offset
  MemorySystem* memory = nullptr;  // null: everything in `alloc`, on the device tier
  Allocator* alloc = nullptr;
  const kernels::KernelBackend* backend = nullptr;
  kernels::ExecContext exec;  // threads and the transfer sink of every copy between tiers

  Allocator* allocator_for(Category c) const { return memory ? memory->allocator_for(c) : alloc; }
  Allocator* host() const { return memory ? memory->host() : alloc; }
  Tier tier_of(Category c) const { return memory ? memory->placement()[c] : Tier::kDevice; }
  // Local row `row`'s initial bytes in layout `l` (padding zeroed): the initializer's values for
  // the row's global key, or zeros for a dynamic table (a row gets values when an id is
  // admitted). tmp: [dim] floats of scratch.
  void init_row(int64_t row, const RowLayout& l, float* tmp, uint8_t* out) const;
};

// One bit per local row: the rows changed since the last clear() (TrackedRows). Host memory
// (category weights), num_rows / 8 bytes. Not thread-safe (the collection's thread marks).
class ChangedRows {
 public:
  static Result<ChangedRows> create(int64_t num_rows, Allocator* alloc);
  void mark(int64_t row) {
    uint64_t& w = bits_.as<uint64_t>()[row >> 6];
    const uint64_t bit = uint64_t{1} << (row & 63);
    count_ += (w & bit) == 0 ? 1 : 0;
    w |= bit;
  }
  void mark_range(int64_t begin, int64_t count);
  void clear();
  int64_t count() const { return count_; }  // rows marked
  // Up to out.size() marked rows >= from, ascending, into out; returns how many.
  int64_t next(int64_t from, std::span<int64_t> out) const;
  size_t bytes() const { return bits_.size_bytes(); }

 private:
  Allocation bits_;
  int64_t num_rows_ = 0;
  int64_t count_ = 0;
};

class Residency {
 public:
  virtual ~Residency() = default;
  virtual std::string_view name() const = 0;

  // The rows the kernels of a step run on. The collection sets table_index and the keys
  // (row_keys / key_stride / key_offset); key_rows / key_rows32 are the residency's.
  virtual kernels::TableView view() const = 0;
  // The learning rate the update kernels read from the residency's layouts.
  virtual void set_learning_rate(float lr) = 0;

  // True when view() holds other rows than the table's (a cache's slots): a step's rows must
  // then be acquired, and pins released.
  virtual bool maps_rows() const { return false; }
  // out[i] := the view row of rows[i], pinned in `set` until release(set). `touch` false: rows
  // already held are not counted again (the update of a step whose forward acquired them).
  virtual Status acquire(std::span<const int64_t> rows, int64_t* out, tiered::PinSet set, bool touch);
  // After start_prefetch(rows) of exactly these rows: their view rows without looking them up
  // again (true), or false when the prefetch was of other rows.
  virtual Result<bool> take_prefetched(std::span<const int64_t> rows, int64_t* out);
  virtual void release(tiered::PinSet) {}
  virtual Status start_prefetch(std::span<const int64_t>) { return Status(); }
  virtual Status wait_prefetch() { return Status(); }
  // Makes every changed row durable where the residency keeps it (a cache: its store).
  virtual Status flush() { return Status(); }
  virtual Result<RowCacheStats> cache_stats() const;

  // The update of n unique view rows `rows` (ascending). update_staging: the workspace bytes
  // begin_update needs (taken before any row changes; zero: none). begin_update: the view and
  // row numbers the update kernel runs on, with `fat` / `slots` of update_staging's sizes;
  // end_update: after the kernel (staged rows written back, rows marked changed).
  struct UpdateTarget {
    kernels::TableView view;
    const int64_t* rows = nullptr;
  };
  virtual StagingBytes update_staging(int64_t /*n*/) const { return {}; }
  virtual UpdateTarget begin_update(const int64_t* rows, int64_t /*n*/, std::span<uint8_t> /*fat*/,
                                    std::span<int64_t> /*slots*/, Tier /*staging_tier*/) {
    return {view(), rows};
  }
  virtual void end_update(const int64_t* /*rows*/, int64_t /*n*/, std::span<const uint8_t> /*fat*/,
                          Tier /*staging_tier*/) {}

  // Fat rows [begin, begin + count) to / from memory of tier `tier` ([count, stride_bytes];
  // alignment gaps read as zeros). REQUIRES: the range within the table. write_rows is a bulk
  // replacement (a restore); write_row replaces one row during training.
  virtual Status read_rows(int64_t begin, int64_t count, uint8_t* out, Tier tier) const = 0;
  // Fat rows `rows` (any order; valid rows) of `stride` bytes into out [rows.size(), stride]:
  // by default runs of consecutive rows through read_rows; a cache reads its resident rows from
  // their slots and the others from its store in one batch.
  virtual Status read_rows_at(std::span<const int64_t> rows, size_t stride, uint8_t* out, Tier tier) const;
  virtual Status write_rows(int64_t begin, int64_t count, const uint8_t* in, Tier tier) = 0;
  virtual Status write_row(int64_t row, const uint8_t* fat, Tier tier) { return write_rows(row, 1, fat, tier); }
  // The rows changed since the last clear, when a TrackedRows layer is on top; else null.
  virtual ChangedRows* changes() { return nullptr; }

  // Linked rows (leanemb/linked_rows.h): a residency whose rows live in a store of files that
  // can be hard-linked (a cache over a log-layout file store). link_rows writes every changed row
  // back to the store (they stay resident, clean) and links the store's files into `dir`, giving
  // each written row's place to `sink`; a row without a place holds its initial bytes.
  // adopt_links makes a residency that holds no row yet take linked files as its rows.
  // Elsewhere: false / Unimplemented (the caller copies rows instead).
  virtual bool can_link_rows(const std::string& /*into_dir*/) const { return false; }
  virtual Result<LinkedRows> link_rows(const std::string& dir, const RowPlaceSink& sink);
  virtual Status adopt_links(const std::string& dir, const LinkedRows& linked, const RowPlaceSource& source);
};

// The residency of table ctx.table: the first registered kind that applies, or the one
// TableOptions::residency names. Errors: InvalidArgument (an unknown name, a name that does not
// apply, a name other than "cached" on a table with cache options); the kind's (allocation,
// options, store).
Result<std::unique_ptr<Residency>> make_residency(const ResidencyContext& ctx);

// The registered kinds, in make_residency's order. Each returns null when the table is not of
// its kind (its options or placement ask for another; TableOptions::residency names another).
Result<std::unique_ptr<Residency>> make_cached_rows(const ResidencyContext& ctx);  // cached_rows.cc
Result<std::unique_ptr<Residency>> make_split_rows(const ResidencyContext& ctx);   // resident_rows.cc
Result<std::unique_ptr<Residency>> make_resident_rows(const ResidencyContext& ctx);
Result<std::unique_ptr<Residency>> make_mirrored_rows(const ResidencyContext& ctx);  // mirrored_rows.cc
// `rows` with a TrackedRows layer on top (tracked_rows.cc): a ChangedRows of num_rows bits from
// `host`. Errors: ResourceExhausted.
Result<std::unique_ptr<Residency>> make_tracked_rows(std::unique_ptr<Residency> rows, int64_t num_rows, Allocator* host);

}  // namespace leanemb::table_internal
