# Driver for the package.* ctest entries (run with `cmake -P`).
#
# Required: -DMODE=find_package|add_subdirectory|fetchcontent -DWORK_DIR=<dir>
#           -DORCHMLLM_SOURCE_DIR=<repo root> -DORCHMLLM_BINARY_DIR=<build dir>
# Optional: -DCMAKE_GENERATOR=... -DCMAKE_MAKE_PROGRAM=... -DCMAKE_CXX_COMPILER=...
#           -DCMAKE_CXX_FLAGS=... -DCONFIG=<build type>
#           -DMPIEXEC=<mpiexec> [-DMPIEXEC_NUMPROC_FLAG=-np] [-DMPIEXEC_FLAGS=<flags, space-separated>]:
#           the consumer also takes the MPI component and builds examples/training_step.cpp
#           as an MPI trainer (mpi_consumer), run here on 4 ranks faked as 2 nodes of 2.
#
# find_package:     installs the orchmllm build tree into WORK_DIR/prefix, then
#                   configures/builds/runs tests/package/find_package against it.
# add_subdirectory: configures/builds/runs tests/package/add_subdirectory, which
#                   add_subdirectory()s the repo root (header-only).
# fetchcontent:     the same through FetchContent, asking for the compiled library.
# Both vendoring modes check (tests/package/consumer.cmake) that orchmllm's tests,
# benchmarks, examples, tool and install rules are off and that it probes and builds only the
# backends asked for; here, that installing the consumer installs nothing of orchmllm.
cmake_minimum_required(VERSION 3.25)

foreach(_var IN ITEMS MODE WORK_DIR ORCHMLLM_SOURCE_DIR ORCHMLLM_BINARY_DIR)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "orchmllm_package_test: -D${_var}=... is required")
  endif()
endforeach()
if(NOT DEFINED CONFIG OR CONFIG STREQUAL "")
  set(CONFIG Release)
endif()

function(run_step what)
  message(STATUS "[${MODE}] ${what}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc COMMAND_ECHO NONE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[${MODE}] ${what} failed (exit code ${rc})")
  endif()
endfunction()

set(_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(_configure_args
  -S "${ORCHMLLM_SOURCE_DIR}/tests/package/${MODE}"
  -B "${_build}"
  "-DCMAKE_BUILD_TYPE=${CONFIG}"
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
if(CMAKE_GENERATOR)
  list(APPEND _configure_args -G "${CMAKE_GENERATOR}")
endif()
if(CMAKE_MAKE_PROGRAM)
  list(APPEND _configure_args "-DCMAKE_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}")
endif()
if(CMAKE_CXX_COMPILER)
  list(APPEND _configure_args "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}")
endif()
if(DEFINED CMAKE_CXX_FLAGS)
  list(APPEND _configure_args "-DCMAKE_CXX_FLAGS=${CMAKE_CXX_FLAGS}")
endif()
# The consumers check the package (install, find_package, link), not code generation: compiled
# without optimisation, in a fraction of the time.
string(TOUPPER "${CONFIG}" _config_upper)
list(APPEND _configure_args "-DCMAKE_CXX_FLAGS_${_config_upper}=-O0")

if(MODE STREQUAL "find_package")
  set(_prefix "${WORK_DIR}/prefix")
  run_step("install" "${CMAKE_COMMAND}" --install "${ORCHMLLM_BINARY_DIR}"
    --prefix "${_prefix}" --config "${CONFIG}")
  # Only the fresh install prefix must satisfy find_package(orchmllm).
  list(APPEND _configure_args "-DCMAKE_PREFIX_PATH=${_prefix}")
elseif(NOT MODE MATCHES "^(add_subdirectory|fetchcontent)$")
  message(FATAL_ERROR "orchmllm_package_test: unknown MODE '${MODE}'")
endif()
list(APPEND _configure_args "-DORCHMLLM_SOURCE_DIR=${ORCHMLLM_SOURCE_DIR}")
if(MPIEXEC)
  list(APPEND _configure_args -DORCHMLLM_PACKAGE_MPI=ON)
endif()

run_step("configure" "${CMAKE_COMMAND}" ${_configure_args})
# The consumers' targets only (and what they link).
set(_consumers consumer)
if(MODE STREQUAL "find_package")
  list(APPEND _consumers consumer_compiled)
endif()
if(MPIEXEC)
  list(APPEND _consumers mpi_consumer)
endif()
run_step("build" "${CMAKE_COMMAND}" --build "${_build}" --config "${CONFIG}" --target ${_consumers})

# Locate and run the consumer executables; the MPI trainer on 4 ranks as 2 nodes of 2.
if(NOT DEFINED MPIEXEC_NUMPROC_FLAG)
  set(MPIEXEC_NUMPROC_FLAG -np)
endif()
foreach(_name IN LISTS _consumers)
  set(_exe "")
  foreach(_cand IN ITEMS "${_build}/${_name}" "${_build}/${CONFIG}/${_name}"
                         "${_build}/${_name}.exe" "${_build}/${CONFIG}/${_name}.exe")
    if(EXISTS "${_cand}")
      set(_exe "${_cand}")
      break()
    endif()
  endforeach()
  if(NOT _exe)
    message(FATAL_ERROR "[${MODE}] ${_name} executable not found under ${_build}")
  endif()
  set(_command "${_exe}")
  if(_name STREQUAL "mpi_consumer")
    separate_arguments(_flags UNIX_COMMAND "${MPIEXEC_FLAGS}")
    set(_command "${MPIEXEC}" ${MPIEXEC_NUMPROC_FLAG} 4 ${_flags} "${_exe}"
      --ranks-per-node 2)
  endif()
  execute_process(COMMAND ${_command} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
    ERROR_VARIABLE _out OUTPUT_STRIP_TRAILING_WHITESPACE)
  message(STATUS "[${MODE}] ${_name} output: ${_out}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "[${MODE}] ${_name} exited with ${_rc}")
  endif()
  if(_name STREQUAL "mpi_consumer" AND
     NOT _out MATCHES "transfers along prebuilt routes on 2 nodes: every row reached")
    message(FATAL_ERROR "[${MODE}] the MPI trainer did not report every row reached")
  endif()
endforeach()

if(MODE STREQUAL "find_package")
  # The tool is installed with the library when it was built.
  if(EXISTS "${ORCHMLLM_BINARY_DIR}/bench/orchmllm-bench" AND
     NOT EXISTS "${_prefix}/bin/orchmllm-bench")
    message(FATAL_ERROR "[${MODE}] cmake --install did not install orchmllm-bench into ${_prefix}/bin")
  endif()
  # A missing component fails find_package with a message naming it and what exists.
  set(_missing_args ${_configure_args})
  list(TRANSFORM _missing_args REPLACE "tests/package/find_package$" "tests/package/missing_component")
  list(TRANSFORM _missing_args REPLACE "^${_build}$" "${WORK_DIR}/missing_build")
  execute_process(COMMAND "${CMAKE_COMMAND}" ${_missing_args}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(_rc EQUAL 0)
    message(FATAL_ERROR "[${MODE}] find_package(orchmllm COMPONENTS nosuch) did not fail")
  endif()
  if(NOT _out MATCHES "nosuch" OR NOT _out MATCHES "available: [^\n]*compiled")
    message(FATAL_ERROR "[${MODE}] the missing-component message does not name the component "
      "and the available ones:\n${_out}")
  endif()
  message(STATUS "[${MODE}] missing component reported")
endif()

# Post-conditions.
file(STRINGS "${_build}/CMakeCache.txt" _cache)
if(MODE STREQUAL "find_package")
  list(FILTER _cache INCLUDE REGEX "^orchmllm_DIR:")
  string(REGEX REPLACE "^orchmllm_DIR:[A-Z]+=" "" _found_dir "${_cache}")
  file(REAL_PATH "${_prefix}" _real_prefix)
  file(REAL_PATH "${_found_dir}" _real_found)
  string(FIND "${_real_found}/" "${_real_prefix}/" _pos)
  if(NOT _pos EQUAL 0)
    message(FATAL_ERROR "[${MODE}] orchmllm was not found in the install prefix ${_prefix}: orchmllm_DIR=${_found_dir}")
  endif()
else()
  # Installing the parent installs nothing of orchmllm (ORCHMLLM_INSTALL is off in a subproject).
  set(_consumer_prefix "${WORK_DIR}/consumer-prefix")
  run_step("install the consumer" "${CMAKE_COMMAND}" --install "${_build}"
    --prefix "${_consumer_prefix}" --config "${CONFIG}")
  file(GLOB_RECURSE _installed RELATIVE "${_consumer_prefix}" "${_consumer_prefix}/*")
  if(NOT _installed MATCHES "consumer" OR _installed MATCHES "orchmllm")
    message(FATAL_ERROR "[${MODE}] installing the consumer installed: ${_installed}")
  endif()
  foreach(_dir IN ITEMS tests bench examples)
    if(EXISTS "${_build}/orchmllm-build/${_dir}" OR EXISTS "${_build}/_deps/orchmllm-build/${_dir}")
      message(FATAL_ERROR "[${MODE}] orchmllm's ${_dir}/ was configured in a non-top-level build")
    endif()
  endforeach()
endif()
message(STATUS "[${MODE}] OK")
