// Block files: the data files of a checkpoint. A block file is a logical byte stream (the
// payload) cut into blocks of block_bytes; on disk every block is followed by its 8-byte
// XXH3-64 checksum (format.h block_checksum). Payload byte L lives in block L / block_bytes at
// file offset (L / block_bytes) * (block_bytes + 8) + L % block_bytes.
//
// BlockFileWriter streams payload in (memory: one block), BlockFileReader reads payload ranges
// back, checking the checksum of every block it touches.
//
// Ownership: each owns its open file; the Env must outlive them. Thread safety: a writer is
// used by one thread at a time; a reader's methods may be called concurrently (one mutex
// serializes them around its one-block cache).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "leanemb/env.h"
#include "ckpt/format.h"

namespace leanemb::ckpt {

class BlockFileWriter {
 public:
  // Creates (truncates) `dir`/`name`, whose block checksums are seeded with `checkpoint_id`
  // (format.h ChecksumKey; empty: version 1). REQUIRES: 1 <= block_bytes <= kMaxBlockBytes.
  // Errors: as Env::new_writable_file.
  static Result<std::unique_ptr<BlockFileWriter>> create(Env* env, const std::string& dir, const std::string& name,
                                                         uint32_t block_bytes, std::vector<uint8_t> checkpoint_id = {});

  // Appends payload bytes; every full block is written with its checksum.
  // Errors: IoError (from the Env).
  Status append(std::span<const uint8_t> data);
  // Writes the last, partial block, syncs and closes. Errors: IoError.
  Status finish();

  uint64_t payload_bytes() const { return payload_bytes_; }  // appended so far
  FileRecord record() const { return {name_, payload_bytes_, block_bytes_}; }

 private:
  BlockFileWriter(std::unique_ptr<WritableFile> file, std::string name, uint32_t block_bytes, std::vector<uint8_t> id);
  Status flush_block();

  std::unique_ptr<WritableFile> file_;
  std::string name_;
  ChecksumKey key_;
  uint32_t block_bytes_;
  std::vector<uint8_t> buf_;  // [block_bytes + 8]: payload of the current block, then room for its checksum
  size_t fill_ = 0;           // payload bytes in buf_
  uint64_t payload_bytes_ = 0;
  uint64_t next_block_ = 0;
};

class BlockFileReader {
 public:
  // Opens `dir`/`rec.name` and checks that its size is physical_file_bytes(rec). Its block
  // checksums are checked against `checkpoint_id` (the manifest's; empty: version 1), so a
  // file of another checkpoint fails them.
  // Errors: DataLoss (missing file, or wrong size: truncated or appended to), IoError.
  static Result<std::unique_ptr<BlockFileReader>> open(Env* env, const std::string& dir, const FileRecord& rec,
                                                       std::vector<uint8_t> checkpoint_id = {});

  // Copies payload bytes [offset, offset + out.size()) into out, checking every block touched.
  // Errors: DataLoss ("file 'x' block b at byte o: checksum mismatch"), OutOfRange (beyond the
  // payload), IoError.
  Status read(uint64_t offset, std::span<uint8_t> out) const;
  // Reads block `index` and checks it. Errors: as read().
  Status check_block(uint64_t index) const;

  const FileRecord& record() const { return rec_; }
  uint64_t num_blocks() const { return ckpt::num_blocks(rec_.payload_bytes, rec_.block_bytes); }
  // Payload bytes [first, end) of block `index`.
  uint64_t block_begin(uint64_t index) const { return index * rec_.block_bytes; }
  uint64_t block_end(uint64_t index) const;

 private:
  BlockFileReader(std::unique_ptr<RandomAccessFile> file, FileRecord rec, std::vector<uint8_t> id);
  // Loads block `index` into the cache (if not there) and checks it. REQUIRES: mu_ held.
  Status load_block(uint64_t index) const;

  std::unique_ptr<RandomAccessFile> file_;
  FileRecord rec_;
  ChecksumKey key_;
  mutable std::mutex mu_;
  mutable std::vector<uint8_t> cache_;  // block cached_ with its checksum
  mutable uint64_t cached_ = UINT64_MAX;
};

}  // namespace leanemb::ckpt
