// The file row store's factory with its test hook (the store itself is private to
// file_store.cc; see row_store.h for the contract and docs/tiered.md for the details).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tiered/file_io.h"
#include "tiered/row_store.h"

namespace leanemb::tiered {

struct FileStoreHooks {
  // Called once with the chosen engine and the store's block size; the store uses what it
  // returns (tests wrap the engine in a FaultInjectionFileIo). Empty: the engine as is.
  std::function<std::unique_ptr<RowFileIo>(std::unique_ptr<RowFileIo>, uint32_t block_bytes)> wrap_io;
  // The log layout's segment bytes (0: log_segment_bytes' choice): tests make them tiny so that
  // compaction runs after a few writes.
  uint64_t log_segment_bytes = 0;
};

// REQUIRES: options.kind == StoreKind::kFile. Errors: InvalidArgument (options), NotFound /
// IoError (open, ftruncate), Unimplemented (io_engine kUring where io_uring is refused),
// ResourceExhausted (staging buffers, presence bitmap).
Result<std::unique_ptr<RowStore>> make_file_row_store(const RowStoreOptions& options, Allocator* host_alloc,
                                                      const FileStoreHooks& hooks = {});

// What the layouts share (file_store.cc): an open, locked row file and its access unit.
struct RowFile {
  std::string path;
  int fd = -1;             // owned by the store made from it
  bool direct = false;     // O_DIRECT is active
  uint32_t block = 4096;   // the access unit of writes (file_store_block_bytes' rule)
  uint32_t read_align = 4096;  // the direct-I/O offset alignment (<= block): what a read needs
};
// The engine of a store over `file` with `slots` requests in flight (kAuto: io_uring, else the
// thread pool), wrapped by hooks.wrap_io. Errors: Unimplemented (kUring refused).
Result<std::unique_ptr<RowFileIo>> make_row_file_io(const RowFile& file, size_t slots, IoEngineKind engine,
                                                     const FileStoreHooks& hooks);
// The mapped layout (row_store.cc: the host store over a mapping of the file, its blocks
// allocated first). Takes the file's descriptor (closed on error too). Errors: ResourceExhausted
// (no space for the file's blocks, no address space), IoError.
Result<std::unique_ptr<RowStore>> make_mapped_row_store(const RowStoreOptions& options, Allocator* host_alloc,
                                                        const RowFile& file);
// The directory of a log store's segment files (log_segments.h): `<path>.log`; `path` itself is
// the store's lock file.
inline std::string log_store_dir(const std::string& path) { return path + ".log"; }
// The log layout (log_store.cc). Takes the file's descriptor (closed on error too).
Result<std::unique_ptr<RowStore>> make_log_row_store(const RowStoreOptions& options, Allocator* host_alloc,
                                                     const RowFile& file, const FileStoreHooks& hooks);

}  // namespace leanemb::tiered
