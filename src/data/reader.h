// DataReader: streams batches from a list of files (Criteo TSV or our binary format, detected
// per file), with an optional seeded shuffle buffer, epochs, and an exactly restorable position.
//
// Record order. Epoch e reads the files in the given order. With shuffle_buffer = S > 0 the
// records pass through a buffer of S records (TensorFlow's shuffle): the first S fill it; then
// each incoming record replaces a uniformly chosen buffered one, which is emitted; at the end of
// the epoch the rest are emitted in random order. The random choices come from a generator
// seeded by (seed, e), so the order is a pure function of (files, options, e).
// Batches hold B = batch_size records of one epoch; the last batch of an epoch may be smaller
// (dropped with drop_last). next() returns false after num_epochs epochs (0 = never).
//
// Resume. save_state() records (epoch, records emitted in the epoch, statistics);
// restore_state() re-reads the epoch from its start through a fresh shuffle buffer and discards
// that many records, which rebuilds the same buffer contents and generator state, so the next
// batches equal those an uninterrupted reader returns. Cost: re-reading up to one epoch (no
// warnings are repeated and the malformed-rate check is off while replaying). The state carries
// a fingerprint of the options (file names, schema, batch size, shuffle, seed, drop_last) and is
// refused by a reader opened with other ones.
//
// Ownership: the reader owns its files and buffers; the caller owns the Batch it fills.
// Memory: the shuffle buffer (S records) plus one read chunk per open file.
// Thread safety: one reader per thread; distinct readers are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/batch.h"
#include "leanemb/data_malformed.h"
#include "data/schema.h"
#include "data/source.h"

namespace leanemb::data {

struct ReaderOptions {
  std::vector<std::string> files;  // read in this order every epoch; TSV and binary may mix
  DataSchema schema;               // features, table sizes (num_rows), max_len, IdMode
  int64_t batch_size = 1024;       // records per batch B (> 0)
  int64_t shuffle_buffer = 0;      // records in the shuffle buffer; 0 = file order
  uint64_t seed = 0;               // shuffle seed (the epoch number is mixed in)
  int64_t num_epochs = 1;          // passes over the files; 0 = loop forever
  bool drop_last = false;          // drop the short last batch of each epoch
  MalformedPolicy malformed;       // max_malformed_rate (default 0.001), warnings
  size_t read_chunk_bytes = size_t{4} << 20;  // TSV read size (lines may be longer: it grows)
};

class DataReader {
 public:
  // Checks the options and that every file exists and matches the schema (binary headers).
  // Errors: InvalidArgument (bad option, naming it), NotFound, IoError, DataLoss.
  static Result<std::unique_ptr<DataReader>> open(ReaderOptions options);
  ~DataReader();

  // Fills *batch (cleared first, capacity kept) with the next batch; false when all epochs are
  // done. Errors (sticky: later calls return the same one): IoError, DataLoss naming file and
  // block, or naming a file whose size or modification time changed since open() (checked at
  // the end of every epoch), InvalidArgument for a malformed rate above the limit (naming file,
  // line and rate) or an epoch with no records (or, with drop_last, fewer than batch_size),
  // naming the files.
  Result<bool> next(Batch* batch);

  // The position after the last batch returned, as bytes (see "Resume" above).
  std::vector<uint8_t> save_state() const;
  // Moves to a saved position. Errors: InvalidArgument (not a reader state, or saved with other
  // options), DataLoss (the files now hold fewer records than the state was saved after), and
  // any read error while replaying.
  Status restore_state(std::span<const uint8_t> state);

  const DataStats& stats() const;
  int64_t epoch() const { return epoch_; }                      // epoch of the next record
  int64_t records_in_epoch() const { return emitted_in_epoch_; }  // emitted so far this epoch
  // Bytes held in buffers (shuffle buffer, read chunk), for memory accounting (io_buffers).
  int64_t held_bytes() const;
  const ReaderOptions& options() const { return options_; }

 private:
  explicit DataReader(ReaderOptions options);
  void begin_epoch(int64_t epoch);
  Result<bool> next_upstream(Record* r);
  Result<bool> next_record(Record** out);
  uint64_t next_random(uint64_t n);  // uniform in [0, n)
  uint64_t fingerprint() const;

  // Each file's size and modification time when the reader opened (checked at every epoch
  // end: a file that changed during the run would silently give another epoch's data).
  struct FileStamp {
    uint64_t bytes = 0;
    int64_t mtime_ns = 0;
  };
  Status check_files_unchanged() const;
  std::string file_list() const;  // "'a.tsv'" or "'a.tsv', 'b.tsv'", for messages

  ReaderOptions options_;
  std::vector<FileStamp> stamps_;
  IdMapper id_mapper_;
  MalformedTracker tracker_;
  std::unique_ptr<RecordSource> source_;
  size_t file_index_ = 0;
  bool upstream_done_ = false;
  std::vector<Record> slots_;  // the shuffle buffer; [0, buffered_) hold records
  size_t buffered_ = 0;
  Record scratch_;
  uint64_t rng_state_ = 0;
  int64_t epoch_ = 0;
  int64_t emitted_in_epoch_ = 0;
  bool finished_ = false;
  Status error_;
};

}  // namespace leanemb::data
