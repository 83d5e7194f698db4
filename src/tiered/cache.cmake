# The device-tier row cache (row_cache.*) and its tests. EmbeddingCollection's side of tiered
# tables is src/table/cached_tables.cc (in the library's source list).
target_sources(leanemb PRIVATE ${CMAKE_CURRENT_LIST_DIR}/row_cache.cc ${CMAKE_CURRENT_LIST_DIR}/cache_index.cc)
if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(cache_test ${CMAKE_CURRENT_LIST_DIR}/cache_test.cc ${CMAKE_CURRENT_LIST_DIR}/row_cache_test.cc
                   ${CMAKE_CURRENT_LIST_DIR}/cache_index_test.cc)
endif()
