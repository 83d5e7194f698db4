// Checks of a run's inputs before any training step (docs/train.md, "Exit codes"): every data
// file exists, is a regular, readable, non-empty file, and generated data matches [data.gen].
// Each failure names the key and the file, so that a run never fails on an input after hours of
// training.
//
// Thread safety: plain functions (they read the file system).
#pragma once

#include "leanemb/status.h"
#include "ctr/ctr_config.h"

namespace leanemb::ctr {

// data.train and data.eval files. Errors: NotFound (missing), InvalidArgument (a directory or
// another non-regular file, empty, unreadable), each naming the key and the path.
Status check_data_files(const CtrConfig& c);

// With data.generate and data that already exists: its meta.json must record the [data.gen]
// values of the config (rows, seed, vocab, zipf, teacher shares, format, ...), since the data
// is not generated again. Errors: InvalidArgument naming every differing key, the value the
// data was generated with and the config's; OK when meta.json is absent (data not ours).
Status check_generated_data(const CtrConfig& c);

}  // namespace leanemb::ctr
