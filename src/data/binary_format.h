// The leanemb binary record format (docs/formats/binary-data.md): a 64-byte header, then blocks
// of records, each block with its own XXH3-64 checksum. All integers little-endian.
//
//   header  "LEANEMBD" | u32 version=1 | u32 header_bytes=64 | u32 num_dense | u32 num_sparse |
//           u32 dense_transform=1 (log1p) | u32 hash_kind=1 (xxh3 of the u64 value, seed=feature) |
//           u64 num_records | u64 num_blocks | u64 num_malformed (lines dropped at conversion) |
//           u64 XXH3-64 of header bytes [0, 56)
//   block   u32 "BLK1" | u32 num_records | u64 payload_bytes | u64 XXH3-64 of payload | payload
//   record  f32 label | f32 dense[num_dense] | u32 counts[num_sparse] | u64 hashes[sum(counts)]
//
// Records hold transformed dense values and categorical hashes before any modulo, so the
// feature's table size and max_len are still chosen when reading. A reader decodes exactly the
// Record a TSV parse of the same line gives (with max_len applied the same way).
//
// BinaryWriter writes `path`.tmp and renames it on finish() (a crash leaves no partial file
// under the final name). BinaryFileReader verifies the header checksum, every block checksum
// and the total record count.
//
// Ownership: each object owns its file and buffers. Thread safety: one object per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/io.h"
#include "data/schema.h"

namespace leanemb::data {

inline constexpr char kBinaryMagic[8] = {'L', 'E', 'A', 'N', 'E', 'M', 'B', 'D'};
inline constexpr uint32_t kBinaryVersion = 1;
inline constexpr uint32_t kBinaryHeaderBytes = 64;
inline constexpr uint32_t kBlockHeaderBytes = 24;
inline constexpr uint32_t kBlockMagic = 0x314b4c42;  // "BLK1"
inline constexpr uint32_t kDenseTransformLog1p = 1;
inline constexpr uint32_t kHashKindXxh3U64 = 1;
// Blocks larger than this are rejected as corrupt (the writer never makes one).
inline constexpr uint64_t kMaxBlockPayloadBytes = uint64_t{1} << 30;

struct BinaryHeader {
  uint32_t version = kBinaryVersion;
  uint32_t num_dense = 0;
  uint32_t num_sparse = 0;
  uint64_t num_records = 0;
  uint64_t num_blocks = 0;
  uint64_t num_malformed = 0;  // TSV lines the converter skipped
};

// True when `prefix` (the first bytes of a file) starts with kBinaryMagic.
bool has_binary_magic(std::span<const uint8_t> prefix);

// Appends the encoding of one record to *payload. REQUIRES: r.dense.size() == num_dense,
// r.counts.size() == num_sparse, r.hashes.size() == sum(r.counts).
void encode_record(const Record& r, std::vector<uint8_t>* payload);

class BinaryWriter {
 public:
  // Creates `path`.tmp for `num_dense` dense and `num_sparse` sparse features; blocks close
  // when their payload reaches `block_bytes`. Errors: IoError.
  static Result<std::unique_ptr<BinaryWriter>> create(const std::string& path, int num_dense, int num_sparse,
                                                      size_t block_bytes = size_t{1} << 20);
  // Adds one record. Errors: IoError.
  Status add(const Record& r);
  // Adds `num_records` records already encoded with encode_record (bytes are copied).
  Status add_encoded(std::span<const uint8_t> bytes, uint64_t num_records);
  // Writes the last block and the final header, fsyncs and renames to `path`.
  // `num_malformed` is recorded in the header. Errors: IoError.
  Status finish(uint64_t num_malformed = 0);
  uint64_t num_records() const { return header_.num_records + pending_records_; }

 private:
  BinaryWriter(OutputFile file, BinaryHeader header, size_t block_bytes)
      : file_(std::move(file)), header_(header), block_bytes_(block_bytes) {}
  Status flush_block();
  OutputFile file_;
  BinaryHeader header_;
  size_t block_bytes_;
  std::vector<uint8_t> payload_;
  uint64_t pending_records_ = 0;
};

class BinaryFileReader {
 public:
  // Opens and checks the header. Errors: NotFound, IoError, DataLoss (bad magic/checksum,
  // unknown version or transform, a file that was never finished), all naming the path.
  static Result<std::unique_ptr<BinaryFileReader>> open(InputFile file);

  const BinaryHeader& header() const { return header_; }
  // Decodes the next record into *r, keeping the first schema.sparse[f].max_len values of each
  // feature (the rest added to *truncated). false after the last record.
  // REQUIRES: schema.num_dense / num_sparse equal the header's.
  // Errors: DataLoss naming file and block (checksum mismatch, truncated file, a payload that
  // does not decode, a record count other than the header's) or the byte offset of bytes after
  // the last block; InvalidArgument naming the byte offset where a second binary file starts
  // (files concatenated); IoError.
  Result<bool> next(const DataSchema& schema, Record* r, int64_t* truncated);
  int64_t bytes_read() const { return bytes_read_; }

 private:
  BinaryFileReader(InputFile file, BinaryHeader header) : file_(std::move(file)), header_(header) {}
  Status load_block();
  // Errors: InvalidArgument (another binary file follows the last block: concatenated files),
  // DataLoss (other bytes follow it), both naming the byte offset.
  Status check_end();
  InputFile file_;
  BinaryHeader header_;
  std::vector<uint8_t> payload_;
  size_t pos_ = 0;               // decode position in payload_
  uint64_t block_left_ = 0;      // records not yet decoded in the current block
  uint64_t blocks_read_ = 0;
  uint64_t records_read_ = 0;
  int64_t bytes_read_ = 0;
};

}  // namespace leanemb::data
