# src/serve: use a trained model (issue 20): `leanemb test`, `predict`, `export` read a
# checkpoint's saved config, build the model with the trainer's code and load its rows
# (docs/serve.md).
target_sources(leanemb PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/saved_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/predict.cc
  ${CMAKE_CURRENT_LIST_DIR}/export.cc
  ${CMAKE_CURRENT_LIST_DIR}/report.cc
  ${CMAKE_CURRENT_LIST_DIR}/task_registry.cc
)

if(LEANEMB_BUILD_TESTS)
  # The report page's structure, number formatting and multi-run overlays (src/serve/report_test.cc).
  leanemb_add_test(report_test ${CMAKE_CURRENT_LIST_DIR}/report_test.cc)
  # The task registry: names, each task's config through its entry, RunConfig -> LoopSettings.
  leanemb_add_test(task_registry_test ${CMAKE_CURRENT_LIST_DIR}/task_registry_test.cc)
  # The commands as a user runs them, against the trainer's own figures (tests/serve_cli_test.cc).
  leanemb_add_test(serve_cli_test ${PROJECT_SOURCE_DIR}/tests/serve_cli_test.cc)
  target_compile_definitions(serve_cli_test PRIVATE LEANEMB_CLI_PATH="$<TARGET_FILE:leanemb_cli>")
  add_dependencies(serve_cli_test leanemb_cli)
  # The report and plan --html pages rendered by headless Chromium, their charts checked in the
  # DOM it built (tests/report_chromium.sh; fails without chromium: scripts/install_deps.sh).
  add_test(NAME report_chromium COMMAND ${PROJECT_SOURCE_DIR}/tests/report_chromium.sh $<TARGET_FILE:leanemb_cli>)
  set_tests_properties(report_chromium PROPERTIES TIMEOUT 180)
endif()
