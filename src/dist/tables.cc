// create_tables: the table stack the options describe (leanemb/tables.h). The distribution
// layer decides: a local EmbeddingCollection, or a ShardedEmbeddingCollection over the given
// communicator; the layers below (id mapping, residency) are the local collection's.
#include "dist/sharded_collection.h"
#include "leanemb/tables.h"

namespace leanemb {

Result<std::unique_ptr<EmbeddingTables>> create_tables(const CollectionOptions& options, MemorySystem* memory,
                                                       const DistributionOptions& dist) {
  if (memory == nullptr) return invalid_argument("create_tables: null MemorySystem");
  if (dist.comm == nullptr) {
    LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<EmbeddingCollection> c, EmbeddingCollection::create(options, memory));
    return std::unique_ptr<EmbeddingTables>(std::move(c));
  }
  dist::ShardedCollectionOptions so;
  so.collection = options;
  so.sharding = dist.sharding;
  so.table_assign = dist.table_assign;
  so.forward_payload = dist.forward_payload;
  so.backward_payload = dist.backward_payload;
  so.wide_ids = dist.wide_ids;
  so.max_call = dist.max_call;
  LEANEMB_ASSIGN_OR_RETURN(std::unique_ptr<dist::ShardedEmbeddingCollection> s,
                           dist::ShardedEmbeddingCollection::create(so, dist.comm, memory));
  return std::unique_ptr<EmbeddingTables>(std::move(s));
}

}  // namespace leanemb
