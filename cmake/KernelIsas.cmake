# Which ISA builds of the fast kernels are compiled (src/kernels/isa.h, isa_builds.h; docs/package.md,
# "Build time"):
#   all   baseline, x86-64-v3 (AVX2) and x86-64-v4 (AVX-512): the binaries run every build on any
#         x86-64 CPU. The Debian package needs it (the package target refuses other builds).
#   host  baseline plus the builds this machine runs (probed at configure time): a binary for this
#         machine, at its full speed, for about a third less compile time on a CPU without AVX-512
#         (on an AVX-512 machine it is `all`). The binary still runs on any x86-64 CPU, with the
#         builds it has.
#   AUTO  (default) `all` when the tests are asked for (-DLEANEMB_BUILD_TESTS=ON: CI and
#         scripts/test.sh, where every build compiles with the warnings as errors), `host`
#         otherwise: the README's quick start, also on a machine where GoogleTest happens to be
#         installed (LEANEMB_BUILD_TESTS=AUTO then builds the tests, but the quick start's
#         release-cli preset does not compile them, so `all` would only cost time).
# The sanitizer presets (debug, tsan; CMakePresets.json) set `host`: a sanitizer checks only the
# code that runs, and a build this CPU cannot run would only be compiled again (the release preset
# compiles every build with the warnings as errors). On an AVX-512 machine `host` is `all`.
# The choice is a compile definition of every target (LEANEMB_KERNELS_NO_V4 / _NO_V3, kernels/vec8.h
# and vec16.h), so the library, the tests and the Python module agree; kernels/isa.h's cpu_isa()
# reports at most the best build compiled, so the tests run every build the CPU and the build have.
set(LEANEMB_KERNEL_ISAS AUTO CACHE STRING "ISA builds of the kernels: AUTO (all with -DLEANEMB_BUILD_TESTS=ON, else host), all (portable, for the package) or host (this machine's)")
set_property(CACHE LEANEMB_KERNEL_ISAS PROPERTY STRINGS AUTO all host)

set(_isas "${LEANEMB_KERNEL_ISAS}")
if(_isas STREQUAL "AUTO")
  if("$CACHE{LEANEMB_BUILD_TESTS}" STREQUAL "ON")
    set(_isas all)
  else()
    set(_isas host)
  endif()
endif()
if(NOT _isas MATCHES "^(all|host)$")
  message(FATAL_ERROR "LEANEMB_KERNEL_ISAS=${LEANEMB_KERNEL_ISAS}: expected AUTO, all or host")
endif()

set(LEANEMB_KERNEL_ISA_HOST "")
if(_isas STREQUAL "host")
  if(CMAKE_CROSSCOMPILING)
    message(STATUS "leanemb: cross-compiling: LEANEMB_KERNEL_ISAS=host builds every ISA (all)")
    set(_isas all)
  else()
    set(_probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/leanemb_cpu_isa_probe)
    try_run(_probe_run _probe_compiled ${_probe_dir} ${PROJECT_SOURCE_DIR}/cmake/cpu_isa_probe.cc
            RUN_OUTPUT_VARIABLE _probe_out)
    # try_run caches its results: keep them in plain variables and drop the cache entries, so a
    # reconfigure probes again.
    set(_probe_ok OFF)
    if(_probe_compiled AND "${_probe_run}" STREQUAL "0")
      set(_probe_ok ON)
    endif()
    unset(_probe_run CACHE)
    unset(_probe_compiled CACHE)
    string(STRIP "${_probe_out}" _probe_out)
    if(_probe_ok AND _probe_out MATCHES "^(baseline|x86-64-v3|x86-64-v4)$")
      set(LEANEMB_KERNEL_ISA_HOST "${_probe_out}")
    else()
      message(STATUS "leanemb: the CPU probe failed: LEANEMB_KERNEL_ISAS=host builds every ISA (all)")
      set(_isas all)
    endif()
  endif()
endif()

# LEANEMB_KERNEL_ISAS_PORTABLE: every ISA build is compiled (Package.cmake checks it);
# LEANEMB_KERNELS_V3 / _V4: the files that hold only a v3 / v4 build are compiled.
set(LEANEMB_KERNEL_ISAS_PORTABLE ON)
set(LEANEMB_KERNELS_V3 ON)
set(LEANEMB_KERNELS_V4 ON)
if(_isas STREQUAL "host" AND NOT LEANEMB_KERNEL_ISA_HOST STREQUAL "x86-64-v4")
  set(LEANEMB_KERNEL_ISAS_PORTABLE OFF)
  set(LEANEMB_KERNELS_V4 OFF)
  if(LEANEMB_KERNEL_ISA_HOST STREQUAL "baseline")
    set(LEANEMB_KERNELS_V3 OFF)
    add_compile_definitions(LEANEMB_KERNELS_NO_V3 LEANEMB_KERNELS_NO_V4)
  else()
    add_compile_definitions(LEANEMB_KERNELS_NO_V4)
  endif()
  message(STATUS "leanemb: kernel ISA builds: this machine's (LEANEMB_KERNEL_ISAS=${LEANEMB_KERNEL_ISAS}: "
                 "up to ${LEANEMB_KERNEL_ISA_HOST}); -DLEANEMB_KERNEL_ISAS=all builds every ISA, as the "
                 "Debian package needs")
elseif(_isas STREQUAL "host")
  message(STATUS "leanemb: kernel ISA builds: all (LEANEMB_KERNEL_ISAS=${LEANEMB_KERNEL_ISAS}: this machine runs x86-64-v4)")
else()
  message(STATUS "leanemb: kernel ISA builds: all (LEANEMB_KERNEL_ISAS=${LEANEMB_KERNEL_ISAS})")
endif()
