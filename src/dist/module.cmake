# src/dist: multi-process training (issue 7): the Communicator interface with its local and MPI
# backends, ShardPlan, wire payload codecs. Only this folder includes <mpi.h>.
option(LEANEMB_WITH_MPI "Build the MPI communicator backend (src/dist) when MPI is found" ON)

target_sources(leanemb PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/communicator.cc
  ${CMAKE_CURRENT_LIST_DIR}/local_comm.cc
  ${CMAKE_CURRENT_LIST_DIR}/payload.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm_sizes.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_collection.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_collection_forward.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_collection_backward.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_collection_rows.cc
  ${CMAKE_CURRENT_LIST_DIR}/tables.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_checkpoint.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_checkpoint_save.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_checkpoint_digest.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_checkpoint_prune.cc
  ${CMAKE_CURRENT_LIST_DIR}/training_digest.cc
)

set(LEANEMB_HAVE_MPI OFF)
if(LEANEMB_WITH_MPI)
  # The CXX component (the project enables no C) without the deprecated C++ bindings: we call
  # the C API.
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Do not link MPI's C++ bindings")
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(LEANEMB_HAVE_MPI ON)
  else()
    message(STATUS "leanemb: MPI not found; src/dist builds without the mpi backend "
                   "(make_communicator(\"mpi\") returns Unimplemented). Debian: apt-get install libopenmpi-dev openmpi-bin")
  endif()
endif()

if(LEANEMB_HAVE_MPI)
  target_sources(leanemb PRIVATE ${CMAKE_CURRENT_LIST_DIR}/mpi_comm.cc)
  # By include path and library paths, not MPI::MPI_CXX, for the same reason as liburing in
  # src/tiered/store.cmake: a static leanemb exports its private libraries as link-only
  # dependencies, and an imported target would have to be recreated in every consumer.
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/mpi_comm.cc PROPERTIES
    INCLUDE_DIRECTORIES "${MPI_CXX_INCLUDE_DIRS}"
    COMPILE_OPTIONS "${MPI_CXX_COMPILE_OPTIONS}"
    COMPILE_DEFINITIONS "${MPI_CXX_COMPILE_DEFINITIONS}")
  set(_dist_mpi_libs ${MPI_CXX_LIBRARIES})
  list(FILTER _dist_mpi_libs EXCLUDE REGEX "mpi_cxx")  # the C++ bindings: unused
  target_link_libraries(leanemb PRIVATE ${_dist_mpi_libs})
else()
  target_sources(leanemb PRIVATE ${CMAKE_CURRENT_LIST_DIR}/mpi_none.cc)
endif()

if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(dist_test ${CMAKE_CURRENT_LIST_DIR}/dist_test.cc ${CMAKE_CURRENT_LIST_DIR}/sharded_collection_test.cc)
  # The table stack: every residency x id mapping x world size x pooling x dtype combination
  # against one resident table in one process.
  leanemb_add_test(stack_matrix_test ${CMAKE_CURRENT_LIST_DIR}/stack_matrix_test.cc)
  # Sharded checkpoints: save at P, load at P' (resharding), digests, incomplete checkpoints.
  leanemb_add_test(dist_ckpt_test ${CMAKE_CURRENT_LIST_DIR}/sharded_checkpoint_test.cc)
  # Incremental sharded checkpoints: each rank's shard chain, loads at P and P', digests,
  # corrupt links, keep_last, crashes.
  leanemb_add_test(sharded_incremental_test ${CMAKE_CURRENT_LIST_DIR}/sharded_incremental_test.cc)
  # Incremental checkpoints: chains of changed rows, new bases, incomplete chains, keep, crashes.
  leanemb_add_test(incremental_ckpt_test ${CMAKE_CURRENT_LIST_DIR}/incremental_checkpoint_test.cc
                   ${CMAKE_CURRENT_LIST_DIR}/linked_checkpoint_test.cc)
  # Training digest: a plain trainer checkpoint and a sharded one of the same state agree.
  leanemb_add_test(training_digest_test ${CMAKE_CURRENT_LIST_DIR}/training_digest_test.cc)
  if(LEANEMB_HAVE_MPI)
    # Collectives across real processes (mpirun -np 2 and 4) and a rank that stops answering.
    add_executable(dist_mpi_check ${CMAKE_CURRENT_LIST_DIR}/mpi_check_main.cc)
    target_link_libraries(dist_mpi_check PRIVATE leanemb)
    target_include_directories(dist_mpi_check PRIVATE ${PROJECT_SOURCE_DIR}/src)
    leanemb_set_warnings(dist_mpi_check)
    # Open MPI refuses to run as root without these (CI containers); --oversubscribe lets 4 ranks
    # share 2 cores. Sanitizer builds: Open MPI keeps allocations until exit, so leak reports
    # whose stack passes through its libraries are suppressed (mpi_lsan.supp). For the stacks to
    # show those libraries, Open MPI must not unload its plugins at MPI_Finalize
    # (disable_dlclose) and LeakSanitizer must unwind through code without frame pointers
    # (fast_unwind_on_malloc=0). Leaks in our code are still reported. See docs/dist.md.
    set(_dist_mpi_env
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
      OMPI_MCA_mca_base_component_disable_dlclose=1 OMP_NUM_THREADS=1
      "LSAN_OPTIONS=fast_unwind_on_malloc=0:suppressions=${CMAKE_CURRENT_LIST_DIR}/mpi_lsan.supp:print_suppressions=0")
    foreach(_np 2 4)
      add_test(NAME dist_mpi_np${_np}
        COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${_np} $<TARGET_FILE:dist_mpi_check>)
      set_tests_properties(dist_mpi_np${_np} PROPERTIES TIMEOUT 60 ENVIRONMENT "${_dist_mpi_env}")
    endforeach()
    # A rank that stops answering (sleeps) or dies (exits): survivors fail in time, naming it.
    foreach(_case "2;1;sleep" "4;2;sleep" "2;1;exit")
      list(GET _case 0 _np)
      list(GET _case 1 _dead)
      list(GET _case 2 _mode)
      add_test(NAME dist_mpi_dead_rank_np${_np}_${_mode}
        COMMAND bash ${PROJECT_SOURCE_DIR}/tests/mpi_dead_rank.sh ${MPIEXEC_EXECUTABLE}
                $<TARGET_FILE:dist_mpi_check> ${_np} ${_dead} ${_mode})
      set_tests_properties(dist_mpi_dead_rank_np${_np}_${_mode} PROPERTIES TIMEOUT 60 ENVIRONMENT "${_dist_mpi_env}")
    endforeach()
    # `leanemb train` under mpirun (tests/mpi_train.sh): P = 1, 2, 4 give the single-process
    # training digest; resume 2 -> 1, 1 -> 2, 2 -> 4; bf16 / int8 payloads within tolerance; a
    # crashed rank is named by the survivor and the relaunch resumes to the same digest; a
    # SIGTERM to one rank stops every rank after the same step (graceful_stop, issue 18).
    foreach(_mode digest reshard payload crash stop)
      add_test(NAME mpi_train_${_mode}
        COMMAND bash ${PROJECT_SOURCE_DIR}/tests/mpi_train.sh ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:leanemb_cli> ${_mode})
      set_tests_properties(mpi_train_${_mode} PROPERTIES TIMEOUT 600 ENVIRONMENT "${_dist_mpi_env}")
    endforeach()
  endif()
endif()
