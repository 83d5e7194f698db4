# src/text: fastText-style text classification (issue 8): fastText-format reader with word
# n-gram hashing, TextModel (mean-pooled input rows -> optional hidden layer -> softmax / OVA),
# and the task = "text" run of `leanemb train`.
target_sources(leanemb PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/text_data.cc
  ${CMAKE_CURRENT_LIST_DIR}/text_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/text_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/text_trainer.cc
  ${CMAKE_CURRENT_LIST_DIR}/text_plan.cc
  ${CMAKE_CURRENT_LIST_DIR}/text_task_config.cc
)

if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(text_test ${CMAKE_CURRENT_LIST_DIR}/text_test.cc ${CMAKE_CURRENT_LIST_DIR}/text_bf16_test.cc)
  target_compile_definitions(text_test PRIVATE LEANEMB_SOURCE_DIR="${PROJECT_SOURCE_DIR}")  # examples/text_debian.toml
endif()
