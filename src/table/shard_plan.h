// ShardPlan: which rank owns each row of each embedding table, and where the row lives there.
//
// Sharding kinds (per table):
//   kTableWise  the whole table on one rank: global row r is local row r of its owner. The
//               owner is TableShardSpec::owner, or chosen by ShardPlanOptions::table_assign:
//               round-robin over the table-wise tables, or by size (largest first onto the
//               rank with the fewest rows * dim so far, ties to the lower rank).
//   kRowModulo  global row r -> rank r % P, local row r / P (spreads hot low ids evenly).
//   kRowRange   contiguous blocks: rank k holds [begin_k, begin_{k+1}), the first N % P ranks
//               one row more than the others (N / P); local row = r - begin_owner.
// With fewer rows than ranks, the row-wise kinds leave some ranks without rows of the table.
// Dense parameters are not in a ShardPlan: they are replicated and all-reduced.
//
// In src/table (a one-process collection reading a sharded checkpoint needs the saving run's
// plan; table_ckpt, sharded_layout.h), under its old name dist::ShardPlan.
//
// A ShardPlan is an immutable value, identical on every rank that builds it from the same
// options; it may be shared between threads.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "leanemb/status.h"
#include "leanemb/tables.h"

namespace leanemb::dist {

// The enums are part of the public table interface (leanemb/tables.h).
using ::leanemb::parse_sharding_kind;
using ::leanemb::sharding_kind_name;
using ::leanemb::ShardingKind;
using ::leanemb::TableAssign;

struct TableShardSpec {
  int64_t num_rows = 0;  // rows of the table, >= 1
  int64_t dim = 1;       // used only to balance table-wise tables by size, >= 1
  ShardingKind kind = ShardingKind::kRowModulo;
  int owner = -1;        // kTableWise: the owning rank, or -1 = chosen by table_assign
};

struct ShardPlanOptions {
  int world_size = 1;  // P, >= 1
  std::vector<TableShardSpec> tables;
  TableAssign table_assign = TableAssign::kRoundRobin;  // table-wise tables without an owner
};

class ShardPlan {
 public:
  // Errors: InvalidArgument naming the table (world_size < 1, num_rows < 1, dim < 1, owner out
  // of range, owner set for a row-wise table).
  static Result<ShardPlan> create(const ShardPlanOptions& options);

  int world_size() const { return world_size_; }
  int num_tables() const { return static_cast<int>(tables_.size()); }
  ShardingKind kind(int table) const { return tables_[static_cast<size_t>(table)].kind; }
  int64_t num_rows(int table) const { return tables_[static_cast<size_t>(table)].num_rows; }
  // kTableWise: the owning rank; row-wise kinds: -1.
  int table_owner(int table) const { return tables_[static_cast<size_t>(table)].owner; }

  // The mapping. REQUIRES: 0 <= table < num_tables(), 0 <= row < num_rows(table),
  // 0 <= rank < world_size(), 0 <= local_row < local_num_rows(table, rank) (check_row() and
  // check_local_row() validate untrusted values).
  int owner(int table, int64_t row) const;
  int64_t local_row(int table, int64_t row) const;
  int64_t global_row(int table, int rank, int64_t local_row) const;
  int64_t local_num_rows(int table, int rank) const;

  // Errors: OutOfRange naming table and row.
  Status check_row(int table, int64_t row) const;
  Status check_local_row(int table, int rank, int64_t local_row) const;

 private:
  struct Table {
    ShardingKind kind;
    int64_t num_rows;
    int owner;         // kTableWise
    int64_t base;      // kRowRange: N / P
    int64_t rem;       // kRowRange: N % P (ranks < rem hold base + 1 rows)
  };
  ShardPlan() = default;
  int64_t range_begin(const Table& t, int rank) const;

  int world_size_ = 1;
  std::vector<Table> tables_;
};

}  // namespace leanemb::dist
