# src/ctr: the CTR task of `leanemb train` (task = "ctr", the default): its config (CtrConfig,
# docs/train.md), the CtrModel over the Criteo-format reader as a TrainTask of the one loop
# (src/train), its part of the memory model (ctr_plan), what serving shares with it
# (ctr_serving.h), the input checks and model.table_rows = "auto". The model itself is src/model.
# The embedded default config: examples/ctr_small.toml as a string constant.
file(READ ${PROJECT_SOURCE_DIR}/examples/ctr_small.toml LEANEMB_DEFAULT_CONFIG_TEXT)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/examples/ctr_small.toml)
configure_file(${CMAKE_CURRENT_LIST_DIR}/default_config.h.in ${PROJECT_BINARY_DIR}/generated/ctr/default_config.h @ONLY)
target_include_directories(leanemb PRIVATE ${PROJECT_BINARY_DIR}/generated)
target_sources(leanemb PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/ctr_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/ctr_task.cc
  ${CMAKE_CURRENT_LIST_DIR}/ctr_task_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/input_check.cc
  ${CMAKE_CURRENT_LIST_DIR}/table_rows.cc
  ${CMAKE_CURRENT_LIST_DIR}/ctr_plan.cc
)

if(LEANEMB_BUILD_TESTS)
  # ctr_test: the config, the model's training and checkpoints; ctr_dist_test: the model over
  # ranks as threads (LocalWorld), bit-identical to one process; ctr_disk_test: the planner's disk
  # over the run against a run whose log store compacts.
  leanemb_add_test(ctr_test ${CMAKE_CURRENT_LIST_DIR}/ctr_test.cc ${CMAKE_CURRENT_LIST_DIR}/ctr_dist_test.cc
                   ${CMAKE_CURRENT_LIST_DIR}/ctr_disk_test.cc)
endif()
