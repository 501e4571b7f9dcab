# ctest format.clang_format: every C++ file of the repository is formatted as .clang-format says.
#
#   cmake -DCLANG_FORMAT=<clang-format-14> -DROOT=<repository root> -P orchmllm_format_check.cmake
#
# Checks the .hpp/.cpp/.cuh/.cu/.inl files under include/, tests/, bench/, examples/ and
# python/src/ with `--dry-run --Werror` (the version is pinned: another clang-format formats
# differently). Fails naming the files to reformat and the command that does it.
cmake_minimum_required(VERSION 3.25)

foreach(_var IN ITEMS CLANG_FORMAT ROOT)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "orchmllm_format_check.cmake: -D${_var}=... is required")
  endif()
endforeach()

set(_globs "")
foreach(_dir IN ITEMS include tests bench examples python/src)
  foreach(_ext IN ITEMS hpp cpp cuh cu inl)
    list(APPEND _globs "${ROOT}/${_dir}/*.${_ext}")
  endforeach()
endforeach()
file(GLOB_RECURSE _files RELATIVE "${ROOT}" ${_globs})
list(SORT _files)
list(LENGTH _files _count)
if(_count EQUAL 0)
  message(FATAL_ERROR "orchmllm_format_check.cmake: no C++ files under ${ROOT}")
endif()

execute_process(COMMAND "${CLANG_FORMAT}" --dry-run --Werror ${_files}
  WORKING_DIRECTORY "${ROOT}" RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
if(_rc EQUAL 0)
  message(STATUS "${_count} files formatted as .clang-format says (${CLANG_FORMAT})")
  return()
endif()
# Which ones.
set(_unformatted "")
foreach(_file IN LISTS _files)
  execute_process(COMMAND "${CLANG_FORMAT}" --dry-run --Werror "${_file}"
    WORKING_DIRECTORY "${ROOT}" RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT _rc EQUAL 0)
    list(APPEND _unformatted "${_file}")
  endif()
endforeach()
if(_unformatted)
  list(LENGTH _unformatted _n)
  list(JOIN _unformatted " " _args)
  message(FATAL_ERROR "${_n} of ${_count} files are not formatted as .clang-format says; "
    "run, from the repository root:\n  ${CLANG_FORMAT} -i ${_args}")
endif()
message(STATUS "${_count} files formatted as .clang-format says (${CLANG_FORMAT})")
