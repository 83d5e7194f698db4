// TrackedRows (residency.h): a layer over any residency that marks every row it changes in a
// ChangedRows bitmap, for incremental checkpoints (dist/sharded_checkpoint.h). A row changes
// through the residency interface only: the update of a step (end_update: the step's unique
// view rows, translated to table rows through the view's key rows), a bulk write (write_rows: a restore) and a single write (write_row: a dynamic table's
// admitted id). Everything else is passed through unchanged, so results are bit-identical with
// and without the layer. EmbeddingCollection::track_changes() puts it over every table.
#include <algorithm>
#include <bit>
#include <cstring>

#include "table/collection_impl.h"
#include "table/residency.h"

namespace leanemb::table_internal {

Result<ChangedRows> ChangedRows::create(int64_t num_rows, Allocator* alloc) {
  ChangedRows c;
  c.num_rows_ = num_rows;
  const size_t words = static_cast<size_t>((num_rows + 63) / 64);
  LEANEMB_ASSIGN_OR_RETURN(c.bits_, alloc->allocate(std::max<size_t>(words, 1) * 8, Category::kWeights, 64));
  std::memset(c.bits_.as<uint8_t>(), 0, c.bits_.size_bytes());
  return c;
}

void ChangedRows::mark_range(int64_t begin, int64_t count) {
  for (int64_t r = begin; r < begin + count; ++r) mark(r);
}

void ChangedRows::clear() {
  std::memset(bits_.as<uint8_t>(), 0, bits_.size_bytes());
  count_ = 0;
}

int64_t ChangedRows::next(int64_t from, std::span<int64_t> out) const {
  const uint64_t* w = bits_.as<uint64_t>();
  const int64_t words = (num_rows_ + 63) / 64;
  size_t n = 0;
  int64_t i = std::max<int64_t>(from, 0) / 64;
  uint64_t cur = i < words ? w[i] & (~uint64_t{0} << (std::max<int64_t>(from, 0) % 64)) : 0;
  while (n < out.size() && i < words) {
    while (cur == 0 && ++i < words) cur = w[i];
    if (cur == 0) break;
    out[n++] = i * 64 + std::countr_zero(cur);
    cur &= cur - 1;
  }
  return static_cast<int64_t>(n);
}

namespace {

class TrackedRows final : public Residency {
 public:
  TrackedRows(std::unique_ptr<Residency> rows, ChangedRows changes) : rows_(std::move(rows)), changes_(std::move(changes)) {}

  std::string_view name() const override { return rows_->name(); }
  kernels::TableView view() const override { return rows_->view(); }
  void set_learning_rate(float lr) override { rows_->set_learning_rate(lr); }
  bool maps_rows() const override { return rows_->maps_rows(); }
  Status acquire(std::span<const int64_t> rows, int64_t* out, tiered::PinSet set, bool touch) override {
    return rows_->acquire(rows, out, set, touch);
  }
  Result<bool> take_prefetched(std::span<const int64_t> rows, int64_t* out) override { return rows_->take_prefetched(rows, out); }
  void release(tiered::PinSet set) override { rows_->release(set); }
  Status start_prefetch(std::span<const int64_t> rows) override { return rows_->start_prefetch(rows); }
  Status wait_prefetch() override { return rows_->wait_prefetch(); }
  Status flush() override { return rows_->flush(); }
  Result<RowCacheStats> cache_stats() const override { return rows_->cache_stats(); }
  StagingBytes update_staging(int64_t n) const override { return rows_->update_staging(n); }
  UpdateTarget begin_update(const int64_t* rows, int64_t n, std::span<uint8_t> fat, std::span<int64_t> slots,
                            Tier staging_tier) override {
    return rows_->begin_update(rows, n, fat, slots, staging_tier);
  }
  // `rows` are view rows: a cache's slots, whose table rows the view's key rows name.
  void end_update(const int64_t* rows, int64_t n, std::span<const uint8_t> fat, Tier staging_tier) override {
    const kernels::TableView v = rows_->view();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = rows[i];
      changes_.mark(v.key_rows32 ? int64_t{v.key_rows32[r]} : v.key_rows ? v.key_rows[r] : r);
    }
    rows_->end_update(rows, n, fat, staging_tier);
  }
  Status read_rows(int64_t begin, int64_t count, uint8_t* out, Tier tier) const override {
    return rows_->read_rows(begin, count, out, tier);
  }
  Status read_rows_at(std::span<const int64_t> rows, size_t stride, uint8_t* out, Tier tier) const override {
    return rows_->read_rows_at(rows, stride, out, tier);
  }
  // Marked even when the write fails: the rows may hold new or torn bytes (write_rows' contract).
  Status write_rows(int64_t begin, int64_t count, const uint8_t* in, Tier tier) override {
    changes_.mark_range(begin, count);
    return rows_->write_rows(begin, count, in, tier);
  }
  Status write_row(int64_t row, const uint8_t* fat, Tier tier) override {
    changes_.mark(row);
    return rows_->write_row(row, fat, tier);
  }
  ChangedRows* changes() override { return &changes_; }
  // Links hold the whole table: nothing to mark (the caller resets the changes to the checkpoint).
  bool can_link_rows(const std::string& into_dir) const override { return rows_->can_link_rows(into_dir); }
  Result<LinkedRows> link_rows(const std::string& dir, const RowPlaceSink& sink) override { return rows_->link_rows(dir, sink); }
  Status adopt_links(const std::string& dir, const LinkedRows& linked, const RowPlaceSource& source) override {
    return rows_->adopt_links(dir, linked, source);
  }

 private:
  std::unique_ptr<Residency> rows_;
  ChangedRows changes_;
};

}  // namespace

Result<std::unique_ptr<Residency>> make_tracked_rows(std::unique_ptr<Residency> rows, int64_t num_rows, Allocator* host) {
  LEANEMB_ASSIGN_OR_RETURN(ChangedRows changes, ChangedRows::create(num_rows, host));
  return std::unique_ptr<Residency>(std::make_unique<TrackedRows>(std::move(rows), std::move(changes)));
}

}  // namespace leanemb::table_internal

namespace leanemb {

using table_internal::ChangedRows;

Status EmbeddingCollection::track_changes() {
  Impl& im = *impl_;
  if (im.tracks_changes) return Status();
  Allocator* host = im.memory ? im.memory->host() : im.alloc;
  for (TableState& ts : im.tables) {
    LEANEMB_ASSIGN_OR_RETURN(ts.residency, table_internal::make_tracked_rows(std::move(ts.residency), ts.num_rows, host));
  }
  im.tracks_changes = true;
  // Before any row changed, the marks count from the initial rows: a sparse base can be written.
  im.change_base = ChangeBase{};
  im.change_base.initial = std::all_of(im.tables.begin(), im.tables.end(), [](const TableState& ts) { return ts.initial_rows; });
  return Status();
}

bool EmbeddingCollection::tracks_changes() const { return impl_->tracks_changes; }
const EmbeddingCollection::ChangeBase& EmbeddingCollection::change_base() const { return impl_->change_base; }

void EmbeddingCollection::reset_changes(ChangeBase base) {
  for (TableState& ts : impl_->tables)
    if (ChangedRows* c = ts.residency->changes()) c->clear();
  impl_->change_base = std::move(base);
}

int64_t EmbeddingCollection::num_changed_rows(int table) const {
  LEANEMB_CHECK(table >= 0 && table < num_tables(), "table index out of range");
  const ChangedRows* c = impl_->tables[static_cast<size_t>(table)].residency->changes();
  return c ? c->count() : 0;
}

void EmbeddingCollection::mark_changed(int table, std::span<const int64_t> rows) {
  LEANEMB_CHECK(table >= 0 && table < num_tables(), "table index out of range");
  ChangedRows* c = impl_->tables[static_cast<size_t>(table)].residency->changes();
  if (c == nullptr) return;
  for (int64_t r : rows) c->mark(r);
}

int64_t EmbeddingCollection::changed_rows(int table, int64_t from, std::span<int64_t> out) const {
  LEANEMB_CHECK(table >= 0 && table < num_tables(), "table index out of range");
  const ChangedRows* c = impl_->tables[static_cast<size_t>(table)].residency->changes();
  return c ? c->next(from, out) : 0;
}

}  // namespace leanemb
