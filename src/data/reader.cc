// DataReader. Invariants:
//   * records emitted in epoch e are a pure function of (files, options, e): the shuffle
//     generator is re-seeded from (seed, e) at every epoch start and consumes exactly one draw
//     per emitted record, whether the record came from the steady state or the final drain;
//   * emitted_in_epoch_ counts records handed to batches since the epoch started, so replaying
//     that many records from the epoch start reproduces buffer, generator and file position.
#include "data/reader.h"

#include <xxhash.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/bytes.h"
#include "core/rng.h"
#include "data/io.h"

namespace leanemb::data {

namespace {

constexpr char kStateMagic[8] = {'L', 'E', 'D', 'R', 'S', 'T', 'A', 'T'};
constexpr uint32_t kStateVersion = 2;  // 2: eight malformed kinds (text kinds added)

}  // namespace

DataReader::DataReader(ReaderOptions options)
    : options_(std::move(options)), id_mapper_(options_.schema), tracker_(options_.malformed) {}
DataReader::~DataReader() = default;

Result<std::unique_ptr<DataReader>> DataReader::open(ReaderOptions o) {
  if (o.files.empty()) return invalid_argument("data reader: no input files");
  LEANEMB_RETURN_IF_ERROR(validate_schema(o.schema));
  if (o.batch_size <= 0) return invalid_argument("data reader: batch_size must be > 0, got " + std::to_string(o.batch_size));
  if (o.shuffle_buffer < 0 || o.shuffle_buffer > (int64_t{1} << 32))
    return invalid_argument("data reader: shuffle_buffer must be in [0, 2^32], got " + std::to_string(o.shuffle_buffer));
  if (o.num_epochs < 0) return invalid_argument("data reader: num_epochs must be >= 0 (0 = forever)");
  if (!(o.malformed.max_rate >= 0.0 && o.malformed.max_rate <= 1.0))
    return invalid_argument("data reader: max_malformed_rate must be in [0, 1]");
  if (o.malformed.min_lines < 0) return invalid_argument("data reader: malformed min_lines must be >= 0");
  if (o.read_chunk_bytes < 4096) return invalid_argument("data reader: read_chunk_bytes must be >= 4096");
  // Fail early on missing files and on binary files of another schema.
  MalformedTracker probe(MalformedPolicy{});
  for (const std::string& f : o.files) { LEANEMB_RETURN_IF_ERROR(open_record_source(f, o.schema, &probe, 4096).status()); }
  // One pass's bytes: the malformed-line rate is judged over the whole pass (malformed.h).
  o.malformed.total_input_bytes = 0;
  for (const std::string& f : o.files) {
    LEANEMB_ASSIGN_OR_RETURN(InputFile in, InputFile::open(f));
    LEANEMB_ASSIGN_OR_RETURN(uint64_t bytes, in.size());
    o.malformed.total_input_bytes += static_cast<int64_t>(bytes);
  }
  auto r = std::unique_ptr<DataReader>(new DataReader(std::move(o)));
  for (const std::string& f : r->options_.files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) return io_error("data reader: cannot stat '" + f + "': " + std::strerror(errno));
    r->stamps_.push_back({static_cast<uint64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  r->begin_epoch(0);
  return r;
}

Status DataReader::check_files_unchanged() const {
  for (size_t i = 0; i < stamps_.size(); ++i) {
    const std::string& f = options_.files[i];
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0)
      return Status(StatusCode::kDataLoss, "data file '" + f + "' is gone since the run started (" + std::strerror(errno) +
                                               "): every epoch must read the same data");
    const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    const uint64_t bytes = static_cast<uint64_t>(st.st_size);
    if (bytes != stamps_[i].bytes || mtime_ns != stamps_[i].mtime_ns)
      return Status(StatusCode::kDataLoss,
                    "data file '" + f + "' changed during the run (epoch " + std::to_string(epoch_) + "): " +
                        (bytes != stamps_[i].bytes ? "it " + std::string(bytes < stamps_[i].bytes ? "shrank" : "grew") + " from " +
                                                         std::to_string(stamps_[i].bytes) + " to " + std::to_string(bytes) + " bytes"
                                                   : "it was modified (same size, " + std::to_string(bytes) + " bytes)") +
                        "; every epoch must read the same data: restore the file or start the run afresh");
  }
  return Status::ok_status();
}

std::string DataReader::file_list() const {
  std::string s;
  for (size_t i = 0; i < options_.files.size(); ++i) s += (i ? ", '" : "'") + options_.files[i] + "'";
  return s;
}

void DataReader::begin_epoch(int64_t epoch) {
  epoch_ = epoch;
  emitted_in_epoch_ = 0;
  file_index_ = 0;
  source_.reset();
  upstream_done_ = false;
  buffered_ = 0;
  rng_state_ = mix64(mix64(options_.seed ^ 0x73687566666c6521ull) + static_cast<uint64_t>(epoch));
}

uint64_t DataReader::next_random(uint64_t n) {
  rng_state_ += 0x9e3779b97f4a7c15ull;
  const uint64_t x = mix64(rng_state_);
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
}

Result<bool> DataReader::next_upstream(Record* r) {
  while (true) {
    if (!source_) {
      if (file_index_ == options_.files.size()) {
        LEANEMB_RETURN_IF_ERROR(tracker_.on_pass_end(options_.files.back()));
        return false;
      }
      LEANEMB_ASSIGN_OR_RETURN(source_, open_record_source(options_.files[file_index_], options_.schema, &tracker_,
                                                           options_.read_chunk_bytes));
    }
    LEANEMB_ASSIGN_OR_RETURN(bool got, source_->next(r));
    if (got) return true;
    source_.reset();
    ++file_index_;
  }
}

Result<bool> DataReader::next_record(Record** out) {
  const size_t cap = static_cast<size_t>(options_.shuffle_buffer);
  if (cap == 0) {
    LEANEMB_ASSIGN_OR_RETURN(bool got, next_upstream(&scratch_));
    *out = &scratch_;
    return got;
  }
  while (!upstream_done_ && buffered_ < cap) {
    if (slots_.size() <= buffered_) slots_.emplace_back();
    LEANEMB_ASSIGN_OR_RETURN(bool got, next_upstream(&slots_[buffered_]));
    if (!got) upstream_done_ = true;
    else ++buffered_;
  }
  if (!upstream_done_) {
    LEANEMB_ASSIGN_OR_RETURN(bool got, next_upstream(&scratch_));
    if (got) {
      std::swap(scratch_, slots_[next_random(buffered_)]);
      *out = &scratch_;
      return true;
    }
    upstream_done_ = true;
  }
  if (buffered_ == 0) return false;
  std::swap(slots_[next_random(buffered_)], slots_[buffered_ - 1]);
  --buffered_;
  *out = &slots_[buffered_];
  return true;
}

Result<bool> DataReader::next(Batch* batch) {
  if (!error_.ok()) return error_;
  const DataSchema& schema = options_.schema;
  batch->clear(schema.num_dense, schema.num_sparse);
  batch->epoch = epoch_;
  if (finished_) return false;
  auto fail = [&](Status s) -> Result<bool> {
    error_ = std::move(s);
    return error_;
  };
  while (batch->batch_size < options_.batch_size) {
    Record* r = nullptr;
    auto got = next_record(&r);
    if (!got.ok()) return fail(got.status());
    if (got.value()) {
      batch->append(*r, id_mapper_);
      ++emitted_in_epoch_;
      continue;
    }
    // End of epoch. A file that changed since open() explains anything below: said first.
    if (Status s = check_files_unchanged(); !s.ok()) return fail(std::move(s));
    if (emitted_in_epoch_ == 0) {
      const DataStats& st = tracker_.stats();
      return fail(invalid_argument("data reader: epoch " + std::to_string(epoch_) + " has no valid records in " + file_list() +
                                   " (" + std::to_string(st.lines) + " lines read in all, " + std::to_string(st.malformed) +
                                   " malformed)"));
    }
    if (options_.drop_last && emitted_in_epoch_ < options_.batch_size)
      return fail(invalid_argument("data reader: epoch " + std::to_string(epoch_) + " of " + file_list() + " has " +
                                   std::to_string(emitted_in_epoch_) + " records, fewer than batch_size " +
                                   std::to_string(options_.batch_size) + " (drop_last would yield nothing)"));
    begin_epoch(epoch_ + 1);
    if (options_.num_epochs > 0 && epoch_ >= options_.num_epochs) finished_ = true;
    if (batch->batch_size > 0 && !options_.drop_last) return true;
    batch->clear(schema.num_dense, schema.num_sparse);
    batch->epoch = epoch_;
    if (finished_) return false;
  }
  return true;
}

uint64_t DataReader::fingerprint() const {
  std::vector<uint8_t> buf;
  ByteWriter w(&buf);
  const DataSchema& s = options_.schema;
  w.put<uint64_t>(options_.files.size());
  for (const std::string& f : options_.files) {
    const std::string base = std::filesystem::path(f).filename().string();
    w.put<uint64_t>(XXH3_64bits(base.data(), base.size()));
  }
  w.put<int32_t>(s.num_dense);
  w.put<int32_t>(s.num_sparse);
  w.put<uint8_t>(static_cast<uint8_t>(s.id_mode));
  for (const SparseFeatureSchema& f : s.sparse) {
    w.put<int64_t>(f.num_rows);
    w.put<int64_t>(f.max_len);
  }
  w.put<int64_t>(options_.batch_size);
  w.put<int64_t>(options_.shuffle_buffer);
  w.put<uint64_t>(options_.seed);
  w.put<uint8_t>(options_.drop_last ? 1 : 0);
  if (s.string_values) w.put<uint8_t>(1);  // (absent for hex values: earlier positions stay valid)
  return XXH3_64bits(buf.data(), buf.size());
}

std::vector<uint8_t> DataReader::save_state() const {
  std::vector<uint8_t> buf;
  ByteWriter w(&buf);
  w.raw(kStateMagic, sizeof kStateMagic);
  w.put<uint32_t>(kStateVersion);
  w.put<uint64_t>(fingerprint());
  w.put<int64_t>(epoch_);
  w.put<int64_t>(emitted_in_epoch_);
  w.put<uint8_t>(finished_ ? 1 : 0);
  const DataStats& st = tracker_.stats();
  for (int64_t v : {st.lines, st.records, st.malformed, st.truncated_values, st.converted_malformed, st.bytes_read})
    w.put<int64_t>(v);
  for (int64_t v : st.malformed_by_kind) w.put<int64_t>(v);
  w.put<uint64_t>(st.first_malformed.size());
  w.raw(st.first_malformed);
  w.put<uint64_t>(XXH3_64bits(buf.data(), buf.size()));
  return buf;
}

Status DataReader::restore_state(std::span<const uint8_t> state) {
  const Status bad = invalid_argument("data reader: restore_state: not a reader state (bad magic, size or checksum)");
  if (state.size() < 8 + 8 || std::memcmp(state.data(), kStateMagic, 8) != 0) return bad;
  uint64_t sum = 0;
  std::memcpy(&sum, state.data() + state.size() - 8, 8);
  if (sum != XXH3_64bits(state.data(), state.size() - 8)) return bad;
  ByteReader r(state.first(state.size() - 8));
  std::string magic;
  uint32_t version = 0;
  if (!r.raw(8, &magic) || !r.get(&version)) return bad;
  if (version != kStateVersion)
    return invalid_argument("data reader: restore_state: the state has format version " + std::to_string(version) +
                            ", this build reads version " + std::to_string(kStateVersion) +
                            " (saved by another leanemb version; start the run afresh)");
  uint64_t fp = 0, msg_len = 0;
  int64_t epoch = 0, emitted = 0;
  uint8_t finished = 0;
  DataStats st;
  bool ok = r.get(&fp) && r.get(&epoch) && r.get(&emitted) && r.get(&finished);
  for (int64_t* v : {&st.lines, &st.records, &st.malformed, &st.truncated_values, &st.converted_malformed, &st.bytes_read})
    ok = ok && r.get(v);
  for (int64_t& v : st.malformed_by_kind) ok = ok && r.get(&v);
  ok = ok && r.get(&msg_len) && r.raw(msg_len, &st.first_malformed) && r.pos() == state.size() - 8;
  if (!ok || epoch < 0 || emitted < 0) return bad;
  if (fp != fingerprint())
    return invalid_argument("data reader: restore_state: the state was saved by a reader with other options "
                            "(files, schema, batch_size, shuffle_buffer, seed or drop_last differ)");
  error_ = Status::ok_status();
  begin_epoch(epoch);
  finished_ = false;
  if (finished == 0 && !(options_.num_epochs > 0 && epoch >= options_.num_epochs)) {
    tracker_.set_replaying(true);
    Status replay;
    for (int64_t i = 0; i < emitted && replay.ok(); ++i) {
      Record* rec = nullptr;
      auto got = next_record(&rec);
      if (!got.ok()) replay = got.status();
      else if (!got.value())
        replay = Status(StatusCode::kDataLoss, "data reader: restore_state: epoch " + std::to_string(epoch) + " now has " +
                                                   std::to_string(i) + " records, the state was saved after " +
                                                   std::to_string(emitted) + " (did the input files change?)");
    }
    tracker_.set_replaying(false);
    if (!replay.ok()) {
      error_ = replay;
      return replay;
    }
    emitted_in_epoch_ = emitted;
  }
  // A reader opened with fewer epochs than the state's position has nothing left to read.
  finished_ = finished != 0 || (options_.num_epochs > 0 && epoch >= options_.num_epochs);
  tracker_.stats() = std::move(st);
  return Status::ok_status();
}

const DataStats& DataReader::stats() const { return tracker_.stats(); }

int64_t DataReader::held_bytes() const {
  auto record_bytes = [](const Record& r) {
    return static_cast<int64_t>(sizeof(Record) + 4 * r.dense.capacity() + 4 * r.counts.capacity() + 8 * r.hashes.capacity());
  };
  int64_t total = record_bytes(scratch_) + static_cast<int64_t>(options_.read_chunk_bytes);
  for (const Record& r : slots_) total += record_bytes(r);
  return total;
}

}  // namespace leanemb::data
