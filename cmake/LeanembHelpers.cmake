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

# leanemb_add_test(name source...) : one GoogleTest binary, registered with CTest.
function(leanemb_add_test name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE leanemb GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})  # tests/cli_testing.h
  leanemb_set_warnings(${name})
  # Passive OpenMP waiting: tests share 2 cores with each other (ctest -j) and spinning
  # workers would starve them.
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600 ENVIRONMENT OMP_WAIT_POLICY=passive)
endfunction()
