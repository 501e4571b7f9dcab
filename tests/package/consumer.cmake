# Shared by the consumer projects of the package.* tests (tests/package/*/CMakeLists.txt).
#
# orchmllm_add_mpi_consumer(<targets to link>...): with -DORCHMLLM_PACKAGE_MPI=ON, builds
# examples/training_step.cpp (one façade include and the MPI backend header) as the MPI trainer
# mpi_consumer, linked to the given targets; nothing otherwise.
function(orchmllm_add_mpi_consumer)
  if(ORCHMLLM_PACKAGE_MPI)
    add_executable(mpi_consumer "${ORCHMLLM_SOURCE_DIR}/examples/training_step.cpp")
    target_compile_definitions(mpi_consumer PRIVATE ORCHMLLM_EXAMPLE_MPI=1)
    target_link_libraries(mpi_consumer PRIVATE ${ARGN})
  endif()
endfunction()

# orchmllm_check_subproject(COMPILED ON|OFF):
# What a parent project that vendors orchmllm (add_subdirectory or FetchContent) may rely on,
# checked right after orchmllm is added: its tests, benchmarks, examples and tool are off, it
# adds no install rules, it probes and builds a backend only when the parent asked for it, and
# the compiled library exists exactly when asked (COMPILED ON|OFF).
function(orchmllm_check_subproject)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "COMPILED" "")
  foreach(_opt IN ITEMS BUILD_TESTS BUILD_BENCHMARKS BUILD_EXAMPLES BUILD_TOOL INSTALL)
    if(ORCHMLLM_${_opt})
      message(FATAL_ERROR "ORCHMLLM_${_opt} should default to OFF when orchmllm is a subproject")
    endif()
  endforeach()
  if(TARGET orchmllm_doctest_main OR TARGET orchmllm_header_check OR TARGET orchmllm-bench)
    message(FATAL_ERROR "orchmllm test or tool targets were created in a subproject build")
  endif()
  # Backends the parent did not ask for: neither probed nor built.
  foreach(_backend IN ITEMS THRUST CUDA NCCL GLPK)
    if(ORCHMLLM_ENABLE_${_backend})
      message(FATAL_ERROR "ORCHMLLM_ENABLE_${_backend} is ON although the parent did not ask")
    endif()
  endforeach()
  foreach(_probe IN ITEMS CUDAToolkit_BIN_DIR ORCHMLLM_CCCL_INCLUDE_DIR ORCHMLLM_NCCL_LIBRARY)
    if(DEFINED ${_probe} OR DEFINED CACHE{${_probe}})
      message(FATAL_ERROR "orchmllm probed for ${_probe} although no backend needing it was asked")
    endif()
  endforeach()
  if(ORCHMLLM_ENABLE_MPI)
    if(NOT ORCHMLLM_PACKAGE_MPI OR NOT TARGET orchmllm::mpi)
      message(FATAL_ERROR "the MPI backend: asked ${ORCHMLLM_PACKAGE_MPI}, enabled ${ORCHMLLM_ENABLE_MPI}")
    endif()
  elseif(ORCHMLLM_PACKAGE_MPI OR DEFINED CACHE{MPI_CXX_COMPILER})
    message(FATAL_ERROR "the MPI backend was asked and not built, or probed and not asked")
  endif()
  if(arg_COMPILED AND NOT TARGET orchmllm::compiled)
    message(FATAL_ERROR "ORCHMLLM_BUILD_COMPILED ON did not make orchmllm::compiled")
  elseif(NOT arg_COMPILED AND TARGET orchmllm::compiled)
    message(FATAL_ERROR "orchmllm::compiled was built although the parent did not ask")
  endif()
endfunction()
