# Row stores (host, file over io_uring / a pread pool) and the IdMap of dynamic tables.
# Included from src/tiered/module.cmake.
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)

target_sources(leanemb PRIVATE
  src/tiered/row_store.cc
  src/tiered/file_io.cc
  src/tiered/file_store.cc
  src/tiered/log_store.cc
  src/tiered/log_segments.cc
  src/tiered/id_map.cc
  src/tiered/id_map_io.cc
  src/tiered/disk_probe.cc
)
# PRIVATE: no public header includes liburing.h or xxhash.h. The libraries are linked by path
# (<PREFIX>_LINK_LIBRARIES), not as PkgConfig:: imported targets: a static leanemb exports its
# private libraries as link-only dependencies, and an imported target name would then have to
# be recreated by leanembConfig.cmake in every consumer (the find_package smoke test).
target_include_directories(leanemb PRIVATE ${URING_INCLUDE_DIRS} ${XXHASH_INCLUDE_DIRS})
target_link_libraries(leanemb PRIVATE ${URING_LINK_LIBRARIES} ${XXHASH_LINK_LIBRARIES})

if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(store_test src/tiered/store_test.cc src/tiered/store_fault_test.cc src/tiered/store_io_test.cc
                   src/tiered/store_log_test.cc src/tiered/store_link_test.cc)
  leanemb_add_test(id_map_test src/tiered/id_map_test.cc)
  # Not a CTest test: measures random-read IOPS of the file store's engines (docs/tiered.md).
  add_executable(store_iops_probe src/tiered/store_iops_probe.cc)
  target_link_libraries(store_iops_probe PRIVATE leanemb)
  target_include_directories(store_iops_probe PRIVATE ${PROJECT_SOURCE_DIR}/src)
  leanemb_set_warnings(store_iops_probe)
endif()
