#include "table/column_state_ckpt.h"

#include <cstring>
#include <vector>

namespace leanemb::table_ckpt {

Status add_column_state_blobs(ckpt::CheckpointWriter& w, const EmbeddingCollection& local) {
  for (int t = 0; t < local.num_tables(); ++t) {
    const std::span<const float> col = local.column_state(t);
    if (col.empty()) continue;
    const auto* p = reinterpret_cast<const uint8_t*>(col.data());
    LEANEMB_RETURN_IF_ERROR(w.add_blob(column_state_blob(local.options().tables[static_cast<size_t>(t)].name),
                                       std::span<const uint8_t>(p, col.size_bytes())));
  }
  return Status();
}

Status read_column_state_blobs(const ckpt::CheckpointReader& r, EmbeddingCollection& local) {
  // Every blob is read and checked before any table changes.
  std::vector<std::vector<uint8_t>> blobs(static_cast<size_t>(local.num_tables()));
  for (int t = 0; t < local.num_tables(); ++t) {
    const std::span<float> col = local.column_state(t);
    if (col.empty()) continue;
    const std::string name = column_state_blob(local.options().tables[static_cast<size_t>(t)].name);
    if (r.find(name) == nullptr)
      return invalid_argument("checkpoint has no blob '" + name + "' (the optimizer's column state of table '" +
                              local.options().tables[static_cast<size_t>(t)].name + "')");
    LEANEMB_ASSIGN_OR_RETURN(blobs[static_cast<size_t>(t)], r.read_blob(name));
    if (blobs[static_cast<size_t>(t)].size() != col.size_bytes())
      return data_loss("checkpoint blob '" + name + "' has " + std::to_string(blobs[static_cast<size_t>(t)].size()) +
                       " bytes, expected " + std::to_string(col.size_bytes()));
  }
  for (int t = 0; t < local.num_tables(); ++t) {
    const std::span<float> col = local.column_state(t);
    if (!col.empty()) std::memcpy(col.data(), blobs[static_cast<size_t>(t)].data(), col.size_bytes());
  }
  return Status();
}

}  // namespace leanemb::table_ckpt
