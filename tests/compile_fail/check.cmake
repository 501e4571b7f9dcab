# ctest compile_fail.<name>: SRC must fail to compile, and the compiler's messages must contain
# the text of every `// expect: TEXT` line of SRC (the requirement a trainer's type misses).
# Usage: cmake -DCXX=<compiler> -DINCLUDE=<include dir> -DSRC=<file.cpp> -P check.cmake
cmake_minimum_required(VERSION 3.25)
file(STRINGS "${SRC}" _expect REGEX "^// expect: ")
if(NOT _expect)
  message(FATAL_ERROR "${SRC}: no `// expect: TEXT` line")
endif()
execute_process(COMMAND "${CXX}" -std=c++20 -fsyntax-only "-I${INCLUDE}" "${SRC}"
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(_rc EQUAL 0)
  message(FATAL_ERROR "${SRC} compiled, but must not")
endif()
foreach(_line IN LISTS _expect)
  string(REGEX REPLACE "^// expect: " "" _text "${_line}")
  string(FIND "${_out}${_err}" "${_text}" _at)
  if(_at EQUAL -1)
    message(FATAL_ERROR "${SRC}: the compiler did not say \"${_text}\":\n${_err}")
  endif()
endforeach()
