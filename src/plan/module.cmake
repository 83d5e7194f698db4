# src/plan: the memory model (every byte of a run, predicted from the allocating code's size
# functions), the planner (device presets, search, cost model); `leanemb plan` is src/cli/plan_command.cc.
target_sources(leanemb PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/memory_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/tables_plan.cc
  ${CMAKE_CURRENT_LIST_DIR}/access_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/disk_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/planner.cc
  ${CMAKE_CURRENT_LIST_DIR}/parity.cc
  ${CMAKE_CURRENT_LIST_DIR}/report.cc
  ${CMAKE_CURRENT_LIST_DIR}/report_html.cc
)

if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(plan_test ${CMAKE_CURRENT_LIST_DIR}/memory_model_test.cc ${CMAKE_CURRENT_LIST_DIR}/planner_test.cc
                         ${CMAKE_CURRENT_LIST_DIR}/parity_test.cc)
endif()
