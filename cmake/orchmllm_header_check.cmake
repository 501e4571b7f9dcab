# The public headers compiled with another compiler than the build's, as a ctest script:
#
#   cmake -DCOMPILER=<c++ compiler> -DROOT=<include root> -DHEADERS=<h1|h2|...>
#         [-DINCLUDES=<dir|dir...>] [-DDEFINES=<NAME=V|...>] [-DFLAGS=<flag|flag...>]
#         -DWORK_DIR=<scratch dir> -P orchmllm_header_check.cmake
#
# One unit includes every header (-fsyntax-only, -std=c++20) with the project's warnings as errors;
# fails with the compiler's diagnostics. (Each header on its own: the build compiler's
# orchmllm_header_check target.)
# Used by tests/CMakeLists.txt for the compilers in ORCHMLLM_HEADER_CHECK_COMPILERS.
cmake_minimum_required(VERSION 3.25)

foreach(_var IN ITEMS COMPILER ROOT HEADERS WORK_DIR)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "orchmllm_header_check.cmake: -D${_var}=... is required")
  endif()
endforeach()

foreach(_var IN ITEMS HEADERS INCLUDES DEFINES FLAGS)
  string(REPLACE "|" ";" ${_var} "${${_var}}")
endforeach()

set(_args -std=c++20 -fsyntax-only -Wall -Wextra -Wpedantic -Wshadow -Werror
  # clang >= 19 flags libstdc++ 12's own use of std::get_temporary_buffer (inside
  # std::stable_sort) as deprecated; that is the standard library's, not ours.
  -Wno-deprecated-declarations
  "-I${ROOT}")
foreach(_dir IN LISTS INCLUDES)
  list(APPEND _args "-isystem" "${_dir}")
endforeach()
foreach(_def IN LISTS DEFINES)
  list(APPEND _args "-D${_def}")
endforeach()
list(APPEND _args ${FLAGS})

file(MAKE_DIRECTORY "${WORK_DIR}")
list(LENGTH HEADERS _count)
set(_text "")
foreach(_hdr IN LISTS HEADERS)
  string(APPEND _text "#include <${_hdr}>\n")
endforeach()
set(_tu "${WORK_DIR}/all_headers.cpp")
file(WRITE "${_tu}" "${_text}")
execute_process(COMMAND "${COMPILER}" ${_args} "${_tu}"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${_count} headers do not compile with ${COMPILER}:\n${_out}")
endif()
message(STATUS "${_count} headers compile with ${COMPILER}")
