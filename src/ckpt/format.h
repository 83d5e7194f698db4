// The on-disk format of a checkpoint (docs/formats/checkpoint.md is the specification; this
// header is its code): the manifest record types, their binary encoding, the block geometry of
// data files, the checksums and the directory names.
//
// Everything here is a pure function of its arguments (no I/O, no state); thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "leanemb/checkpoint.h"
#include "leanemb/status.h"

namespace leanemb::ckpt {

inline constexpr char kManifestMagic[8] = {'L', 'E', 'A', 'N', 'C', 'K', 'P', 'T'};
// Version 2 (written): the manifest body starts with the checkpoint's 128-bit id, and every
// block checksum is seeded with it, so a data file of another checkpoint (another step's
// data-00000.dat copied or swapped in) fails its checksums. Version 1 (no id) is still read.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kOldestFormatVersion = 1;
inline constexpr size_t kCheckpointIdBytes = 16;
inline constexpr char kManifestName[] = "MANIFEST";
inline constexpr char kDataFileName[] = "data-00000.dat";
inline constexpr char kTmpSuffix[] = ".tmp";
inline constexpr char kDeletingSuffix[] = ".deleting";  // a checkpoint being removed
inline constexpr uint64_t kChecksumBytes = 8;            // XXH3-64 after every block
inline constexpr uint32_t kMaxBlockBytes = 64u << 20;    // writer and decoder limit
inline constexpr size_t kMaxNameBytes = 1024;            // entry names
inline constexpr size_t kMaxMetaBytes = 1u << 20;        // table meta, stored in the manifest
inline constexpr uint64_t kMaxRowBytes = uint64_t{1} << 32;

// One data file of the checkpoint directory.
struct FileRecord {
  std::string name;            // file name inside the checkpoint directory
  uint64_t payload_bytes = 0;  // logical bytes (checksums excluded)
  uint32_t block_bytes = 0;    // payload bytes per block (the last block may be shorter)
};

// Rows [row_begin, row_begin + row_count) of a table, stored contiguously at payload byte
// `offset` of file `file` (an index into Manifest::files).
struct ChunkRecord {
  int64_t row_begin = 0;
  int64_t row_count = 0;
  uint32_t file = 0;
  uint64_t offset = 0;
};

struct EntryRecord {
  EntryKind kind = EntryKind::kBlob;
  std::string name;
  // kBlob: `size` bytes at payload byte `offset` of file `file`.
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  // kTable: chunks sorted by row_begin, covering [0, total_rows) exactly once.
  uint64_t row_bytes = 0;
  int64_t total_rows = 0;
  std::vector<uint8_t> meta;
  std::vector<ChunkRecord> chunks;
};

// What a data file's block checksums are seeded with: the file name, then (version 2) the
// checkpoint id. Empty id: version 1.
struct ChecksumKey {
  std::string file_name;
  std::vector<uint8_t> checkpoint_id;  // kCheckpointIdBytes bytes, or empty (version 1)
};

struct Manifest {
  uint32_t version = kFormatVersion;
  // A random id of this checkpoint (version 2; empty for version 1), written in the manifest
  // and bound into every block checksum of its data files.
  std::vector<uint8_t> id;
  int64_t step = 0;
  std::vector<FileRecord> files;
  std::vector<EntryRecord> entries;  // sorted by name (bytewise), names unique
};

// The manifest file's bytes: header, body, XXH3-64 of everything before it.
// REQUIRES: `m` passes the checks decode_manifest() makes.
std::vector<uint8_t> encode_manifest(const Manifest& m);

// Parses and validates manifest bytes read from `path` (used in messages only): magic, version,
// length, checksum, then every field (indexes, ranges, sorted unique names, table coverage).
// Errors: DataLoss naming `path` and what is wrong; Unimplemented for a newer format version.
Result<Manifest> decode_manifest(std::span<const uint8_t> bytes, const std::string& path);

// Block geometry of a data file with `payload_bytes` logical bytes in blocks of `block_bytes`.
uint64_t num_blocks(uint64_t payload_bytes, uint32_t block_bytes);
uint64_t physical_file_bytes(uint64_t payload_bytes, uint32_t block_bytes);

// XXH3-64 of one block's payload, seeded by the file name, the checkpoint id (version 2) and
// the block index so that swapped blocks, swapped files and files of another checkpoint do not
// verify.
uint64_t block_checksum(const ChecksumKey& key, uint64_t block_index, std::span<const uint8_t> payload);

// A fresh random checkpoint id (kCheckpointIdBytes bytes: std::random_device, the clock and
// `step` hashed together; unique in practice, not a secret).
std::vector<uint8_t> new_checkpoint_id(int64_t step);
// "0f3a..." (32 hex digits), or "none" for an empty id.
std::string checkpoint_id_hex(std::span<const uint8_t> id);

// The reserved blob kParentBlob of an incremental checkpoint: "leanemb-parent-v1" (17 bytes),
// i64 parent step, str (u32 length + bytes) the parent's id in 32 hex digits.
std::vector<uint8_t> encode_parent_blob(int64_t step, std::string_view id_hex);
// Errors: DataLoss naming `where` (bad magic, truncated, trailing bytes, a negative step or an
// id that is not 32 hex digits).
Result<ParentRef> decode_parent_blob(std::span<const uint8_t> bytes, const std::string& where);
// The blob kLinkedFilesBlob: "leanemb-linked-v1", u32 count, then per file str32 path, u64
// bytes, u64 xxh3. Decode errors: DataLoss (malformed; a path that is absolute or has "..").
std::vector<uint8_t> encode_linked_files_blob(std::span<const LinkedFile> files);
Result<std::vector<LinkedFile>> decode_linked_files_blob(std::span<const uint8_t> bytes, const std::string& where);
// A path a linked file may have: relative, no "." or ".." part, not empty.
bool is_linked_file_path(std::string_view path);

// Entry names: 1..kMaxNameBytes bytes, no control characters. Errors: InvalidArgument.
Status check_entry_name(std::string_view name);

// "step-0000000100" <-> 100. parse_step_dir_name accepts "step-" followed by 1..19 decimal
// digits whose value fits in int64 (so "step-7" too); anything else (".tmp" included) is nullopt.
std::string step_dir_name(int64_t step);
std::optional<int64_t> parse_step_dir_name(std::string_view name);
// True for "step-<digits>.tmp".
bool is_tmp_dir_name(std::string_view name);
// True for "step-<digits>.tmp" and "step-<digits>.deleting": leftovers of an interrupted write
// or removal, never checkpoints, removed by the next commit.
bool is_leftover_dir_name(std::string_view name);

// Little-endian encoding helpers.
void put_u32(std::vector<uint8_t>* out, uint32_t v);
void put_u64(std::vector<uint8_t>* out, uint64_t v);
uint32_t get_u32(const uint8_t* p);
uint64_t get_u64(const uint8_t* p);

}  // namespace leanemb::ckpt
