// What the CTR task (ctr/ctr_task.cc) shares with the commands that use a trained model
// (`leanemb test`, `predict`, `export`: src/serve, docs/serve.md): the model and reader options
// of a config, the evaluation loop and the loading of a checkpoint's dense parameters. The
// trainer's own final evaluation runs evaluate_ctr, so `leanemb test` on the eval file gives the
// same AUC and logloss bit for bit.
//
// Thread safety: as CtrModel (one thread at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/batch.h"
#include "data/reader.h"
#include "leanemb/checkpoint.h"
#include "leanemb/status.h"
#include "model/ctr_model.h"
#include "ctr/ctr_config.h"

namespace leanemb::ctr {

// The CtrModel of a config (without communicator or gradient groups).
model::CtrModelOptions ctr_model_options(const CtrConfig& c);
// The reader of `files` under the config's rules (schema, batch, malformed rate); `train`:
// shuffle and epochs as training reads, else file order and one pass.
Result<data::ReaderOptions> ctr_reader_options(const CtrConfig& c, const std::vector<std::string>& files, bool train);

// Runs the model over `files` read as evaluation reads them (file order, one pass, the config's
// batch size and micro-batches), calling on_batch(batch, probs) with the first max_rows records
// (0: all). Returns the reader's statistics.
Result<data::DataStats> predict_ctr(model::CtrModel& model, const CtrConfig& c, const std::vector<std::string>& files,
                                    int64_t max_rows,
                                    const std::function<Status(const data::Batch&, std::span<const float>)>& on_batch,
                                    const std::function<void(int64_t bytes_read)>& on_read = {});
// predict_ctr, then {"auc", "logloss", "rows"} of the records' labels against the probabilities
// (`stats`, when given, receives the reader's statistics).
Result<nlohmann::json> evaluate_ctr(model::CtrModel& model, const CtrConfig& c, const std::vector<std::string>& files,
                                    int64_t max_rows, data::DataStats* stats = nullptr);
// Loads blobs "dense/param/<name>" (and, with `state`, "dense/opt/<name>") of a checkpoint into
// the model. Errors: NotFound / DataLoss naming the blob; InvalidArgument (shapes).
Status load_ctr_dense(model::CtrModel& model, const ckpt::CheckpointReader& r, bool state);

}  // namespace leanemb::ctr
