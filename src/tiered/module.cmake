# src/tiered: tiered row storage (row stores, the device-tier row cache, dynamic id maps).
# Split in two parts so they can be built separately: store.cmake (RowStore backends, IdMap)
# and cache.cmake (RowCache and its integration with EmbeddingCollection).
include(${CMAKE_CURRENT_LIST_DIR}/store.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/cache.cmake OPTIONAL)
