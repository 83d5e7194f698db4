# ckpt: crash-safe checkpoints (docs/formats/checkpoint.md), the file-system Env and the
# `leanemb ckpt` subcommand. Included from the top-level CMakeLists.txt.

find_path(LEANEMB_XXHASH_INCLUDE_DIR xxhash.h)
find_library(LEANEMB_XXHASH_LIBRARY NAMES xxhash)
if(NOT LEANEMB_XXHASH_INCLUDE_DIR OR NOT LEANEMB_XXHASH_LIBRARY)
  message(FATAL_ERROR "leanemb: xxHash not found (Debian: apt-get install libxxhash-dev)")
endif()

target_sources(leanemb PRIVATE
  src/ckpt/env_posix.cc
  src/ckpt/fault_injection_env.cc
  src/ckpt/format.cc
  src/ckpt/block_file.cc
  src/ckpt/writer.cc
  src/ckpt/reader.cc
  src/ckpt/directory.cc
)
target_include_directories(leanemb PRIVATE ${LEANEMB_XXHASH_INCLUDE_DIR})
target_link_libraries(leanemb PRIVATE ${LEANEMB_XXHASH_LIBRARY})

if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(ckpt_test src/ckpt/ckpt_test.cc src/ckpt/ckpt_crash_test.cc)
  leanemb_add_test(ckpt_cli_test src/ckpt/ckpt_cli_test.cc)
  target_compile_definitions(ckpt_cli_test PRIVATE LEANEMB_CLI_PATH="$<TARGET_FILE:leanemb_cli>"
                                                  LEANEMB_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_dependencies(ckpt_cli_test leanemb_cli)
endif()
