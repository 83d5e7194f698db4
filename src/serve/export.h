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
// out_dir reads as a run directory): the same model with int8 rows (DType::kInt8Rowwise: dim
// codes, an fp32 scale and an fp32 bias per row), no row or dense optimizer state, the tables
// lookup-only; blobs train/state, train/config (the run's), dense/param/*, serve/format.
// `leanemb predict` and `test` read it like any checkpoint. Each row is the int8 rounding of the
// trained row, so predictions differ from the trained model's by that rounding only. Dynamic
// tables are refused (their rows cannot be frozen).
//
// Thread safety: one call at a time per output directory.
#pragma once

#include <cstdio>
#include <span>
#include <string>
#include <vector>

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

// Returns a line saying what was written (bytes of the tables before and after).
Result<std::string> export_serving(const SavedRun& run, const std::string& out_dir, std::span<const std::string> sets);

// One .npy file (format 1.0, '<f4', C order) of `shape` whose data the callback writes in order.
// Exposed for tests.
Status write_npy_header(std::FILE* f, std::span<const int64_t> shape);

}  // namespace leanemb::serve
