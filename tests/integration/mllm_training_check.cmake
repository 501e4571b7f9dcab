# Check of the mllm_training integration program (ctests integration.mllm_training.local / .mpi and
# their .split variants, registered in tests/integration/CMakeLists.txt):
#
#   cmake -P tests/integration/mllm_training_check.cmake -- <command> [args...]
#
# Runs the command (the program, or mpiexec ... program) and fails unless it exits 0 and the
# last line of its standard output is one JSON object with
#   grad_max_rel_diff <= 1e-10 and loss_rel_diff <= 1e-10 (numbers),
#   encoders == 2, alltoalls_per_step == 7 (3K + 1),
#   stages: 3 entries with name, imbalance_before and imbalance_after, one name containing "llm",
#   and, when it has "split": true (--split), cut_videos >= 1.
# The program's output is echoed so that ctest --output-on-failure shows it.

cmake_minimum_required(VERSION 3.25)

set(_cmd)
set(_collect OFF)
math(EXPR _last "${CMAKE_ARGC} - 1")
foreach(_i RANGE 0 ${_last})
  if(_collect)
    list(APPEND _cmd "${CMAKE_ARGV${_i}}")
  elseif("${CMAKE_ARGV${_i}}" STREQUAL "--")
    set(_collect ON)
  endif()
endforeach()
if(NOT _cmd)
  message(FATAL_ERROR "mllm_training_check.cmake: usage: "
                      "cmake -P mllm_training_check.cmake -- <command> [args...]")
endif()

execute_process(COMMAND ${_cmd} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("${_out}")
if(_err)
  message("stderr:\n${_err}")
endif()
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "mllm_training exited with '${_rc}' (expected 0)")
endif()

string(STRIP "${_out}" _out)
string(REGEX REPLACE "^.*\n" "" _line "${_out}")
string(JSON _type ERROR_VARIABLE _jerr TYPE "${_line}")
if(_jerr OR NOT _type STREQUAL "OBJECT")
  message(FATAL_ERROR "the last output line is not a JSON object: ${_line}")
endif()

function(get_number key out)
  string(JSON _t ERROR_VARIABLE _e TYPE "${_line}" ${key})
  if(_e OR NOT _t STREQUAL "NUMBER")
    message(FATAL_ERROR "the JSON line has no number '${key}': ${_line}")
  endif()
  string(JSON _v GET "${_line}" ${key})
  set(${out} "${_v}" PARENT_SCOPE)
endfunction()

foreach(_key grad_max_rel_diff loss_rel_diff)
  get_number(${_key} _v)
  # if(LESS_EQUAL) compares numbers parsed as doubles, exponents included.
  if(NOT _v LESS_EQUAL 1e-10)
    message(FATAL_ERROR "${_key} = ${_v} exceeds 1e-10")
  endif()
endforeach()
get_number(encoders _k)
if(NOT _k EQUAL 2)
  message(FATAL_ERROR "encoders = ${_k}, expected 2")
endif()
get_number(alltoalls_per_step _a)
if(NOT _a EQUAL 7)
  message(FATAL_ERROR "alltoalls_per_step = ${_a}, expected 3K + 1 = 7")
endif()
string(JSON _n ERROR_VARIABLE _e LENGTH "${_line}" stages)
if(_e OR NOT _n EQUAL 3)
  message(FATAL_ERROR "expected 3 stages in: ${_line}")
endif()
set(_llm OFF)
math(EXPR _last_stage "${_n} - 1")
foreach(_s RANGE 0 ${_last_stage})
  string(JSON _name GET "${_line}" stages ${_s} name)
  get_number("stages;${_s};imbalance_before" _b)
  get_number("stages;${_s};imbalance_after" _f)
  if(_name MATCHES "llm")
    set(_llm ON)
  endif()
endforeach()
if(NOT _llm)
  message(FATAL_ERROR "no stage name contains 'llm': ${_line}")
endif()
# --split runs: the step must really have cut a video across ranks.
string(JSON _split ERROR_VARIABLE _e GET "${_line}" split)
if(NOT _e AND _split)
  get_number(cut_videos _cut)
  if(_cut LESS 1)
    message(FATAL_ERROR "split run that cut no video: ${_line}")
  endif()
endif()
message(STATUS "mllm_training: grad_max_rel_diff and loss_rel_diff within 1e-10")
