// Block file writer and reader (layout in block_file.h and docs/formats/checkpoint.md).
#include "ckpt/block_file.h"

#include <algorithm>
#include <cstring>

namespace leanemb::ckpt {

BlockFileWriter::BlockFileWriter(std::unique_ptr<WritableFile> file, std::string name, uint32_t block_bytes,
                                 std::vector<uint8_t> id)
    : file_(std::move(file)), name_(std::move(name)), key_{name_, std::move(id)}, block_bytes_(block_bytes),
      buf_(block_bytes + kChecksumBytes) {}

Result<std::unique_ptr<BlockFileWriter>> BlockFileWriter::create(Env* env, const std::string& dir,
                                                                 const std::string& name, uint32_t block_bytes,
                                                                 std::vector<uint8_t> checkpoint_id) {
  LEANEMB_CHECK(block_bytes >= 1 && block_bytes <= kMaxBlockBytes, "block size out of range");
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->new_writable_file(join_path(dir, name)));
  return std::unique_ptr<BlockFileWriter>(new BlockFileWriter(std::move(f), name, block_bytes, std::move(checkpoint_id)));
}

Status BlockFileWriter::flush_block() {
  const uint64_t sum = block_checksum(key_, next_block_, std::span<const uint8_t>(buf_.data(), fill_));
  for (size_t i = 0; i < kChecksumBytes; ++i) buf_[fill_ + i] = static_cast<uint8_t>(sum >> (8 * i));
  // One append per block: the checksum travels with its payload.
  LEANEMB_RETURN_IF_ERROR(file_->append(std::span<const uint8_t>(buf_.data(), fill_ + kChecksumBytes)));
  ++next_block_;
  fill_ = 0;
  return Status();
}

Status BlockFileWriter::append(std::span<const uint8_t> data) {
  while (!data.empty()) {
    const size_t n = std::min<size_t>(data.size(), block_bytes_ - fill_);
    std::memcpy(buf_.data() + fill_, data.data(), n);
    fill_ += n;
    payload_bytes_ += n;
    data = data.subspan(n);
    if (fill_ == block_bytes_) LEANEMB_RETURN_IF_ERROR(flush_block());
  }
  return Status();
}

Status BlockFileWriter::finish() {
  if (fill_ > 0) LEANEMB_RETURN_IF_ERROR(flush_block());
  LEANEMB_RETURN_IF_ERROR(file_->sync());
  return file_->close();
}

BlockFileReader::BlockFileReader(std::unique_ptr<RandomAccessFile> file, FileRecord rec, std::vector<uint8_t> id)
    : file_(std::move(file)), rec_(std::move(rec)), key_{rec_.name, std::move(id)} {}

Result<std::unique_ptr<BlockFileReader>> BlockFileReader::open(Env* env, const std::string& dir, const FileRecord& rec,
                                                               std::vector<uint8_t> checkpoint_id) {
  const std::string path = join_path(dir, rec.name);
  const uint64_t want = physical_file_bytes(rec.payload_bytes, rec.block_bytes);
  auto size = env->file_size(path);
  if (!size.ok()) {
    if (size.status().code() == StatusCode::kNotFound)
      return Status(StatusCode::kDataLoss, "data file '" + path + "' listed in the manifest is missing");
    return size.status();
  }
  if (*size != want)
    return Status(StatusCode::kDataLoss, "data file '" + path + "' has " + std::to_string(*size) +
                                             " bytes, the manifest says " + std::to_string(want) +
                                             (*size < want ? " (truncated)" : " (appended to)"));
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, env->new_random_access_file(path));
  return std::unique_ptr<BlockFileReader>(new BlockFileReader(std::move(f), rec, std::move(checkpoint_id)));
}

uint64_t BlockFileReader::block_end(uint64_t index) const {
  return std::min<uint64_t>(rec_.payload_bytes, (index + 1) * rec_.block_bytes);
}

Status BlockFileReader::load_block(uint64_t index) const {
  if (cached_ == index) return Status();
  const uint64_t begin = block_begin(index);
  const size_t len = static_cast<size_t>(block_end(index) - begin);
  const uint64_t file_offset = index * (uint64_t{rec_.block_bytes} + kChecksumBytes);
  cached_ = UINT64_MAX;
  cache_.resize(len + kChecksumBytes);
  LEANEMB_RETURN_IF_ERROR(file_->read_at(file_offset, cache_));
  const uint64_t stored = get_u64(cache_.data() + len);
#ifndef LEANEMB_FUZZING  // the fuzz build reads on behind a bad checksum (fuzz/)
  if (block_checksum(key_, index, std::span<const uint8_t>(cache_.data(), len)) != stored)
    return Status(StatusCode::kDataLoss, "file '" + rec_.name + "' block " + std::to_string(index) + " (file bytes [" +
                                             std::to_string(file_offset) + ", " +
                                             std::to_string(file_offset + len + kChecksumBytes) + ")): checksum mismatch" +
                                             (key_.checkpoint_id.empty() ? "" : " (corrupt, or a data file of another checkpoint)"));
#else
  (void)stored;
#endif
  cached_ = index;
  return Status();
}

Status BlockFileReader::read(uint64_t offset, std::span<uint8_t> out) const {
  if (offset > rec_.payload_bytes || out.size() > rec_.payload_bytes - offset)
    return out_of_range("read of bytes [" + std::to_string(offset) + ", +" + std::to_string(out.size()) +
                        ") beyond the payload of file '" + rec_.name + "'");
  std::lock_guard<std::mutex> lock(mu_);
  size_t done = 0;
  while (done < out.size()) {
    const uint64_t pos = offset + done;
    const uint64_t index = pos / rec_.block_bytes;
    LEANEMB_RETURN_IF_ERROR(load_block(index));
    const size_t within = static_cast<size_t>(pos - block_begin(index));
    const size_t n = std::min<size_t>(out.size() - done, static_cast<size_t>(block_end(index) - pos));
    std::memcpy(out.data() + done, cache_.data() + within, n);
    done += n;
  }
  return Status();
}

Status BlockFileReader::check_block(uint64_t index) const {
  if (index >= num_blocks()) return out_of_range("file '" + rec_.name + "' has no block " + std::to_string(index));
  std::lock_guard<std::mutex> lock(mu_);
  return load_block(index);
}

}  // namespace leanemb::ckpt
