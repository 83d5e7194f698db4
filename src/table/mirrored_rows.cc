// MirroredRows (residency.h): resident rows plus a second copy of every fat row in host memory,
// kept equal through the residency interface and compared whenever rows are read out. A write to
// the table's memory that does not come through the interface (a kernel or backend writing rows
// it was not given, a stray pointer) shows up as DataLoss naming the first row that differs, at
// the next read_raw_rows, checkpoint or export. For testing kernels and backends: it doubles the
// table's memory and adds a copy per updated row. Chosen only by name:
// TableOptions::residency = "mirrored".
//
// It is a layer over another residency: the rows the kernels run on are a ResidentRows
// (make_resident_rows), and this class adds the mirror around it.
#include <cstring>
#include <string>
#include <vector>

#include "table/residency.h"

namespace leanemb::table_internal {

namespace {

class MirroredRows final : public Residency {
 public:
  MirroredRows(const ResidencyContext& c, std::unique_ptr<Residency> rows, Allocation mirror)
      : stride_(c.layout.stride_bytes), num_rows_(c.options.num_rows), rows_(std::move(rows)), mirror_(std::move(mirror)) {}

  // The mirror starts as a copy of the initialized rows.
  Status init() { return rows_->read_rows(0, num_rows_, mirror_.as<uint8_t>(), Tier::kHost); }

  std::string_view name() const override { return "mirrored"; }
  kernels::TableView view() const override { return rows_->view(); }
  void set_learning_rate(float lr) override { rows_->set_learning_rate(lr); }

  // The rows the update kernel changed (unique table rows) are copied to the mirror.
  void end_update(const int64_t* rows, int64_t n, std::span<const uint8_t> fat, Tier staging_tier) override {
    rows_->end_update(rows, n, fat, staging_tier);
    for (int64_t i = 0; i < n; ++i) {
      const Status s = rows_->read_rows(rows[i], 1, at(rows[i]), Tier::kHost);
      if (!s.ok() && first_error_.ok()) first_error_ = s;
    }
  }

  Status read_rows(int64_t begin, int64_t count, uint8_t* out, Tier tier) const override {
    LEANEMB_RETURN_IF_ERROR(first_error_);
    LEANEMB_RETURN_IF_ERROR(rows_->read_rows(begin, count, out, tier));
    for (int64_t r = 0; r < count; ++r)
      if (std::memcmp(out + static_cast<size_t>(r) * stride_, at(begin + r), stride_) != 0)
        return Status(StatusCode::kDataLoss, "mirrored residency: row " + std::to_string(begin + r) +
                                                 " was changed outside the table's interface (it differs from its mirror)");
    return Status();
  }
  Status write_rows(int64_t begin, int64_t count, const uint8_t* in, Tier tier) override {
    LEANEMB_RETURN_IF_ERROR(rows_->write_rows(begin, count, in, tier));
    std::memcpy(at(begin), in, static_cast<size_t>(count) * stride_);
    return Status();
  }

 private:
  uint8_t* at(int64_t row) const { return mirror_.as<uint8_t>() + static_cast<size_t>(row) * stride_; }
  size_t stride_;
  int64_t num_rows_;
  std::unique_ptr<Residency> rows_;
  Allocation mirror_;  // [num_rows, stride] host memory
  Status first_error_;
};

}  // namespace

Result<std::unique_ptr<Residency>> make_mirrored_rows(const ResidencyContext& c) {
  if (c.options.residency != "mirrored") return std::unique_ptr<Residency>();
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<Residency> rows, make_resident_rows(c));
  LEANEMB_ASSIGN_OR_RETURN(Allocation mirror,
                           c.host()->allocate(static_cast<size_t>(c.options.num_rows) * c.layout.stride_bytes,
                                              Category::kWeights, 64));
  auto m = std::make_unique<MirroredRows>(c, std::move(rows), std::move(mirror));
  LEANEMB_RETURN_IF_ERROR(m->init());
  return std::unique_ptr<Residency>(std::move(m));
}

}  // namespace leanemb::table_internal
