// CtrReader: the batches `leanemb train` reads from CTR data files (Criteo TSV or leanemb's
// binary format, detected per file; docs/data.md), for programs that train on the same data
// outside the CLI (examples/torch_dlrm.py, bench/dlrm_torch.py through the Python module).
//
// A record is a label, num_dense dense features (log(1 + max(x, 0)) in fp32) and num_sparse
// categorical features, each a bag of ids: the hash of each value modulo its table's rows
// (the ids of the CLI's CTR model with the same table_rows). Records pass through the optional
// seeded shuffle buffer and are cut into batches of batch_size (the last of an epoch may be
// smaller), exactly as `leanemb train` with the same files and options sees them.
//
//   auto r = leanemb::CtrReader::open({.files = {"data/ctr_small/train.tsv"}, .table_rows = {100000}});
//   while (*r->next()) { r->labels(); r->dense(); r->ids(f); r->offsets(f); ... }
//
// Ownership: the reader owns its files and the current batch; the spans it returns are valid
// until the next call of next().
// Thread safety: one reader per thread; distinct readers are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "leanemb/status.h"

namespace leanemb {

struct CtrReaderOptions {
  std::vector<std::string> files;   // read in this order every epoch; TSV and binary may mix
  int num_dense = 13;               // dense features per record
  int num_sparse = 26;              // categorical features per record
  // Rows of each feature's table (ids = hash % rows): one value for every feature, or
  // num_sparse values.
  std::vector<int64_t> table_rows;
  int64_t max_len = 0;              // > 0: keep the first max_len values of a multi-hot field
  int64_t batch_size = 1024;        // records per batch B (> 0)
  int64_t shuffle_buffer = 0;       // records in the shuffle buffer; 0 = file order
  uint64_t seed = 0;                // shuffle seed (the epoch number is mixed in)
  int64_t num_epochs = 1;           // passes over the files; 0 = loop forever
};

class CtrReader {
 public:
  // Checks the options and that every file exists and matches the schema.
  // Errors: InvalidArgument (a bad option or table_rows, naming it), NotFound, IoError, DataLoss.
  static Result<std::unique_ptr<CtrReader>> open(const CtrReaderOptions& options);
  ~CtrReader();
  CtrReader(const CtrReader&) = delete;
  CtrReader& operator=(const CtrReader&) = delete;

  // Reads the next batch into the reader; false when all epochs are done (the batch is then
  // empty). Errors (sticky): IoError, DataLoss naming file and block, InvalidArgument for a
  // malformed-line rate above 0.001 (naming file, line and rate) or an epoch with no records.
  Result<bool> next();

  // The batch of the last next():
  int64_t batch_size() const;               // B
  int num_dense() const;
  int num_sparse() const;
  std::span<const float> labels() const;    // [B] 0 or 1
  std::span<const float> dense() const;     // [B, num_dense] row-major
  // Feature f's bags in EmbeddingBag's layout (offsets[0] = 0, bag b = ids[offsets[b] ..
  // offsets[b + 1])). REQUIRES: 0 <= f < num_sparse().
  std::span<const int64_t> ids(int f) const;      // [nnz_f]
  std::span<const int64_t> offsets(int f) const;  // [B + 1]

 private:
  struct Impl;
  explicit CtrReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace leanemb
