# Every ```cpp block of docs/*.md is built by the test suite, so the documentation cannot drift
# from the headers:
#  - a block that defines `int main(` is a program: built against orchmllm::orchmllm and run
#    (test docs.<file>.<n>, n counting the file's ```cpp blocks from 1; exit code 0 passes);
#  - the other ```cpp blocks of one file are fragments: concatenated in order into the body of
#    one function (so a later fragment may use what an earlier one declared), their #include
#    lines hoisted to the top after <orchmllm/orchmllm.hpp> and the common standard headers;
#    the unit is compiled (target docs_<file>_fragments), not run.
# Blocks fenced otherwise (```text, ```sh, ```cuda) are not built.

function(orchmllm_add_docs_examples)
  file(GLOB _docs "${PROJECT_SOURCE_DIR}/docs/*.md")
  set(_out "${PROJECT_BINARY_DIR}/docs_examples")
  file(MAKE_DIRECTORY "${_out}")
  foreach(_md IN LISTS _docs)
    get_filename_component(_stem "${_md}" NAME_WE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_md}")
    file(READ "${_md}" _rest)
    set(_n 0)
    set(_frag_includes "")
    set(_frag_body "")
    while(TRUE)
      string(FIND "${_rest}" "```cpp\n" _b)
      if(_b EQUAL -1)
        break()
      endif()
      math(EXPR _b "${_b} + 7")
      string(SUBSTRING "${_rest}" ${_b} -1 _rest)
      string(FIND "${_rest}" "\n```" _e)
      if(_e EQUAL -1)
        message(FATAL_ERROR "orchmllm: an unterminated ```cpp block in ${_md}")
      endif()
      string(SUBSTRING "${_rest}" 0 ${_e} _code)
      math(EXPR _e "${_e} + 4")
      string(SUBSTRING "${_rest}" ${_e} -1 _rest)
      math(EXPR _n "${_n} + 1")
      if(_code MATCHES "int main\\(")
        set(_src "${_out}/${_stem}_${_n}.cpp")
        file(WRITE "${_src}.tmp" "// Extracted from docs/${_stem}.md, C++ block ${_n}.\n${_code}\n")
        file(COPY_FILE "${_src}.tmp" "${_src}" ONLY_IF_DIFFERENT)
        file(REMOVE "${_src}.tmp")
        add_executable(docs_${_stem}_${_n} "${_src}")
        target_link_libraries(docs_${_stem}_${_n} PRIVATE orchmllm::orchmllm)
        orchmllm_target_warnings(docs_${_stem}_${_n})
        add_test(NAME docs.${_stem}.${_n} COMMAND docs_${_stem}_${_n})
        set_tests_properties(docs.${_stem}.${_n} PROPERTIES LABELS docs)
      else()
        string(REGEX MATCHALL "#include[^\n]*" _incs "${_code}")
        list(APPEND _frag_includes ${_incs})
        string(REGEX REPLACE "#include[^\n]*" "" _code "${_code}")
        string(APPEND _frag_body "  // docs/${_stem}.md, C++ block ${_n}\n${_code}\n")
      endif()
    endwhile()
    if(NOT _frag_body STREQUAL "")
      list(REMOVE_DUPLICATES _frag_includes)
      list(JOIN _frag_includes "\n" _incs)
      set(_src "${_out}/${_stem}_fragments.cpp")
      file(WRITE "${_src}.tmp"
        "// The C++ fragments of docs/${_stem}.md, in order, as one function body.\n"
        "#include <orchmllm/orchmllm.hpp>\n\n#include <cstdint>\n#include <cstdio>\n"
        "#include <type_traits>\n#include <vector>\n${_incs}\n\n"
        "namespace {\n[[maybe_unused]] void docs_fragments() {\n${_frag_body}}\n}  // namespace\n\n"
        "int main() { return 0; }\n")
      file(COPY_FILE "${_src}.tmp" "${_src}" ONLY_IF_DIFFERENT)
      file(REMOVE "${_src}.tmp")
      add_executable(docs_${_stem}_fragments "${_src}")
      target_link_libraries(docs_${_stem}_fragments PRIVATE orchmllm::orchmllm)
      orchmllm_target_warnings(docs_${_stem}_fragments)
      # Fragments declare names to show them, not to use them.
      target_compile_options(docs_${_stem}_fragments PRIVATE
        $<$<NOT:$<CXX_COMPILER_ID:MSVC>>:-Wno-unused-variable -Wno-unused-but-set-variable>)
    endif()
  endforeach()
endfunction()
