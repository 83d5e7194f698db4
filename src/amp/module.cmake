# src/amp: precision emulation (bf16/fp16 rounding and storage) and the loss scaler.
target_sources(leanemb PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/precision.cc
  ${CMAKE_CURRENT_LIST_DIR}/loss_scaler.cc
)
if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(amp_test ${CMAKE_CURRENT_LIST_DIR}/amp_test.cc)
endif()
