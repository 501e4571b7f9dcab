# Header self-containment with another compiler than the build's, as a ctest script:
#
#   cmake -DCOMPILER=<c++ compiler> -DROOT=<include root> -DHEADERS=<h1|h2|...>
#         [-DINCLUDES=<dir|dir...>] [-DDEFINES=<NAME=V|...>] [-DFLAGS=<flag|flag...>]
#         -DWORK_DIR=<scratch dir> -P orchmllm_header_check.cmake
#
# Every header compiles on its own (a TU including it twice, -fsyntax-only, -std=c++20) with the
# project's warnings as errors. Fails listing every header that does not, with its diagnostics.
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
set(_failed "")
list(LENGTH HEADERS _count)
foreach(_hdr IN LISTS HEADERS)
  string(REGEX REPLACE "[/.]" "_" _stem "${_hdr}")
  set(_tu "${WORK_DIR}/${_stem}.cpp")
  file(WRITE "${_tu}" "#include <${_hdr}>\n#include <${_hdr}>\n")
  execute_process(COMMAND "${COMPILER}" ${_args} "${_tu}"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    list(APPEND _failed "${_hdr}")
    message("---- ${_hdr} (${COMPILER}):\n${_out}")
  endif()
endforeach()
if(_failed)
  list(LENGTH _failed _nfailed)
  message(FATAL_ERROR "${_nfailed} of ${_count} headers do not compile on their own with "
    "${COMPILER}: ${_failed}")
endif()
message(STATUS "${_count} headers compile on their own with ${COMPILER}")
