# ctest bench.layering: the include rules of bench/ (bench/CMakeLists.txt, bench/support/):
#   * nothing under bench/ outside bench/cli/ (benchmarks, bench/support/) includes the CLI;
#   * in bench/cli/, a subcommand's files (generate, workload, plan, compare, simulate,
#     dispatch and its dispatch_*.hpp parts) include only the shared files (command, json,
#     file_io, items_csv, micro_batch_flags, cp_flags, plan_csv, problem, trace_csv), their own parts and bench/support/ (which holds
#     the flag parser, args.hpp, and quote.hpp); only tool.hpp (the subcommand table) and
#     main.cpp include the subcommands.
#   * examples/*.cpp include only the public headers, the standard library and MPI.
# Usage: cmake -DSOURCE_DIR=<repository root> -P tests/bench/layering_check.cmake
cmake_minimum_required(VERSION 3.25)
set(_shared command cp_flags json file_io items_csv micro_batch_flags plan_csv problem trace_csv)
set(_problems "")
file(GLOB_RECURSE _files RELATIVE "${SOURCE_DIR}"
  "${SOURCE_DIR}/bench/*.hpp" "${SOURCE_DIR}/bench/*.cpp" "${SOURCE_DIR}/bench/*.cu"
  "${SOURCE_DIR}/bench/*.cuh")
foreach(_f IN LISTS _files)
  file(STRINGS "${SOURCE_DIR}/${_f}" _includes REGEX "^#include \"bench/cli/")
  if(NOT _includes)
    continue()
  endif()
  if(NOT _f MATCHES "^bench/cli/")
    list(APPEND _problems "${_f} includes the CLI: ${_includes}")
    continue()
  endif()
  get_filename_component(_stem "${_f}" NAME_WE)
  if(_stem STREQUAL "tool" OR _stem STREQUAL "main")
    continue()
  endif()
  string(REGEX REPLACE "_.*$" "" _group "${_stem}")  # dispatch_mpi -> dispatch
  if(_stem IN_LIST _shared)
    set(_group "")
  endif()
  foreach(_inc IN LISTS _includes)
    string(REGEX REPLACE "^#include \"bench/cli/([a-z_]+)\\.hpp\".*$" "\\1" _target "${_inc}")
    string(REGEX REPLACE "_.*$" "" _target_group "${_target}")
    if(_target IN_LIST _shared)
      continue()
    endif()
    if(NOT _group STREQUAL "" AND _target_group STREQUAL _group)
      continue()
    endif()
    list(APPEND _problems "${_f} includes another subcommand's file: ${_inc}")
  endforeach()
endforeach()
# Examples: only the library's public headers (orchmllm/..., not detail/), the standard
# library and MPI; nothing in quotes but "orchmllm/...".
file(GLOB _examples RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/examples/*.cpp")
foreach(_f IN LISTS _examples)
  file(STRINGS "${SOURCE_DIR}/${_f}" _includes REGEX "^#include ")
  foreach(_inc IN LISTS _includes)
    if(_inc MATCHES "orchmllm/detail/" OR
       (_inc MATCHES "^#include \"" AND NOT _inc MATCHES "^#include \"orchmllm/"))
      list(APPEND _problems "${_f} includes a file outside the public headers: ${_inc}")
    endif()
  endforeach()
endforeach()
list(LENGTH _files _count)
if(_problems)
  list(JOIN _problems "\n  " _text)
  message(FATAL_ERROR "bench/ include layering broken:\n  ${_text}")
endif()
message(STATUS "bench.layering: ${_count} files under bench/ follow the include rules")
