// CtrReader (leanemb/ctr_reader.h): a DataReader over a make_schema schema, its Batch exposed as
// spans.
#include "leanemb/ctr_reader.h"

#include <utility>

#include "data/batch.h"
#include "data/reader.h"
#include "data/schema.h"

namespace leanemb {

struct CtrReader::Impl {
  std::unique_ptr<data::DataReader> reader;
  data::Batch batch;
};

CtrReader::CtrReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CtrReader::~CtrReader() = default;

Result<std::unique_ptr<CtrReader>> CtrReader::open(const CtrReaderOptions& options) {
  data::ReaderOptions ro;
  ro.files = options.files;
  LEANEMB_ASSIGN_OR_RETURN(ro.schema,
                           data::make_schema(options.num_dense, options.num_sparse, options.table_rows, options.max_len));
  ro.batch_size = options.batch_size;
  ro.shuffle_buffer = options.shuffle_buffer;
  ro.seed = options.seed;
  ro.num_epochs = options.num_epochs;
  auto impl = std::make_unique<Impl>();
  LEANEMB_ASSIGN_OR_RETURN(impl->reader, data::DataReader::open(std::move(ro)));
  return std::unique_ptr<CtrReader>(new CtrReader(std::move(impl)));
}

Result<bool> CtrReader::next() { return impl_->reader->next(&impl_->batch); }

int64_t CtrReader::batch_size() const { return impl_->batch.batch_size; }
int CtrReader::num_dense() const { return impl_->batch.num_dense; }
int CtrReader::num_sparse() const { return static_cast<int>(impl_->batch.sparse.size()); }
std::span<const float> CtrReader::labels() const { return impl_->batch.labels; }
std::span<const float> CtrReader::dense() const { return impl_->batch.dense; }
std::span<const int64_t> CtrReader::ids(int f) const { return impl_->batch.sparse[static_cast<size_t>(f)].ids; }
std::span<const int64_t> CtrReader::offsets(int f) const {
  return impl_->batch.sparse[static_cast<size_t>(f)].offsets;
}

}  // namespace leanemb
