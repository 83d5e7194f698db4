#include "table/shard_plan.h"

#include "core/enum_names.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace leanemb {

template <>
struct EnumNames<ShardingKind> {
  static constexpr std::string_view kWhat = "sharding";
  static constexpr EnumName<ShardingKind> kNames[] = {{ShardingKind::kTableWise, "table", ""},
                                                      {ShardingKind::kRowModulo, "row_modulo", "row"},
                                                      {ShardingKind::kRowRange, "row_range", ""}};
};

std::string_view sharding_kind_name(ShardingKind k) { return enum_name(k); }

Result<ShardingKind> parse_sharding_kind(std::string_view s) {
  auto r = parse_enum<ShardingKind>(s);
  if (!r.ok()) return invalid_argument("dist: " + r.status().message());
  return r;
}

}  // namespace leanemb

namespace leanemb::dist {

Result<ShardPlan> ShardPlan::create(const ShardPlanOptions& options) {
  const int p = options.world_size;
  if (p < 1) return invalid_argument("dist: ShardPlan world_size must be >= 1, got " + std::to_string(p));
  ShardPlan plan;
  plan.world_size_ = p;
  std::vector<int> unassigned;  // table-wise tables without an owner
  for (size_t i = 0; i < options.tables.size(); ++i) {
    const TableShardSpec& s = options.tables[i];
    const std::string where = "dist: ShardPlan table " + std::to_string(i) + ": ";
    if (s.num_rows < 1) return invalid_argument(where + "num_rows must be >= 1, got " + std::to_string(s.num_rows));
    if (s.dim < 1) return invalid_argument(where + "dim must be >= 1, got " + std::to_string(s.dim));
    if (s.kind != ShardingKind::kTableWise && s.owner != -1) {
      return invalid_argument(where + "owner is set (" + std::to_string(s.owner) + ") but the table is sharded " +
                              std::string(sharding_kind_name(s.kind)));
    }
    if (s.kind == ShardingKind::kTableWise && (s.owner < -1 || s.owner >= p)) {
      return invalid_argument(where + "owner " + std::to_string(s.owner) + " out of range [0, " + std::to_string(p) + ")");
    }
    Table t{s.kind, s.num_rows, s.owner, s.num_rows / p, s.num_rows % p};
    if (s.kind == ShardingKind::kTableWise && s.owner == -1) unassigned.push_back(static_cast<int>(i));
    plan.tables_.push_back(t);
  }
  if (options.table_assign == TableAssign::kRoundRobin) {
    for (size_t k = 0; k < unassigned.size(); ++k) {
      plan.tables_[static_cast<size_t>(unassigned[k])].owner = static_cast<int>(k % static_cast<size_t>(p));
    }
  } else {
    // Largest first (ties: lower table index) onto the least loaded rank (ties: lower rank).
    // Tables with an explicit owner count toward their rank's load.
    std::vector<int64_t> load(static_cast<size_t>(p), 0);
    for (size_t i = 0; i < options.tables.size(); ++i) {
      const auto& s = options.tables[i];
      if (s.kind == ShardingKind::kTableWise && s.owner >= 0) load[static_cast<size_t>(s.owner)] += s.num_rows * s.dim;
    }
    auto size_of = [&](int t) { return options.tables[static_cast<size_t>(t)].num_rows * options.tables[static_cast<size_t>(t)].dim; };
    std::stable_sort(unassigned.begin(), unassigned.end(), [&](int a, int b) { return size_of(a) > size_of(b); });
    for (int t : unassigned) {
      const auto it = std::min_element(load.begin(), load.end());
      const int r = static_cast<int>(it - load.begin());
      plan.tables_[static_cast<size_t>(t)].owner = r;
      *it += size_of(t);
    }
  }
  return plan;
}

int64_t ShardPlan::range_begin(const Table& t, int rank) const {
  const int64_t k = rank;
  return k * t.base + std::min(k, t.rem);
}

int ShardPlan::owner(int table, int64_t row) const {
  const Table& t = tables_[static_cast<size_t>(table)];
  switch (t.kind) {
    case ShardingKind::kTableWise: return t.owner;
    case ShardingKind::kRowModulo: return static_cast<int>(row % world_size_);
    case ShardingKind::kRowRange: {
      const int64_t big = t.rem * (t.base + 1);  // rows held by the ranks with one extra row
      if (row < big) return static_cast<int>(row / (t.base + 1));
      return static_cast<int>(t.rem + (row - big) / t.base);  // base > 0 here: row < N
    }
  }
  return -1;
}

int64_t ShardPlan::local_row(int table, int64_t row) const {
  const Table& t = tables_[static_cast<size_t>(table)];
  switch (t.kind) {
    case ShardingKind::kTableWise: return row;
    case ShardingKind::kRowModulo: return row / world_size_;
    case ShardingKind::kRowRange: return row - range_begin(t, owner(table, row));
  }
  return -1;
}

int64_t ShardPlan::global_row(int table, int rank, int64_t local) const {
  const Table& t = tables_[static_cast<size_t>(table)];
  switch (t.kind) {
    case ShardingKind::kTableWise: return local;
    case ShardingKind::kRowModulo: return local * world_size_ + rank;
    case ShardingKind::kRowRange: return range_begin(t, rank) + local;
  }
  return -1;
}

int64_t ShardPlan::local_num_rows(int table, int rank) const {
  const Table& t = tables_[static_cast<size_t>(table)];
  switch (t.kind) {
    case ShardingKind::kTableWise: return rank == t.owner ? t.num_rows : 0;
    case ShardingKind::kRowModulo: return t.num_rows / world_size_ + (rank < t.num_rows % world_size_ ? 1 : 0);
    case ShardingKind::kRowRange: return t.base + (rank < t.rem ? 1 : 0);
  }
  return 0;
}

Status ShardPlan::check_row(int table, int64_t row) const {
  if (table < 0 || table >= num_tables()) {
    return out_of_range("dist: table " + std::to_string(table) + " out of range [0, " + std::to_string(num_tables()) + ")");
  }
  if (row < 0 || row >= num_rows(table)) {
    return out_of_range("dist: row " + std::to_string(row) + " of table " + std::to_string(table) +
                        " out of range [0, " + std::to_string(num_rows(table)) + ")");
  }
  return Status::ok_status();
}

Status ShardPlan::check_local_row(int table, int rank, int64_t local) const {
  if (table < 0 || table >= num_tables()) {
    return out_of_range("dist: table " + std::to_string(table) + " out of range [0, " + std::to_string(num_tables()) + ")");
  }
  if (rank < 0 || rank >= world_size_) {
    return out_of_range("dist: rank " + std::to_string(rank) + " out of range [0, " + std::to_string(world_size_) + ")");
  }
  const int64_t n = local_num_rows(table, rank);
  if (local < 0 || local >= n) {
    return out_of_range("dist: local row " + std::to_string(local) + " of table " + std::to_string(table) + " on rank " +
                        std::to_string(rank) + " out of range [0, " + std::to_string(n) + ")");
  }
  return Status::ok_status();
}

}  // namespace leanemb::dist
