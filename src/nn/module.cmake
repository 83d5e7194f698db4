# src/nn: dense layers on OpenBLAS (Linear, ReLU, MLP with activation checkpointing, DLRM
# interactions), BCE loss and dense optimizers.
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
target_sources(leanemb PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/gemm.cc
  ${CMAKE_CURRENT_LIST_DIR}/bf16_gemm.cc
  ${CMAKE_CURRENT_LIST_DIR}/tensor.cc
  ${CMAKE_CURRENT_LIST_DIR}/linear.cc
  ${CMAKE_CURRENT_LIST_DIR}/mlp.cc
  ${CMAKE_CURRENT_LIST_DIR}/interaction.cc
  ${CMAKE_CURRENT_LIST_DIR}/dot_interaction.cc
  ${CMAKE_CURRENT_LIST_DIR}/loss.cc
  ${CMAKE_CURRENT_LIST_DIR}/dense_optimizer.cc
)
target_link_libraries(leanemb PUBLIC ${BLAS_LIBRARIES})

if(LEANEMB_BUILD_TESTS)
  leanemb_add_test(nn_test
    ${CMAKE_CURRENT_LIST_DIR}/gemm_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/bf16_gemm_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/layers_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/dot_interaction_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/mlp_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/dense_optimizer_test.cc
  )
  # PyTorch parity of the dense optimizers: nn_optim_trace prints a few steps of each optimizer,
  # the script replays them with torch.optim (exit 77 = skipped when torch is missing).
  add_executable(nn_optim_trace ${CMAKE_CURRENT_LIST_DIR}/optim_trace_main.cc)
  target_link_libraries(nn_optim_trace PRIVATE leanemb)
  target_include_directories(nn_optim_trace PRIVATE ${PROJECT_SOURCE_DIR}/src)
  leanemb_set_warnings(nn_optim_trace)
  add_test(NAME nn_torch_optim_parity
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/torch_optim_parity_test.py $<TARGET_FILE:nn_optim_trace>)
  set_tests_properties(nn_torch_optim_parity PROPERTIES SKIP_RETURN_CODE 77 ENVIRONMENT "OMP_NUM_THREADS=2")
endif()
