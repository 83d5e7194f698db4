# src/cli: the commands of the leanemb CLI, one function each (include/leanemb/commands.h): parse
# the option values, call the library, print, map Status to an exit code. tools/main.cc only
# declares the options (CLI11) and calls them; `leanemb bench` is bench/command.cc. A command is
# built when the modules it calls are (LEANEMB_SKIP_MODULES).
target_sources(leanemb PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/common.cc
  ${CMAKE_CURRENT_LIST_DIR}/ckpt_command.cc
)
if(NOT "data" IN_LIST LEANEMB_SKIP_MODULES)
  target_sources(leanemb PRIVATE ${CMAKE_CURRENT_LIST_DIR}/data_command.cc)
endif()
# train and plan find a config's task in serve's task registry.
if(NOT "serve" IN_LIST LEANEMB_SKIP_MODULES)
  target_sources(leanemb PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/train_command.cc
    ${CMAKE_CURRENT_LIST_DIR}/serve_command.cc
  )
  if(NOT "plan" IN_LIST LEANEMB_SKIP_MODULES)
    target_sources(leanemb PRIVATE ${CMAKE_CURRENT_LIST_DIR}/plan_command.cc)
  endif()
endif()
