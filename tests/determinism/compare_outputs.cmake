# Runs FIRST and SECOND (two builds of one program) and fails unless both succeed and print
# the same non-empty output. Used by ctest determinism.build_flags (tests/CMakeLists.txt).
foreach(_which IN ITEMS FIRST SECOND)
  execute_process(COMMAND "${${_which}}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out_${_which}
    ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${${_which}} exited with ${_rc}:\n${_out_${_which}}${_err}")
  endif()
  if(_out_${_which} STREQUAL "")
    message(FATAL_ERROR "${${_which}} printed nothing")
  endif()
endforeach()
if(NOT _out_FIRST STREQUAL _out_SECOND)
  message(FATAL_ERROR "builds disagree:\n--- ${FIRST}\n${_out_FIRST}--- ${SECOND}\n${_out_SECOND}")
endif()
message(STATUS "both builds print the same fingerprints")
