// The file row store's factory with its test hook (the store itself is private to
// file_store.cc; see row_store.h for the contract and docs/tiered.md for the details).
#pragma once

#include <functional>
#include <memory>

#include "tiered/file_io.h"
#include "tiered/row_store.h"

namespace leanemb::tiered {

struct FileStoreHooks {
  // Called once with the chosen engine and the store's block size; the store uses what it
  // returns (tests wrap the engine in a FaultInjectionFileIo). Empty: the engine as is.
  std::function<std::unique_ptr<RowFileIo>(std::unique_ptr<RowFileIo>, uint32_t block_bytes)> wrap_io;
};

// REQUIRES: options.kind == StoreKind::kFile. Errors: InvalidArgument (options), NotFound /
// IoError (open, ftruncate), Unimplemented (io_engine kUring where io_uring is refused),
// ResourceExhausted (staging buffers, presence bitmap).
Result<std::unique_ptr<RowStore>> make_file_row_store(const RowStoreOptions& options, Allocator* host_alloc,
                                                      const FileStoreHooks& hooks = {});

}  // namespace leanemb::tiered
