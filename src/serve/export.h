// `leanemb export` (docs/serve.md): a trained model's arrays as NumPy files, and a compact
// serving checkpoint.
//
// export_model() writes into out_dir:
//   manifest.json            what follows, with shapes and dtypes, the task, the checkpoint and
//                            step, and how ids reach rows ("id_hashing")
//   tables/<table>.npy       float32 [rows, dim]: every row's weights as the model reads them
//                            (fp16 / bf16 / int8 rows decoded)
//   tables/<table>.state.npy float32 [rows, state floats per row] (--with-state): the row
//                            optimizer's state, as EmbeddingTables::read_state gives it
//   dense/<name>.npy         float32 [n]: each dense parameter, flat in the layer's order
//   dense/<name>.opt.npy     (--with-state) its dense optimizer state, flat
//   words.vec                text models: fastText's .vec text format ("<words> <dim>", then
//                            "<word> <v1> ... <vdim>" per vocabulary word, most frequent first)
// .npy files are NumPy format 1.0, little-endian, C order.
//
// export_serving() writes a compact serving checkpoint into <out_dir>/checkpoints/step-<N> (so
// out_dir reads as a run directory; it owns out_dir as `leanemb train` does, see below): the same model with int8 rows (DType::kInt8Rowwise: dim
// codes, an fp32 scale and an fp32 bias per row), no row or dense optimizer state, the tables
// lookup-only; blobs train/state, train/config (the run's), dense/param/*, serve/format.
// `leanemb predict` and `test` read it like any checkpoint. Each row is the int8 rounding of the
// trained row, so predictions differ from the trained model's by that rounding only. Dynamic
// tables are refused (their rows cannot be frozen).
//
// Pruning (prune_min_count N >= 1, docs/serve.md "Pruning"): a counting pass reads the run's
// training files once, in file order, with the trainer's reader and id rules (CTR: the config's
// schema, categorical hashing and hash % table_rows; text: the vocabulary rebuilt from the files
// and text::read_dataset's ids, words and n-gram buckets), and counts every row's occurrences.
// Rows counted fewer than N times are dropped: each table keeps only its other rows, in
// ascending order, and its blob "serve/kept/<table>" (int64 little-endian, ascending) lists
// their trained row numbers; "serve/format" records prune_min_count and per table the trained
// and kept rows. Lookups map ids through table/pruned_rows.h (pruned ids are dropped).
//
// Thread safety: one call at a time per output directory.
#pragma once

#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "leanemb/status.h"
#include "serve/saved_model.h"

namespace leanemb::serve {

struct ExportOptions {
  std::string out_dir;
  bool with_state = false;
  std::vector<std::string> sets;  // applied to the saved config (memory budgets, ...)
};

// Returns a few lines saying what was written. Errors: open/load errors, IoError.
Result<std::string> export_model(const SavedRun& run, const ExportOptions& options);

struct ServingExportOptions {
  std::string out_dir;
  std::vector<std::string> sets;  // applied to the saved config
  int64_t prune_min_count = 0;    // >= 1: drop rows counted fewer times in the training files; 0: keep all
  // out_dir holding checkpoints, shards/ or metrics.jsonl (a training run's, an earlier
  // export's) is refused unless set; then they are moved into <out_dir>/replaced-<time>/.
  bool overwrite = false;
  std::function<void(const std::string&)> say;  // notes ("moved FROM -> TO"); null: stderr
};

// Returns lines saying what was written (bytes of the tables before and after, rows kept).
// out_dir is opened as a train::RunDir (writers_own_their_dirs): locked for the export, and
// refused when it holds work this process did not write, unless options.overwrite.
// Errors: as load_ctr / load_text, the reader's, InvalidArgument (dynamic tables, a serving
// export as input, prune_min_count < 0, out_dir holding earlier work, out_dir being the
// exported run's own directory), FailedPrecondition (out_dir locked by a run).
Result<std::string> export_serving(const SavedRun& run, const ServingExportOptions& options);

// The tasks' parts of export_model and export_serving, as the task registry calls them
// (serve/task_registry.h). *_arrays: the task's model loaded (with options.sets and
// with_state), its arrays written into options.out_dir and listed in *manifest; returns what was
// written ("26 tables, 12 dense parameters"). *_serving: the task's serving copy written
// through `w` (the export's blobs, pruning and checkpoint, export.cc); returns its path.
struct ServingWriter;
Result<std::string> export_ctr_arrays(const SavedRun& run, const ExportOptions& options, nlohmann::json* manifest);
Result<std::string> export_text_arrays(const SavedRun& run, const ExportOptions& options, nlohmann::json* manifest);
Result<std::string> export_ctr_serving(ServingWriter& w);
Result<std::string> export_text_serving(ServingWriter& w);

// One .npy file (format 1.0, '<f4', C order) of `shape` whose data the callback writes in order.
// Exposed for tests.
Status write_npy_header(std::FILE* f, std::span<const int64_t> shape);

}  // namespace leanemb::serve
