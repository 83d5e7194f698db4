# src/model: model assembly (the DLRM-style CTR model).
target_sources(leanemb PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ctr_model.cc)
