# orchmllm_add_backend(<name> DEFINE <macro> LINK <items>...)
#
# The one way a backend becomes a target of the installed package:
#   - INTERFACE library orchmllm_<name>, alias orchmllm::<name>, exported as <name> in
#     orchmllmTargets, linking orchmllm::orchmllm and LINK, with <macro>=1 on its users;
#   - when ORCHMLLM_INSTALL is ON, installs ${PROJECT_BINARY_DIR}/orchmllm_<name>_deps.cmake
#     (the caller generates it first: what find_package(orchmllm COMPONENTS <name>) runs before
#     orchmllmTargets.cmake, so that the targets LINK names exist on the consumer's machine) into
#     ORCHMLLM_INSTALL_CMAKEDIR;
#   - appends <name> to ORCHMLLM_BACKEND_COMPONENTS in the caller's scope.
#
# orchmllm_may_probe(<option> <result>): sets <result> TRUE when the backend behind <option> may
# be enabled, so its dependency is worth looking for: the option is ON, or it is unset and
# orchmllm is the top-level project (its default then follows the search). A subproject probes
# only what its parent set ON, and an option set OFF costs no search.
#
# Included by the cmake/orchmllm_backend_*.cmake fragments, which run in the top-level scope.
include_guard(GLOBAL)

macro(orchmllm_may_probe var result)
  if(${var} OR (NOT DEFINED ${var} AND PROJECT_IS_TOP_LEVEL))
    set(${result} TRUE)
  else()
    set(${result} FALSE)
  endif()
endmacro()

function(orchmllm_add_backend name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "DEFINE" "LINK")
  set(_deps "${PROJECT_BINARY_DIR}/orchmllm_${name}_deps.cmake")
  if(NOT arg_DEFINE OR NOT EXISTS "${_deps}")
    message(FATAL_ERROR "orchmllm_add_backend(${name}): DEFINE and a generated ${_deps} needed")
  endif()
  add_library(orchmllm_${name} INTERFACE)
  add_library(orchmllm::${name} ALIAS orchmllm_${name})
  set_target_properties(orchmllm_${name} PROPERTIES EXPORT_NAME ${name})
  target_link_libraries(orchmllm_${name} INTERFACE orchmllm::orchmllm ${arg_LINK})
  target_compile_definitions(orchmllm_${name} INTERFACE ${arg_DEFINE}=1)
  if(ORCHMLLM_INSTALL)
    install(TARGETS orchmllm_${name} EXPORT orchmllmTargets)
    install(FILES "${_deps}" DESTINATION "${ORCHMLLM_INSTALL_CMAKEDIR}")
  endif()
  set(ORCHMLLM_BACKEND_COMPONENTS ${ORCHMLLM_BACKEND_COMPONENTS} ${name} PARENT_SCOPE)
endfunction()
