# Shared compile settings and test helper.

# Warnings, determinism-relevant flags and sanitizers for one target.
function(leanemb_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter
    # GCC notes that 32-byte vector arguments change the ABI without AVX; ours are inline only.
    -Wno-psabi
    # No FMA contraction: the multiversioned kernels must round exactly like the reference.
    -ffp-contract=off
    # sqrt without errno, so loops over it vectorize (results are unchanged).
    -fno-math-errno)
  if(LEANEMB_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

if(LEANEMB_SANITIZE)
  string(REPLACE ";" "," _san "${LEANEMB_SANITIZE}")
  add_compile_options(-fsanitize=${_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_san})
  # target_clones (ifunc) resolvers run before the sanitizer runtime is ready.
  add_compile_definitions(LEANEMB_NO_MULTIVERSION)
endif()

# Optimization flags for code that needs no speed: the test programs' own sources (the library
# they test keeps the build type's flags). The sanitizer presets set -O0: it halves the compile
# time of those files (measured on src/table/table_test.cc under ASan + UBSan: 23.4 s at -O1,
# 12.1 s at -O0). The release preset sets -O1: about 0.6x the CPU of -O3 (reliability_test.cc
# 26.5 -> 17.9 s, table_test.cc 15.5 -> 9.5 s, serve_cli_test.cc 17.2 -> 10.7 s; GCC 12, AMD EPYC
# Zen 3, 2026-12-07, user + sys of single compiles beside a -j2 build), while the tests' own
# loops (simulations, reference sums) keep some speed.
set(LEANEMB_LIGHT_OPT_FLAGS "" CACHE STRING "Compile flags for the test programs' own sources (e.g. -O0)")

# leanemb_add_test(name source...) : one GoogleTest binary, registered with CTest.
function(leanemb_add_test name)
  add_executable(${name} ${ARGN})
  if(LEANEMB_LIGHT_OPT_FLAGS)
    target_compile_options(${name} PRIVATE ${LEANEMB_LIGHT_OPT_FLAGS})
  endif()
  target_link_libraries(${name} PRIVATE leanemb GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})  # tests/cli_testing.h
  leanemb_set_warnings(${name})
  # Passive OpenMP waiting: tests share 2 cores with each other (ctest -j) and spinning
  # workers would starve them.
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600 ENVIRONMENT OMP_WAIT_POLICY=passive)
endfunction()
