// The residencies of tables held whole in memory (residency.h): ResidentRows, fat rows in one
// buffer in the weights' tier, and SplitRows, weights and optimizer state in two buffers when the
// placement puts the two categories in different tiers.
#include <omp.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "table/residency.h"

namespace leanemb::table_internal {

namespace {

Status table_alloc_error(const ResidencyContext& c, const Status& s, size_t stride) {
  return Status(s.code(), "table '" + c.options.name + "' (" + std::to_string(c.options.num_rows) + " rows x " +
                              std::to_string(stride) + " B): " + s.message());
}

// Every row's initial bytes, in parallel: row r of `base` ([num_rows, l.stride_bytes]) gets
// ctx.init_row(r); each row's values depend only on (seed, table, row).
void init_rows(const ResidencyContext& c, const RowLayout& l, uint8_t* base) {
  const int64_t n = c.options.num_rows;
#pragma omp parallel num_threads(c.exec.num_threads)
  {
    std::vector<float> tmp(static_cast<size_t>(c.layout.dim));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) c.init_row(r, l, tmp.data(), base + static_cast<size_t>(r) * l.stride_bytes);
  }
}

// Fat rows [num_rows, stride_bytes] in one buffer of the weights' tier. The kernels run on the
// rows where they are; the backend records the bytes of rows off the device.
class ResidentRows final : public Residency {
 public:
  explicit ResidentRows(const ResidencyContext& c) : c_(c), layout_(c.layout), tier_(c.tier_of(Category::kWeights)) {}

  Status allocate() {
    const RowLayout& l = layout_;
    const size_t n = static_cast<size_t>(c_.options.num_rows);
    const CategoryBytes parts[2] = {{Category::kWeights, n * (l.stride_bytes - l.state_bytes)},
                                    {Category::kOptimizerState, n * l.state_bytes}};
    auto rows = c_.allocator_for(Category::kWeights)
                    ->allocate_parts(std::span<const CategoryBytes>(parts, l.state_bytes ? 2 : 1), 64);
    if (!rows.ok()) return table_alloc_error(c_, rows.status(), l.stride_bytes);
    rows_ = std::move(rows).value();
    init_rows(c_, layout_, rows_.as<uint8_t>());
    return Status();
  }

  std::string_view name() const override { return "resident"; }
  kernels::TableView view() const override {
    kernels::TableView v{rows_.as<uint8_t>(), &layout_, c_.options.num_rows, 0};
    v.tier = tier_;
    return v;
  }
  void set_learning_rate(float lr) override { layout_.optimizer.learning_rate = lr; }

  Status read_rows(int64_t begin, int64_t count, uint8_t* out, Tier tier) const override {
    c_.backend->copy(out, tier, at(begin), tier_, static_cast<size_t>(count) * layout_.stride_bytes, c_.exec);
    return Status();
  }
  Status write_rows(int64_t begin, int64_t count, const uint8_t* in, Tier tier) override {
    c_.backend->copy(at(begin), tier_, in, tier, static_cast<size_t>(count) * layout_.stride_bytes, c_.exec);
    return Status();
  }

 private:
  uint8_t* at(int64_t row) const { return rows_.as<uint8_t>() + static_cast<size_t>(row) * layout_.stride_bytes; }
  ResidencyContext c_;
  RowLayout layout_;
  Allocation rows_;
  Tier tier_;
};

// Weights [num_rows, weights stride] in the weights' tier and optimizer state [num_rows, state
// stride] in the state's tier. Lookups read the weights where they are; an update gathers the
// touched fat rows into workspace staging, updates them there and scatters them back.
class SplitRows final : public Residency {
 public:
  explicit SplitRows(const ResidencyContext& c)
      : c_(c),
        layout_(c.layout),
        weights_tier_(c.tier_of(Category::kWeights)),
        state_tier_(c.tier_of(Category::kOptimizerState)) {
    weights_layout_ = layout_;
    weights_layout_.optimizer.kind = OptimizerKind::kSgd;
    weights_layout_.has_rowwise = false;
    weights_layout_.num_elem_states = 0;
    weights_layout_.state_bytes = 0;
    weights_layout_.stride_bytes = split_weight_stride(layout_.weight_bytes);
    state_begin_ = (layout_.weight_bytes + 3) / 4 * 4;
    state_stride_ = split_state_stride(layout_.state_bytes);
  }

  Status allocate() {
    const size_t n = static_cast<size_t>(c_.options.num_rows);
    auto rows = c_.allocator_for(Category::kWeights)->allocate(n * weights_layout_.stride_bytes, Category::kWeights, 64);
    if (!rows.ok()) return table_alloc_error(c_, rows.status(), weights_layout_.stride_bytes);
    rows_ = std::move(rows).value();
    auto state = c_.allocator_for(Category::kOptimizerState)->allocate(n * state_stride_, Category::kOptimizerState, 64);
    if (!state.ok()) return table_alloc_error(c_, state.status(), state_stride_);
    state_ = std::move(state).value();
    init_rows(c_, weights_layout_, rows_.as<uint8_t>());
    // The state starts at zero, each row's by the thread that initialized its weights (as the
    // weights' pages, first touched where they are used).
    uint8_t* state_base = state_.as<uint8_t>();
    const int64_t num_rows = c_.options.num_rows;
    const size_t stride = state_stride_;
#pragma omp parallel for schedule(static) num_threads(c_.exec.num_threads)
    for (int64_t r = 0; r < num_rows; ++r) std::memset(state_base + static_cast<size_t>(r) * stride, 0, stride);
    return Status();
  }

  std::string_view name() const override { return "split"; }
  kernels::TableView view() const override {
    kernels::TableView v{rows_.as<uint8_t>(), &weights_layout_, c_.options.num_rows, 0};
    v.tier = weights_tier_;
    return v;
  }
  void set_learning_rate(float lr) override {
    layout_.optimizer.learning_rate = lr;
    weights_layout_.optimizer.learning_rate = lr;
  }

  StagingBytes update_staging(int64_t n) const override { return staging_bytes(n, layout_.stride_bytes); }
  UpdateTarget begin_update(const int64_t* rows, int64_t n, std::span<uint8_t> fat, std::span<int64_t> slots,
                            Tier staging_tier) override {
    for (int64_t i = 0; i < n; ++i) slots[static_cast<size_t>(i)] = i;
    c_.backend->copy_rows(parts(true, fat.data(), staging_tier, rows, 0), n, c_.exec);
    kernels::TableView v{fat.data(), &layout_, n, 0, rows};
    v.tier = staging_tier;
    return {v, slots.data()};
  }
  void end_update(const int64_t* rows, int64_t n, std::span<const uint8_t> fat, Tier staging_tier) override {
    c_.backend->copy_rows(parts(false, const_cast<uint8_t*>(fat.data()), staging_tier, rows, 0), n, c_.exec);
  }

  Status read_rows(int64_t begin, int64_t count, uint8_t* out, Tier tier) const override {
    if (count > 0) std::memset(out, 0, static_cast<size_t>(count) * layout_.stride_bytes);  // gaps read as zeros
    c_.backend->copy_rows(parts(true, out, tier, nullptr, begin), count, c_.exec);
    return Status();
  }
  Status write_rows(int64_t begin, int64_t count, const uint8_t* in, Tier tier) override {
    // A scatter only reads the fat rows: the cast gives them the source's type, never written.
    c_.backend->copy_rows(parts(false, const_cast<uint8_t*>(in), tier, nullptr, begin), count, c_.exec);
    return Status();
  }

 private:
  // The two parts (weights, state) of a KernelBackend::copy_rows between this table's buffers
  // and fat rows at `fat` ([count, stride_bytes] in `fat_tier`): fat row u is table row
  // first + (table_rows ? table_rows[u] : u). to_fat: table -> fat rows, else back. Alignment
  // gaps of the fat rows are not written.
  std::array<kernels::RowCopy, 2> parts(bool to_fat, uint8_t* fat, Tier fat_tier, const int64_t* table_rows,
                                        int64_t first) const {
    struct End {
      uint8_t* base;
      size_t stride;
      const int64_t* rows;
      Tier tier;
    };
    const End fat_end[2] = {{fat, layout_.stride_bytes, nullptr, fat_tier},
                            {fat + state_begin_, layout_.stride_bytes, nullptr, fat_tier}};
    const End table_end[2] = {
        {rows_.as<uint8_t>() + static_cast<size_t>(first) * weights_layout_.stride_bytes, weights_layout_.stride_bytes,
         table_rows, weights_tier_},
        {state_.as<uint8_t>() + static_cast<size_t>(first) * state_stride_, state_stride_, table_rows, state_tier_}};
    const size_t part_bytes[2] = {layout_.weight_bytes, layout_.state_bytes};
    std::array<kernels::RowCopy, 2> out;
    for (size_t k = 0; k < 2; ++k) {
      const End& from = to_fat ? table_end[k] : fat_end[k];
      const End& to = to_fat ? fat_end[k] : table_end[k];
      out[k] = kernels::RowCopy{to.base,     to.stride, to.rows,   to.tier,     from.base,
                                from.stride, from.rows, from.tier, part_bytes[k]};
    }
    return out;
  }

  ResidencyContext c_;
  RowLayout layout_;          // the fat row (staged rows)
  RowLayout weights_layout_;  // `layout_` without the state: the stride of rows_
  Allocation rows_, state_;
  size_t state_begin_ = 0;    // offset of the state bytes in a fat row
  size_t state_stride_ = 0;
  Tier weights_tier_, state_tier_;
};

}  // namespace

Result<std::unique_ptr<Residency>> make_split_rows(const ResidencyContext& c) {
  if (c.layout.state_bytes == 0 || c.allocator_for(Category::kWeights) == c.allocator_for(Category::kOptimizerState))
    return std::unique_ptr<Residency>();
  auto r = std::make_unique<SplitRows>(c);
  LEANEMB_RETURN_IF_ERROR(r->allocate());
  return std::unique_ptr<Residency>(std::move(r));
}

Result<std::unique_ptr<Residency>> make_resident_rows(const ResidencyContext& c) {
  auto r = std::make_unique<ResidentRows>(c);
  LEANEMB_RETURN_IF_ERROR(r->allocate());
  return std::unique_ptr<Residency>(std::move(r));
}

}  // namespace leanemb::table_internal
