// Binary record format. Invariant of BinaryWriter: header_.num_records / num_blocks count the
// blocks already written; the header on disk says num_records = UINT64_MAX until finish()
// rewrites it, so a file whose writer died is recognized as unfinished.
#include "data/binary_format.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace leanemb::data {

namespace {

constexpr uint64_t kUnfinished = ~uint64_t{0};

template <typename T>
void put(std::vector<uint8_t>* out, T v) {
  const size_t n = out->size();
  out->resize(n + sizeof(T));
  std::memcpy(out->data() + n, &v, sizeof(T));
}

template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::vector<uint8_t> header_bytes(const BinaryHeader& h) {
  std::vector<uint8_t> b(kBinaryMagic, kBinaryMagic + 8);
  put<uint32_t>(&b, h.version);
  put<uint32_t>(&b, kBinaryHeaderBytes);
  put<uint32_t>(&b, h.num_dense);
  put<uint32_t>(&b, h.num_sparse);
  put<uint32_t>(&b, kDenseTransformLog1p);
  put<uint32_t>(&b, kHashKindXxh3U64);
  put<uint64_t>(&b, h.num_records);
  put<uint64_t>(&b, h.num_blocks);
  put<uint64_t>(&b, h.num_malformed);
  put<uint64_t>(&b, XXH3_64bits(b.data(), b.size()));
  return b;
}

Status data_loss(const std::string& path, const std::string& what) {
  return Status(StatusCode::kDataLoss, "data: " + path + ": " + what);
}

}  // namespace

bool has_binary_magic(std::span<const uint8_t> prefix) {
  return prefix.size() >= 8 && std::memcmp(prefix.data(), kBinaryMagic, 8) == 0;
}

void encode_record(const Record& r, std::vector<uint8_t>* payload) {
  const size_t bytes = 4 * (1 + r.dense.size() + r.counts.size()) + 8 * r.hashes.size();
  const size_t n = payload->size();
  payload->resize(n + bytes);
  uint8_t* p = payload->data() + n;
  std::memcpy(p, &r.label, 4);
  p += 4;
  std::memcpy(p, r.dense.data(), 4 * r.dense.size());
  p += 4 * r.dense.size();
  std::memcpy(p, r.counts.data(), 4 * r.counts.size());
  p += 4 * r.counts.size();
  std::memcpy(p, r.hashes.data(), 8 * r.hashes.size());
}

// ---- writer -----------------------------------------------------------------------------------

Result<std::unique_ptr<BinaryWriter>> BinaryWriter::create(const std::string& path, int num_dense, int num_sparse,
                                                           size_t block_bytes) {
  if (num_dense < 0 || num_sparse < 0) return invalid_argument("data: binary writer needs num_dense, num_sparse >= 0");
  LEANEMB_ASSIGN_OR_RETURN(OutputFile file, OutputFile::create(path));
  BinaryHeader h;
  h.num_dense = static_cast<uint32_t>(num_dense);
  h.num_sparse = static_cast<uint32_t>(num_sparse);
  BinaryHeader placeholder = h;
  placeholder.num_records = kUnfinished;
  LEANEMB_RETURN_IF_ERROR(file.write(header_bytes(placeholder)));
  return std::unique_ptr<BinaryWriter>(new BinaryWriter(std::move(file), h, block_bytes == 0 ? 1 : block_bytes));
}

Status BinaryWriter::add(const Record& r) {
  encode_record(r, &payload_);
  ++pending_records_;
  if (payload_.size() >= block_bytes_) return flush_block();
  return Status::ok_status();
}

Status BinaryWriter::add_encoded(std::span<const uint8_t> bytes, uint64_t num_records) {
  payload_.insert(payload_.end(), bytes.begin(), bytes.end());
  pending_records_ += num_records;
  if (payload_.size() >= block_bytes_) return flush_block();
  return Status::ok_status();
}

Status BinaryWriter::flush_block() {
  if (pending_records_ == 0) return Status::ok_status();
  std::vector<uint8_t> bh;
  put<uint32_t>(&bh, kBlockMagic);
  put<uint32_t>(&bh, static_cast<uint32_t>(pending_records_));
  put<uint64_t>(&bh, payload_.size());
  put<uint64_t>(&bh, XXH3_64bits(payload_.data(), payload_.size()));
  LEANEMB_RETURN_IF_ERROR(file_.write(bh));
  LEANEMB_RETURN_IF_ERROR(file_.write(payload_));
  header_.num_records += pending_records_;
  ++header_.num_blocks;
  pending_records_ = 0;
  payload_.clear();
  return Status::ok_status();
}

Status BinaryWriter::finish(uint64_t num_malformed) {
  LEANEMB_RETURN_IF_ERROR(flush_block());
  header_.num_malformed = num_malformed;
  LEANEMB_RETURN_IF_ERROR(file_.pwrite(0, header_bytes(header_)));
  return file_.commit();
}

// ---- reader -----------------------------------------------------------------------------------

Result<std::unique_ptr<BinaryFileReader>> BinaryFileReader::open(InputFile file) {
  uint8_t b[kBinaryHeaderBytes];
  bool full = false;
  LEANEMB_RETURN_IF_ERROR(file.read_full(b, &full));
  const std::string& path = file.path();
  if (!full || !has_binary_magic(b)) return data_loss(path, "not a leanemb binary data file (bad magic or short header)");
#ifndef LEANEMB_FUZZING  // the fuzz build reaches the decoder behind the checksum (fuzz/)
  if (get<uint64_t>(b + 56) != XXH3_64bits(b, 56)) return data_loss(path, "header checksum mismatch");
#endif
  BinaryHeader h;
  h.version = get<uint32_t>(b + 8);
  if (h.version != kBinaryVersion)
    return data_loss(path, "unsupported format version " + std::to_string(h.version) + " (this build reads 1)");
  if (get<uint32_t>(b + 12) != kBinaryHeaderBytes) return data_loss(path, "unexpected header size");
  h.num_dense = get<uint32_t>(b + 16);
  h.num_sparse = get<uint32_t>(b + 20);
  if (get<uint32_t>(b + 24) != kDenseTransformLog1p || get<uint32_t>(b + 28) != kHashKindXxh3U64)
    return data_loss(path, "unknown dense transform or hash kind");
  h.num_records = get<uint64_t>(b + 32);
  h.num_blocks = get<uint64_t>(b + 40);
  h.num_malformed = get<uint64_t>(b + 48);
  if (h.num_records == kUnfinished) return data_loss(path, "the file was never finished (its writer did not complete)");
  auto r = std::unique_ptr<BinaryFileReader>(new BinaryFileReader(std::move(file), h));
  r->bytes_read_ = kBinaryHeaderBytes;
  return r;
}

Status BinaryFileReader::load_block() {
  const std::string& path = file_.path();
  const std::string where = "block " + std::to_string(blocks_read_);
  uint8_t bh[kBlockHeaderBytes];
  bool full = false;
  LEANEMB_RETURN_IF_ERROR(file_.read_full(bh, &full));
  if (!full) return data_loss(path, "truncated: " + where + " header is missing (the header promises " +
                                        std::to_string(header_.num_blocks) + " blocks)");
  const uint64_t payload_bytes = get<uint64_t>(bh + 8);
  if (get<uint32_t>(bh) != kBlockMagic || payload_bytes > kMaxBlockPayloadBytes)
    return data_loss(path, where + " header is corrupt");
  // A block cannot be longer than the rest of the file: checked before the buffer is sized, so
  // that a damaged length does not allocate and clear up to kMaxBlockPayloadBytes for nothing
  // (found by fuzz/fuzz_binary: a 640-byte file took seconds per block).
  LEANEMB_ASSIGN_OR_RETURN(uint64_t file_bytes, file_.size());
  const uint64_t at = static_cast<uint64_t>(bytes_read_) + kBlockHeaderBytes;
  if (payload_bytes > (file_bytes > at ? file_bytes - at : 0))
    return data_loss(path, "truncated inside " + where + " (it announces " + std::to_string(payload_bytes) + " bytes, the file has " +
                               std::to_string(file_bytes > at ? file_bytes - at : 0) + " left)");
  payload_.resize(payload_bytes);
  LEANEMB_RETURN_IF_ERROR(file_.read_full(payload_, &full));
  if (!full) return data_loss(path, "truncated inside " + where);
#ifndef LEANEMB_FUZZING
  if (XXH3_64bits(payload_.data(), payload_.size()) != get<uint64_t>(bh + 16))
    return data_loss(path, where + " checksum mismatch");
#endif
  block_left_ = get<uint32_t>(bh + 4);
  pos_ = 0;
  ++blocks_read_;
  bytes_read_ += static_cast<int64_t>(kBlockHeaderBytes + payload_bytes);
  return Status::ok_status();
}

// After the last block the header announces the file must end: bytes after it were ignored
// before, so `cat a.bin b.bin > c.bin` read as a.bin alone and a damaged tail went unnoticed.
Status BinaryFileReader::check_end() {
  const std::string& path = file_.path();
  LEANEMB_ASSIGN_OR_RETURN(uint64_t file_bytes, file_.size());
  const uint64_t end = static_cast<uint64_t>(bytes_read_);
  if (file_bytes <= end) return Status::ok_status();
  const std::string at = "byte offset " + std::to_string(end);
  uint8_t head[kBinaryHeaderBytes] = {};
  bool full = false;
  LEANEMB_RETURN_IF_ERROR(file_.read_full(std::span<uint8_t>(head, std::min<uint64_t>(sizeof head, file_bytes - end)), &full));
  if (file_bytes - end >= kBinaryHeaderBytes && has_binary_magic(head))
    return invalid_argument("data: " + path + ": another binary data file starts at " + at + ", after the " +
                            std::to_string(header_.num_blocks) + " blocks its header announces (files joined with cat?): "
                            "a binary data file holds one file's records; list each file in data.train instead");
  return data_loss(path, std::to_string(file_bytes - end) + " bytes of trailing garbage at " + at + ", after the " +
                             std::to_string(header_.num_blocks) + " blocks its header announces");
}

Result<bool> BinaryFileReader::next(const DataSchema& schema, Record* r, int64_t* truncated) {
  const std::string& path = file_.path();
  while (block_left_ == 0) {
    if (pos_ != payload_.size())
      return data_loss(path, "block " + std::to_string(blocks_read_ - 1) + " holds bytes beyond its records");
    if (blocks_read_ == header_.num_blocks) {
      if (records_read_ != header_.num_records)
        return data_loss(path, "holds " + std::to_string(records_read_) + " records, the header says " +
                                   std::to_string(header_.num_records));
      LEANEMB_RETURN_IF_ERROR(check_end());
      return false;
    }
    LEANEMB_RETURN_IF_ERROR(load_block());
  }
  const size_t nd = header_.num_dense, ns = header_.num_sparse;
  const size_t fixed = 4 * (1 + nd + ns);
  auto corrupt = [&] { return data_loss(path, "block " + std::to_string(blocks_read_ - 1) + " does not decode"); };
  if (payload_.size() - pos_ < fixed) return corrupt();
  const uint8_t* p = payload_.data() + pos_;
  std::memcpy(&r->label, p, 4);
  // (memcpy of 0 bytes into an empty vector's null data() is undefined: guarded; found by
  // fuzz/fuzz_binary under UBSan, a record without values)
  r->dense.resize(nd);
  if (nd) std::memcpy(r->dense.data(), p + 4, 4 * nd);
  r->counts.resize(ns);
  if (ns) std::memcpy(r->counts.data(), p + 4 + 4 * nd, 4 * ns);
  uint64_t total = 0;
  bool truncate = false;
  for (size_t f = 0; f < ns; ++f) {
    const uint32_t c = r->counts[f];
    const int64_t max_len = schema.sparse[f].max_len;
    total += c;
    truncate |= max_len > 0 && c > max_len;
  }
  if ((payload_.size() - pos_ - fixed) / 8 < total) return corrupt();
  const uint8_t* h = p + fixed;
  r->hashes.resize(static_cast<size_t>(total));
  if (!truncate) {
    if (total) std::memcpy(r->hashes.data(), h, 8 * static_cast<size_t>(total));
  } else {
    uint64_t* out = r->hashes.data();
    for (size_t f = 0; f < ns; ++f) {
      const uint32_t c = r->counts[f];
      const int64_t max_len = schema.sparse[f].max_len;
      const uint32_t keep = max_len > 0 && c > max_len ? static_cast<uint32_t>(max_len) : c;
      std::memcpy(out, h, 8 * size_t{keep});
      out += keep;
      h += 8 * size_t{c};
      *truncated += c - keep;
      r->counts[f] = keep;
    }
    r->hashes.resize(static_cast<size_t>(out - r->hashes.data()));
  }
  pos_ += fixed + 8 * static_cast<size_t>(total);
  --block_left_;
  ++records_read_;
  return true;
}

}  // namespace leanemb::data
