# The optional compiled mode: orchmllm::compiled, a static library holding the balancers and the
# statistics (one instantiation per computation type, on a type-erased cost model) and the heavy
# non-template functions (map_bins, plan_step) once, so a trainer's translation units stop
# compiling them (see include/orchmllm/config.hpp and README "Header-only or compiled").
#
# Linking orchmllm::compiled defines ORCHMLLM_COMPILED for the consumer; the library's own
# translation unit (include/orchmllm/detail/compiled/library.cpp, not installed) also defines
# ORCHMLLM_COMPILED_BUILD. orchmllm::orchmllm stays header-only and flag-free.
#
# Included from the top-level CMakeLists.txt after the orchmllm target.
include_guard(GLOBAL)

# orchmllm_link_planner(<target> <PUBLIC|PRIVATE>): links the repository's own programs that plan
# (the command-line tool and the tests that link it, the Python module, the examples, the docs
# programs, the mllm_training integration test) to orchmllm::compiled when it is built, so a
# build compiles the planner once instead of once per program; to the header-only
# orchmllm::orchmllm otherwise. The unit tests, the benchmarks and the C++ reference of the
# Python tests stay header-only (what a trainer including the headers compiles).
function(orchmllm_link_planner target scope)
  if(TARGET orchmllm::compiled)
    target_link_libraries(${target} ${scope} orchmllm::compiled)
  else()
    target_link_libraries(${target} ${scope} orchmllm::orchmllm)
  endif()
endfunction()

# On by default as the top-level project; a parent that add_subdirectory()s orchmllm and wants
# the compiled mode sets ORCHMLLM_BUILD_COMPILED ON first.
option(ORCHMLLM_BUILD_COMPILED
  "Build and install orchmllm::compiled (the optional compiled mode of the library)"
  ${PROJECT_IS_TOP_LEVEL})
if(NOT ORCHMLLM_BUILD_COMPILED)
  return()
endif()

add_library(orchmllm_compiled STATIC
  "${PROJECT_SOURCE_DIR}/include/orchmllm/detail/compiled/library.cpp")
add_library(orchmllm::compiled ALIAS orchmllm_compiled)
set_target_properties(orchmllm_compiled PROPERTIES
  EXPORT_NAME compiled
  POSITION_INDEPENDENT_CODE ON)
target_link_libraries(orchmllm_compiled PUBLIC orchmllm::orchmllm)
target_compile_definitions(orchmllm_compiled
  PUBLIC ORCHMLLM_COMPILED=1
  PRIVATE ORCHMLLM_COMPILED_BUILD=1)
if(ORCHMLLM_INSTALL)
  install(TARGETS orchmllm_compiled EXPORT orchmllmTargets
    ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
endif()
