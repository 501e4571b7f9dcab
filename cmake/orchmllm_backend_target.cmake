# orchmllm_add_backend(<name> DEFINE <macro> LINK <items>...)
#
# The one way a backend becomes a target of the installed package:
#   - INTERFACE library orchmllm_<name>, alias orchmllm::<name>, exported as <name> in
#     orchmllmTargets, linking orchmllm::orchmllm and LINK, with <macro>=1 on its users;
#   - when ORCHMLLM_INSTALL is ON, installs ${PROJECT_BINARY_DIR}/orchmllm_<name>_deps.cmake (the caller generates it first:
#     what find_package(orchmllm COMPONENTS <name>) runs before orchmllmTargets.cmake, so that
#     the targets LINK names exist on the consumer's machine) into the package's CMake folder;
#   - appends <name> to ORCHMLLM_BACKEND_COMPONENTS in the caller's scope.
#
# Included by the cmake/orchmllm_backend_*.cmake fragments, which run in the top-level scope.
include_guard(GLOBAL)

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
    # ORCHMLLM_INSTALL_CMAKEDIR is defined after the backend includes (as a cache variable with
    # this default); use the same default unless the user already set it.
    if(DEFINED ORCHMLLM_INSTALL_CMAKEDIR)
      set(_dir "${ORCHMLLM_INSTALL_CMAKEDIR}")
    else()
      set(_dir "${CMAKE_INSTALL_LIBDIR}/cmake/orchmllm")
    endif()
    install(FILES "${_deps}" DESTINATION "${_dir}")
  endif()
  set(ORCHMLLM_BACKEND_COMPONENTS ${ORCHMLLM_BACKEND_COMPONENTS} ${name} PARENT_SCOPE)
endfunction()
