# fuzz/: libFuzzer harnesses of the readers (docs: README "Fuzzing"). Included from the top-level
# CMakeLists.txt.
#   fuzz preset (LEANEMB_BUILD_FUZZERS, clang 14, ASan + UBSan): fuzz_<name>, the real fuzzers;
#     scripts/fuzz.sh builds and runs them.
#   every other build with tests: fuzz_<name>_replay runs the harness once on each seed input
#     (fuzz/corpus/<name>/) and each input a fuzzer crashed on (fuzz/regressions/<name>/), as
#     the CTest test fuzz_replay_<name>.
set(LEANEMB_FUZZ_HARNESSES tsv text toml binary ckpt sharded_ckpt)
if(LEANEMB_BUILD_FUZZERS)
  # The modules no harness reads through (kernels, tables, dense layers, model, row stores,
  # distribution, planner) are compiled without sanitizers or coverage at -O0: the harnesses
  # only link their parse functions, and the fuzz build stays a few minutes on 2 cores. The
  # sharded checkpoint reader of src/dist (fuzz_sharded_ckpt) keeps both.
  get_target_property(_lib_sources leanemb SOURCES)
  foreach(_s ${_lib_sources})
    if(_s MATCHES "src/(kernels|table|nn|model|tiered|dist|plan|amp)/" AND NOT _s MATCHES "src/dist/sharded_checkpoint")
      set_property(SOURCE ${_s} TARGET_DIRECTORY leanemb APPEND PROPERTY COMPILE_OPTIONS -O0 -fno-sanitize=all)
    endif()
  endforeach()
  # The kernels' longest files, compiled as target leanemb_kernel_builds (CMakeLists.txt).
  set_property(TARGET leanemb_kernel_builds APPEND PROPERTY COMPILE_OPTIONS -O0 -fno-sanitize=all)
  set(_fuzzers "")
  foreach(_n ${LEANEMB_FUZZ_HARNESSES})
    add_executable(fuzz_${_n} ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${_n}.cc)
    target_link_libraries(fuzz_${_n} PRIVATE leanemb)
    target_include_directories(fuzz_${_n} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
    target_link_options(fuzz_${_n} PRIVATE -fsanitize=fuzzer)
    leanemb_set_warnings(fuzz_${_n})
    list(APPEND _fuzzers fuzz_${_n})
  endforeach()
  add_custom_target(fuzzers DEPENDS ${_fuzzers})
elseif(LEANEMB_BUILD_TESTS)
  foreach(_n ${LEANEMB_FUZZ_HARNESSES})
    add_executable(fuzz_${_n}_replay ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${_n}.cc ${PROJECT_SOURCE_DIR}/fuzz/replay_main.cc)
    target_link_libraries(fuzz_${_n}_replay PRIVATE leanemb)
    target_include_directories(fuzz_${_n}_replay PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
    leanemb_set_warnings(fuzz_${_n}_replay)
    add_test(NAME fuzz_replay_${_n} COMMAND fuzz_${_n}_replay ${PROJECT_SOURCE_DIR}/fuzz/corpus/${_n}
             ${PROJECT_SOURCE_DIR}/fuzz/regressions/${_n})
  endforeach()
endif()
