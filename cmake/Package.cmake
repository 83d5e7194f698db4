# Installation and the Debian package (docs/package.md).
#
#   cmake --build --preset release --target package   ->  build/release/leanemb_<version>_<arch>.deb
#
# Components: `cli` (/usr/bin/leanemb, its man page and bash completion), `python` (the leanemb
# package with the compiled _leanemb module and byte-compiled sources in
# /usr/lib/python3/dist-packages/leanemb), `doc` (/usr/share/doc/leanemb: README.md, docs/) go into
# the .deb; `dev` (libleanemb.a, libleanemb_bench_workloads.a, the headers, the CMake package
# config) is installed by `cmake --install` only. A consumer links leanemb::leanemb, and
# leanemb::leanemb_bench_workloads too when it calls run_bench / bench_workload_list
# (include/leanemb/commands.h); tests/install_test.sh builds such a consumer.
include(GNUInstallDirs)

install(TARGETS leanemb leanemb_bench_workloads EXPORT leanembTargets ARCHIVE DESTINATION lib COMPONENT dev)
install(TARGETS leanemb_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
install(DIRECTORY include/leanemb DESTINATION include COMPONENT dev)
install(EXPORT leanembTargets NAMESPACE leanemb:: DESTINATION lib/cmake/leanemb COMPONENT dev)
include(CMakePackageConfigHelpers)
configure_package_config_file(cmake/leanembConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/leanembConfig.cmake
  INSTALL_DESTINATION lib/cmake/leanemb)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/leanembConfig.cmake DESTINATION lib/cmake/leanemb COMPONENT dev)

# ---- generated at build time: the man page and bash completion from the CLI's --help, the pycs --
set(LEANEMB_PKG_DIR ${CMAKE_BINARY_DIR}/pkg)
set(_gen ${PROJECT_SOURCE_DIR}/scripts/gen_package_files.py)
# Not in sanitizer builds (debug, tsan, fuzz presets): those binaries are not packaged, and running
# them at build time would bring their runtime's reports (leak checks) into the build.
find_package(Python3 COMPONENTS Interpreter)
set(LEANEMB_PACKAGE_FILES OFF)
if(Python3_Interpreter_FOUND AND NOT LEANEMB_SANITIZE AND NOT LEANEMB_BUILD_FUZZERS)
  set(LEANEMB_PACKAGE_FILES ON)
endif()
if(LEANEMB_PACKAGE_FILES)
  add_custom_command(OUTPUT ${LEANEMB_PKG_DIR}/leanemb.1.gz ${LEANEMB_PKG_DIR}/completion/leanemb
    COMMAND ${CMAKE_COMMAND} -E make_directory ${LEANEMB_PKG_DIR}/completion
    COMMAND ${Python3_EXECUTABLE} ${_gen} man $<TARGET_FILE:leanemb_cli> ${LEANEMB_PKG_DIR}/leanemb.1.gz
    COMMAND ${Python3_EXECUTABLE} ${_gen} completion $<TARGET_FILE:leanemb_cli> ${LEANEMB_PKG_DIR}/completion/leanemb
    DEPENDS leanemb_cli ${_gen}
    COMMENT "leanemb: man page and bash completion from `leanemb --help`" VERBATIM)
  add_custom_target(leanemb_cli_docs ALL DEPENDS ${LEANEMB_PKG_DIR}/leanemb.1.gz ${LEANEMB_PKG_DIR}/completion/leanemb)
  install(FILES ${LEANEMB_PKG_DIR}/leanemb.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT cli)
  install(FILES ${LEANEMB_PKG_DIR}/completion/leanemb DESTINATION share/bash-completion/completions COMPONENT cli)
endif()

# The Python package: the sources, the module (its build-tree RUNPATH is removed on install) and
# checked-hash pycs, so that an import never writes __pycache__ into dist-packages.
set(LEANEMB_PY_DEST lib/python3/dist-packages/leanemb)
if(TARGET _leanemb AND LEANEMB_PACKAGE_FILES)
  install(TARGETS _leanemb LIBRARY DESTINATION ${LEANEMB_PY_DEST} COMPONENT python)
  install(FILES ${LEANEMB_PY_FILES} DESTINATION ${LEANEMB_PY_DEST} COMPONENT python)
  add_custom_command(OUTPUT ${LEANEMB_PKG_DIR}/pyc.stamp
    COMMAND ${CMAKE_COMMAND} -E rm -rf ${LEANEMB_PKG_DIR}/__pycache__
    COMMAND ${Python3_EXECUTABLE} ${_gen} pyc /usr/${LEANEMB_PY_DEST} ${LEANEMB_PKG_DIR}/__pycache__ ${LEANEMB_PY_FILES}
    COMMAND ${CMAKE_COMMAND} -E touch ${LEANEMB_PKG_DIR}/pyc.stamp
    DEPENDS ${LEANEMB_PY_FILES} ${_gen}
    COMMENT "leanemb: byte-compiling the Python package for the .deb" VERBATIM)
  add_custom_target(leanemb_py_pyc ALL DEPENDS ${LEANEMB_PKG_DIR}/pyc.stamp)
  install(DIRECTORY ${LEANEMB_PKG_DIR}/__pycache__ DESTINATION ${LEANEMB_PY_DEST} COMPONENT python)
endif()

file(GLOB _docs ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES README.md ${_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT doc)
install(DIRECTORY docs/formats DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT doc FILES_MATCHING PATTERN "*.md")

# ---- CPack: one .deb of the cli, python and doc components ------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME leanemb)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "leanemb maintainers <leanemb@invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "train embedding models whose tables and optimizer state exceed fast memory")
set(CPACK_PACKAGE_DESCRIPTION
    "leanemb trains embedding models (recommendation/CTR, text classification) whose tables and optimizer "
    "state are larger than fast memory: low-precision rows with stochastic rounding, fat rows, fused sparse "
    "optimizers, tiered row storage, crash-safe checkpoints. This package has the leanemb command (train, "
    "plan, test, predict, export, report, ...), the Python package leanemb with leanemb.torch (PyTorch "
    "modules) for Debian's python3, the documentation, a man page and bash completion.")
string(REPLACE ";" "" CPACK_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL cli python doc)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_DEBIAN_PACKAGE_NAME leanemb)
execute_process(COMMAND dpkg --print-architecture OUTPUT_VARIABLE _deb_arch OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET RESULT_VARIABLE _deb_arch_rc)
if(NOT _deb_arch_rc EQUAL 0 OR NOT _deb_arch)
  set(_deb_arch amd64)
endif()
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${_deb_arch})
set(CPACK_DEBIAN_FILE_NAME leanemb_${PROJECT_VERSION}_${_deb_arch}.deb)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Shared libraries (libc6, libgomp1, libopenblas0, liburing2, libxxhash0, Open MPI when built with
# it, ...) from dpkg-shlibdeps; the Python side by name: the module is built for this python3
# (3.11 on Debian 12), and leanemb.torch imports numpy and torch.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(_py_dep "python3")
if(Python3_VERSION_MAJOR AND Python3_VERSION_MINOR)
  math(EXPR _py_next "${Python3_VERSION_MINOR} + 1")
  set(_py_dep "python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}), python3 (<< ${Python3_VERSION_MAJOR}.${_py_next})")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${_py_dep}, python3-numpy, python3-torch")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "openmpi-bin")
set(CPACK_PACKAGE_FILE_NAME leanemb_${PROJECT_VERSION}_${_deb_arch})
# The .deb runs on any x86-64 CPU and must run each at its full speed: it needs every ISA build of
# the kernels. A build configured with fewer (LEANEMB_KERNEL_ISAS=host, the quick start's default
# where GoogleTest is missing; cmake/KernelIsas.cmake) makes cpack, and so the package target,
# stop with this message (cpack reads CPACK_PROJECT_CONFIG_FILE before it installs anything).
set(_pkg_check ${CMAKE_BINARY_DIR}/CPackKernelIsas.cmake)
if(LEANEMB_KERNEL_ISAS_PORTABLE)
  file(WRITE ${_pkg_check} "# every ISA build of the kernels is compiled (LEANEMB_KERNEL_ISAS): the package may be built\n")
else()
  file(WRITE ${_pkg_check}
    "message(FATAL_ERROR \"leanemb: this build has only the kernel ISA builds of the machine that built it "
    "(LEANEMB_KERNEL_ISAS=${LEANEMB_KERNEL_ISAS}: up to ${LEANEMB_KERNEL_ISA_HOST}), and the Debian package must "
    "have all of them. Reconfigure with every ISA and build the package again:\n"
    "  cmake --preset release -DLEANEMB_KERNEL_ISAS=all && cmake --build --preset release --target package\")\n")
endif()
set(CPACK_PROJECT_CONFIG_FILE ${_pkg_check})
include(CPack)

# The package as CI checks it: built by cpack into a scratch directory, unpacked with dpkg -x and
# used from there (tests/package_test.sh; needs dpkg-deb, man for the man page check).
if(LEANEMB_BUILD_TESTS AND TARGET _leanemb AND LEANEMB_PACKAGE_FILES AND NOT LEANEMB_KERNEL_ISAS_PORTABLE)
  message(STATUS "leanemb: test `package` left out: LEANEMB_KERNEL_ISAS=${LEANEMB_KERNEL_ISAS} builds only this "
                 "machine's kernel ISAs, and the package target refuses such a build")
elseif(LEANEMB_BUILD_TESTS AND TARGET _leanemb AND LEANEMB_PACKAGE_FILES)
  add_test(NAME package COMMAND ${PROJECT_SOURCE_DIR}/tests/package_test.sh ${CMAKE_BINARY_DIR} ${PROJECT_VERSION})
  set_tests_properties(package PROPERTIES TIMEOUT 300)
endif()

# The developer install as a consumer sees it: `cmake --install --component dev` into a scratch
# prefix, and a project that finds the package there, links libleanemb and
# libleanemb_bench_workloads and calls what the installed headers declare (tests/install_test.sh).
# Not in sanitizer builds: a consumer would need their runtimes.
if(LEANEMB_BUILD_TESTS AND NOT LEANEMB_SANITIZE AND NOT LEANEMB_BUILD_FUZZERS)
  add_test(NAME install_consumer COMMAND ${PROJECT_SOURCE_DIR}/tests/install_test.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(install_consumer PROPERTIES TIMEOUT 300)
endif()
