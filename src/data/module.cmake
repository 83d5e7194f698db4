# src/data: readers (Criteo TSV, binary), batching, shuffling, synthetic data, metrics; the
# data_test suite (the `convert` and `gen-data` commands: src/cli/data_command.cc).
find_path(LEANEMB_XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(LEANEMB_XXHASH_LIBRARY NAMES xxhash REQUIRED)

target_sources(leanemb PRIVATE
  src/data/schema.cc
  src/data/io.cc
  src/data/malformed.cc
  src/data/tsv.cc
  src/data/binary_format.cc
  src/data/source.cc
  src/data/batch.cc
  src/data/reader.cc
  src/data/ctr_reader.cc
  src/data/convert.cc
  src/data/synthetic.cc
  src/data/metrics.cc
)
target_include_directories(leanemb PRIVATE ${LEANEMB_XXHASH_INCLUDE_DIR})
# A plain library path (not an imported target): the installed package needs no extra
# find_dependency for it.
target_link_libraries(leanemb PRIVATE ${LEANEMB_XXHASH_LIBRARY})

if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(data_test
    src/data/reader_test.cc
    src/data/binary_test.cc
    src/data/synthetic_test.cc
    src/data/metrics_test.cc
    src/data/cli_data_test.cc)
  target_include_directories(data_test PRIVATE ${LEANEMB_XXHASH_INCLUDE_DIR})
  target_link_libraries(data_test PRIVATE ${LEANEMB_XXHASH_LIBRARY})
  target_compile_definitions(data_test PRIVATE LEANEMB_CLI_PATH="$<TARGET_FILE:leanemb_cli>")
  add_dependencies(data_test leanemb_cli)
endif()
